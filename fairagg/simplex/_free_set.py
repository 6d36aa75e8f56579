"""The linear algebra of the active-set method's free set F: the Cholesky factor of A_FF
(LAPACK's dpotrf in place), its updates as a coordinate joins (a triangular solve) or leaves
(Givens rotations) F and its rank-one update for a new A, and the equality-constrained
minimiser on F, through that factor (positive definite A) or a bordered LU solve (LAPACK's dgesv,
semidefinite A). All compiled; each states its own fast-math flags (see ``_REASSOC``).
"""

from __future__ import annotations

import numba
import numpy as np
from numba.np.linalg import F_INT_nbtype as _LAPACK_INT
from numba.np.linalg import F_INT_nptype as _LAPACK_INT_NP

from ._scan import all_finite

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
    if not (all_finite(B) and all_finite(r)):
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
