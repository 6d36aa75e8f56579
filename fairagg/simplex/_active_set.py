"""The simplex QP's active-set method on a box-simplex (Nocedal & Wright, Alg. 16.3), compiled,
built twice from one definition (a positive definite A's Cholesky variant and a semidefinite A's
bordered-LU one) so that a run compiles only the variant it uses, and ``_qp``, the Python function
that runs one solve: its start (cold, warm or given), the method and the KKT residual, each a
compiled call of its own (see ``_qp`` for why not one).

Working-set states: ``_FREE`` (0), ``_LOWER`` (1, held at the lower bound), ``_UPPER`` (2).
"""

from __future__ import annotations

import numba
import numpy as np
from scipy.linalg.blas import dgemv as _dgemv

from ._free_set import _REASSOC, _bordered_kkt, _chol_append, _chol_delete, _chol_free, _chol_kkt
from ._projection import _box_project
from ._scan import absmax

_FREE, _LOWER, _UPPER = 0, 1, 2


# Refactorise A_FF from scratch after this many rank-one updates of its Cholesky factor (keeps
# the round-off of the updated factor at the level of a fresh one; each update costs O(K²)).
_REFACTOR_EVERY = 64


def _qualified(name):
    """Name a compiled function's variant (its events, its cache file): ``_active_set_method``
    builds two functions from one definition."""

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
def _start_state(x, lo, hi, A, b, total, snap, amax):  # pragma: no cover - compiled
    """Working set of a feasible start (coordinates at a bound are held; at least one is free),
    the active-set method's tolerance 4Kε·max(gscale, 1e-300) with gscale = max|A| max|x| +
    max|b| (``amax`` = max|A|) and max|b|: (state, tol, bmax).

    ``snap`` (a warm start): first put the entries of x within round-off of a bound on it, in
    place, their mass moved to the largest free entry (Σx0 off by an ulp lifts zeros to ~1e-16;
    otherwise each would start free and be dropped one iteration at a time). One function with
    the working set, not one of its own: each compiled function costs a process's first solve
    0.1-0.3 s.
    """
    K = x.shape[0]
    if snap:
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
        if top >= 0:  # min(max(x_top + moved, lo), hi) as numba's builtins select, without them
            v = x[top] + moved
            v = lo[top] if lo[top] > v else v
            x[top] = hi[top] if hi[top] < v else v
    state = np.empty(K, dtype=np.int64)  # every entry is set below (np.zeros: one more compile)
    nfree = 0
    for i in range(K):
        if x[i] <= lo[i]:
            state[i] = 1
        elif x[i] >= hi[i]:
            state[i] = 2
        else:
            state[i] = 0
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
    bmax = absmax(b)
    gscale = amax * absmax(x) + bmax
    gscale = 1e-300 if 1e-300 > gscale else gscale  # max(gscale, 1e-300), numba's select
    return state, 4.0 * K * 2.220446049250313e-16 * gscale, bmax


def _kkt_residual(A, b, x, state, nu, lo, hi, total, gscale):
    """Largest KKT violation, relative to the scale of the gradient (and of ``total``).

    ``gscale`` = max|A| max|x| + max|b|, the scale of the terms of g = Ax + b (not of g itself,
    which is round-off at a min-norm point 0). A C-contiguous.

    Ax is BLAS's dgemv from SciPy, called as numba's ``A @ x`` calls it (the same routine of the
    same library, on A's buffer as the Fortran-ordered Aᵀ, transposed): the same bits, without
    compiling numba's matrix product (0.3-0.5 s of a process's first solve). The rest is
    ``_kkt_residual_of``.
    """
    Ax = _dgemv(1.0, A.T, x, trans=1)
    return _kkt_residual_of(Ax, b, x, state, nu, lo, hi, total, gscale)


@numba.njit(cache=True)
def _kkt_residual_of(Ax, b, x, state, nu, lo, hi, total, gscale):  # pragma: no cover - compiled
    """``_kkt_residual`` given Ax: g = Ax + b.

    Written with loops and comparisons (``v if v > r else r`` is numba's ``max(r, v)``, the
    same select): ``x.sum()``, ``Ax + b`` as an array expression and the builtin ``max`` would
    each compile functions of their own on a process's first solve.
    """
    K = b.shape[0]
    scale = gscale
    v = abs(nu)
    scale = v if v > scale else scale
    scale = 1e-300 if 1e-300 > scale else scale
    r = 0.0
    s = 0.0
    for i in range(K):
        s += x[i]
    feas = abs(s - total) / total
    for i in range(K):
        g = Ax[i] + b[i]
        if state[i] == 0:
            v = abs(g - nu) / scale
        elif state[i] == 1:
            v = (nu - g) / scale
        else:
            v = (g - nu) / scale
        r = v if v > r else r
        v = (lo[i] - x[i]) / total
        feas = v if v > feas else feas
        v = (x[i] - hi[i]) / total
        feas = v if v > feas else feas
    return feas if feas > r else r


def _symmetrize(A):
    """(A + Aᵀ)/2, max |A − Aᵀ|, max |A| and whether A is finite (A C-contiguous).

    An exactly symmetric A (the usual case) is returned as it is, not copied. NumPy, not
    compiled: the same values (each entry of (A + Aᵀ)/2 is the one IEEE sum and halving either
    way round); 1.8-2.1 ms at K = 1000 against the compiled pass's 1.4-1.7 ms, 3 µs against 1 µs
    at K = 10, where compiling that pass cost a process's first solve 0.4-0.6 s
    (``validate/bench_cold_start.py``). max |A| is ``absmax`` of A's flat view, the one
    signature of its other calls.
    """
    flat = A.reshape(-1)
    amax = absmax(flat)
    if (A == A.T).all():  # NaN ≠ NaN: a NaN anywhere takes the full pass below, so here A is
        return A, 0.0, amax, amax < np.inf  # finite exactly when max |A| is
    with np.errstate(invalid="ignore", over="ignore"):
        S = 0.5 * (A + A.T)
        asym = float(np.max(np.abs(A - A.T)))
    return S, asym, amax, bool(np.isfinite(flat).all())


@numba.njit(cache=True)
def _inside(x0, lo, hi, total):  # pragma: no cover - compiled
    """Whether ``x0`` already lies in the box-simplex (Σ x0 summed in order, to 4Kε)."""
    K = x0.shape[0]
    inside = True
    s0 = 0.0
    for i in range(K):
        inside = inside and lo[i] <= x0[i] <= hi[i]
        s0 += x0[i]
    return inside and abs(s0 - total) <= 4.0 * K * 2.220446049250313e-16 * total


def _qp(A, b, amax, lo, hi, total, x0, warm, definite, check, max_iter, L, free, nf0, age0):
    """Start (cold, warm or given), active-set loop and KKT residual.

    ``amax`` = max |A| (from the symmetry check). ``warm``: 0 cold start, 1 project ``x0`` and
    start there, 2 ``x0`` is already feasible (the only start for a semidefinite A, not
    ``definite``). ``check``: prove A positive definite on a warm start (a cold start always
    does). ``L``, ``free``, ``nf0``, ``age0``: the factor buffers of the active-set method (a
    given factor is only used on a warm start). Returns (x, state, ν, iterations, status,
    kkt_residual, nf, age); status 3 means A is not positive definite.

    Python calls each compiled piece in turn: a compiled caller (``_qp_chol`` until issue 38)
    linked every piece into its own module and optimised and generated its machine code again,
    1.9-2.9 s of a process's first solve (``validate/bench_cold_start.py``), for some 2-4 µs per
    solve more here (a warm-started K = 100 solve: 48-53 µs against 47-48 µs, 2-core host). The
    scalar arithmetic here (the gradient's scale) is the compiled code's, IEEE float64 without
    fast-math: the same bits.
    """
    K = b.shape[0]
    if definite and warm == 1:
        if check and not _chol_free(A, np.arange(K), K, np.empty((K, K))):
            return _not_definite(x0, K)
        # a start already in the box-simplex (the previous round's decision) is kept as it is
        x = x0.copy() if _inside(x0, lo, hi, total) else _box_project(x0, lo, hi, total)
    elif definite and warm == 0:
        # cold start: the minimiser over {Σx = total} alone (its Cholesky factorisation of the
        # whole of A is the positive-definiteness check), projected onto the box-simplex
        free[:K] = np.arange(K)
        if not _chol_free(A, free, K, L):
            return _not_definite(x0, K)
        sol, _ = _chol_kkt(A, b, x0, np.zeros(K, dtype=np.int64), free, K, L, total)
        x = _box_project(sol, lo, hi, total)
        nf0 = -1
    else:  # x0 is a feasible start whose working set the caller gives through ``lo``/``hi``
        x = x0.copy()
    state, tol, bmax = _start_state(x, lo, hi, A, b, total, bool(definite and warm == 1), amax)
    active_set = _active_set_chol if definite else _active_set_lu
    x, state, nu, its, status, nf, age = active_set(
        A, b, lo, hi, total, x, state, max_iter, tol, L, free, nf0, age0
    )
    gscale = amax * absmax(x) + bmax
    res = _kkt_residual(A, b, x, state, nu, lo, hi, total, gscale)
    return x, state, nu, its, status, res, nf, age


def _not_definite(x0, K):
    """``_qp``'s result for an A that is not positive definite (status 3)."""
    return x0, np.zeros(K, dtype=np.int64), 0.0, 0, 3, np.inf, -1, 0


# Why the active-set method's compiled callees are loaded before it. Numba links a copy of each
# callee into its caller's machine code, re-optimised there; with reassociation allowed
# (``_REASSOC``) that copy may sum in another order than the callee's own code. Which of the two
# a call runs is decided by which was loaded into the process first. A process that compiles
# (an empty cache) always compiles, and so loads, a callee before its caller; a process that
# loads them from the cache loaded the caller first, and ran its copies: AAgFF-S's decisions
# differed in the last bits between the first run after install and every later one (176 of
# 6244 recorded results: the FTRL rounds at K = 30 and 80; none at K ≤ 7, nor a min-norm solve).
# Loading each callee's own code first, as compiling does, makes every process run the same
# code: the first run's. It is done where numba looks for a new compiled version of the method
# (its dispatcher's ``_compile_for_args``, called for argument types it has not met in this
# process), so a solve pays nothing for it.
def _load_chol_callees(A, b, lo, hi, total, x, state, max_iter, tol, L, free, nf0, age0):
    """Compile, or load from the cache, ``_active_set_chol``'s callees for these arguments."""
    tA, tb, tx, ts, tf, tL, tt = map(numba.typeof, (A, b, x, state, free, L, total))
    i8 = numba.types.int64
    _chol_free.compile((tA, tf, i8, tL))
    _chol_kkt.compile((tA, tb, tx, ts, tf, i8, tL, tt))
    _chol_delete.compile((tf, i8, tL, i8))
    _chol_append.compile((tA, tf, i8, tL, i8))


def _load_lu_callees(A, b, lo, hi, total, x, state, max_iter, tol, L, free, nf0, age0):
    """Compile, or load from the cache, ``_active_set_lu``'s callee for these arguments."""
    tA, tb, tx, ts, tf, tt = map(numba.typeof, (A, b, x, state, free, total))
    _bordered_kkt.compile((tA, tb, tx, ts, tf, numba.types.int64, tt))


def _callees_first(dispatcher, load):
    """Make ``dispatcher`` call ``load`` with the arguments of each call for which it has no
    compiled version in this process yet, before it compiles or loads one."""
    compile_for_args = dispatcher._compile_for_args

    def _compile_for_args(*args, **kws):
        load(*args, **kws)
        return compile_for_args(*args, **kws)

    dispatcher._compile_for_args = _compile_for_args


_callees_first(_active_set_chol, _load_chol_callees)
_callees_first(_active_set_lu, _load_lu_callees)
