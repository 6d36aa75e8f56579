"""The simplex QP of AAgFF-S's FTRL through the structure of A = dI + βRᵀR (diagonal plus low
rank, never formed): an active-set method whose free-set systems are solved by Woodbury's
identity, refined through an SVD where that is not accurate enough, and the KKT check of the
point returned, recomputed from A (which the dense path shares)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from ..simplex import project_simplex
from ..simplex._solve import IllConditionedQPError, QPResult

# A returned point whose KKT residual (relative, as QPResult.kkt_residual) exceeds this is refined
# and, if still off, refused. Exact solves of well-scaled problems reach ~1e-16; where
# b = Σg − βΣg⟨g, p⟩ cancels (b far below β max Σ g gᵀ) they legitimately stop near 1e-11.
_FTRL_KKT_TOL = 1e-8


def _ftrl_kkt_residual(
    matvec: Callable[[np.ndarray], np.ndarray],
    amax: float,
    b: np.ndarray,
    x: np.ndarray,
    free: np.ndarray,
    nu: float,
) -> float:
    """[`QPResult.kkt_residual`][fairagg.simplex.QPResult] of (x, ν) for min ½xᵀAx + bᵀx over the
    simplex, recomputed from A (``matvec``) rather than trusted: stationarity on the free set, dual
    signs on the rest, relative to max|A| max|x| + max|b|; and feasibility."""
    if not (np.isfinite(x).all() and math.isfinite(nu)):
        return math.inf
    g = matvec(x) + b
    scale = max(amax * float(np.max(np.abs(x))) + float(np.max(np.abs(b))), abs(nu), 1e-300)
    r = float(np.max(np.abs(g[free] - nu), initial=0.0)) / scale
    r = max(r, float(np.max(nu - g[~free], initial=0.0)) / scale)
    return max(r, abs(float(x.sum()) - 1.0), float(np.max(-x, initial=0.0)))


class _FreeSolver:
    """Solves the equality-constrained QP on a free set F, min ½yᵀA_FF y + b_Fᵀy s.t. Σy = 1,
    with A_FF = dI + β R_Fᵀ R_F never formed: from the thin SVD R_Fᵀ = U S Vᵀ (|F| × r,
    O(|F| r min(|F|, r))), A_FF⁻¹v = (v − UUᵀv)/d + U (Uᵀv / (d + βs²)) — exact eigenvalues
    d + βs², no d lost against βs² — followed by iterative refinement on the true residual."""

    def __init__(self, d: float, beta: float, R: np.ndarray, F: np.ndarray):
        self.d, self.beta, self.RF = d, beta, R[:, F]
        n = F.size
        U, sv, _ = np.linalg.svd(self.RF.T, full_matrices=False)
        self.U, self.inv = U, 1.0 / (d + beta * sv * sv)
        self.full = U.shape[1] == n  # U spans all of R^F: no complement
        self.ones = self.solve(np.ones(n))
        self.denom = float(self.ones.sum())
        if not (self.denom > 0 and math.isfinite(self.denom)):
            raise IllConditionedQPError(
                "the QP is too ill-conditioned for float64: 1ᵀA_FF⁻¹1 is not a positive number"
            )

    def solve(self, v: np.ndarray) -> np.ndarray:
        w = self.U.T @ v
        out = self.U @ (w * self.inv)
        if not self.full:
            out += (v - self.U @ w) / self.d
        return out

    def matvec(self, y: np.ndarray) -> np.ndarray:
        return self.d * y + self.beta * (self.RF.T @ (self.RF @ y))

    def kkt(self, bF: np.ndarray, steps: int = 2) -> tuple[np.ndarray, float]:
        """(y, ν): A_FF y + b_F = ν1, Σy = 1, refined ``steps`` times."""
        y, nu = self._correction(-bF, 1.0)
        for _ in range(steps):
            r1 = -(self.matvec(y) + bF - nu)  # A dy − dν 1 = r1, Σdy = r2
            r2 = 1.0 - float(y.sum())
            dy, dnu = self._correction(r1, r2)
            y, nu = y + dy, nu + dnu
        return y, nu

    def _correction(self, r1: np.ndarray, r2: float) -> tuple[np.ndarray, float]:
        # A y − ν1 = r1, 1ᵀy = r2: y = A⁻¹r1 + ν A⁻¹1, ν = (r2 − 1ᵀA⁻¹r1) / 1ᵀA⁻¹1.
        z = self.solve(r1)
        nu = (r2 - float(z.sum())) / self.denom
        return z + nu * self.ones, nu


class _Woodbury:
    """The free-set solves of the active-set iterations, A_FF⁻¹v = (v − βR_Fᵀ C⁻¹ R_F v)/d with the
    r × r capacitance C = dI + βR_F R_Fᵀ (Woodbury): C is updated by ±βr_j r_jᵀ as coordinates
    join or leave F (O(r²) each, recomputed from R every 32 iterations) and factorised in O(r³),
    so an iteration costs O(|F| r + r³), not O(|F| r²). Accurate while βΣggᵀ/α is far below
    1/ε; the final point's KKT residual decides whether ``_FreeSolver``
    must refine it."""

    def __init__(self, d: float, beta: float, R: np.ndarray, free: np.ndarray):
        self.d, self.beta, self.R = d, beta, R
        self.updates = 0
        self.reset(free)

    def reset(self, free: np.ndarray) -> None:
        RF = self.R[:, free]
        self.C = self.beta * (RF @ RF.T)
        self.C.flat[:: self.C.shape[0] + 1] += self.d
        self.updates = 0

    def change(self, free: np.ndarray, added: np.ndarray, removed: np.ndarray) -> None:
        self.updates += 1
        if self.updates >= 32 or added.size + removed.size > 8:
            self.reset(free)
            return
        Ra, Rr = self.R[:, added], self.R[:, removed]
        self.C += self.beta * (Ra @ Ra.T)
        self.C -= self.beta * (Rr @ Rr.T)

    def kkt(self, F: np.ndarray, bF: np.ndarray) -> tuple[np.ndarray, float]:
        RF = self.R[:, F]
        d, beta = self.d, self.beta
        if RF.shape[0]:
            try:
                cf = cho_factor(self.C, lower=True, check_finite=False)
            except np.linalg.LinAlgError:  # C lost definiteness to round-off: exact eigenvalues
                return _FreeSolver(d, beta, self.R, F).kkt(bF)

            def solve(v: np.ndarray) -> np.ndarray:
                return (v - beta * (RF.T @ cho_solve(cf, RF @ v, check_finite=False))) / d
        else:

            def solve(v: np.ndarray) -> np.ndarray:
                return v / d

        ones = solve(np.ones(F.size))
        denom = float(ones.sum())
        if not (denom > 0 and math.isfinite(denom)):  # 1ᵀA_FF⁻¹1 > 0 in exact arithmetic
            return _FreeSolver(d, beta, self.R, F).kkt(bF)
        y: np.ndarray | float = 0.0
        nu = 0.0
        r1, r2 = -bF, 1.0
        for _ in range(2):  # the solve and one step of iterative refinement
            z = solve(r1)
            dnu = (r2 - float(z.sum())) / denom
            y, nu = y + z + dnu * ones, nu + dnu
            r1 = -(d * y + beta * (RF.T @ (RF @ y)) + bF - nu)
            r2 = 1.0 - float(np.sum(y))
        return np.asarray(y, dtype=np.float64), nu


def _low_rank_qp(
    d: float, beta: float, R: np.ndarray, b: np.ndarray, x0: np.ndarray | None
) -> QPResult:
    """Exact simplex minimiser of ½xᵀAx + bᵀx, A = dI + βRᵀR (d > 0, β ≥ 0), by a primal
    active-set method whose free-set systems are solved through A's structure
    (``_Woodbury``): memory O(K r), an iteration O(K r + r³). Every
    coordinate whose multiplier is negative joins the free set at once; every one a step drives
    to 0 leaves it.

    The point returned is checked against its KKT conditions, recomputed from A: a residual above
    ``_FTRL_KKT_TOL`` (βΣggᵀ near 1/ε times α) is refined on the final free set through the SVD of
    R_F (``_FreeSolver``) and, if still off, refused
    (``IllConditionedQPError``), never returned."""
    K = b.size
    diag = d + beta * np.einsum("ij,ij->j", R, R)
    amax = float(diag.max())  # A is positive definite: its largest entry is on the diagonal

    def matvec(y: np.ndarray) -> np.ndarray:
        return d * y + beta * (R.T @ (R @ y))

    x = np.full(K, 1.0 / K) if x0 is None else project_simplex(x0)
    free = x > 0
    wood = _Woodbury(d, beta, R, free)
    # Primal-dual active set (Hintermüller, Ito & Kunisch 2002) first: F = {y > 0} ∪ {λ < 0}
    # at once, a handful of iterations from a warm start; if it has not settled in 30, the
    # primal method (one coordinate at a time, monotone) finishes from a feasible point.
    x, free, it = _primal_dual_start(wood, matvec, amax, b, x, free)
    if not np.array_equal(x > 0, free) or not np.isclose(x.sum(), 1.0):
        x = np.full(K, 1.0 / K) if x0 is None else project_simplex(x0)
        free = x > 0
        wood.reset(free)
    x, free, nu, it = _primal_active_set(wood, matvec, amax, b, x, free, it)
    x, nu, res = _kkt_refined(d, beta, R, matvec, amax, b, x, free, nu)
    return QPResult(x, nu, ~free, np.zeros(K, dtype=bool), it, res)


def _primal_dual_start(
    wood: _Woodbury,
    matvec: Callable[[np.ndarray], np.ndarray],
    amax: float,
    b: np.ndarray,
    x: np.ndarray,
    free: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Up to 30 primal-dual active-set iterations from the feasible ``x`` with free set ``free``
    (``wood`` set up for it): (x, free, iterations), x the point where they settled, else ``x``
    as given with the free set they reached (which ``_low_rank_qp`` then checks)."""
    K = b.size
    bscale = float(np.max(np.abs(b)))
    eps64 = 64 * np.finfo(np.float64).eps
    it = 0
    for _ in range(30):
        it += 1
        F = np.flatnonzero(free)
        y, nu = wood.kkt(F, b[F])
        if not (np.isfinite(y).all() and math.isfinite(nu)):
            break
        xt = np.zeros(K)
        xt[F] = np.maximum(y, 0.0)
        lam = matvec(xt) + b - nu
        scale = max(amax * float(np.max(np.abs(xt))) + bscale, abs(nu))
        new_free = np.zeros(K, dtype=bool)
        new_free[F[y > 0]] = True
        out = ~free & (lam < -eps64 * scale)
        new_free |= out
        if np.array_equal(new_free, free) and not np.any(y < 0):
            x = xt
            break
        if not new_free.any():
            break
        wood.change(new_free, np.flatnonzero(new_free & ~free), np.flatnonzero(free & ~new_free))
        free = new_free
    return x, free, it


def _primal_active_set(
    wood: _Woodbury,
    matvec: Callable[[np.ndarray], np.ndarray],
    amax: float,
    b: np.ndarray,
    x: np.ndarray,
    free: np.ndarray,
    it: int,
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """The primal active-set method from the feasible ``x`` (free set ``free``, ``it``
    iterations so far; ``x`` and ``free`` are updated in place): (x, free, ν, iterations)."""
    K = b.size
    bscale = float(np.max(np.abs(b)))
    eps64 = 64 * np.finfo(np.float64).eps
    max_iter = 20 * K + 100
    while True:
        it += 1
        if it > max_iter:
            raise IllConditionedQPError(
                f"the low-rank FTRL active-set method did not converge in {max_iter} iterations"
            )
        F = np.flatnonzero(free)
        y, nu = wood.kkt(F, b[F])
        if not (np.isfinite(y).all() and math.isfinite(nu)):
            raise IllConditionedQPError(
                "the low-rank FTRL solve reached a point that is not finite"
            )
        if np.any(y < 0):
            step = y - x[F]
            neg = step < 0
            ratios = np.full(F.size, np.inf)
            ratios[neg] = x[F][neg] / -step[neg]
            tau = float(ratios.min())
            if tau < 1.0:
                hit = ratios <= tau
                x[F] = np.maximum(x[F] + tau * step, 0.0)
                x[F[hit]] = 0.0
                free[F[hit]] = False
                wood.change(free, F[:0], F[hit])
                continue
            y = np.maximum(y, 0.0)
        x[:] = 0.0
        x[F] = y
        if F.size == K:
            break
        lam = matvec(x) + b - nu
        lam[free] = np.inf
        scale = max(amax * float(np.max(np.abs(x))) + bscale, abs(nu))
        j = int(np.argmin(lam))
        if lam[j] >= -eps64 * scale:
            break
        add = np.array([j])
        free[add] = True
        wood.change(free, add, add[:0])
    return x, free, nu, it


def _kkt_refined(
    d: float,
    beta: float,
    R: np.ndarray,
    matvec: Callable[[np.ndarray], np.ndarray],
    amax: float,
    b: np.ndarray,
    x: np.ndarray,
    free: np.ndarray,
    nu: float,
) -> tuple[np.ndarray, float, float]:
    """(x, ν, KKT residual) of the point the active-set method ended at, refined on its free set
    through ``_FreeSolver`` where the residual exceeds ``_FTRL_KKT_TOL``, or
    ``IllConditionedQPError`` where it still does."""
    K = b.size
    res = _ftrl_kkt_residual(matvec, amax, b, x, free, nu)
    if not res <= _FTRL_KKT_TOL:  # refine on the final free set (β Σ g gᵀ far above α)
        F = np.flatnonzero(free)
        y, nu_r = _FreeSolver(d, beta, R, F).kkt(b[F], steps=8)
        xr = np.zeros(K)
        xr[F] = y
        res_r = _ftrl_kkt_residual(matvec, amax, b, xr, free, nu_r)
        if res_r < res:
            x, nu, res = xr, nu_r, res_r
    if not res <= _FTRL_KKT_TOL:
        raise IllConditionedQPError(
            f"the QP is too ill-conditioned for float64: its solution is {res:.3g} off its KKT "
            "conditions after iterative refinement"
        )
    return x, nu, res
