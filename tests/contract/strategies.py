"""Small valid inputs for the contract entries (sizes stay tiny: each call must be fast)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.tolerances import assert_close


def floats(draw: Any, shape: Any, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    """A float64 array with entries in [lo, hi] (no subnormals: those are a scale family)."""
    return draw(
        hnp.arrays(
            np.float64,
            shape,
            elements=st.floats(lo, hi, allow_nan=False, allow_subnormal=False, width=64),
        )
    )


def nonzero_floats(draw: Any, shape: Any, lo: float = 0.1, hi: float = 2.0) -> np.ndarray:
    """Entries with |x| in [lo, hi] and a random sign."""
    mag = floats(draw, shape, lo, hi)
    sign = draw(hnp.arrays(np.bool_, shape))
    return np.where(sign, mag, -mag)


def size(draw: Any, lo: int = 1, hi: int = 5) -> int:
    return draw(st.integers(lo, hi))


def simplex_point(draw: Any, k: int, *, interior: bool = False) -> np.ndarray:
    w = floats(draw, k, 0.05 if interior else 0.0, 1.0)
    if w.sum() == 0:
        w[0] = 1.0
    return w / w.sum()


def counts(draw: Any, m: int) -> np.ndarray:
    """Positive sample counts, as float64 (the form every rule accepts)."""
    return draw(hnp.arrays(np.int64, m, elements=st.integers(1, 50))).astype(np.float64)


def spd(draw: Any, k: int) -> np.ndarray:
    b = floats(draw, (k, k), -1.0, 1.0)
    return b @ b.T + np.eye(k)


def on_simplex(total: float = 1.0):
    """A check that the (first leaf of the) result is a point of the scaled simplex."""

    def check(kwargs: dict[str, Any], result: Any) -> None:
        x = np.asarray(result[0] if isinstance(result, tuple) else result)
        tol = 1e-6 if x.dtype == np.float32 else 1e-9
        x = x.astype(np.float64)
        assert (x >= 0).all(), f"negative entries {x}"
        t = float(kwargs.get("total", total))
        assert abs(x.sum() - t) <= tol * max(1.0, abs(t)), f"sums to {x.sum()}, not {t}"

    return check


def close(expected: Any):
    """A check that the result equals ``expected(kwargs)`` to the closed-form tolerance."""

    def check(kwargs: dict[str, Any], result: Any) -> None:
        with np.errstate(all="ignore"):
            want = np.asarray(expected(kwargs), dtype=np.float64)
        if not np.isfinite(want).all():
            return  # the plain formula overflows: the scale families judge such inputs
        got = np.asarray(result)
        dtype = np.float32 if got.dtype == np.float32 else np.float64  # documented float32 results
        try:
            assert_close(got.astype(np.float64), want, dtype=dtype)
        except AssertionError as exc:  # as an AssertionError with the values
            raise AssertionError(f"result {result!r} != {want!r}") from exc

    return check


def f64(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)
