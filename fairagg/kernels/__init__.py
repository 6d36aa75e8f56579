"""Backends of the hot aggregation loops (the Conventions guide, "Backends").

The NumPy float64 code is the specification; other backends must equal it within the tolerance
table. The API the rules call, each with ``backend=``:

- [`weighted_update`][fairagg.kernels.weighted_update] θ − Σ_k w_k δ_k (with a finiteness witness)
  and [`weighted_sum`][fairagg.kernels.weighted_sum] Σ_k w_k δ_k: every averaging rule;
- [`row_sq_norms`][fairagg.kernels.row_sq_norms] ‖δ_k‖² (float64): FedMGDA+'s normalisation, FedFV;
- [`weighted_sum_sq_norms`][fairagg.kernels.weighted_sum_sq_norms] both of Σ_k w_k δ_k and ‖δ_k‖² in
  one pass: q-FedAvg;
- [`gram`][fairagg.kernels.gram] G = D Dᵀ (float64): FedMGDA+'s min-norm QP, FedFV's coefficient
  space;
- [`two_combinations`][fairagg.kernels.two_combinations] W @ D for a (2, m) W (float64): FedFV's ḡ
  and mean update, one pass.

Backends: ``"numpy"`` (the reference), ``"numba"`` (``kernels/cpu.py``, parallel CPU kernels;
the Gram matrix is a register-tiled kernel for small m, BLAS's SYRK above) and ``"cuda"``
(``kernels/cuda.py``, numba.cuda; imported only when used, so the package works without CUDA,
and run under numba's simulator where there is no GPU). A backend name is validated where a rule
is built.

The kernels check the kind, number of axes and lengths of their arguments, never their values:
NaN and infinity propagate as in IEEE arithmetic, and a result beyond float64's range is ±inf
(``weighted_update`` reports it through its finiteness witness). The rules validate what reaches
them ([`fairagg.types.make_reports`][fairagg.types.make_reports]) and check their results.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._checks import (
    FLOAT_DTYPES,
    _describe,
    check_choice,
    check_device_array,
    is_device_array,
)
from ._threads import blas_single_thread

__all__ = [
    "BACKENDS",
    "BACKEND_CHOICES",
    "available_backends",
    "check_backend",
    "gram",
    "resolve_backend",
    "row_sq_norms",
    "two_combinations",
    "weighted_sum",
    "weighted_sum_sq_norms",
    "weighted_update",
]

BACKENDS: tuple[str, ...] = ("numpy", "numba", "cuda")
#: What an experiment's ``backend`` setting takes: a backend, or ``"auto"`` (see
#: [`resolve_backend`][fairagg.kernels.resolve_backend]).
BACKEND_CHOICES: tuple[str, ...] = ("auto", *BACKENDS)


def _ieee() -> np.errstate:
    """Values are not checked here: NaN and infinity propagate without a warning."""
    return np.errstate(over="ignore", invalid="ignore")


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
    """Validate a ``backend`` argument against [`BACKENDS`][fairagg.kernels.BACKENDS]; ``"cuda"``
    must be usable here (a CUDA GPU, or the simulator switched on with
    ``NUMBA_ENABLE_CUDASIM=1``)."""
    check_choice(backend, "backend", BACKENDS)
    if backend == "cuda" and not _cuda().available():
        sim = os.environ.get("NUMBA_ENABLE_CUDASIM", "0")
        raise ValueError(
            "backend='cuda' needs a CUDA GPU that numba can use (numba.cuda.is_available() is "
            f"False; NUMBA_ENABLE_CUDASIM={sim}); set NUMBA_ENABLE_CUDASIM=1 before numba is "
            "imported to run the kernels in numba's simulator"
        )
    return backend


def resolve_backend(backend: str) -> str:
    """The backend an experiment runs its rule on: ``backend`` itself, checked as
    [`check_backend`][fairagg.kernels.check_backend] checks it, or for ``"auto"`` the fastest
    backend proven equal to the NumPy specification here: ``"cuda"`` where numba sees a CUDA GPU
    (never the simulator), else ``"numba"``.

    [`fairagg.simulate`][fairagg.simulation.simulate], ``fairagg run``/``compare --backend`` and
    [`FairaggStrategy`][fairagg.flower.FairaggStrategy] take ``"auto"`` by default; the rule
    factories, [`make_rule`][fairagg.rules.make_rule] and the formula functions keep
    ``"numpy"``, the specification. What "equal" means for each rule is the docs'
    Conventions page, "Backends": the bound is tested rule by rule.
    """
    check_choice(backend, "backend", BACKEND_CHOICES)
    if backend == "auto":
        return "cuda" if "cuda" in available_backends() else "numba"
    return check_backend(backend)


def _real_dtype(dtype: Any, name: str) -> np.dtype:
    """The float dtype in which an array of ``dtype`` is computed (see the module docstring)."""
    dt = np.dtype(dtype)
    if dt.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers (bool, integer or float); got dtype {dt}")
    return dt if dt in FLOAT_DTYPES else np.dtype(np.float64)


def _host(x: Any, name: str, ndim: int) -> tuple[np.ndarray, np.dtype]:
    """A host argument as an ndarray of ``ndim`` dimensions, and the float dtype it computes in."""
    if isinstance(x, np.ndarray):
        a = x
    else:
        try:
            a = np.asarray(x)
        except (TypeError, ValueError) as exc:  # ragged nested sequences
            raise TypeError(
                f"{name} must be an array of real numbers; got {type(x).__name__}"
            ) from exc
    if a.dtype.kind not in "biuf":
        raise TypeError(
            f"{name} must hold real numbers (bool, integer or float); got {_describe(x)}"
        )
    dt = _real_dtype(a.dtype, name)
    if a.ndim != ndim:
        want = "(m, d)" if ndim == 2 else "(n,)"
        raise ValueError(f"{name} must be {ndim}-D, shape {want}; got shape {a.shape}")
    return a, dt


def _operand(x: Any, name: str, ndim: int, backend: str) -> tuple[Any, np.dtype]:
    """``_host``, or a CUDA device array (``backend="cuda"`` only), checked without a copy."""
    if is_device_array(x):
        if backend != "cuda":
            raise ValueError(
                f"{name} is a CUDA device array: it needs backend='cuda'; got {backend!r}"
            )
        check_device_array(x, name, ndim=ndim)
        return x, np.dtype(x.dtype)
    return _host(x, name, ndim)


def _matching(x: Any, name: str, length: int, what: str) -> tuple[np.ndarray, np.dtype]:
    """A 1-D host argument of ``length`` entries (the ``what`` axis of ``deltas``)."""
    a, dt = _host(x, name, 1)
    if a.shape[0] != length:
        raise ValueError(
            f"{name} must have shape ({length},) to match the {what} of deltas; got {a.shape}"
        )
    return a, dt


def _cast(a: Any, dtype: np.dtype, backend: str) -> Any:
    """``a`` in ``dtype`` (C-contiguous for the compiled backends); device arrays as they are."""
    if is_device_array(a):
        return a
    if backend == "numpy":
        return a.astype(dtype, copy=False)
    return np.ascontiguousarray(a, dtype=dtype)


def weighted_sum(weights: Any, deltas: Any, backend: str = "numpy") -> Any:
    """Σ_k weights_k · deltas_k, shape (d,), for ``weights`` (m,) and ``deltas`` (m, d).

    One pass over the (m, d) matrix (a BLAS matrix-vector product on the NumPy backend), in the
    float dtype of ``deltas``. On ``"cuda"``, ``deltas`` may be a device array, and the sum is
    then one too.
    """
    check_backend(backend)
    D, dtype = _operand(deltas, "deltas", 2, backend)
    w, _ = _matching(weights, "weights", D.shape[0], "rows")
    w, D = _cast(w, dtype, backend), _cast(D, dtype, backend)
    if backend == "cuda":
        return _cuda().weighted_sum(w, D)
    if backend == "numba":
        from . import cpu

        with _ieee():
            return cpu.weighted_sum(w, D)
    with _ieee():
        return w @ D


def weighted_update(
    theta: Any, deltas: Any, weights: Any, backend: str = "numpy"
) -> tuple[Any, bool]:
    """θ − Σ_k weights_k δ_k for ``theta`` (d,), ``deltas`` (m, d), ``weights`` (m,).

    Returns ``(out, maybe_finite)``: ``maybe_finite`` is True when every entry of ``out`` is
    certainly finite; False asks the caller for a full check (see ``kernels.cpu``). ``out`` has
    the promotion of ``theta``'s and ``deltas``' float dtypes. The CUDA backend also takes numba
    device arrays, and returns a device array when ``theta`` is one.
    """
    check_backend(backend)
    D, ddt = _operand(deltas, "deltas", 2, backend)
    t, tdt = _operand(theta, "theta", 1, backend)
    if t.shape[0] != D.shape[1]:
        raise ValueError(
            f"theta must have shape ({D.shape[1]},) to match the columns of deltas; "
            f"got {tuple(t.shape)}"
        )
    w, _ = _matching(weights, "weights", D.shape[0], "rows")
    dtype = np.result_type(tdt, ddt)
    w, D, t = _cast(w, dtype, backend), _cast(D, dtype, backend), _cast(t, dtype, backend)
    if backend == "numba":
        from . import cpu

        with _ieee():
            return cpu.weighted_update(t, D, w)
    if backend == "cuda":
        return _cuda().weighted_update(t, D, w)
    with _ieee():
        out = t - w @ D
        return out, bool(np.isfinite(out.sum()))


def weighted_sum_sq_norms(
    weights: Any, deltas: Any, backend: str = "numpy"
) -> tuple[Any, np.ndarray]:
    """(Σ_k weights_k δ_k, ‖δ_k‖²) for ``weights`` (m,) and ``deltas`` (m, d): the sum in the
    float dtype of ``deltas``, the squared norms in float64. ``"numba"`` and ``"cuda"`` read
    the matrix once for both (q-FedAvg's fused reduction); the reference is the two NumPy
    expressions."""
    check_backend(backend)
    D, dtype = _operand(deltas, "deltas", 2, backend)
    w, _ = _matching(weights, "weights", D.shape[0], "rows")
    w, D = _cast(w, dtype, backend), _cast(D, dtype, backend)
    if backend == "cuda":
        return _cuda().weighted_sum_sq_norms(w, D)
    if backend == "numba":
        from . import cpu

        with _ieee():
            return cpu.weighted_sum_sq_norms(w, D)
    with _ieee():
        return w @ D, _row_sq_norms(D)


def _row_sq_norms(D: np.ndarray) -> np.ndarray:
    D = np.asarray(D, dtype=np.float64)
    with _ieee():
        return np.einsum("ij,ij->i", D, D)


def row_sq_norms(deltas: Any, backend: str = "numpy") -> np.ndarray:
    """‖δ_k‖² of each row of an (m, d) ``deltas``, float64, shape (m,).

    The reference squares and sums in float64; float32 input is widened first.
    """
    check_backend(backend)
    D, dtype = _operand(deltas, "deltas", 2, backend)
    D = _cast(D, dtype, backend)
    if backend == "cuda":
        return _cuda().row_sq_norms(D)
    if backend == "numba":
        from . import cpu

        with _ieee():
            return cpu.row_sq_norms(D)
    return _row_sq_norms(D)


def gram(deltas: Any, backend: str = "numpy") -> np.ndarray:
    """G = D Dᵀ of an (m, d) ``deltas``, float64, shape (m, m), exactly symmetric.

    The reference is one float64 GEMM (float32 input is widened first); ``"numba"`` is a
    register-tiled one-pass kernel up to ``cpu.GRAM_MAX_M`` rows (700 with AVX-512, 128
    otherwise: the same limit for every thread count; 1.5-3.4× faster than OpenBLAS's SYRK at
    m = 10-100, about level with it at the limit on one thread) and BLAS's SYRK, on one thread,
    above; ``"cuda"`` the tiled kernel of ``kernels/cuda.py``.
    """
    check_backend(backend)
    D, dtype = _operand(deltas, "deltas", 2, backend)
    D = _cast(D, dtype, backend)
    if backend == "cuda":
        return _cuda().gram(D)
    if backend == "numba":
        from . import cpu

        if cpu.use_gram_kernel(D.shape[0]):
            with _ieee():
                return cpu.gram(D)
        with blas_single_thread():  # SYRK's second thread gains nothing here, and under load
            return _blas_gram(D)  # it ran 10-40× slower
    return _blas_gram(D)


def _blas_gram(D: Any) -> np.ndarray:
    D = np.asarray(D, dtype=np.float64)
    with _ieee():
        G = D @ D.T
    return np.triu(G) + np.triu(G, 1).T


def two_combinations(weights: Any, deltas: Any, backend: str = "numpy") -> np.ndarray:
    """``weights @ deltas`` for a (2, m) ``weights`` and an (m, d) ``deltas``, float64,
    shape (2, d): FedFV's ḡ and mean update. ``"numba"`` and ``"cuda"`` read the matrix once
    for both rows (BLAS reads the right factor of a (2, m) × (m, d) product about half as fast
    as a plain stream); the reference is the float64 matrix product."""
    check_backend(backend)
    D, dtype = _operand(deltas, "deltas", 2, backend)
    W, _ = _host(weights, "weights", 2)
    if W.shape != (2, D.shape[0]):
        raise ValueError(
            f"weights must have shape (2, {D.shape[0]}) to match the rows of deltas; got {W.shape}"
        )
    W = np.ascontiguousarray(W, dtype=np.float64)
    if backend == "cuda":
        return _cuda().two_combinations(W, _cast(D, dtype, backend))
    D = np.asarray(D, dtype=np.float64)
    if backend == "numba":
        from . import cpu

        with _ieee():
            return cpu.two_combinations(W, np.ascontiguousarray(D))
    with _ieee():
        return W @ D
