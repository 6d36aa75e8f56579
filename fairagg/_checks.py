"""Input validation shared by every public function (the Errors guide).

Public functions validate once at the boundary and raise ``TypeError`` (wrong kind of thing)
or ``ValueError`` (right kind, wrong value) with a message that names the argument, what was
expected and what was given. Nothing here uses ``assert``: checks must survive ``python -O``.
Kernels behind these checks assume validated input.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "as_float_array",
    "as_int_array",
    "check_choice",
    "check_finite",
    "check_count",
    "check_int",
    "check_real",
    "check_same_length",
]

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"an array of dtype {x.dtype} and shape {x.shape}"
    try:
        scalar = np.ndim(x) == 0
    except ValueError:  # a ragged nested sequence
        scalar = False
    return f"{type(x).__name__} {x!r}" if scalar else f"{type(x).__name__}"


def is_device_array(x: Any) -> bool:
    """Whether ``x`` is a CUDA device array (numba's, or its simulator's stand-in): not an
    ndarray, and copies itself to the host."""
    return not isinstance(x, np.ndarray) and all(
        hasattr(x, a) for a in ("copy_to_host", "shape", "dtype")
    )


def check_device_array(x: Any, name: str, *, ndim: int, min_size: int = 0) -> Any:
    """Validate a CUDA device array's structure (float32/float64, ``ndim`` dimensions, at least
    ``min_size`` entries along the first axis) without reading it: its finiteness is checked by
    the kernels' witnesses on the results."""
    dt = np.dtype(x.dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{name} must be a float32 or float64 device array; got dtype {dt}")
    if len(x.shape) != ndim:
        raise ValueError(f"{name} must be {ndim}-D; got shape {tuple(x.shape)}")
    if x.shape[0] < min_size:
        raise ValueError(f"{name} must have at least {min_size} rows; got shape {tuple(x.shape)}")
    return x


def to_host(x: Any) -> Any:
    """A NumPy copy of a device array; anything else unchanged."""
    return x.copy_to_host() if is_device_array(x) else x


def check_finite(a: np.ndarray, name: str) -> np.ndarray:
    """Raise ``ValueError`` if ``a`` holds NaN or infinity; return ``a``."""
    if a.size and not np.isfinite(a).all():
        n_nan = int(np.count_nonzero(np.isnan(a)))
        n_inf = int(np.count_nonzero(np.isinf(a)))
        raise ValueError(
            f"{name} must be finite; got {n_nan} NaN and {n_inf} infinite value(s) "
            f"in an array of shape {a.shape}"
        )
    return a


def as_float_array(
    x: Any,
    name: str,
    *,
    ndim: int | None = None,
    shape: Sequence[int | None] | None = None,
    dtype: Any = None,
    allow_int: bool = False,
    finite: bool = True,
    min_size: int = 0,
) -> np.ndarray:
    """Convert ``x`` to a float32/float64 array and validate it.

    Parameters
    ----------
    x : array_like
        Input. Python sequences of numbers are converted to float64.
    name : str
        Argument name used in error messages.
    ndim : int, optional
        Required number of dimensions.
    shape : sequence of int or None, optional
        Required shape; ``None`` entries match any length.
    dtype : {None, float32, float64}, optional
        Cast to this dtype. ``None`` keeps a float32/float64 input's dtype (float64 otherwise).
    allow_int : bool
        Accept integer/bool arrays (cast to float64). Integer *ndarrays* are otherwise rejected so
        that a float kernel never silently truncates.
    finite : bool
        Reject NaN and infinity.
    min_size : int
        Minimum length of the leading axis.

    Returns
    -------
    ndarray
        The validated array (the input itself when no conversion was needed).
    """
    if isinstance(x, np.ndarray):
        arr = x
    else:
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError) as exc:  # ragged nested sequences
            raise TypeError(f"{name} must be an array of numbers; got {_describe(x)}") from exc
        if arr.dtype.kind in "biu":
            arr = arr.astype(np.float64)
    kind = arr.dtype.kind
    if kind in "biu":
        if not allow_int:
            raise TypeError(
                f"{name} must be a floating-point array (float32 or float64); got dtype "
                f"{arr.dtype}. Cast it explicitly, e.g. {name}.astype(np.float64)"
            )
        arr = arr.astype(np.float64)
    elif kind != "f":
        raise TypeError(f"{name} must be an array of real numbers; got {_describe(x)}")
    if dtype is not None:
        target = np.dtype(dtype)
        if target not in FLOAT_DTYPES:
            raise ValueError(f"dtype must be float32 or float64; got {target}")
        if arr.dtype != target:
            arr = arr.astype(target)
    elif arr.dtype not in FLOAT_DTYPES:  # float16, longdouble
        arr = arr.astype(np.float64)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional; got shape {arr.shape}")
    if shape is not None:
        if arr.ndim != len(shape) or any(
            want is not None and got != want for got, want in zip(arr.shape, shape, strict=True)
        ):
            parts = ["*" if s is None else str(s) for s in shape]
            want_str = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
            raise ValueError(f"{name} must have shape {want_str}; got {arr.shape}")
    if min_size and (arr.ndim == 0 or arr.shape[0] < min_size):
        raise ValueError(
            f"{name} must have at least {min_size} entr{'y' if min_size == 1 else 'ies'} "
            f"along its first axis; got shape {arr.shape}"
        )
    if finite:
        check_finite(arr, name)
    return arr


def as_weights(x: Any, name: str) -> np.ndarray:
    """Positive per-client weights n_k, 1-D: sample counts (integers ≥ 1, kept as int64, also when
    given as integral floats) or any positive finite reals (float64: Flower's weighting metric
    may be a fraction). FedAvg-type rules use them only through n_k / Σ n."""
    try:
        arr = np.asarray(x)
    except (OverflowError, ValueError):
        arr = None
    if arr is not None and arr.dtype.kind == "f":
        w = as_float_array(arr, name, ndim=1, dtype=np.float64)  # finite, 1-D
        # real weights: a fraction, or a value beyond exact integers (Flower's 1e300 is a weight)
        if np.any(w != np.round(w)) or (w.size and np.abs(w).max() >= 2.0**53):
            if w.min() <= 0:
                raise ValueError(f"{name} must be positive; got minimum {w.min()}")
            return w
    return as_int_array(x, name, min_value=1)


def as_int_array(
    x: Any, name: str, *, ndim: int | None = 1, min_value: int | None = None
) -> np.ndarray:
    """Convert ``x`` to an int64 array, rejecting floats with a fractional part."""
    try:
        arr = np.asarray(x)
    except OverflowError as exc:  # a Python int beyond 64 bits inside a sequence
        raise ValueError(f"{name} must fit in a 64-bit integer (|value| < 2**63)") from exc
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise TypeError(f"{name} must hold integers; got non-integral values")
        if arr.size and np.max(np.abs(arr)) >= 2.0**63:
            raise ValueError(
                f"{name} must fit in a 64-bit integer (|value| < 2**63 ≈ 9.2e18); got "
                f"{arr.flat[np.argmax(np.abs(arr))]:.3g}"
            )
    elif arr.dtype.kind == "u" and arr.size and arr.max() >= 2**63:
        raise ValueError(f"{name} must fit in a 64-bit integer (|value| < 2**63); got {arr.max()}")
    elif arr.dtype.kind == "O" and any(
        isinstance(v, int) and not -(2**63) <= v < 2**63 for v in arr.flat
    ):
        raise ValueError(f"{name} must fit in a 64-bit integer (|value| < 2**63)")
    elif arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an array of integers; got {_describe(x)}")
    arr = arr.astype(np.int64)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional; got shape {arr.shape}")
    if min_value is not None and arr.size and arr.min() < min_value:
        raise ValueError(f"{name} must be >= {min_value}; got minimum {arr.min()}")
    return arr


def check_real(
    x: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Validate a finite real scalar in an optional (half-)open interval; return it as float."""
    if type(x) is not float and (  # exact floats skip the (slow) ABC check
        isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real)
    ):
        raise TypeError(f"{name} must be a real number; got {_describe(x)}")
    v = float(x)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite; got {v}")
    if low is not None and (v < low or (low_open and v == low)):
        op = ">" if low_open else ">="
        raise ValueError(f"{name} must be {op} {low}; got {v}")
    if high is not None and (v > high or (high_open and v == high)):
        op = "<" if high_open else "<="
        raise ValueError(f"{name} must be {op} {high}; got {v}")
    return v


def check_int(x: Any, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """Validate an integer scalar (not bool, not float) in ``[low, high]``; return it as int."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {_describe(x)}")
    v = int(x)
    if low is not None and v < low:
        raise ValueError(f"{name} must be >= {low}; got {v}")
    if high is not None and v > high:
        raise ValueError(f"{name} must be <= {high}; got {v}")
    return v


#: The largest count an array axis can have (numpy's index type): a larger ``num_clients`` or
#: size is refused naming the argument, not by numpy's "maximum allowed dimension exceeded".
MAX_COUNT = int(np.iinfo(np.intp).max)


def check_count(x: Any, name: str, *, low: int = 0, high: int | None = None) -> int:
    """Validate a count that sizes an array (clients, items, classes): an integer in
    ``[low, high]`` and at most ``MAX_COUNT``."""
    return check_int(x, name, low=low, high=MAX_COUNT if high is None else min(high, MAX_COUNT))


def check_choice(x: Any, name: str, choices: Sequence[str]) -> str:
    """Validate that ``x`` is one of the strings ``choices``."""
    if not isinstance(x, str) or x not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {x!r}")
    return x


#: What a federated dataset must have (the fields of
#: [`fairagg.data.FederatedData`][fairagg.data.FederatedData]).
FEDERATED_FIELDS = (
    "X_train",
    "y_train",
    "train_offsets",
    "X_test",
    "y_test",
    "test_offsets",
    "n_features",
    "n_classes",
)


def check_federated_data(data: Any, name: str = "data") -> Any:
    """``data`` if it has the fields of a ``fairagg.data.FederatedData``, else a TypeError
    naming ``name`` (a dataset *name* such as ``"synthetic"`` goes through
    ``fairagg.data.load`` first)."""
    missing = [f for f in FEDERATED_FIELDS if not hasattr(data, f)]
    if missing:
        hint = f" (load it first: fairagg.data.load({data!r}))" if isinstance(data, str) else ""
        raise TypeError(
            f"{name} must be a fairagg.data.FederatedData{hint}; got {type(data).__name__} "
            f"without {', '.join(missing)}"
        )
    return data


def check_same_length(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have the same leading length."""
    if a.shape[0] != b.shape[0]:
        raise ValueError(
            f"{name_a} and {name_b} must have the same length along the client axis; "
            f"got {a.shape[0]} and {b.shape[0]}"
        )


#: Squared norms in [SQ_LOW, SQ_HIGH] come from products and partial sums that neither overflow
#: nor lose digits to subnormals; outside it the scale-aware rules divide their updates by a
#: power of two first (exact).
SQ_LOW, SQ_HIGH = 2.0**-968, 2.0**1000


def squares_in_range(sq: np.ndarray, rows: Callable[[np.ndarray], Any]) -> bool:
    """Whether squared row norms ``sq`` are exact to rounding: finite, each non-zero one in
    [SQ_LOW, SQ_HIGH], and each zero one the square of a zero row (not squares that
    underflowed). ``rows(index)`` returns those rows of the updates, as a host array."""
    if not np.all(np.isfinite(sq)):
        return False
    nz = sq != 0
    if np.any(sq[nz] < SQ_LOW) or np.any(sq[nz] > SQ_HIGH):
        return False
    return bool(nz.all()) or not np.any(rows(np.flatnonzero(~nz)))
