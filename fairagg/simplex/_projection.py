"""Exact Euclidean projections onto the simplex and the box-simplex (SPEC §3), and the check of
box bounds every box-simplex routine of the package shares.

The box projection's compiled kernels (a heapsort and a bisection over the breakpoints) also
give the simplex QP its cold and warm starts ([`fairagg.simplex`][fairagg.simplex]'s
``_active_set`` module).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from .._checks import as_float_array, check_count, check_real


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
