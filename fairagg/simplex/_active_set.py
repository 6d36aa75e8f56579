"""The compiled simplex QP: the primal active-set method on a box-simplex (Nocedal & Wright,
Alg. 16.3) and ``_qp``, its start (cold, warm or given), loop and KKT residual in one compiled call,
each built twice from one definition (a positive definite A's Cholesky variant and a semidefinite
A's bordered-LU one) so that a run compiles only the variant it uses.

Working-set states: ``_FREE`` (0), ``_LOWER`` (1, held at the lower bound), ``_UPPER`` (2).
"""

from __future__ import annotations

import numba
import numpy as np

from ._free_set import _REASSOC, _bordered_kkt, _chol_append, _chol_delete, _chol_free, _chol_kkt
from ._projection import _box_project
from ._scan import absmax, all_finite

_FREE, _LOWER, _UPPER = 0, 1, 2


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


# Why _active_set_method (and the _active_set it builds) is one long function (issue 39 item 5
# allows a compiled kernel a stated reason): it is one compiled loop over a dozen pieces of state
# that every branch reads and writes (x, the working set, the free order and its factor L, nf, the
# tabu marks, the coordinate freed last, the refactorisation flag and age). Compiled helpers would
# pass that state in and return it as tuples every iteration, and each is one more function to
# compile on a process's first solve (tests/test_bench_cold_start.py counts them); the variants'
# pruning of the branches ``definite`` rules out needs the branches in the function that closes
# over it. The free-set algebra it calls is already in _free_set.
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
        # One function on purpose: see the comment above _active_set_method.
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
    # The scans of A's flat view: the one signature (1-D) of their other calls (the QP's, the
    # FTRL kernel's), so that a process compiles each once, not also for 2-D arrays.
    flat = A.ravel()
    amax = absmax(flat)
    if unequal == 0:
        return A, 0.0, amax, all_finite(flat)
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
    return S, asym, amax, finite


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
        bmax = absmax(b)
        gscale = amax * absmax(x) + bmax
        tol = 4.0 * K * 2.220446049250313e-16 * max(gscale, 1e-300)
        if definite:
            x, state, nu, its, status, nf, age = _active_set_chol(
                A, b, lo, hi, total, x, state, max_iter, tol, L, free, nf0, age0
            )
        else:
            x, state, nu, its, status, nf, age = _active_set_lu(
                A, b, lo, hi, total, x, state, max_iter, tol, L, free, nf0, age0
            )
        gscale = amax * absmax(x) + bmax
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
