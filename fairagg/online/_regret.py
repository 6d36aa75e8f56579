"""Regret of a decision sequence against a fixed decision, the exactly solved best fixed
decision in hindsight, and the regret bounds of the AAgFF poster's Theorems 1-2 (SPEC §5)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .._checks import as_float_array, check_count, check_int, check_real
from ..simplex import check_simplex_point, solve_simplex_qp


def _check_sequence(decisions: Any, responses: Any) -> tuple[np.ndarray, np.ndarray]:
    R = as_float_array(responses, "responses", ndim=2, dtype=np.float64, allow_int=True)
    P = as_float_array(decisions, "decisions", shape=R.shape, dtype=np.float64, allow_int=True)
    if np.any(P < 0) or np.any(np.abs(P.sum(axis=1) - 1.0) > 1e-9):
        raise ValueError(
            "decisions must hold points of the simplex (non-negative rows summing to 1)"
        )
    return P, R


def _check_responses(responses: Any) -> np.ndarray:
    R = as_float_array(responses, "responses", ndim=2, dtype=np.float64, allow_int=True)
    if R.shape[1] < 1:
        raise ValueError("responses must have at least one column (client)")
    if R.size and np.min(1.0 + R.min(axis=1)) <= 0:
        raise ValueError(
            "responses must satisfy 1 + <p, r_t> > 0 on the whole simplex, i.e. every entry > -1"
        )
    return R


def cumulative_regret(decisions: Any, responses: Any, comparator: Any) -> np.ndarray:
    """Running regret Σ_{τ≤t} ℓ_τ(p_τ) − Σ_{τ≤t} ℓ_τ(p*) for t = 1..T against a fixed p*.

    Parameters
    ----------
    decisions : array_like, shape (T, K)
        p_t, the decision played at round t (before r_t was seen).
    responses : array_like, shape (T, K)
        r_t, entries > −1.
    comparator : array_like, shape (K,)
        p*, a point of the simplex.
    """
    P, R = _check_sequence(decisions, _check_responses(responses))
    c = check_simplex_point(comparator, "comparator")
    if c.size != R.shape[1]:
        raise ValueError(f"comparator must have shape ({R.shape[1]},); got {c.shape}")
    played = -np.log1p(np.einsum("tk,tk->t", P, R))
    fixed = -np.log1p(R @ c)
    return np.cumsum(played - fixed)


class BestFixedDecision(NamedTuple):
    """The best fixed decision in hindsight, max_{p∈Δ} Σ_t log(1 + ⟨p, r_t⟩).

    Attributes
    ----------
    p : ndarray, shape (K,)
        A maximiser (not unique when the responses do not span; the value is).
    value : float
        Σ_t log(1 + ⟨p, r_t⟩) at ``p``: the minimal cumulative decision loss is −value.
    gap : float
        Frank-Wolfe duality gap max_i ∇_i − ⟨∇, p⟩ of the concave objective: a certified bound on
        (true maximum − value).
    iterations : int
        Proximal-Newton iterations.
    """

    p: np.ndarray
    value: float
    gap: float
    iterations: int


def best_fixed_decision(
    responses: Any, *, tol: float = 1e-13, max_iter: int = 100
) -> BestFixedDecision:
    """Exact best fixed decision in hindsight for AAgFF's log loss (SPEC §5).

    Maximises the concave f(p) = Σ_t log(1 + ⟨p, r_t⟩) over the simplex by proximal Newton: each
    step solves the simplex QP of the local quadratic model, A = H + μI with
    H = Σ_t r_t r_tᵀ/(1 + ⟨p, r_t⟩)² and μ proportional to the current gap (exactly, by
    [`fairagg.simplex.solve_simplex_qp`][fairagg.simplex.solve_simplex_qp]), followed by a
    backtracking line search. It stops when the Frank-Wolfe gap, an upper bound on the
    suboptimality, is below ``tol`` relative to max(1, |f|): the value is certified to round-off.

    Parameters
    ----------
    responses : array_like, shape (T, K)
        Entries > −1 (so 1 + ⟨p, r_t⟩ > 0 on the whole simplex). T may be 0 (value 0).
    tol : float
        Relative gap at which to stop.
    max_iter : int
        Iteration limit. A run that stalls at working precision returns its (reported) gap if
        it is within 1000 × ``tol`` × max(1, |f|); a larger gap is a ``RuntimeError``.

    Returns
    -------
    BestFixedDecision
    """
    R = _check_responses(responses)
    t = check_real(tol, "tol", low=0.0, low_open=True)
    n_it = check_int(max_iter, "max_iter", low=1)
    T, K = R.shape
    p = np.full(K, 1.0 / K)
    if T == 0 or K == 1:
        return BestFixedDecision(p, float(np.sum(np.log1p(R @ p))), 0.0, 0)

    def value(x: np.ndarray) -> float:
        return float(np.sum(np.log1p(R @ x)))

    # ∇f and −∇²f = Σ_t r_t r_tᵀ / z_t² are used only on directions d with Σ d = 0 (the
    # simplex's) and in the gap max_k ∇f_k − ⟨∇f, p⟩, where r_t may be shifted by any multiple
    # of 1: shifted by its minimum, a round with every response near −1 (z_t near 0) no longer
    # puts ~1/z_t on every entry of ∇f (a gap computed as the difference of two such sums lost
    # every digit below eps/z_t: a wrong "certified" point) nor ~1/z_t² on the all-ones
    # direction of the Hessian (which stalled the damped Newton steps).
    S = R - R.min(axis=1, keepdims=True)

    def shifted_gradient(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        W = S / (1.0 + R @ x)[:, None]
        g = W.sum(axis=0)  # ∇f up to a multiple of 1
        return W, g, float(np.max(g) - g @ x)

    f = value(p)
    for it in range(1, n_it + 1):
        W, grad, gap = shifted_gradient(p)
        if gap <= t * max(1.0, abs(f)):
            return BestFixedDecision(p, f, max(gap, 0.0), it - 1)
        H = W.T @ W
        mu = max(gap, 1e-12 * (1.0 + float(np.trace(H)) / K))
        A = H + mu * np.eye(K)
        q = solve_simplex_qp(A, -grad - A @ p, x0=p).x  # argmax of the local model over Δ
        d = q - p
        slope = float(grad @ d)
        # Near the optimum a Newton step changes f by less than f's own rounding error: accept
        # any step that loses no more than that (Armijo up to round-off).
        noise = 8.0 * np.finfo(np.float64).eps * max(1.0, abs(f))
        step = 1.0
        while True:
            cand = p + step * d
            fc = value(cand)
            if fc >= f + 1e-4 * step * slope - noise or step < 1e-12:
                break
            step *= 0.5
        if fc < f - noise:  # no progress possible at working precision
            break
        p, f = cand, fc
    gap = shifted_gradient(p)[2]
    # Stalled at working precision: accept a gap within 1e3 of the target (it is reported, so the
    # certificate stays honest); anything larger is a failure, never a silent answer.
    if gap > 1e3 * t * max(1.0, abs(f)):
        raise RuntimeError(
            f"best_fixed_decision did not converge: gap {gap:.3g} after {it} steps "
            "(raise max_iter or tol)"
        )
    return BestFixedDecision(p, f, max(gap, 0.0), it)


def regret(decisions: Any, responses: Any, comparator: Any = None) -> float:
    """Regret^T(p*) = Σ_t ℓ_t(p_t) − Σ_t ℓ_t(p*) (AAgFF poster, "Decision Objective").

    Against ``comparator`` if given, else against the best fixed decision in hindsight
    ([`best_fixed_decision`][fairagg.online.best_fixed_decision]), which makes it the regret the
    theorems bound.
    """
    P, R = _check_sequence(decisions, _check_responses(responses))
    played = float(-np.sum(np.log1p(np.einsum("tk,tk->t", P, R))))
    if comparator is None:
        return played + best_fixed_decision(R).value
    return float(cumulative_regret(P, R, comparator)[-1]) if R.shape[0] else 0.0


def theorem1_bound(num_clients: int, rounds: int, lipschitz: float) -> float:
    """AAgFF poster Theorem 1: Regret^T ≤ 2 L∞ K (1 + log(1 + T/(16K))) for AAgFF-S."""
    K = check_count(num_clients, "num_clients", low=1)
    T = check_int(rounds, "rounds", low=0)
    L = check_real(lipschitz, "lipschitz", low=0.0, low_open=True)
    return 2.0 * L * K * (1.0 + math.log1p(T / (16.0 * K)))


def theorem2_bound(num_clients: int, rounds: int, lipschitz: float) -> float:
    """AAgFF poster Theorem 2 / Corollary 3: (expected) Regret^T ≤ 2 L∞ √(T log K), AAgFF-D."""
    K = check_count(num_clients, "num_clients", low=1)
    T = check_int(rounds, "rounds", low=0)
    L = check_real(lipschitz, "lipschitz", low=0.0, low_open=True)
    return 2.0 * L * math.sqrt(T * math.log(K))
