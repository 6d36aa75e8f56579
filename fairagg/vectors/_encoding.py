"""How a case is written: arrays and numbers as JSON values (large arrays as ``.npy`` files
beside it), one line per array, and back; a function's result as named numeric outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_VERSION = 1
#: Arrays with more entries than this go to ``.npy`` files.
INLINE_MAX = 64

Json = dict[str, Any]


def _encode(value: Any, files: dict[str, np.ndarray], stem: str, key: str) -> Any:
    """A JSON value for ``value``; large arrays are added to ``files`` under their file name."""
    if isinstance(value, (np.ndarray, list, tuple)) and not (
        isinstance(value, (list, tuple)) and value and isinstance(value[0], dict)
    ):
        a = np.asarray(value)
        if a.dtype.kind == "f":
            a = a.astype(np.float64)
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{key}: golden arrays must be finite")
        elif a.dtype.kind in "iu":
            a = a.astype(np.int64)
        elif a.dtype.kind != "b":
            raise TypeError(f"{key}: cannot encode an array of dtype {a.dtype}")
        out: Json = {"dtype": str(a.dtype), "shape": list(a.shape)}
        if a.size > INLINE_MAX:
            name = f"{stem}.{key}.npy"
            files[name] = np.ascontiguousarray(a)
            out["file"] = name
        else:
            out["data"] = a.ravel().tolist()
        return out
    if isinstance(value, dict):
        return {k: _encode(v, files, stem, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, files, stem, f"{key}.{i}") for i, v in enumerate(value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            raise ValueError(f"{key}: golden numbers must be finite")
        return float(value)
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{key}: cannot encode {type(value).__name__}")


def _dumps(obj: Any, level: int = 0) -> str:
    """JSON with one line per array (an array's entries on that line) and keys sorted."""
    pad = " " * level
    if isinstance(obj, dict) and "dtype" in obj and "shape" in obj:
        return json.dumps(obj, sort_keys=True, ensure_ascii=False)
    if isinstance(obj, dict) and obj:
        items = [f"{pad} {json.dumps(k)}: {_dumps(obj[k], level + 1)}" for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and obj and all(isinstance(v, (dict, list)) for v in obj):
        items = [pad + " " + _dumps(v, level + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def _decode(obj: Any, folder: Path) -> Any:
    if isinstance(obj, dict) and "dtype" in obj and "shape" in obj:
        if "file" in obj:
            a = np.load(folder / obj["file"], allow_pickle=False)
        else:
            a = np.array(obj["data"], dtype=obj["dtype"]).reshape(obj["shape"])
        if a.dtype != np.dtype(obj["dtype"]) or list(a.shape) != obj["shape"]:
            raise ValueError(f"array {obj.get('file', '')} does not match its dtype and shape")
        return a
    if isinstance(obj, dict):
        return {k: _decode(v, folder) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, folder) for v in obj]
    return obj


def _outputs(result: Any, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """A function's result as named numeric outputs: a NamedTuple's fields, a tuple's items
    (``out0``, ``out1``, ...), or ``out``. Fields in ``exclude`` (iteration counts and other
    facts of the algorithm, not of the formula) and None are left out."""
    if hasattr(result, "_fields"):
        items = {k: getattr(result, k) for k in result._fields}
    elif isinstance(result, tuple):
        items = {f"out{i}": v for i, v in enumerate(result)}
    else:
        items = {"out": result}
    out = {}
    for k, v in items.items():
        if k in exclude or v is None:
            continue
        if hasattr(v, "_fields"):  # a nested record (e.g. a state): its numeric fields
            for kk, vv in _outputs(v).items():
                out[f"{k}.{kk}"] = vv
        elif isinstance(v, (np.ndarray, float, int, bool, np.number, np.bool_)):
            out[k] = v
    return out


def _json_value(v: Any) -> Any:
    """A parameter as JSON holds it: tuples as lists, NumPy scalars as numbers, an infinite
    default (an absent bound, ``upper=inf``) as the string ``"inf"`` or ``"-inf"``."""
    if isinstance(v, tuple):
        return [_json_value(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and math.isinf(v):
        return str(v)
    return v
