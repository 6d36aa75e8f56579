"""Loading the scripts of ``validate/`` as modules, and reading their CSVs, for their smoke
tests."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

VALIDATE = Path(__file__).resolve().parents[1] / "validate"


def load_script(name: str) -> ModuleType:
    """``validate/<name>.py`` imported as the module ``validate_<name>`` (registered in
    ``sys.modules``, where dataclasses and pickling look a module up)."""
    spec = importlib.util.spec_from_file_location(f"validate_{name}", VALIDATE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file with a header, as dicts of strings."""
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))
