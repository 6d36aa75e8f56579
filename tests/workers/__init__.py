"""Outside implementations for the conformance tests, and the worker that serves them."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

HERE = Path(__file__).parent
TEMPLATE = HERE.parents[1] / "fairagg" / "_worker_template.py"


def make_worker(folder: Path) -> Path:
    """The worker users copy (``fairagg check --template``) with its examples replaced by
    ``outside_impl.py`` (and ``planted.py``), written into ``folder``."""
    template = TEMPLATE.read_text(encoding="utf-8")
    examples = 'FORMULAS = {"project_simplex": project_simplex}\nRULES = {"fedavg": FedAvg}\n'
    assert template.count(examples) == 1
    text = template.replace(
        examples,
        "import outside_impl\n\noutside_impl.set_skip(Skip)\n"
        "FORMULAS, RULES = outside_impl.FORMULAS, outside_impl.RULES\n",
    )
    (folder / "worker.py").write_text(text, encoding="utf-8")
    for name in ("outside_impl.py", "planted.py"):
        (folder / name).write_text((HERE / name).read_text(encoding="utf-8"), encoding="utf-8")
    return folder


def worker_command(folder: Path, *extra: str) -> str:
    """The command line that starts the worker in ``folder`` (in an isolated interpreter)."""
    return shlex.join([sys.executable, "-E", "-s", str(folder / "worker.py"), *extra])
