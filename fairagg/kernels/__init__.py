"""Backends of the hot aggregation loops (DESIGN.md, "Backends").

The NumPy float64 code is the specification; other backends must equal it within the tolerance
table. The API the rules call, each with ``backend=``:

- :func:`weighted_update` θ − Σ_k w_k δ_k (with a finiteness witness) and :func:`weighted_sum`
  Σ_k w_k δ_k: every averaging rule;
- :func:`row_sq_norms` ‖δ_k‖² (float64): FedMGDA+'s normalisation, FedFV;
- :func:`weighted_sum_sq_norms` both of Σ_k w_k δ_k and ‖δ_k‖² in one pass: q-FedAvg;
- :func:`gram` G = D Dᵀ (float64): FedMGDA+'s min-norm QP, FedFV's coefficient space;
- :func:`two_combinations` W @ D for a (2, m) W (float64): FedFV's ḡ and mean update, one pass.

Backends: ``"numpy"`` (the reference), ``"numba"`` (``kernels/cpu.py``, parallel CPU kernels;
the Gram matrix is a register-tiled kernel for small m, BLAS's SYRK above) and ``"cuda"``
(``kernels/cuda.py``, numba.cuda; imported only when used, so the package works without CUDA,
and run under numba's simulator where there is no GPU). A backend name is validated where a rule
is built.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._checks import check_choice

__all__ = [
    "BACKENDS",
    "available_backends",
    "check_backend",
    "gram",
    "row_sq_norms",
    "two_combinations",
    "weighted_sum",
    "weighted_sum_sq_norms",
    "weighted_update",
]

BACKENDS: tuple[str, ...] = ("numpy", "numba", "cuda")


def _cuda():
    from . import cuda

    return cuda


def available_backends(*, simulator: bool = False) -> tuple[str, ...]:
    """The backends that run here: always ``"numpy"`` and ``"numba"``; ``"cuda"`` with a CUDA GPU,
    or also under numba's simulator when ``simulator`` is True (benchmarks leave it out: the
    simulator's timings mean nothing)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1" and not simulator:
        return BACKENDS[:2]
    return BACKENDS if _cuda().available() else BACKENDS[:2]


def check_backend(backend: str) -> str:
    """Validate a ``backend`` argument against :data:`BACKENDS`; ``"cuda"`` must be usable here
    (a CUDA GPU, or the simulator switched on with ``NUMBA_ENABLE_CUDASIM=1``)."""
    check_choice(backend, "backend", BACKENDS)
    if backend == "cuda" and not _cuda().available():
        sim = os.environ.get("NUMBA_ENABLE_CUDASIM", "0")
        raise ValueError(
            "backend='cuda' needs a CUDA GPU that numba can use (numba.cuda.is_available() is "
            f"False; NUMBA_ENABLE_CUDASIM={sim}); set NUMBA_ENABLE_CUDASIM=1 before numba is "
            "imported to run the kernels in numba's simulator"
        )
    return backend


def weighted_sum(weights: np.ndarray, deltas: np.ndarray, backend: str = "numpy") -> np.ndarray:
    """Σ_k weights_k · deltas_k, shape (d,), for validated ``weights`` (m,) and ``deltas`` (m, d).

    One pass over the (m, d) matrix (a BLAS matrix-vector product on the NumPy backend). On
    ``"cuda"``, ``deltas`` may be a device array, and the sum is then one too.
    """
    check_choice(backend, "backend", BACKENDS)
    if backend == "cuda":
        return _cuda().weighted_sum(weights, deltas)
    if backend == "numba":
        from . import cpu

        return cpu.weighted_sum(np.asarray(weights), np.ascontiguousarray(deltas))
    return weights.astype(deltas.dtype, copy=False) @ deltas


def weighted_update(
    theta: np.ndarray, deltas: np.ndarray, weights: np.ndarray, backend: str = "numpy"
) -> tuple[np.ndarray, bool]:
    """θ − Σ_k weights_k δ_k for validated ``theta`` (d,), ``deltas`` (m, d), ``weights`` (m,).

    Returns ``(out, maybe_finite)``: ``maybe_finite`` is True when every entry of ``out`` is
    certainly finite; False asks the caller for a full check (see ``kernels.cpu``). The CUDA
    backend also takes numba device arrays, and returns a device array when ``theta`` is one.
    """
    check_choice(backend, "backend", BACKENDS)
    if backend == "numba":
        from . import cpu

        dtype = np.result_type(theta, deltas)
        return cpu.weighted_update(
            np.ascontiguousarray(theta, dtype=dtype),
            np.ascontiguousarray(deltas, dtype=dtype),
            np.asarray(weights, dtype=dtype),
        )
    if backend == "cuda":
        cu = _cuda()
        if isinstance(theta, np.ndarray) and isinstance(deltas, np.ndarray):
            dtype = np.result_type(theta, deltas)
            theta = np.ascontiguousarray(theta, dtype=dtype)
            deltas = np.ascontiguousarray(deltas, dtype=dtype)
        return cu.weighted_update(theta, deltas, weights)
    out = theta - weighted_sum(weights, deltas)
    return out, bool(np.isfinite(out.sum()))


def weighted_sum_sq_norms(
    weights: np.ndarray, deltas: Any, backend: str = "numpy"
) -> tuple[Any, np.ndarray]:
    """(Σ_k weights_k δ_k, ‖δ_k‖²) for validated ``weights`` (m,) and ``deltas`` (m, d): the sum
    in the dtype of ``deltas``, the squared norms in float64. ``"numba"`` and ``"cuda"`` read
    the matrix once for both (q-FedAvg's fused reduction); the reference is the two NumPy
    expressions."""
    check_choice(backend, "backend", BACKENDS)
    if backend == "cuda":
        return _cuda().weighted_sum_sq_norms(weights, deltas)
    if backend == "numba":
        from . import cpu

        return cpu.weighted_sum_sq_norms(np.asarray(weights), np.ascontiguousarray(deltas))
    return weighted_sum(np.asarray(weights), deltas), row_sq_norms(deltas)


def row_sq_norms(deltas: Any, backend: str = "numpy") -> np.ndarray:
    """‖δ_k‖² of each row of a validated (m, d) ``deltas``, float64, shape (m,).

    The reference squares and sums in float64; float32 input is widened first.
    """
    check_choice(backend, "backend", BACKENDS)
    if backend == "cuda":
        return _cuda().row_sq_norms(deltas)
    if backend == "numba":
        from . import cpu

        return cpu.row_sq_norms(np.ascontiguousarray(deltas))
    D = np.asarray(deltas, dtype=np.float64)
    return np.einsum("ij,ij->i", D, D)


def gram(deltas: Any, backend: str = "numpy") -> np.ndarray:
    """G = D Dᵀ of a validated (m, d) ``deltas``, float64, shape (m, m), exactly symmetric.

    The reference is one float64 GEMM (float32 input is widened first); ``"numba"`` is a
    register-tiled one-pass kernel for small m (up to 48 rows on one Numba thread, 128 on
    more: 1.4-2.5× faster than OpenBLAS's SYRK there, see ``cpu.GRAM_MAX_M``) and the BLAS call
    above; ``"cuda"`` the tiled kernel of ``kernels/cuda.py``.
    """
    check_choice(backend, "backend", BACKENDS)
    if backend == "cuda":
        return _cuda().gram(deltas)
    if backend == "numba":
        from . import cpu

        if cpu.use_gram_kernel(deltas.shape[0]):
            return cpu.gram(np.ascontiguousarray(deltas))
    D = np.asarray(deltas, dtype=np.float64)
    G = D @ D.T
    return np.triu(G) + np.triu(G, 1).T


def two_combinations(weights: np.ndarray, deltas: Any, backend: str = "numpy") -> np.ndarray:
    """``weights @ deltas`` for a (2, m) ``weights`` and a validated (m, d) ``deltas``, float64,
    shape (2, d): FedFV's ḡ and mean update. ``"numba"`` and ``"cuda"`` read the matrix once
    for both rows (BLAS reads the right factor of a (2, m) × (m, d) product about half as fast
    as a plain stream); the reference is the float64 matrix product."""
    check_choice(backend, "backend", BACKENDS)
    W = np.asarray(weights, dtype=np.float64)
    if backend == "cuda":
        return _cuda().two_combinations(W, deltas)
    D = np.asarray(deltas, dtype=np.float64)
    if backend == "numba":
        from . import cpu

        return cpu.two_combinations(np.ascontiguousarray(W), np.ascontiguousarray(D))
    return W @ D
