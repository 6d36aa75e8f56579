"""Flat parameter vectors <-> Flower's ArrayRecords, and reading one record of a RecordDict."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

Layout = tuple[tuple[str, tuple[int, ...], str], ...]


def _is_param(dtype: np.dtype) -> bool:
    """Whether an array of this dtype is a parameter the rule aggregates (floating point)."""
    return dtype.kind == "f"


def _flatten(
    arrays: Any, name: str = "arrays", like: Layout | None = None
) -> tuple[np.ndarray, Layout]:
    """One vector of an ArrayRecord's floating-point arrays (raveled, concatenated in key order,
    in their common dtype: float32 stays float32, as in ``fairagg.simulate``; float16 is widened
    to float32) and the layout (key, shape, dtype) of every array, which ``_unflatten``
    inverts. Other arrays (integer counters such as BatchNorm's ``num_batches_tracked``) are in
    the layout but not in the vector: [`FairaggStrategy`][fairagg.flower.FairaggStrategy] averages
    them as Flower's FedAvg does.

    With ``like`` (the first round's layout), the arrays are read in its key order and which
    ones are parameters is its decision: a counter that Flower's average turned into float64
    stays a counter. A record whose keys or shapes differ raises ``ValueError``."""
    if not isinstance(arrays, ArrayRecord):
        raise TypeError(f"{name} must be a flwr.app.ArrayRecord; got {type(arrays).__name__}")
    if len(arrays) == 0:
        raise ValueError(f"{name} must hold at least one array")
    if like is not None:
        got = {k: tuple(v.numpy().shape) for k, v in arrays.items()}
        want = {k: tuple(shape) for k, shape, _ in like}
        if got != want:
            raise ValueError(f"{name} have the arrays {got}; θ^t has {want}")
        keys: list[tuple[str, bool | None]] = [(k, _is_param(np.dtype(d))) for k, _, d in like]
    else:
        keys = [(k, None) for k in arrays.keys()]
    pieces, layout = [], []
    for key, param in keys:
        a = arrays[key].numpy()
        if a.dtype.kind not in "biuf":
            raise TypeError(
                f"{name}[{key!r}] must be a numeric array (the floating-point ones are the "
                f"parameters); got dtype {a.dtype}"
            )
        if param is None:
            param = _is_param(a.dtype)
        if param:
            if a.dtype.kind != "f":
                a = a.astype(np.float64)
            pieces.append(a.ravel())
        layout.append(
            (key, tuple(a.shape), a.dtype.str if param or like is None else _dtype_of(like, key))
        )
    if not pieces:
        raise TypeError(f"{name} must hold at least one floating-point array (the parameters)")
    dtype = np.result_type(np.float32, *pieces)  # float16 computed in float32
    flat = pieces[0].astype(dtype) if len(pieces) == 1 else np.concatenate(pieces, dtype=dtype)
    return flat, tuple(layout)


def _dtype_of(layout: Layout, key: str) -> str:
    return next(d for k, _, d in layout if k == key)


def _others(arrays: ArrayRecord, like: Layout | None = None) -> dict[str, np.ndarray]:
    """The arrays of a record that are not parameters (see ``_flatten``)."""
    out = {}
    for key, value in arrays.items():
        a = value.numpy()
        param = _is_param(a.dtype) if like is None else _is_param(np.dtype(_dtype_of(like, key)))
        if not param:
            out[key] = a
    return out


def _unflatten(
    params: np.ndarray, layout: Layout, others: dict[str, np.ndarray] | None = None
) -> ArrayRecord:
    """The ArrayRecord of ``layout``: parameters from the vector ``params``, each in its own
    dtype and shape (0-d arrays stay 0-d), the other arrays from ``others``."""
    record = ArrayRecord()
    start = 0
    for key, shape, dtype in layout:
        if not _is_param(np.dtype(dtype)):
            if others is None or key not in others:
                raise ValueError(f"no value for the non-parameter array {key!r}")
            record[key] = Array(np.array(others[key], order="C"))
            continue
        size = math.prod(shape)
        piece = params[start : start + size].reshape(shape)
        record[key] = Array(np.array(piece, dtype=dtype, order="C"))  # a copy; 0-d stays 0-d
        start += size
    return record


def params_to_arrays(params: Any, key: str = "theta") -> ArrayRecord:
    """A flat parameter vector θ (shape (d,), float32/float64) as a one-array ArrayRecord."""
    p = np.asarray(params)
    if p.ndim != 1 or p.dtype.kind != "f" or p.size == 0:
        raise ValueError(f"params must be a non-empty 1-D float array; got {p.dtype} {p.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError("params must be finite")
    if not isinstance(key, str) or not key:
        raise TypeError("key must be a non-empty str")
    return ArrayRecord({key: Array(np.ascontiguousarray(p))})


def arrays_to_params(arrays: ArrayRecord) -> np.ndarray:
    """The parameter vector of an ArrayRecord: every array raveled, concatenated in key order,
    in the arrays' common dtype (float32 or float64)."""
    return _flatten(arrays)[0]


def _single_record(content: RecordDict, kind: str, where: str) -> tuple[str, Any]:
    by_kind: dict[str, Any] = {
        "ArrayRecord": content.array_records,
        "ConfigRecord": content.config_records,
        "MetricRecord": content.metric_records,
    }
    records = by_kind[kind]
    if len(records) != 1:
        raise ValueError(f"{where} must hold exactly one {kind}; got keys {sorted(records)}")
    return next(iter(records.items()))
