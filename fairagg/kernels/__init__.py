"""Backends of the hot aggregation loops (DESIGN.md, "Backends").

The NumPy float64 code is the specification; other backends must equal it within the tolerance
table. Available: ``"numpy"`` (the reference) and ``"numba"`` (``kernels/cpu.py``, parallel CPU
kernels). A backend name is validated where a rule is built.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_choice

__all__ = ["BACKENDS", "check_backend", "weighted_sum", "weighted_update"]

BACKENDS: tuple[str, ...] = ("numpy", "numba")


def check_backend(backend: str) -> str:
    """Validate a ``backend`` argument against :data:`BACKENDS`."""
    return check_choice(backend, "backend", BACKENDS)


def weighted_sum(weights: np.ndarray, deltas: np.ndarray, backend: str = "numpy") -> np.ndarray:
    """Σ_k weights_k · deltas_k, shape (d,), for validated ``weights`` (m,) and ``deltas`` (m, d).

    One pass over the (m, d) matrix (a BLAS matrix-vector product on the NumPy backend).
    """
    check_backend(backend)
    if backend == "numba":
        out, _ = weighted_update(np.zeros(deltas.shape[1], deltas.dtype), deltas, -weights, "numba")
        return out
    return weights.astype(deltas.dtype, copy=False) @ deltas


def weighted_update(
    theta: np.ndarray, deltas: np.ndarray, weights: np.ndarray, backend: str = "numpy"
) -> tuple[np.ndarray, bool]:
    """θ − Σ_k weights_k δ_k for validated ``theta`` (d,), ``deltas`` (m, d), ``weights`` (m,).

    Returns ``(out, maybe_finite)``: ``maybe_finite`` is True when every entry of ``out`` is
    certainly finite; False asks the caller for a full check (see ``kernels.cpu``).
    """
    check_backend(backend)
    if backend == "numba":
        from . import cpu

        dtype = np.result_type(theta, deltas)
        return cpu.weighted_update(
            np.ascontiguousarray(theta, dtype=dtype),
            np.ascontiguousarray(deltas, dtype=dtype),
            np.asarray(weights, dtype=dtype),
        )
    out = theta - weighted_sum(weights, deltas)
    return out, bool(np.isfinite(out.sum()))
