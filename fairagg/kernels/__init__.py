"""Backends of the hot aggregation loops (DESIGN.md, "Backends").

The NumPy float64 code is the specification; other backends must equal it within the tolerance
table. Available now: ``"numpy"``.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_choice

__all__ = ["BACKENDS", "check_backend", "weighted_sum"]

BACKENDS: tuple[str, ...] = ("numpy",)


def check_backend(backend: str) -> str:
    """Validate a ``backend`` argument against :data:`BACKENDS`."""
    return check_choice(backend, "backend", BACKENDS)


def weighted_sum(weights: np.ndarray, deltas: np.ndarray, backend: str = "numpy") -> np.ndarray:
    """Σ_k weights_k · deltas_k, shape (d,), for validated ``weights`` (m,) and ``deltas`` (m, d).

    One pass over the (m, d) matrix (a BLAS matrix-vector product on the NumPy backend).
    """
    check_backend(backend)
    return weights.astype(deltas.dtype, copy=False) @ deltas
