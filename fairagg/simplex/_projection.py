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


# The kernels below are written with loops and comparisons only: numba compiles each NumPy call
# it supports (np.max, np.zeros, np.flatnonzero, fancy indexing, a.sum(), ...) and each builtin
# min/max as functions of their own, 0.1-0.6 s each on a process's first solve
# (validate/bench_cold_start.py). Each replacement computes the same values: ``v if v > u else
# u`` is numba's max(u, v) (a select on v > u), ``v if v < u else u`` its min(u, v), a running
# sum from 0.0 in index order its a.sum(). No fast-math flags here, so the compiler may not
# reorder any of it. They are two functions, not five: each compiled callee costs its own
# compilation and is compiled again inside its caller, so the heapsort and the evaluation of S
# are written inside _box_crossing and the second-level projection inside _box_project.


@numba.njit(cache=True)
def _box_crossing(z, lo, hi, s):  # pragma: no cover - compiled
    """(t_a, t_b): consecutive distinct breakpoints of S with S(t_a) > s ≥ S(t_b) (t_a = −inf
    when S(first) ≤ s), by bisection with S(t) = Σ_i clip(z_i − t, lo_i, hi_i) summed afresh at
    each breakpoint: every term is a clipped value, so no huge z_i enters the sum unless it is a
    free coordinate's value.

    The breakpoints are sorted by a heapsort (O(n log n)): np.sort's compiled quicksort took
    2-3 s of the solver's first compilation (a dozen helper functions); the values sorted are
    the same (only zeros of either sign may trade places, and S takes the same value at t = 0
    and t = −0). One loop: the heap is built by sifting down from each parent (n//2 − 1 down to
    0), then the top is swapped to the end, one position at a time, and sifted down again.
    """
    K = z.shape[0]
    ev = np.empty(2 * K)
    ne = 0
    for i in range(K):
        if np.isfinite(hi[i]):
            ev[ne] = z[i] - hi[i]
            ne += 1
        ev[ne] = z[i] - lo[i]
        ne += 1
    start = ne // 2  # heapsort of ev[:ne]
    end = ne
    while end > 1:
        if start > 0:  # building the heap
            start -= 1
            root = start
        else:  # taking the largest from the top
            end -= 1
            top = ev[0]
            ev[0] = ev[end]
            ev[end] = top
            root = 0
        x = ev[root]  # sift x down below root, within ev[:end]
        i = root
        child = 2 * i + 1
        while child < end:
            if child + 1 < end and ev[child + 1] > ev[child]:
                child += 1
            if not ev[child] > x:
                break
            ev[i] = ev[child]
            i = child
            child = 2 * i + 1
        ev[i] = x
    # S(last) = Σlo ≤ s (the caller's check allows Σlo to exceed s by round-off: b is then the
    # last breakpoint).
    a, b = -1, ne - 1
    while b - a > 1:
        mid = (a + b) // 2
        t = ev[mid]
        acc = 0.0
        for i in range(K):
            v = z[i] - t
            v = lo[i] if lo[i] > v else v
            acc += hi[i] if hi[i] < v else v
        if acc <= s:
            b = mid
        else:
            a = mid
    return (ev[a] if a >= 0 else -np.inf), ev[b]


@numba.njit(cache=True)
def _box_project(y, lo, hi, s):  # pragma: no cover - compiled
    """x = clip(y − τ, lo, hi) with Σx = s.

    S(τ) = Σ_i clip(y_i − τ, lo_i, hi_i) is continuous, non-increasing and piecewise linear:
    coordinate i sits at hi_i for τ ≤ y_i − hi_i, equals y_i − τ up to τ = y_i − lo_i and sits at
    lo_i after. Bisection over the sorted breakpoints, with S summed afresh from clipped values
    at each (``_box_crossing``), finds the segment (t_a, t_b] where S crosses s at any scale of
    y. The coordinates whose value differs between t_a and t_b are the ones that move there;
    they are solved again as a box projection of y_i − max y_F with the sum left to them, so
    that their breakpoints are computed relative to each other: with y = (0.1, −0.5, 0.3, 1.2)
    × 1e160 and the box [0.005, 0.5], both breakpoints of the third entry round to the same
    float, which a single sweep with running sums got wrong (Σx = 1.505).
    """
    K = y.shape[0]
    # translation invariance keeps the breakpoints small: shift by np.max(y) (the first NaN,
    # if there is one, as np.max returns)
    shift = y[0]
    if not np.isnan(shift):
        for i in range(1, K):
            v = y[i]
            if np.isnan(v):
                shift = v
                break
            if v > shift:
                shift = v
    big = 1.7976931348623157e308  # np.finfo(np.float64).max
    z = np.empty(K)
    for i in range(K):  # more than the float range below the maximum: at the lower bound
        v = y[i] - shift
        z[i] = -big if v < -big else v
    t_a, t_b = _box_crossing(z, lo, hi, s)
    x = np.empty(K)
    idx = np.empty(K, dtype=np.int64)  # the moving coordinates, in order
    rest = s
    top = -np.inf
    m = 0
    for i in range(K):
        va = z[i] - t_a
        va = lo[i] if lo[i] > va else va
        va = hi[i] if hi[i] < va else va
        vb = z[i] - t_b
        vb = lo[i] if lo[i] > vb else vb
        vb = hi[i] if hi[i] < vb else vb
        if va != vb:
            idx[m] = i
            top = z[i] if z[i] > top else top
            m += 1
        else:
            x[i] = vb
            rest -= vb
    if m > 0:
        w = np.empty(m)
        lw = np.empty(m)
        hw = np.empty(m)
        for k in range(m):
            w[k] = z[idx[k]] - top
            lw[k] = lo[idx[k]]
            hw[k] = hi[idx[k]]
        # the moving coordinates' projection (z of moderate spread now): those at a bound on
        # its crossing segment, and the free ones x_i = (rest − Σ_bounded)/n + (w_i − w̄_free)
        t_a, t_b = _box_crossing(w, lw, hw, rest)
        free = np.empty(m, dtype=np.int64)
        bounded = 0.0
        n = 0
        ref = 0.0
        for k in range(m):  # the classification on the open segment (t_a, t_b)
            free[k] = 0
            if np.isfinite(hw[k]) and w[k] - hw[k] >= t_b:
                x[idx[k]] = hw[k]
                bounded += hw[k]
            elif w[k] - lw[k] <= t_a:
                x[idx[k]] = lw[k]
                bounded += lw[k]
            else:
                if n == 0:
                    ref = w[k]
                free[k] = 1
                n += 1
        if n > 0:
            dev = 0.0  # the mean of w over the free set, as ref + mean(w_k − ref)
            for k in range(m):
                if free[k]:
                    dev += w[k] - ref
            dev /= n
            share = (rest - bounded) / n
            for k in range(m):
                if free[k]:
                    v = share + ((w[k] - ref) - dev)
                    v = lw[k] if lw[k] > v else v
                    x[idx[k]] = hw[k] if hw[k] < v else v
    # Polish: hand the residual of Σx = s to the free entries, so the result lies on the set to
    # the round-off of x itself.
    for _ in range(2):
        sx = 0.0
        for i in range(K):
            sx += x[i]
        res = s - sx
        n = 0
        for i in range(K):
            if lo[i] < x[i] < hi[i]:
                n += 1
        if n == 0 or res == 0.0:
            break
        for i in range(K):
            if lo[i] < x[i] < hi[i]:
                v = x[i] + res / n
                v = lo[i] if lo[i] > v else v
                x[i] = hi[i] if hi[i] < v else v
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
