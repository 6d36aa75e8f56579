"""The case files on disk: writing every case with ``index.json`` and ``schema.json``, and reading
one back with its arrays."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._checks import check_int
from ._encoding import SCHEMA_VERSION, Json, _decode, _dumps, _encode, _json_value
from ._generate import DEFAULT_SEED, generate
from ._schema import schema


def _relpath(case: Json) -> Path:
    return Path(f"{case['kind']}s") / case["name"] / case["case"]


def write_vectors(out: Path | str, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write every case under ``out`` (created), with ``schema.json`` and ``index.json``;
    returns the JSON files written. Existing case files of the same names are replaced."""
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a str or a path; got {type(out).__name__}")
    seed = check_int(seed, "seed", low=0)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    written = []
    index = []
    for case in generate(seed):
        rel = _relpath(case)
        folder = root / rel.parent
        folder.mkdir(parents=True, exist_ok=True)
        files: dict[str, np.ndarray] = {}
        body = {"schema_version": SCHEMA_VERSION, "seed": seed}
        for k, v in case.items():
            body[k] = _encode(v, files, rel.name, k) if k in ("inputs", "expected") else v
        body["params"] = _encode(case["params"], files, rel.name, "params")
        body["resolved_params"] = _encode(
            {k: _json_value(v) for k, v in case["resolved_params"].items()},
            files,
            rel.name,
            "resolved_params",
        )
        for fname, arr in files.items():
            np.save(folder / fname, arr, allow_pickle=False)
        path = folder / f"{rel.name}.json"
        path.write_text(_dumps(body) + "\n")
        written.append(path)
        index.append(
            {
                "kind": case["kind"],
                "name": case["name"],
                "case": case["case"],
                "file": str(rel) + ".json",
                "error": "error" in case["expected"],
            }
        )
    (root / "index.json").write_text(
        json.dumps({"schema_version": SCHEMA_VERSION, "seed": seed, "cases": index}, indent=1)
        + "\n"
    )
    (root / "schema.json").write_text(json.dumps(schema(), indent=1, ensure_ascii=False) + "\n")
    return written


def _existing(path: Any, name: str, *, folder: bool) -> Path:
    """``path`` as a Path to an existing file (or folder): a TypeError naming ``name`` for
    something that is not a path, a FileNotFoundError naming it for a path that is missing."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or a path; got {type(path).__name__}")
    p = Path(path)
    if not (p.is_dir() if folder else p.is_file()):
        what = "folder" if folder else "file"
        raise FileNotFoundError(f"{name} must be an existing {what}; got {str(p)!r}")
    return p


def load_case(path: Path | str) -> Json:
    """A case file with its arrays decoded (``.npy`` files read from beside it)."""
    p = _existing(path, "path", folder=False)
    body = json.loads(p.read_text())
    if body.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{p}: schema_version {body.get('schema_version')!r}; this fairagg reads "
            f"{SCHEMA_VERSION}"
        )
    return _decode(body, p.parent)
