"""The simplex QP as Python calls it: input checks, scaling by powers of two, the result and its
checks, the Cholesky factor kept between solves
([`solve_simplex_qp`][fairagg.simplex.solve_simplex_qp],
[`a_norm_projection`][fairagg.simplex.a_norm_projection]).

The package's internal interface to [`fairagg.online`][fairagg.online] (AAgFF-S's FTRL solves):
``solve_checked`` (a solve of validated input), ``solve_with_factor`` (a checked solve
starting from a kept factor), ``new_factor`` and ``factor_rank_one``, with
[`QPResult`][fairagg.simplex.QPResult], [`QPFactor`][fairagg.simplex.QPFactor],
``SingularSystemError`` and ``IllConditionedQPError``; the ``_scan`` module's ``absmax`` and
``all_finite`` complete it.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .._checks import as_float_array, check_finite, check_int, check_real
from ._active_set import _LOWER, _UPPER, _qp, _symmetrize
from ._free_set import _chol_rank_one
from ._projection import check_box
from ._scan import absmax


class QPResult(NamedTuple):
    """Solution of min ½xᵀAx + bᵀx over a box-simplex.

    Attributes
    ----------
    x : ndarray of float64, shape (K,)
        The minimiser.
    multiplier : float
        ν, the multiplier of Σx = total: (Ax + b)_i = ν on the free set, ≥ ν at the lower bound,
        ≤ ν at the upper bound (the KKT conditions).
    active_lower, active_upper : ndarray of bool, shape (K,)
        The final working set: coordinates held at their lower / upper bound.
    iterations : int
        Active-set iterations (each one linear solve on the free set).
    kkt_residual : float
        Largest violation of the KKT conditions (stationarity on the free set, dual signs on the
        working set, primal feasibility), relative to the gradient's scale. Round-off level.
    """

    x: np.ndarray
    multiplier: float
    active_lower: np.ndarray
    active_upper: np.ndarray
    iterations: int
    kkt_residual: float


def _check_qp(A: Any, b: Any, name_a: str = "A") -> tuple[np.ndarray, np.ndarray, float]:
    """Validated (A symmetrised, b, max |A|); A's finiteness is checked in the symmetry pass."""
    Am = as_float_array(A, name_a, ndim=2, dtype=np.float64, allow_int=True, finite=False)
    bv = as_float_array(b, "b", ndim=1, dtype=np.float64, allow_int=True, min_size=1)
    # The compiled solver's products want C order: a strided view (A[::-1, ::-1], a transpose)
    # would otherwise run slowly and emit a NumbaPerformanceWarning.
    Am, bv = np.ascontiguousarray(Am), np.ascontiguousarray(bv)
    K = bv.size
    if Am.shape != (K, K):
        raise ValueError(f"{name_a} must have shape ({K}, {K}) to match b; got {Am.shape}")
    S, asym, amax, finite = _symmetrize(Am)
    if not finite:
        check_finite(Am, name_a)
    if asym > 1e-10 * max(amax, 1e-300):
        raise ValueError(f"{name_a} must be symmetric; max |{name_a} - {name_a}.T| = {asym:.3g}")
    return S, bv, amax


class SingularSystemError(ValueError):
    """A positive definite matrix that is singular to working precision (a ValueError: the
    input, not the method, is at fault; callers that build the matrix re-raise it naming their
    own arguments)."""


class IllConditionedQPError(ValueError):
    """A QP the active-set method could not solve in float64: the point it ended at is not finite
    or not feasible (A's eigenvalues, or A against b, span more than float64 resolves). Refused
    rather than returned (callers that build A and b re-raise it naming their own arguments)."""


def _result(out: tuple, max_iter: int, name_a: str = "A") -> QPResult:
    x, state, nu, its, status, res = out[:6]
    if status == 3:
        raise ValueError(f"{name_a} must be positive definite (its Cholesky factorisation failed)")
    if status == 1:
        raise RuntimeError(
            f"the active-set method did not terminate in max_iter = {max_iter} iterations "
            "(cycling on a degenerate problem); raise max_iter or perturb the problem"
        )
    if status == 2:
        raise SingularSystemError(
            f"{name_a} is singular to working precision: the free-set KKT system at the start "
            "cannot be solved (its eigenvalues span more than float64's precision)"
        )
    return QPResult(x, float(nu), state == _LOWER, state == _UPPER, int(its), float(res))


def solve_simplex_qp(
    A: Any,
    b: Any,
    *,
    lower: Any = 0.0,
    upper: Any = np.inf,
    total: float = 1.0,
    x0: Any = None,
    max_iter: int | None = None,
    check_definite: bool = True,
) -> QPResult:
    """Exact minimiser of the strictly convex QP ½xᵀAx + bᵀx over the box-simplex (SPEC §5).

    This is the AAgFF-S step and the A-norm (Mahalanobis) projection onto the simplex. A primal
    active-set method (Nocedal & Wright, *Numerical Optimization*, Alg. 16.3): each iteration solves
    the KKT system of the equality-constrained problem on the current free set (a Cholesky
    factorisation of A_FF), then either steps to its solution or stops at the first bound in the
    way, which joins the working set; at a face minimiser, the held coordinate whose multiplier has
    the wrong sign leaves the working set. The objective never increases and, A being positive
    definite, no working set repeats, so the method terminates finitely at a point that satisfies
    the KKT conditions up to round-off (``kkt_residual``).

    The cold start minimises over {Σx = total} alone and projects that point onto the box-simplex
    (its bounds guess the active set); ``x0`` (e.g. the previous round's solution) replaces it, and
    a good ``x0`` usually ends the method in one or two iterations. The start, the method and the
    KKT residual are compiled functions, called in turn.

    Parameters
    ----------
    A : array_like, shape (K, K)
        Symmetric positive definite (``ValueError`` otherwise; for a semidefinite Gram matrix use
        [`min_norm_weights`][fairagg.simplex.min_norm_weights]). Symmetrised as (A + Aᵀ)/2 after a
        symmetry check.
    b : array_like, shape (K,)
    lower, upper : float or array_like, shape (K,)
        Box bounds (default: the simplex).
    total : float
        Σx.
    x0 : array_like, shape (K,), optional
        Warm start; projected onto the box-simplex first, so any finite vector is accepted.
    max_iter : int, optional
        Safety limit, default 20K + 100; reaching it raises ``RuntimeError``.
    check_definite : bool
        With ``x0``, prove A positive definite by a Cholesky factorisation of the whole of A
        (a cold start always does). ``False`` skips it for callers whose A is positive definite
        by construction (AAgFF-S: αI plus a sum of outer products, α > 0).

    Returns
    -------
    QPResult
    """
    return solve_with_factor(A, b, lower, upper, total, x0, max_iter, check_definite, None)[0]


class QPFactor(NamedTuple):
    """The Cholesky factor of A_FF that an active-set solve ended with, to start the next solve
    of a rank-one update of A from (AAgFF-S's A grows by β g gᵀ each round): an O(K²) update
    instead of an O(K³) factorisation. Treat it as opaque:
    [`fairagg.online.quadratic_ftrl_round`][fairagg.online.quadratic_ftrl_round] creates and
    consumes it.

    Attributes
    ----------
    L : ndarray, shape (K, K)
        Lower triangle of L[:size, :size]: the factor of A_FF, F = order[:size] in that order.
    order : ndarray of int64, shape (K,)
    size : int
        |F|; −1 when there is no factor.
    age : int
        Updates since the factor was last computed from scratch.
    key : tuple
        What the factorised A belongs to (set by the caller, e.g. (α, β, variant, t)).
    """

    L: np.ndarray
    order: np.ndarray
    size: int
    age: int
    key: tuple = ()


def new_factor(size: int, *, kept: bool = True) -> QPFactor:
    """Empty factor buffers. ``kept``: zeroed, because the factor will live in a state that is
    copied and compared (unused entries must not be whatever memory held); a solve whose factor
    is thrown away skips that."""
    alloc = np.zeros if kept else np.empty
    return QPFactor(alloc((size, size)), alloc(size, dtype=np.int64), -1, 0)


def factor_rank_one(factor: QPFactor, w: np.ndarray, key: tuple) -> QPFactor:
    """A new factor of A + wwᵀ on the same free set (``factor`` is left as it is)."""
    L = factor.L.copy()
    if factor.size < 0:
        return QPFactor(L, factor.order.copy(), -1, 0, key)
    _chol_rank_one(L, factor.size, np.asarray(w, dtype=np.float64)[factor.order[: factor.size]])
    return QPFactor(L, factor.order.copy(), factor.size, factor.age + 1, key)


# A solve started from a kept factor whose KKT residual exceeds this is redone from scratch (the
# exact solves' residuals are round-off, ~1e-16 relative; this only guards against a factor that
# no longer matches A).
_KEPT_FACTOR_RESIDUAL = 1e-10


def solve_with_factor(
    A, b, lower, upper, total, x0, max_iter, check_definite, factor
) -> tuple[QPResult, QPFactor]:
    """[`solve_simplex_qp`][fairagg.simplex.solve_simplex_qp] starting from ``factor`` (a
    [`QPFactor`][fairagg.simplex.QPFactor] of this A, or None), whose buffers it reuses; returns the
    result and the factor it ended with."""
    Am, bv, amax = _check_qp(A, b)
    K = bv.size
    s = check_real(total, "total", low=0.0, low_open=True)
    lo, hi = check_box(lower, upper, K, s)
    it = 20 * K + 100 if max_iter is None else check_int(max_iter, "max_iter", low=1)
    if x0 is None:
        start, warm = np.zeros(K), 0
    else:
        start, warm = as_float_array(x0, "x0", shape=(K,), dtype=np.float64, allow_int=True), 1
    return solve_checked(Am, bv, amax, lo, hi, s, start, warm, it, bool(check_definite), factor)


def _rescaling(m: float) -> int:
    """The exponent e by which a QP whose largest coefficient is ``m`` is solved, scaled by 2^e:
    0 within 2^±400 (and for m = 0), else the even e that brings m into [1/2, 2).

    The minimiser of ½xᵀAx + bᵀx does not change when A and b are scaled together, and scaling by
    a power of two is exact (it makes a subnormal entry normal, without rounding). Far from 1 the
    solver's intermediate quantities leave float64: A⁻¹1 ~ 1/λ_min overflows for A ~ 1e-308
    (the answer was NaN), and products underflow to subnormals for A ~ 1e307. An even exponent
    keeps the Cholesky factor's square roots exact too, so a solve scaled by 4^j gives the
    unscaled solve's x bit for bit. The scale follows A, which the factorisation and the solves
    divide by; b rides along (scaled by max(|A|, |b|) instead, a b far above A pushed A into
    underflow, and positive definite matrices were refused as not positive definite).
    """
    if not m > 0.0 or 2.0**-_SAFE_EXPONENT < m < 2.0**_SAFE_EXPONENT:
        return 0
    return -2 * (math.frexp(m)[1] // 2)


def _unscaled(res: QPResult, e: int) -> QPResult:
    """``res`` of a QP solved scaled by 2^e: the multiplier scales back (±inf or 0 where the exact
    value leaves float64, as min_norm_point's); x and the relative KKT residual do not change."""
    if not e:
        return res
    with np.errstate(over="ignore", under="ignore"):
        return res._replace(multiplier=float(np.ldexp(res.multiplier, -e)))


_SAFE_EXPONENT = 400


def solve_checked(Am, bv, amax, lo, hi, s, start, warm, it, check, factor):
    """``solve_with_factor`` on validated input: ``Am`` exactly symmetric, C-contiguous and
    finite with ``amax`` = max |Am|, ``bv`` finite, ``lo``/``hi`` from
    [`check_box`][fairagg.simplex.check_box], ``start`` float64 (K,), ``warm`` 0 (cold) or 1
    (project ``start``), ``it`` ≥ 1. Callers whose A is symmetric by construction (AAgFF-S's) come
    here directly.

    An A far from 1 is solved scaled, with b (``_rescaling``, no further up than keeps b
    finite); the multiplier is scaled back, and no factor is kept (it would be the scaled
    A_FF's). A solve that ends at a non-finite or infeasible point is refused
    (``IllConditionedQPError``), never returned."""
    K = bv.size
    e = _rescaling(amax)
    bmax = absmax(bv)
    if e > 0 and bmax > 0.0:  # scaling up: keep b below 2^1000 (never scale a tiny A down)
        e = max(0, min(e, 2 * ((1000 - math.frexp(bmax)[1]) // 2)))
    if e:
        Am, bv, amax = np.ldexp(Am, e), np.ldexp(bv, e), math.ldexp(amax, e)
        factor = new_factor(K)  # zeroed: the returned factor holds no stale memory
    if factor is None or factor.L.shape != (K, K):
        factor = new_factor(K, kept=False)
    L, order, kept = factor.L, factor.order, factor.size
    out = _qp(Am, bv, amax, lo, hi, s, start, warm, True, check, it, L, order, kept, factor.age)
    if kept >= 0 and warm == 1 and out[4] == 0 and not out[5] <= _KEPT_FACTOR_RESIDUAL:
        out = _qp(Am, bv, amax, lo, hi, s, start, warm, True, check, it, L, order, -1, 0)
    res = _unscaled(_checked_result(_result(out, it), lo, hi, s), e)
    return res, QPFactor(L, order, -1 if e else out[6], 0 if e else out[7], factor.key)


def _checked_result(res: QPResult, lo: np.ndarray, hi: np.ndarray, total: float) -> QPResult:
    """``res``, or ``IllConditionedQPError`` if its x is not finite or leaves the
    box-simplex beyond round-off (a NaN x reported a KKT residual of 0)."""
    x = res.x
    if not np.isfinite(x).all():
        what = "a point that is not finite"
    else:
        tol = 1e-9 * max(1.0, abs(total), float(np.max(np.abs(x))))
        off = max(abs(float(x.sum()) - total), float(np.max(lo - x)), float(np.max(x - hi)))
        if off <= tol:
            return res
        what = f"a point {off:.3g} outside the box-simplex"
    raise IllConditionedQPError(
        f"the QP is too ill-conditioned for float64: the active-set method ended at {what} "
        "(A's eigenvalues, or A against b, span more than float64 resolves)"
    )


def a_norm_projection(
    y: Any, A: Any, *, lower: Any = 0.0, upper: Any = np.inf, total: float = 1.0
) -> QPResult:
    """Projection of ``y`` onto the box-simplex in the A-norm: argmin ½(x − y)ᵀA(x − y).

    The QP of [`solve_simplex_qp`][fairagg.simplex.solve_simplex_qp] with b = −Ay; A symmetric
    positive definite.
    """
    yv = as_float_array(y, "y", ndim=1, dtype=np.float64, min_size=1)
    Am, _, amax = _check_qp(A, yv)
    # A far from 1 is scaled before A y is formed (a subnormal A y would round the answer away):
    # the projection does not depend on A's scale; the multiplier is scaled back.
    e = _rescaling(amax)
    As = np.ldexp(Am, e) if e else Am
    with np.errstate(over="ignore", invalid="ignore"):
        b = -(As @ yv)
    if not np.isfinite(b).all():
        raise ValueError(
            f"y is too large for its A-norm projection in float64: A y overflows (max |y| = "
            f"{float(np.max(np.abs(yv))):.3g}); scale y down"
        )
    res = solve_simplex_qp(As, b, lower=lower, upper=upper, total=total, x0=yv)
    return _unscaled(res, e)
