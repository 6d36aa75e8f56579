"""Data-only files: a tree of values stored as ``.npz`` arrays plus one JSON description.

A checkpoint ([`fairagg.simulate`][fairagg.simulation.simulate], ``checkpoint=``) must be safe
to open when someone else made it: nothing in it may run code. So it is never a pickle.
``write_npz_tree`` stores

- arrays (any dtype but ``object``) and NumPy scalars as entries of an ``.npz`` file,
- ``None``, bools, ints, strings, floats (non-finite ones tagged), lists, tuples and dicts with
  string keys as JSON,
- rule states as JSON naming one of ``STATE_TYPES``, fairagg's own state NamedTuples,

and the JSON itself as a string array in the same ``.npz``. ``read_npz_tree`` reads it with
``np.load(..., allow_pickle=False)`` and rebuilds NamedTuples only from that allow-list; a pickle,
an object array or a type it does not know is a ``ValueError``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .online import LowRankFTRL, QuadraticFTRL
from .rules.aaggff import AAgFFDState, AAgFFSState
from .rules.afl import AFLState
from .rules.fedfa import FedFaState
from .rules.fedfv import FedFVHistory, FedFVState
from .rules.term import TERMState
from .simplex import QPFactor
from .types import EmptyState

#: The NamedTuples a data-only file may rebuild: the states of fairagg's rules and their parts.
STATE_TYPES: dict[str, type] = {
    f"{cls.__module__}.{cls.__qualname__}": cls
    for cls in (
        EmptyState,
        AFLState,
        TERMState,
        FedFVState,
        FedFVHistory,
        FedFaState,
        AAgFFSState,
        AAgFFDState,
        QuadraticFTRL,
        LowRankFTRL,
        QPFactor,
    )
}
#: The name of the JSON entry in the ``.npz`` file.
_DESCRIPTION = "__description__"
#: Tags of the JSON nodes that are not plain JSON values.
_TAGS = ("array", "scalar", "float", "tuple", "dict", "type")
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class NotData(TypeError):
    """A value that a data-only file cannot hold (an object, a type outside the allow-list)."""


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def known_state_types(*states: Any) -> dict[str, type]:
    """``STATE_TYPES`` and the NamedTuple types found in ``states`` (a rule's own state, as its
    ``init`` made it in this process: the caller's code, already imported, so rebuilding such a
    type from field values runs nothing a file names)."""
    found = dict(STATE_TYPES)

    def walk(v: Any) -> None:
        if isinstance(v, tuple) and hasattr(type(v), "_fields"):
            found.setdefault(_type_name(type(v)), type(v))
        if isinstance(v, (tuple, list)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    for s in states:
        walk(s)
    return found


def encode(
    value: Any, arrays: dict[str, np.ndarray], where: str = "", types: dict[str, type] | None = None
) -> Any:
    """The JSON form of ``value``; its arrays are added to ``arrays`` under new keys. NamedTuples
    must be of ``types`` (``STATE_TYPES`` by default)."""
    types = STATE_TYPES if types is None else types
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and type(value) is int:
        return value
    if type(value) is float:
        if math.isfinite(value):
            return value
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise NotData(f"{where or 'the value'} is an array of Python objects")
        key = f"a{len(arrays)}"
        arrays[key] = arr
        return {"array" if isinstance(value, np.ndarray) else "scalar": key}
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        name = _type_name(type(value))
        if types.get(name) is not type(value):
            raise NotData(
                f"{where or 'the value'} is a {type(value).__name__}, a NamedTuple that is neither "
                "one of fairagg's own rule-state types nor one of the rule's state as init made it"
            )
        return {
            "type": name,
            "fields": {
                f: encode(v, arrays, f"{where}.{f}", types)
                for f, v in zip(type(value)._fields, value, strict=True)  # type: ignore[attr-defined]
            },
        }
    if isinstance(value, (tuple, list)):
        items = [encode(v, arrays, f"{where}[{i}]", types) for i, v in enumerate(value)]
        return {"tuple": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise NotData(f"{where or 'the value'} is a dict with a key {bad[0]!r} that is no str")
        return {"dict": {k: encode(v, arrays, f"{where}[{k!r}]", types) for k, v in value.items()}}
    raise NotData(f"{where or 'the value'} is a {type(value).__name__}, which is not data")


def decode(node: Any, arrays: Any, types: dict[str, type] | None = None) -> Any:
    """The value of a JSON node made by ``encode``, with its arrays read from ``arrays``;
    NamedTuples are rebuilt only as one of ``types`` (``STATE_TYPES`` by default)."""
    types = STATE_TYPES if types is None else types
    if node is None or isinstance(node, (bool, str, int, float)):
        return node
    if isinstance(node, list):
        return [decode(v, arrays, types) for v in node]
    if not isinstance(node, dict):
        raise ValueError(f"unexpected JSON {type(node).__name__}")
    tags = [t for t in _TAGS if t in node]
    if (
        len(tags) != 1
        or set(node) - {tags[0], "fields"}
        or ("fields" in node) != (tags == ["type"])
    ):
        raise ValueError(f"unexpected JSON object with keys {sorted(node)}")
    tag, val = tags[0], node[tags[0]]
    if tag in ("array", "scalar"):
        if not isinstance(val, str) or not val.startswith("a") or val not in arrays:
            raise ValueError(f"no array {val!r}")
        arr = arrays[val]  # np.load(..., allow_pickle=False) refuses object arrays here
        return arr if tag == "array" else arr[()]
    if tag == "float":
        if val not in _NONFINITE:
            raise ValueError(f"unexpected float {val!r}")
        return _NONFINITE[val]
    if tag == "tuple":
        if not isinstance(val, list):
            raise ValueError("a tuple that is no list")
        return tuple(decode(v, arrays, types) for v in val)
    if tag == "dict":
        if not isinstance(val, dict):
            raise ValueError("a dict that is no object")
        return {k: decode(v, arrays, types) for k, v in val.items()}
    cls: Any = types.get(val) if isinstance(val, str) else None
    if cls is None:
        raise ValueError(f"the type {val!r} is not one of fairagg's own rule-state types")
    fields = node["fields"]
    if not isinstance(fields, dict) or list(fields) != list(cls._fields):
        raise ValueError(f"the fields of {val} are not {list(cls._fields)}")
    return cls(**{k: decode(v, arrays, types) for k, v in fields.items()})


def write_npz_tree(path: Path, tree: Any, types: dict[str, type] | None = None) -> None:
    """Write ``tree`` (see ``encode``) to ``path`` atomically: a temporary file in the same
    folder, flushed to disk, then renamed over ``path``, so a crash at any moment leaves the old
    file or the new one."""
    arrays: dict[str, np.ndarray] = {}
    text = json.dumps(encode(tree, arrays, types=types), allow_nan=False)
    arrays[_DESCRIPTION] = np.array(text)
    write_atomically(path, lambda fh: np.savez(fh, **arrays))  # type: ignore[arg-type]


def write_atomically(path: Path, write: Callable[[Any], None]) -> None:
    """Call ``write`` on a temporary file beside ``path``, flush it to disk and rename it over
    ``path``: an interruption at any moment leaves the old file or the new one, never a part."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_npz_tree(path: Path, types: dict[str, type] | None = None) -> Any:
    """The tree stored by ``write_npz_tree``, read without unpickling anything.

    Raises
    ------
    ValueError
        When ``path`` is no such file (a pickle, an object array, malformed JSON, a type
        outside ``STATE_TYPES``); the message says why.
    """
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head[:1] == b"\x80":
        raise ValueError(
            "it is a pickle, and fairagg never unpickles a file: unpickling runs whatever code "
            "the file names (an older fairagg wrote checkpoint.pkl files as pickles)"
        )
    if head != b"PK\x03\x04":
        raise ValueError("it is not an .npz file")
    try:
        with np.load(path, allow_pickle=False) as z:
            if _DESCRIPTION not in z.files:
                raise ValueError(f"it has no {_DESCRIPTION} entry")
            desc = z[_DESCRIPTION]
            if desc.dtype.kind != "U" or desc.ndim != 0:
                raise ValueError(f"its {_DESCRIPTION} is not a string")
            node = json.loads(str(desc), parse_constant=_no_constant)
            arrays = {k: z[k] for k in z.files if k != _DESCRIPTION}
            return decode(node, arrays, types)
    except (
        OSError, EOFError, KeyError, RecursionError, zipfile.BadZipFile, json.JSONDecodeError
    ) as exc:  # fmt: skip
        raise ValueError(f"it cannot be read ({type(exc).__name__}: {exc})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"unexpected JSON constant {name}")
