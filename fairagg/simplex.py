"""Geometry of the probability simplex: exact projections, the simplex-constrained QP, min-norm
points and entropic (KL) steps (SPEC §3-§5, §8; AAgFF poster; FedMGDA+).

Everything here is *exact*: each argmin is found by a finite algorithm (a sort, a sweep over
breakpoints, an active-set method) and is correct up to floating-point round-off, never "to a
solver tolerance". ``fairagg.oracles`` solves the same problems with cvxpy as an independent check.

Sets used below, for a length-K vector x:

- the simplex Δ = {x : x ≥ 0, Σ x = total} (``total`` = 1 unless stated);
- the box-simplex {x : lower ≤ x ≤ upper, Σ x = total}, ``lower``/``upper`` scalars or length-K
  arrays, ``upper`` may be ``inf``. It is non-empty iff lower ≤ upper and Σ lower ≤ total ≤ Σ upper.

Conventions: inputs are validated once (``ValueError``/``TypeError`` naming the argument); the
projections keep a float32/float64 input's dtype; the QP machinery computes and returns float64.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numba
import numpy as np
from numba.np.linalg import F_INT_nbtype as _LAPACK_INT
from numba.np.linalg import F_INT_nptype as _LAPACK_INT_NP

from ._checks import as_float_array, check_count, check_finite, check_int, check_real

__all__ = [
    "MinNormResult",
    "QPFactor",
    "QPResult",
    "a_norm_projection",
    "check_box",
    "check_simplex_point",
    "kl_step",
    "log_normalize",
    "min_norm_point",
    "min_norm_weights",
    "project_box_simplex",
    "project_simplex",
    "solve_simplex_qp",
]

_FREE, _LOWER, _UPPER = 0, 1, 2


# --------------------------------------------------------------------------------------------
# Euclidean projections
# --------------------------------------------------------------------------------------------


def project_simplex(y: Any, total: float = 1.0) -> np.ndarray:
    """Exact Euclidean projection argmin_{x ≥ 0, Σx = total} ½‖x − y‖² (SPEC §3).

    The sort-based algorithm (Held, Wolfe & Crowder 1974; Duchi et al. 2008), O(K log K): sort
    ``y`` descending into u, ρ = max{j : u_j + (total − Σ_{i≤j} u_i)/j > 0},
    τ = (total − Σ_{i≤ρ} u_i)/ρ, x = max(y + τ, 0). Note the inclusive sum Σ_{i≤j}: the public
    q-FFL code's Σ_{i<j} leaves the simplex.

    Parameters
    ----------
    y : array_like, shape (K,)
        Finite point, K ≥ 1; float32 and float64 keep their dtype.
    total : float
        Positive sum of the result.

    Returns
    -------
    ndarray, shape (K,)
        The projection. ``y`` is shifted by its maximum first (projection commutes with adding a
        constant to every entry), so large offsets do not overflow the cumulative sum.
    """
    v = as_float_array(y, "y", ndim=1, min_size=1)
    s = check_real(total, "total", low=0.0, low_open=True)
    with np.errstate(over="ignore"):
        # entries far below the maximum (beyond the float range) project to 0 whatever they are
        z = np.maximum(v.astype(np.float64) - np.max(v), -1e300)
    u = np.sort(z)[::-1]
    css = np.cumsum(u) - s
    j = np.arange(1, u.size + 1)
    rho = int(np.nonzero(u - css / j > 0)[0][-1]) + 1
    tau = css[rho - 1] / rho
    return np.maximum(z - tau, 0.0).astype(v.dtype, copy=False)


def check_box(
    lower: Any, upper: Any, size: int, total: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Validate box bounds for a length-``size`` box-simplex; return float64 arrays (K,).

    ``lower`` must be finite; ``upper`` may hold ``+inf``. Raises ``ValueError`` if the set
    {lower ≤ x ≤ upper, Σx = total} is empty.
    """
    size = check_count(size, "size", low=1)
    total = check_real(total, "total", low=0.0, low_open=True)
    if isinstance(lower, float) and isinstance(upper, float) and lower == 0.0 and upper == np.inf:
        return np.zeros(size), np.full(size, np.inf)  # the plain simplex (fast path)
    lo = as_float_array(lower, "lower", dtype=np.float64, allow_int=True)
    hi = as_float_array(upper, "upper", dtype=np.float64, allow_int=True, finite=False)
    if np.any(np.isnan(hi)) or np.any(hi == -np.inf):
        raise ValueError("upper must hold real numbers or +inf; got NaN or -inf")
    for name, v in (("lower", lo), ("upper", hi)):
        if v.shape not in ((), (size,)):
            raise ValueError(f"{name} must be a scalar or have shape ({size},); got {v.shape}")
    lo = np.array(np.broadcast_to(lo, (size,)))
    hi = np.array(np.broadcast_to(hi, (size,)))
    if np.any(lo > hi):
        i = int(np.argmax(lo > hi))
        raise ValueError(
            f"lower must not exceed upper; lower[{i}] = {lo[i]} > upper[{i}] = {hi[i]}"
        )
    if lo.sum() > total * (1 + 1e-12):
        raise ValueError(f"the box-simplex is empty: sum(lower) = {lo.sum()} > total = {total}")
    if hi.sum() < total * (1 - 1e-12):
        raise ValueError(f"the box-simplex is empty: sum(upper) = {hi.sum()} < total = {total}")
    return lo, hi


@numba.njit(cache=True)
def _box_sum(z, lo, hi, t):  # pragma: no cover - compiled
    """S(t) = Σ_i clip(z_i − t, lo_i, hi_i), summed afresh: every term is a clipped value, so no
    huge z_i enters the sum unless it is a free coordinate's value."""
    acc = 0.0
    for i in range(z.shape[0]):
        acc += min(max(z[i] - t, lo[i]), hi[i])
    return acc


@numba.njit(cache=True)
def _heap_sort(v):  # pragma: no cover - compiled
    """Sort the finite ``v`` in place, ascending (heapsort, O(n log n)). np.sort's compiled
    quicksort took 2-3 s of the solver's first compilation (a dozen helper functions); the
    values sorted are the same (only zeros of either sign may trade places, and S takes the same
    value at t = 0 and t = −0)."""
    n = v.shape[0]
    for start in range(n // 2 - 1, -1, -1):
        _sift_down(v, start, n)
    for end in range(n - 1, 0, -1):
        top = v[0]
        v[0] = v[end]
        v[end] = top
        _sift_down(v, 0, end)


@numba.njit(cache=True, inline="always")
def _sift_down(v, root, n):  # pragma: no cover - compiled
    """Restore the max-heap order of v[:n] below ``root``."""
    x = v[root]
    i = root
    child = 2 * i + 1
    while child < n:
        if child + 1 < n and v[child + 1] > v[child]:
            child += 1
        if not v[child] > x:
            break
        v[i] = v[child]
        i = child
        child = 2 * i + 1
    v[i] = x


@numba.njit(cache=True)
def _box_crossing(z, lo, hi, s):  # pragma: no cover - compiled
    """(t_a, t_b): consecutive distinct breakpoints of S with S(t_a) > s ≥ S(t_b) (t_a = −inf
    when S(first) ≤ s), by bisection with S evaluated afresh at each breakpoint."""
    K = z.shape[0]
    ev = np.empty(2 * K)
    ne = 0
    for i in range(K):
        if np.isfinite(hi[i]):
            ev[ne] = z[i] - hi[i]
            ne += 1
        ev[ne] = z[i] - lo[i]
        ne += 1
    ev = ev[:ne]
    _heap_sort(ev)
    # S(last) = Σlo ≤ s (the caller's check allows Σlo to exceed s by round-off: b is then the
    # last breakpoint).
    a, b = -1, ne - 1
    while b - a > 1:
        mid = (a + b) // 2
        if _box_sum(z, lo, hi, ev[mid]) <= s:
            b = mid
        else:
            a = mid
    return (ev[a] if a >= 0 else -np.inf), ev[b]


@numba.njit(cache=True)
def _box_free(z, lo, hi, s):  # pragma: no cover - compiled
    """The projection for z of moderate spread: the coordinates at a bound on the crossing
    segment, and the free ones x_i = (s − Σ_bounded)/n + (z_i − z̄_free)."""
    K = z.shape[0]
    t_a, t_b = _box_crossing(z, lo, hi, s)
    x = np.empty(K)
    free = np.zeros(K, dtype=np.bool_)
    bounded = 0.0
    n = 0
    ref = 0.0
    for i in range(K):  # the classification on the open segment (t_a, t_b)
        if np.isfinite(hi[i]) and z[i] - hi[i] >= t_b:
            x[i] = hi[i]
            bounded += hi[i]
        elif z[i] - lo[i] <= t_a:
            x[i] = lo[i]
            bounded += lo[i]
        else:
            if n == 0:
                ref = z[i]
            free[i] = True
            n += 1
    if n > 0:
        dev = 0.0  # the mean of z over the free set, as ref + mean(z_i − ref)
        for i in range(K):
            if free[i]:
                dev += z[i] - ref
        dev /= n
        share = (s - bounded) / n
        for i in range(K):
            if free[i]:
                x[i] = min(max(share + ((z[i] - ref) - dev), lo[i]), hi[i])
    return x


@numba.njit(cache=True)
def _box_project(y, lo, hi, s):  # pragma: no cover - compiled
    """x = clip(y − τ, lo, hi) with Σx = s.

    S(τ) = Σ_i clip(y_i − τ, lo_i, hi_i) is continuous, non-increasing and piecewise linear:
    coordinate i sits at hi_i for τ ≤ y_i − hi_i, equals y_i − τ up to τ = y_i − lo_i and sits at
    lo_i after. Bisection over the sorted breakpoints, with S summed afresh from clipped values
    at each (``_box_sum``), finds the segment (t_a, t_b] where S crosses s at any scale of
    y. The coordinates whose value differs between t_a and t_b are the ones that move there;
    they are solved again as a box projection of y_i − max y_F with the sum left to them, so
    that their breakpoints are computed relative to each other: with y = (0.1, −0.5, 0.3, 1.2)
    × 1e160 and the box [0.005, 0.5], both breakpoints of the third entry round to the same
    float, which a single sweep with running sums got wrong (Σx = 1.505).
    """
    K = y.shape[0]
    shift = np.max(y)  # translation invariance keeps the breakpoints small
    z = y - shift
    big = np.finfo(np.float64).max
    for i in range(K):  # more than the float range below the maximum: at the lower bound
        if z[i] < -big:
            z[i] = -big
    t_a, t_b = _box_crossing(z, lo, hi, s)
    x = np.empty(K)
    moving = np.zeros(K, dtype=np.bool_)
    rest = s
    top = -np.inf
    m = 0
    for i in range(K):
        va = min(max(z[i] - t_a, lo[i]), hi[i])
        vb = min(max(z[i] - t_b, lo[i]), hi[i])
        if va != vb:
            moving[i] = True
            top = max(top, z[i])
            m += 1
        else:
            x[i] = vb
            rest -= vb
    if m > 0:
        idx = np.flatnonzero(moving)
        w = np.empty(m)
        for k in range(m):
            w[k] = z[idx[k]] - top
        xf = _box_free(w, lo[idx], hi[idx], rest)
        for k in range(m):
            x[idx[k]] = xf[k]
    # Polish: hand the residual of Σx = s to the free entries, so the result lies on the set to
    # the round-off of x itself.
    for _ in range(2):
        res = s - x.sum()
        n = 0
        for i in range(K):
            if lo[i] < x[i] < hi[i]:
                n += 1
        if n == 0 or res == 0.0:
            break
        for i in range(K):
            if lo[i] < x[i] < hi[i]:
                x[i] = min(max(x[i] + res / n, lo[i]), hi[i])
    return x


def project_box_simplex(
    y: Any, lower: Any = 0.0, upper: Any = np.inf, total: float = 1.0
) -> np.ndarray:
    """Exact Euclidean projection onto the box-simplex {lower ≤ x ≤ upper, Σx = total}.

    The solution is x_i = clip(y_i − τ, lower_i, upper_i) with τ the root of the non-increasing,
    piecewise-linear S(τ) = Σ_i clip(y_i − τ, lower_i, upper_i) = total. A sweep over the 2K sorted
    breakpoints y_i − upper_i, y_i − lower_i finds the segment where S crosses ``total`` and solves
    the linear equation there: O(K log K), exact up to round-off. With ``lower = 0``,
    ``upper = inf`` this is [`project_simplex`][fairagg.simplex.project_simplex].

    Parameters
    ----------
    y : array_like, shape (K,)
        Finite point; dtype kept.
    lower, upper : float or array_like, shape (K,)
        Bounds (``upper`` may be ``inf``); the set must be non-empty.
    total : float
        Positive sum of the result.

    Returns
    -------
    ndarray, shape (K,)
    """
    v = as_float_array(y, "y", ndim=1, min_size=1)
    s = check_real(total, "total", low=0.0, low_open=True)
    lo, hi = check_box(lower, upper, v.size, s)
    return _box_project(v.astype(np.float64), lo, hi, s).astype(v.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# Simplex-constrained QP: primal active-set method
# --------------------------------------------------------------------------------------------


_NO_L = np.empty((0, 0))  # the bordered-LU (semidefinite) path keeps no Cholesky factor


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


# Reassociation only (no finite-math assumptions): lets the compiler vectorise the dot products
# of the triangular solves; NaN and infinity keep their IEEE meaning.
#
# A compiled function without fastmath flags of its own is compiled with its caller's when a
# fastmath caller compiles it first (numba passes them on), and that version is the one kept, on
# disk too: its bits would depend on which caller, or which test calling it directly, came
# first. Every callee of _active_set therefore states the flags it always ran with.
_REASSOC = {"reassoc", "nsz", "contract"}


# LAPACK's dpotrf through the helper numba itself uses for np.linalg.cholesky (its signature:
# kind, uplo, n, a, lda -> info). Calling it on our own buffer, with lda = K, factorises A_FF in
# place: no copy in, no copy out, no zeroing of the unused triangle.
_POTRF = numba.types.ExternalFunction(
    "numba_xxpotrf",
    numba.types.intc(
        numba.types.char,
        numba.types.char,
        numba.types.intp,
        numba.types.CPointer(numba.types.float64),
        numba.types.intp,
    ),
)

# LAPACK's dgesv through the helper numba's np.linalg.solve calls (kind, n, nrhs, a, lda, ipiv,
# b, ldb -> info), for the bordered KKT system: the same factorisation and solve as
# np.linalg.solve, without compiling its wrapper (its checks and error messages took 2.4 s of the
# solver's first compilation).
_GESV = numba.types.ExternalFunction(
    "numba_xgesv",
    numba.types.intc(
        numba.types.char,
        numba.types.intp,
        numba.types.intp,
        numba.types.CPointer(numba.types.float64),
        numba.types.intp,
        numba.types.CPointer(_LAPACK_INT),
        numba.types.CPointer(numba.types.float64),
        numba.types.intp,
    ),
)
# The helpers' kind and uplo arguments: ord("d") (float64) and ord("U") (upper), as constants:
# ord() of a string in compiled code compiles numba's unicode support.
_KIND_D = 100
_UPLO_U = 85


@numba.njit(cache=True, fastmath=_REASSOC)  # copies and LAPACK: the flags change nothing here
def _chol_free(A, free, nf, L):  # pragma: no cover - compiled
    """L[:nf, :nf] ← the Cholesky factor of A_FF, F = free[:nf] in that order (LAPACK dpotrf).

    Only the lower triangle of L[:nf, :nf] is the factor. Returns False if A_FF is not
    positive definite.
    """
    K = L.shape[1]
    for a in range(nf):
        for c in range(a + 1):
            L[a, c] = A[free[a], free[c]]
    # The row-major lower triangle is LAPACK's column-major upper one: factorising "U" there
    # (A_FF = UᵀU) leaves U's transpose, our L, in place.
    info = _POTRF(_KIND_D, _UPLO_U, nf, L.ctypes, K)
    return info == 0


@numba.njit(cache=True, fastmath=_REASSOC)
def _chol_append(A, free, nf, L, j):  # pragma: no cover - compiled
    """Extend the factor of A_FF by coordinate j, placed last: one triangular solve, O(nf²).

    Returns False (factor unchanged) when the new pivot is not safely positive, i.e. A_FF+j is
    numerically singular or indefinite; the caller then refactorises from scratch.
    """
    ss = 0.0
    for a in range(nf):
        acc = A[free[a], j]
        for c in range(a):
            acc -= L[a, c] * L[nf, c]
        v = acc / L[a, a]
        L[nf, a] = v
        ss += v * v
    d = A[j, j] - ss
    if not d > 1e-10 * A[j, j]:
        return False
    L[nf, nf] = np.sqrt(d)
    free[nf] = j
    return True


@numba.njit(cache=True, fastmath=_REASSOC)
def _chol_delete(free, nf, L, p):  # pragma: no cover - compiled
    """Drop position p from F and from the factor of A_FF: Givens rotations, O((nf − p)²).

    Removing row p of L leaves rows p.. with one entry above the diagonal; rotating columns
    (k, k+1) from the right (LQ Qᵀ Lᵀ = LLᵀ) zeroes it row by row.
    """
    for i in range(p, nf - 1):
        free[i] = free[i + 1]
        for c in range(i + 2):
            L[i, c] = L[i + 1, c]
    n = nf - 1
    for k in range(p, n):
        a = L[k, k]
        e = L[k, k + 1]
        r = np.hypot(a, e)
        co = a / r
        si = e / r
        L[k, k] = r
        L[k, k + 1] = 0.0
        for i in range(k + 1, n):
            u = L[i, k]
            w = L[i, k + 1]
            L[i, k] = co * u + si * w
            L[i, k + 1] = co * w - si * u


@numba.njit(cache=True)
def _chol_rank_one(L, nf, w):  # pragma: no cover - compiled
    """L ← the factor of LLᵀ + wwᵀ (w of length nf, overwritten): O(nf²) rotations, stable
    (the update is positive, so no pivot can vanish)."""
    for k in range(nf):
        lkk = L[k, k]
        r = np.hypot(lkk, w[k])
        c = r / lkk
        s = w[k] / lkk
        inv_c = lkk / r
        L[k, k] = r
        for i in range(k + 1, nf):
            lik = (L[i, k] + s * w[i]) * inv_c
            w[i] = c * w[i] - s * lik
            L[i, k] = lik


@numba.njit(cache=True, fastmath=_REASSOC)
def _chol_kkt(A, b, x, state, free, nf, L, total):  # pragma: no cover - compiled
    """Minimise over the free set F = free[:nf] with the working set held; return (x_F, ν).

    Stationarity A_FF x_F + A_FW x_W + b_F = ν 1 with 1ᵀx_F = total − Σ x_W. With A_FF = LLᵀ:
    u = A_FF⁻¹(r − c1), v = A_FF⁻¹ 1, ν' = (s' − Σu)/Σv, x_F = u + ν'v, ν = ν' − c, where
    r = −b_F − A_FW x_W and c = mean(r). Adding c·1 to the right-hand side only shifts ν by c;
    centring it keeps u small, so u + ν'v does not cancel (for A ≈ aI the error would otherwise
    grow with |b| / a).
    """
    K = b.shape[0]
    held = np.empty(K - nf, dtype=np.int64)
    h = 0
    fixed_sum = 0.0
    for j in range(K):
        if state[j] != 0:
            held[h] = j
            h += 1
            fixed_sum += x[j]
    u = np.empty(nf)
    v = np.empty(nf)
    c = 0.0
    for a in range(nf):
        i = free[a]
        acc = b[i]
        for q in range(h):
            acc += A[i, held[q]] * x[held[q]]
        u[a] = -acc
        c += -acc
    c /= nf
    for a in range(nf):  # forward: L y = (r − c, 1)
        acc_u = u[a] - c
        acc_v = 1.0
        for k in range(a):
            acc_u -= L[a, k] * u[k]
            acc_v -= L[a, k] * v[k]
        u[a] = acc_u / L[a, a]
        v[a] = acc_v / L[a, a]
    for a in range(nf - 1, -1, -1):  # backward: Lᵀ z = y, a column of Lᵀ (row of L) at a time
        u[a] /= L[a, a]
        v[a] /= L[a, a]
        ua = u[a]
        va = v[a]
        for k in range(a):
            u[k] -= L[a, k] * ua
            v[k] -= L[a, k] * va
    vs = v.sum()
    nu = (total - fixed_sum - u.sum()) / vs
    xf = u + nu * v
    # u + ν'v cancels where A_FF is ill-conditioned (diagonal entries 1 and 1e-12: |u|, |ν'v|
    # ~1e12 for x ~ 1), and the equality then misses by ~1e-7. One refinement step along v
    # (A_FF v = 1, so stationarity holds with ν shifted) restores 1ᵀx_F to rounding.
    e = (total - fixed_sum - xf.sum()) / vs
    return xf + e * v, nu + e - c


@numba.njit(cache=True, fastmath=_REASSOC)
def _bordered_kkt(A, b, x, state, free, nf, total):  # pragma: no cover - compiled
    """The free-set minimiser of ``_chol_kkt`` for a semidefinite A: the bordered system
    [A_FF −1; 1ᵀ 0] solved by LU. Returns (x_F, ν, ok); a solution with a large residual (a
    numerically singular system) is reported as not ok.
    """
    K = b.shape[0]
    fixed_sum = 0.0
    for j in range(K):
        if state[j] != 0:
            fixed_sum += x[j]
    B = np.zeros((nf + 1, nf + 1))
    r = np.empty(nf + 1)
    for a in range(nf):
        i = free[a]
        acc = b[i]
        for j in range(K):
            if state[j] != 0:
                acc += A[i, j] * x[j]
        r[a] = -acc
        for c in range(nf):
            B[a, c] = A[i, free[c]]
        B[a, nf] = -1.0
        B[nf, a] = 1.0
    r[nf] = total - fixed_sum
    # np.linalg.solve(B, r): it refuses a non-finite system (r can overflow where A's entries
    # and the bounds are huge; the residual test below would not catch an infinite one), then
    # LAPACK's dgesv solves a Fortran-ordered copy of B (here the transpose in C order) with r
    # copied in.
    if not (_all_finite(B) and _all_finite(r)):
        return r[:nf], 0.0, False
    n = nf + 1
    Bf = np.empty((n, n))
    for a in range(n):
        for c in range(n):
            Bf[c, a] = B[a, c]
    sol = r.copy()
    ipiv = np.empty(n, dtype=_LAPACK_INT_NP)
    if _GESV(_KIND_D, n, 1, Bf.ctypes, n, ipiv.ctypes, sol.ctypes, n) != 0:  # exactly singular
        return r[:nf], 0.0, False
    res = 0.0
    scale = 0.0
    for a in range(nf + 1):
        acc = -r[a]
        scale = max(scale, abs(r[a]))
        for c in range(nf + 1):
            acc += B[a, c] * sol[c]
            scale = max(scale, abs(B[a, c] * sol[c]))
        res = max(res, abs(acc))
    if not (res <= 1e-9 * scale):  # also catches NaN
        return r[:nf], 0.0, False
    return sol[:nf], sol[nf], True


# Refactorise A_FF from scratch after this many rank-one updates of its Cholesky factor (keeps
# the round-off of the updated factor at the level of a fresh one; each update costs O(K²)).
_REFACTOR_EVERY = 64


def _qualified(name):
    """Name a compiled function's variant (its events, its cache file): ``_active_set_method``
    and ``_qp_method`` build two functions each from one definition."""

    def rename(fn):
        fn.__name__ = fn.__qualname__ = name
        return fn

    return rename


def _active_set_method(definite: bool):
    """The compiled active-set method for a positive definite A (``definite``: a Cholesky factor
    of A_FF, updated) or a semidefinite one (a bordered LU solve per free set).

    ``definite`` is a constant of each compiled function, not an argument: numba drops the
    branches it rules out before it compiles, so a run that only solves positive definite QPs
    (every AAgFF-S step, FedMGDA+ on affinely independent updates) never compiles the bordered
    LU path (``_bordered_kkt``, LAPACK's dgesv), and the LU variant compiles no Cholesky update.
    """

    @numba.njit(cache=True, fastmath=_REASSOC)
    @_qualified("_active_set_chol" if definite else "_active_set_lu")
    def _active_set(  # pragma: no cover - compiled
        A, b, lo, hi, total, x, state, max_iter, tol, L, free, nf0, age0
    ):
        """Primal active-set method (Nocedal & Wright, Alg. 16.3) on a box-simplex.

        ``x`` is feasible and consistent with ``state`` (0 free, 1 at lower, 2 at upper) with
        at least one free coordinate. For a positive definite A (``definite``) the Cholesky
        factor of A_FF is computed once and then updated as coordinates join (a triangular
        solve) or leave (Givens rotations) the free set, O(K²) per iteration; otherwise each
        free-set system is solved by LU.

        ``L`` (K, K) and ``free`` (K,) are the caller's buffers for the factor and the order of
        F. If ``nf0`` ≥ 0 they already hold the factor of A_FF for F = free[:nf0], ``age0``
        updates old; it is used when F is the start's free set (a warm start from the previous
        solution), and refactorised otherwise. On return they hold the final free set's factor.

        Returns (x, state, ν, iterations, status, nf, age): status 0 converged, 1 iteration
        limit, 2 the free-set system failed with nothing to drop; nf = |F| and age = updates
        since the last factorisation (nf = −1: no valid factor).
        """
        K = b.shape[0]
        tabu = np.zeros(K, dtype=np.bool_)
        last_freed = -1
        nu = 0.0
        # np.int64(0), not 0 (and np.int64(-1) below): numba types a variable first assigned a
        # literal as that literal, and compiled every callee it reaches (_chol_kkt, _bordered_kkt,
        # ...) once for Literal[int](0) and once for int64: 1.6 s of the first compilation.
        nf = np.int64(0)
        for j in range(K):
            if state[j] == 0:
                nf += 1
        given = definite and nf0 == nf
        for a in range(nf0 if given else 0):
            given = given and state[free[a]] == 0
        refactor = not given
        updates = age0 if given else 0
        if not given:
            nf = np.int64(0)
            for j in range(K):
                if state[j] == 0:
                    free[nf] = j
                    nf += 1
        for it in range(1, max_iter + 1):
            if definite:
                ok = True
                if refactor or updates >= _REFACTOR_EVERY:
                    ok = _chol_free(A, free, nf, L)
                    refactor = False
                    updates = 0
                if ok:
                    sol, nu_f = _chol_kkt(A, b, x, state, free, nf, L, total)
            else:
                sol, nu_f, ok = _bordered_kkt(A, b, x, state, free, nf, total)
            if not ok:
                # Degenerate free set (semidefinite A): the coordinate freed last is affinely
                # dependent on the others to working precision, so it cannot lower the objective.
                if last_freed < 0:
                    return x, state, nu, it, 2, -1, 0
                j = last_freed
                state[j] = 1 if x[j] <= lo[j] else 2
                x[j] = lo[j] if state[j] == 1 else hi[j]
                tabu[j] = True
                last_freed = -1
                for a in range(nf):  # it was appended last
                    if free[a] == j:
                        free[a] = free[nf - 1]
                nf -= 1
                refactor = True
                continue
            nu = nu_f
            alpha = 1.0
            block = -1
            block_at = np.int64(-1)
            block_to = 0
            if nf > 1:  # with one free coordinate the equality fixes it: no step to limit
                for a in range(nf):
                    i = free[a]
                    d = sol[a] - x[i]
                    if d < 0.0:
                        r = (lo[i] - x[i]) / d
                        if r < alpha:
                            alpha, block, block_at, block_to = r, i, a, 1
                    elif d > 0.0 and hi[i] < np.inf:
                        r = (hi[i] - x[i]) / d
                        if r < alpha:
                            alpha, block, block_at, block_to = r, i, a, 2
            if block >= 0:
                if alpha < 0.0:
                    alpha = 0.0
                for a in range(nf):
                    i = free[a]
                    x[i] += alpha * (sol[a] - x[i])
                state[block] = block_to
                x[block] = lo[block] if block_to == 1 else hi[block]
                if definite and not refactor:
                    _chol_delete(free, nf, L, block_at)
                    updates += 1
                else:
                    for a in range(block_at, nf - 1):
                        free[a] = free[a + 1]
                nf -= 1
                if alpha > 0.0:
                    tabu[:] = False
                elif block == last_freed:
                    tabu[block] = True  # freed on a round-off-sized multiplier: keep it held
                last_freed = -1
                continue
            moved = False
            for a in range(nf):
                moved = moved or sol[a] != x[free[a]]
                x[free[a]] = sol[a]
            if moved:  # progress: a coordinate held back as dependent may help again
                tabu[:] = False
            # x minimises over the current face: check the signs of the working set's multipliers
            worst = tol
            enter = np.int64(-1)
            for j in range(K):
                if state[j] == 0 or tabu[j]:
                    continue
                g = b[j]
                for k in range(K):
                    g += A[j, k] * x[k]
                viol = nu - g if state[j] == 1 else g - nu
                if viol > worst:
                    worst, enter = viol, j
            if enter < 0:
                return x, state, nu, it, 0, nf if definite else -1, updates
            state[enter] = 0
            last_freed = enter
            if definite and not refactor and _chol_append(A, free, nf, L, enter):
                updates += 1
            else:
                free[nf] = enter
                refactor = True
            nf += 1
        return x, state, nu, max_iter, 1, -1, 0

    return _active_set


_active_set_chol = _active_set_method(True)
_active_set_lu = _active_set_method(False)


@numba.njit(cache=True)
def _start_state(x, lo, hi, A, b):  # pragma: no cover - compiled
    """Working set of a feasible start: coordinates at a bound are held; at least one is free."""
    K = x.shape[0]
    state = np.zeros(K, dtype=np.int64)
    nfree = 0
    for i in range(K):
        if x[i] <= lo[i]:
            state[i] = 1
        elif x[i] >= hi[i]:
            state[i] = 2
        else:
            nfree += 1
    if nfree == 0:
        # a vertex of the box: free the movable coordinate with the smallest gradient
        best = -1
        gbest = np.inf
        for i in range(K):
            if lo[i] < hi[i] or best < 0:
                g = b[i]
                for k in range(K):
                    g += A[i, k] * x[k]
                if g < gbest or best < 0 or (lo[best] == hi[best] and lo[i] < hi[i]):
                    best, gbest = i, g
        state[best] = 0
    return state


@numba.njit(cache=True)
def _kkt_residual(A, b, x, state, nu, lo, hi, total, gscale):  # pragma: no cover - compiled
    """Largest KKT violation, relative to the scale of the gradient (and of ``total``).

    ``gscale`` = max|A| max|x| + max|b|, the scale of the terms of g = Ax + b (not of g itself,
    which is round-off at a min-norm point 0).
    """
    K = b.shape[0]
    g = A @ x + b
    scale = max(gscale, abs(nu), 1e-300)
    r = 0.0
    feas = abs(x.sum() - total) / total
    for i in range(K):
        if state[i] == 0:
            r = max(r, abs(g[i] - nu) / scale)
        elif state[i] == 1:
            r = max(r, (nu - g[i]) / scale)
        else:
            r = max(r, (g[i] - nu) / scale)
        feas = max(feas, (lo[i] - x[i]) / total, (x[i] - hi[i]) / total)
    return max(r, feas)


@numba.njit(cache=True)
def _symmetrize(A):  # pragma: no cover - compiled
    """(A + Aᵀ)/2, max |A − Aᵀ|, max |A| and whether A is finite, in one compiled call.

    An exactly symmetric A (the usual case) is returned as it is, not copied.
    """
    K = A.shape[0]
    unequal = 0
    for i in range(K):  # a branch-free count: this runs on every matrix the QP sees
        for j in range(i):
            unequal += A[i, j] != A[j, i]  # NaN != NaN: a NaN takes the full pass below
    if unequal == 0:
        return A, 0.0, _absmax(A), _all_finite(A)
    finite = True
    S = np.empty((K, K))
    asym = 0.0
    for i in range(K):
        for j in range(i + 1):
            u = A[i, j]
            w = A[j, i]
            finite = finite and abs(u) < np.inf and abs(w) < np.inf
            m = 0.5 * (u + w)
            S[i, j] = m
            S[j, i] = m
            asym = max(asym, abs(u - w))
    return S, asym, _absmax(A), finite


@numba.njit(cache=True, fastmath={"reassoc"})
def _all_finite(v):  # pragma: no cover - compiled
    """Whether every entry of a contiguous array is finite: Σ v·0 is 0, or NaN if one is not.

    Reassociation (no finite-math flags, so v·0 is not folded to 0) lets the sum vectorise.
    """
    f = v.ravel()
    s = 0.0
    for i in range(f.size):
        s += f[i] * 0.0
    return s == 0.0


@numba.njit(cache=True)
def _absmax(v):  # pragma: no cover - compiled
    """max |v| over a contiguous array (0 if empty); NaN entries are skipped.

    Four independent running maxima: a single one is a loop-carried compare chain that the
    compiler cannot vectorise, and this runs on every K×K matrix the QP sees.
    """
    f = v.ravel()
    n = f.size
    m0 = m1 = m2 = m3 = 0.0
    i = 0
    while i + 4 <= n:
        a0 = abs(f[i])
        a1 = abs(f[i + 1])
        a2 = abs(f[i + 2])
        a3 = abs(f[i + 3])
        m0 = a0 if a0 > m0 else m0
        m1 = a1 if a1 > m1 else m1
        m2 = a2 if a2 > m2 else m2
        m3 = a3 if a3 > m3 else m3
        i += 4
    while i < n:
        a0 = abs(f[i])
        m0 = a0 if a0 > m0 else m0
        i += 1
    return max(max(m0, m1), max(m2, m3))


def _qp_method(definite: bool):
    """``_qp`` for a positive definite A (``definite``) or a semidefinite one: each compiles
    only its own active-set variant (see ``_active_set_method``)."""

    @numba.njit(cache=True)
    @_qualified("_qp_chol" if definite else "_qp_lu")
    def _qp(  # pragma: no cover - compiled
        A, b, amax, lo, hi, total, x0, warm, check, max_iter, L, free, nf0, age0
    ):
        """Start (cold, warm or given), active-set loop and KKT residual in one compiled call.

        ``amax`` = max |A| (from the symmetry check). ``warm``: 0 cold start, 1 project ``x0``
        and start there, 2 ``x0`` is already feasible (the only start of the semidefinite
        variant, whose other branches are not compiled). ``check``: prove A positive definite on
        a warm start (a cold start always does). ``L``, ``free``, ``nf0``, ``age0``: the factor
        buffers of the active-set method (a given factor is only used on a warm start). Returns
        (x, state, ν, iterations, status, kkt_residual, nf, age); status 3 means A is not
        positive definite.
        """
        K = b.shape[0]
        fail = (x0, np.zeros(K, dtype=np.int64), 0.0, 0, 3, np.inf, -1, 0)
        if definite and warm == 1:
            if check and not _chol_free(A, np.arange(K), K, np.empty((K, K))):
                return fail
            # a start already in the box-simplex (the previous round's decision) is kept as it is
            inside = True
            s0 = 0.0
            for i in range(K):
                inside = inside and lo[i] <= x0[i] <= hi[i]
                s0 += x0[i]
            if inside and abs(s0 - total) <= 4.0 * K * 2.220446049250313e-16 * total:
                x = x0.copy()
            else:
                x = _box_project(x0, lo, hi, total)
            # Entries within round-off of a bound (Σx0 off by an ulp lifts zeros to ~1e-16) are
            # put on the bound and held, their mass moved to the largest free entry; otherwise
            # each would start free and be dropped one iteration at a time.
            eps_g = 1e-12 * total
            moved = 0.0
            top = -1
            for i in range(K):
                if lo[i] < x[i] <= lo[i] + eps_g:
                    moved += x[i] - lo[i]
                    x[i] = lo[i]
                elif hi[i] - eps_g <= x[i] < hi[i]:
                    moved += x[i] - hi[i]
                    x[i] = hi[i]
                elif lo[i] < x[i] < hi[i] and (top < 0 or x[i] > x[top]):
                    top = i
            if top >= 0:
                x[top] = min(max(x[top] + moved, lo[top]), hi[top])
            state = _start_state(x, lo, hi, A, b)
        elif definite and warm == 0:
            # cold start: the minimiser over {Σx = total} alone (its Cholesky factorisation of the
            # whole of A is the positive-definiteness check), projected onto the box-simplex
            for i in range(K):  # (a slice assignment compiles a shape check with its message)
                free[i] = i
            if not _chol_free(A, free, K, L):
                return fail
            sol, nu = _chol_kkt(A, b, x0, np.zeros(K, dtype=np.int64), free, K, L, total)
            x = _box_project(sol, lo, hi, total)
            state = _start_state(x, lo, hi, A, b)
            nf0 = -1
        else:  # x0 is a feasible start whose working set the caller gives through ``lo``/``hi``
            x = x0.copy()
            state = _start_state(x, lo, hi, A, b)
        bmax = _absmax(b)
        gscale = amax * _absmax(x) + bmax
        tol = 4.0 * K * 2.220446049250313e-16 * max(gscale, 1e-300)
        if definite:
            x, state, nu, its, status, nf, age = _active_set_chol(
                A, b, lo, hi, total, x, state, max_iter, tol, L, free, nf0, age0
            )
        else:
            x, state, nu, its, status, nf, age = _active_set_lu(
                A, b, lo, hi, total, x, state, max_iter, tol, L, free, nf0, age0
            )
        gscale = amax * _absmax(x) + bmax
        res = _kkt_residual(A, b, x, state, nu, lo, hi, total, gscale)
        return x, state, nu, its, status, res, nf, age

    return _qp


_qp_chol = _qp_method(True)
_qp_lu = _qp_method(False)


def _qp(A, b, amax, lo, hi, total, x0, warm, definite, check, max_iter, L, free, nf0, age0):
    """Start (cold, warm or given), active-set loop and KKT residual in one compiled call:
    ``_qp_chol`` for a positive definite A (``definite``), else ``_qp_lu``, each compiled only
    when first called. Arguments and result as documented in ``_qp_method``."""
    qp = _qp_chol if definite else _qp_lu
    return qp(A, b, amax, lo, hi, total, x0, warm, check, max_iter, L, free, nf0, age0)


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
    a good ``x0`` usually ends the method in one or two iterations. All of it runs in one compiled
    call.

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
    return _solve_simplex_qp(A, b, lower, upper, total, x0, max_iter, check_definite, None)[0]


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


def _new_factor(size: int, *, kept: bool = True) -> QPFactor:
    """Empty factor buffers. ``kept``: zeroed, because the factor will live in a state that is
    copied and compared (unused entries must not be whatever memory held); a solve whose factor
    is thrown away skips that."""
    alloc = np.zeros if kept else np.empty
    return QPFactor(alloc((size, size)), alloc(size, dtype=np.int64), -1, 0)


def _factor_rank_one(factor: QPFactor, w: np.ndarray, key: tuple) -> QPFactor:
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


def _solve_simplex_qp(
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
    return _solve_checked(Am, bv, amax, lo, hi, s, start, warm, it, bool(check_definite), factor)


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


def _solve_checked(Am, bv, amax, lo, hi, s, start, warm, it, check, factor):
    """``_solve_simplex_qp`` on validated input: ``Am`` exactly symmetric, C-contiguous and
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
    bmax = _absmax(bv)
    if e > 0 and bmax > 0.0:  # scaling up: keep b below 2^1000 (never scale a tiny A down)
        e = max(0, min(e, 2 * ((1000 - math.frexp(bmax)[1]) // 2)))
    if e:
        Am, bv, amax = np.ldexp(Am, e), np.ldexp(bv, e), math.ldexp(amax, e)
        factor = _new_factor(K)  # zeroed: the returned factor holds no stale memory
    if factor is None or factor.L.shape != (K, K):
        factor = _new_factor(K, kept=False)
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


# --------------------------------------------------------------------------------------------
# Min-norm point of a convex hull (MGDA / FedMGDA+ / Pareto stationarity)
# --------------------------------------------------------------------------------------------


class MinNormResult(NamedTuple):
    """Min-norm point of the (box-constrained) convex hull of vectors v_1..v_m.

    Attributes
    ----------
    weights : ndarray of float64, shape (m,)
        λ in the box-simplex attaining the minimum (not unique when the vectors are affinely
        dependent; the point is).
    point : ndarray of float64, shape (d,) or None
        Σ λ_k v_k (None when only the Gram matrix was given).
    norm_sq : float
        ‖Σ λ_k v_k‖² = λᵀGλ (from [`min_norm_point`][fairagg.simplex.min_norm_point]: inf or 0 only
        where the exact value leaves float64's range; the weights and the point are exact at every
        scale).
    qp : QPResult
        The underlying QP solution (active set, multiplier, iterations, KKT residual).
    """

    weights: np.ndarray
    point: np.ndarray | None
    norm_sq: float
    qp: QPResult


def _greedy_vertex(A: np.ndarray, lo: np.ndarray, hi: np.ndarray, s: float) -> np.ndarray:
    """A feasible start with at most one coordinate strictly inside its bounds.

    Fill up from ``lower`` in order of the smallest diagonal ½A_ii. For the plain simplex this is
    the vertex e_j of the shortest vector, Wolfe's starting point for the min-norm point.
    """
    x = lo.copy()
    rest = s - lo.sum()
    for i in np.argsort(np.diag(A), kind="stable"):
        if rest <= 0.0:
            break
        add = min(rest, hi[i] - lo[i])
        x[i] += add
        rest -= add
    return x


def min_norm_weights(
    gram: Any,
    *,
    lower: Any = 0.0,
    upper: Any = np.inf,
    max_iter: int | None = None,
) -> QPResult:
    """Exact argmin_{λ in the box-simplex} λᵀGλ for a positive semidefinite Gram matrix G.

    The active-set method of [`solve_simplex_qp`][fairagg.simplex.solve_simplex_qp] on
    G + c11ᵀ, c = max G_kk: on Σλ = 1 its quadratic form is λᵀGλ + c (the same minimisers), and it
    is the Gram matrix of the vectors each extended by one coordinate √c, positive definite on a
    free set exactly when the free vectors are affinely independent. The Cholesky factor of the
    free block is updated as coordinates join or leave it, O(m²) per iteration and O(m³)
    overall. Where all of G + c11ᵀ factorises (m affinely independent vectors, as m ≤ d client
    updates usually are), the start is the minimiser over the affine hull projected onto the
    box-simplex (one iteration when the minimum is inside); otherwise (more vectors than
    dimensions, parallel or repeated vectors) the best vertex, adding one coordinate at a time as
    Wolfe's min-norm-point algorithm does (Wolfe 1976): a coordinate joins the free set only if it
    lowers the objective, hence the free vectors stay affinely independent. A coordinate whose
    system is singular to working precision is held at its bound (it cannot lower the objective).
    The answer gets one step of iterative refinement with G itself (adding c rounds G's entries to
    the scale of c), and ν and the KKT residual are G's. A solve whose free block is singular to
    working precision, or whose KKT residual on G is above 1e-10, is redone from the best vertex
    with a bordered LU solve on each free set (O(m³) per iteration; degenerate problems only),
    a compiled path of its own that a process compiles only when it first takes it.

    FedMGDA+'s Gram matrix of m = 1000 normalised updates (d = 10⁴) is solved 6-82× faster than
    cvxpy+CLARABEL on the same matrix, 25-155× at m = 100-300 (one thread, a busy 2-core host;
    ``validate/bench_simplex_qp.py``), with KKT residuals ≤ 2e-15.

    Parameters
    ----------
    gram : array_like, shape (m, m)
        G_jk = ⟨v_j, v_k⟩, symmetric positive semidefinite.
    lower, upper : float or array_like, shape (m,)
        Box bounds on λ (FedMGDA+'s ε-box; default the simplex).

    Returns
    -------
    QPResult
        ``x`` holds λ; the objective value is xᵀGx.
    """
    G0 = as_float_array(gram, "gram", ndim=2, dtype=np.float64, allow_int=True, min_size=1)
    G, _, gmax = _check_qp(G0, np.zeros(G0.shape[0]), "gram")
    m = G.shape[0]
    e = _rescaling(gmax)  # solved scaled far from 1, as solve_simplex_qp is: the same λ
    if e:
        G, gmax = np.ldexp(G, e), math.ldexp(gmax, e)
    if np.any(np.diag(G) < 0):
        raise ValueError("gram must be positive semidefinite; it has a negative diagonal entry")
    lo, hi = check_box(lower, upper, m, 1.0)
    it = 20 * m + 100 if max_iter is None else check_int(max_iter, "max_iter", low=1)
    zeros = np.zeros(m)
    # G + c11ᵀ (c = max G_kk) is the Gram matrix of the vectors each extended by one coordinate
    # √c: on Σλ = 1 its quadratic form is λᵀGλ + c, so it has the same minimisers, and it is
    # positive definite exactly where the vectors are affinely independent, which Wolfe's method
    # keeps the free ones. Its Cholesky factor of the free block is then updated as coordinates
    # join or leave (O(m²) each) instead of a bordered LU per iteration (O(m³) each).
    Gc = G + gmax
    L, order = np.empty((m, m)), np.empty(m, np.int64)
    # Cold start where the whole of G + c11ᵀ factorises (the vectors affinely independent, as
    # m ≤ d updates usually are): the affine-hull minimiser projected onto the box-simplex.
    out = _qp(Gc, zeros, 2.0 * gmax, lo, hi, 1.0, zeros, 0, True, False, it, L, order, -1, 0)
    if out[4] == 3:  # affinely dependent: Wolfe's start, the best vertex
        x = _greedy_vertex(G, lo, hi, 1.0)
        out = _qp(Gc, zeros, 2.0 * gmax, lo, hi, 1.0, x, 2, True, False, it, L, order, -1, 0)
    if out[4] == 0:
        # ν and the KKT residual of G itself: G + c11ᵀ's ν is ν + c, whose subtraction would
        # round ν (= λᵀGλ on the plain simplex) to the scale of c.
        x, state = _refined(G, Gc, out[0], out[1], lo, hi, L, order, out[6])
        g = G @ x
        nu = float(np.mean(g[state == _FREE]))
        res = _kkt_residual(G, zeros, x, state, nu, lo, hi, 1.0, gmax * _absmax(x))
        out = (x, state, nu, out[3], 0, res)
    if out[4] != 0 or not out[5] <= _FALLBACK_RESIDUAL:
        # A free block too close to singular for the factor's updates: the bordered LU solve on
        # each free set, from the best vertex (O(m³) per iteration).
        x = _greedy_vertex(G, lo, hi, 1.0)
        out = _qp(G, zeros, gmax, lo, hi, 1.0, x, 2, False, False, it, _NO_L, order, -1, 0)
    return _unscaled(_checked_result(_result(out, it, "gram"), lo, hi, 1.0), e)


def _refined(G, Gc, x, state, lo, hi, L, order, nf):
    """x after one step of iterative refinement on its free set F = order[:nf]: the residual of
    stationarity computed with G itself, the correction δ (Σδ = 0) solved with the factor of
    (G + c11ᵀ)_FF, which acts on {Σδ = 0} as G_FF does. It recovers the digits of G that
    adding c rounded away (for v and −3v the squared min norm is 0.0 with it, 1.07e-30 without).
    Kept only if x + δ stays in the box."""
    if nf < 2:
        return x, state
    g = G @ x
    delta, _ = _chol_kkt(Gc, g, np.zeros_like(x), state, order, nf, L, 0.0)
    F = order[:nf]
    xf = x[F] + delta
    if np.all(np.isfinite(xf)) and np.all(xf >= lo[F]) and np.all(xf <= hi[F]):
        x = x.copy()
        x[F] = xf
    return x, state


# A min-norm solve on G + c11ᵀ whose KKT residual on G exceeds this is redone by the bordered LU
# path (the exact solves' residuals are round-off, ~1e-16 relative).
_FALLBACK_RESIDUAL = 1e-10


def min_norm_point(
    vectors: Any, *, lower: Any = 0.0, upper: Any = np.inf, max_iter: int | None = None
) -> MinNormResult:
    """Min-norm point of the convex hull of the rows of ``vectors`` (box-constrained weights).

    min_{λ} ‖Σ_k λ_k v_k‖² over the box-simplex; see
    [`min_norm_weights`][fairagg.simplex.min_norm_weights]. The Gram matrix is one GEMM (O(m² d));
    the QP is O(m³) overall on affinely independent vectors.

    Parameters
    ----------
    vectors : array_like, shape (m, d)
        Finite vectors, m ≥ 1.
    lower, upper : float or array_like, shape (m,)
        Box bounds on λ.

    Returns
    -------
    MinNormResult
    """
    V = as_float_array(vectors, "vectors", ndim=2, dtype=np.float64, min_size=1)
    # The weights do not depend on the vectors' scale: far from 1 (beyond 2^±400), solve with
    # V 2^-e (exact), whose largest entry is in [1/2, 1), so that the Gram matrix neither over-
    # nor underflows (in range, the plain Gram matrix: the same bits as min_norm_weights); the
    # point, the squared norm and the multiplier are scaled back (±inf or 0 only where the exact
    # value leaves float64). The KKT residual is relative to the gradient's scale: it is not.
    top = float(np.max(np.abs(V)))
    e = (
        math.frexp(top)[1]
        if not 2.0**-_SAFE_EXPONENT < top < 2.0**_SAFE_EXPONENT and top > 0
        else 0
    )
    Vs = np.ldexp(V, -e) if e else V
    qp = min_norm_weights(Vs @ Vs.T, lower=lower, upper=upper, max_iter=max_iter)
    with np.errstate(over="ignore", under="ignore"):
        qp = qp._replace(multiplier=float(np.ldexp(qp.multiplier, 2 * e)))
        ps = qp.x @ Vs
        point = np.ldexp(ps, e)
        norm_sq = float(np.ldexp(ps @ ps, 2 * e))
    return MinNormResult(qp.x, point, norm_sq, qp)


# --------------------------------------------------------------------------------------------
# Entropic (KL) steps
# --------------------------------------------------------------------------------------------


def log_normalize(log_weights: Any) -> np.ndarray:
    """p_i = exp(s_i) / Σ_j exp(s_j) with a max-shift, so it never overflows (STYLE.md).

    ``-inf`` entries give exact zeros; ``+inf`` and NaN are rejected; at least one entry must be
    finite.
    """
    s = as_float_array(log_weights, "log_weights", ndim=1, min_size=1, finite=False)
    if np.any(np.isnan(s)) or np.any(s == np.inf):
        raise ValueError("log_weights must not hold NaN or +inf")
    top = np.max(s)
    if top == -np.inf:
        raise ValueError("log_weights must hold at least one finite entry (all weights are zero)")
    with np.errstate(over="ignore"):  # s − top below the float range: a zero weight
        e = np.exp(s - top)
    return e / e.sum()


def kl_step(p: Any, r: Any, eta: float) -> np.ndarray:
    """Entropic mirror step p_i^+ ∝ p_i exp(r_i / η) (SPEC §4; AAgFF poster, EG closed form).

    This is argmin_{x ∈ Δ} −⟨x, r⟩ + η KL(x ‖ p), computed in log space: log p_i + r_i/η,
    max-shifted, exponentiated, normalised. Entries with p_i = 0 stay 0 (KL(x ‖ p) is finite only
    if x_i = 0 there).

    Parameters
    ----------
    p : array_like, shape (K,)
        A point of the simplex (non-negative, Σp = 1 within 1e-9 relative).
    r : array_like, shape (K,)
        Response (the negative loss gradient); −inf entries get weight 0, NaN and +inf are
        rejected.
    eta : float
        Positive step parameter; η = inf returns p.

    Returns
    -------
    ndarray of float64, shape (K,)
    """
    pv = check_simplex_point(p, "p")
    rv = as_float_array(r, "r", shape=(pv.size,), dtype=np.float64, allow_int=True, finite=False)
    if np.any(np.isnan(rv)) or np.any(rv == np.inf):
        raise ValueError("r must not hold NaN or +inf (-inf is the limit of a zero weight)")
    if np.max(rv[pv > 0]) == -np.inf:
        raise ValueError("r must be finite somewhere on the support of p")
    if isinstance(eta, (int, float, np.floating, np.integer)) and eta == np.inf:
        return pv.copy()
    e = check_real(eta, "eta", low=0.0, low_open=True)
    supp = pv > 0
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        logp = np.log(pv)
        # Shift r by its maximum over the support of p before dividing by η: the step is invariant
        # to the shift, r/η cannot overflow, and at a tie of the maxima the small log p_i are not
        # rounded away against a huge r/η (the weights then split exactly ∝ p).
        z = (rv - np.max(rv[supp])) / e
    z[~supp] = 0.0  # log p_i = −inf there already
    z[np.isnan(z)] = -np.inf
    return log_normalize(logp + z)


def check_simplex_point(p: Any, name: str, *, rtol: float = 1e-9) -> np.ndarray:
    """Validate a point of the probability simplex: float64, finite, ≥ 0, sums to 1 (±rtol).
    ``name`` is the caller's name for ``p`` in the messages."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str; got {type(name).__name__}")
    tol = check_real(rtol, "rtol", low=0.0)
    pv = as_float_array(p, name, ndim=1, dtype=np.float64, allow_int=True, min_size=1)
    low = pv.min()
    if low < 0:
        raise ValueError(f"{name} must be non-negative; minimum is {low}")
    total = pv.sum()
    if abs(total - 1.0) > tol:
        raise ValueError(f"{name} must sum to 1 (a point of the simplex); sums to {total!r}")
    return pv
