"""Fair federated learning as online convex optimisation over the simplex (SPEC §4, §5; AAgFF
poster, "Fair FL algorithms are OCO algorithms" and "AAgFF").

A server that picks mixing coefficients p ∈ Δ_{K−1} each round is an online learner: it plays p^t,
then sees a response vector r^t (a transform of the clients' losses) and suffers the decision loss
ℓ_t(p) = −log(1 + ⟨p, r^t⟩). This module holds that layer, once and exactly:

- [`exponentiated_gradient`][fairagg.online.exponentiated_gradient] (the poster's EG step; the OCO
  view of FedAvg, q-FedAvg, TERM and PropFair) and [`entropic_ftrl`][fairagg.online.entropic_ftrl];
- the AAgFF response [`aaggff_response`][fairagg.online.aaggff_response] with its six CDFs
  ([`RESPONSE_CDFS`][fairagg.online.RESPONSE_CDFS]);
- [`decision_loss`][fairagg.online.decision_loss],
  [`decision_gradient`][fairagg.online.decision_gradient], [`regret`][fairagg.online.regret] and the
  exactly solved [`best_fixed_decision`][fairagg.online.best_fixed_decision];
- AAgFF-S's quadratic FTRL ([`QuadraticFTRL`][fairagg.online.QuadraticFTRL],
  [`quadratic_ftrl_step`][fairagg.online.quadratic_ftrl_step]), solved exactly by
  [`fairagg.simplex.solve_simplex_qp`][fairagg.simplex.solve_simplex_qp];
- AAgFF-D's entropic FTRL ([`aaggff_d_decision`][fairagg.online.aaggff_d_decision]) with the
  doubly-robust response ([`dr_response`][fairagg.online.dr_response]) and its first-order gradient
  ([`dr_gradient`][fairagg.online.dr_gradient]);
- the regret bounds of Theorems 1-2 / Corollary 3 and two players
  ([`play_aaggff_s`][fairagg.online.play_aaggff_s], [`play_aaggff_d`][fairagg.online.play_aaggff_d])
  that run the learners on a response sequence.

The rules in [`fairagg.rules.oco`][fairagg.rules.oco] and
[`fairagg.rules.aaggff`][fairagg.rules.aaggff] are built from these functions;
[`fairagg.oracles`][fairagg.oracles] re-solves every argmin with cvxpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numba
import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.special import ndtr

from ._checks import as_float_array, as_int_array, check_choice, check_count, check_int, check_real
from .simplex import (
    IllConditionedQPError,
    QPFactor,
    QPResult,
    SingularSystemError,
    _absmax,
    _all_finite,
    _factor_rank_one,
    _new_factor,
    _solve_checked,
    _solve_simplex_qp,
    check_simplex_point,
    kl_step,
    log_normalize,
    project_simplex,
    solve_simplex_qp,
)

__all__ = [
    "RESPONSE_CDFS",
    "BestFixedDecision",
    "FTRLRound",
    "LowRankFTRL",
    "QuadraticFTRL",
    "aaggff_d_decision",
    "aaggff_response",
    "aaggff_s_defaults",
    "best_fixed_decision",
    "cumulative_regret",
    "decision_gradient",
    "decision_loss",
    "dr_gradient",
    "dr_response",
    "entropic_ftrl",
    "exponentiated_gradient",
    "official_first_decision",
    "play_aaggff_d",
    "play_aaggff_s",
    "quadratic_ftrl_init",
    "quadratic_ftrl_problem",
    "quadratic_ftrl_round",
    "quadratic_ftrl_step",
    "quadratic_ftrl_update",
    "regret",
    "theorem1_bound",
    "theorem2_bound",
]

VARIANTS = ("paper", "official")


# --------------------------------------------------------------------------------------------
# Entropic steps
# --------------------------------------------------------------------------------------------


def exponentiated_gradient(p: Any, r: Any, eta: float) -> np.ndarray:
    """One exponentiated-gradient step p_i^+ = p_i e^{r_i/η} / Σ_j p_j e^{r_j/η} (SPEC §4).

    The AAgFF poster's closed form; it is argmin_{x∈Δ} −⟨x, r⟩ + η KL(x ‖ p) (the poster writes the
    negative entropy; with the previous decision in the closed form the regulariser is the KL
    divergence to p). Computed in log space with a max-shift. See
    [`fairagg.simplex.kl_step`][fairagg.simplex.kl_step].

    Parameters
    ----------
    p : array_like, shape (K,)
        Last decision, a point of the simplex.
    r : array_like, shape (K,)
        Response (the negative gradient of the linear decision loss −⟨p, r⟩).
    eta : float
        Step parameter η > 0.

    Returns
    -------
    ndarray of float64, shape (K,)
    """
    return kl_step(p, r, eta)


def entropic_ftrl(grad_sum: Any, eta: float, prior: Any = None) -> np.ndarray:
    """Entropic FTRL: argmin_{p∈Δ} ⟨G, p⟩ + η Σ_i p_i log(p_i / prior_i) = prior ⊙ e^{−G/η} / Z.

    With the uniform prior (default) the regulariser is the negative entropy of the AAgFF poster's
    FTRL; the closed form is a max-shifted softmax of −G/η.

    Parameters
    ----------
    grad_sum : array_like, shape (K,)
        G = Σ_τ g_τ, the cumulative (linearised) loss gradients.
    eta : float
        Regularisation weight η > 0.
    prior : array_like, shape (K,), optional
        A point of the simplex (uniform by default).
    """
    G = as_float_array(grad_sum, "grad_sum", ndim=1, dtype=np.float64, min_size=1)
    e = check_real(eta, "eta", low=0.0, low_open=True)
    if prior is None:
        return kl_step(np.full(G.size, 1.0 / G.size), -G, e)
    pv = check_simplex_point(prior, "prior")
    if pv.size != G.size:
        raise ValueError(f"prior must have shape ({G.size},); got {pv.shape}")
    return kl_step(pv, -G, e)


# --------------------------------------------------------------------------------------------
# Responses and decision losses
# --------------------------------------------------------------------------------------------


def _frechet(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    pos = x > 0
    with np.errstate(over="ignore"):  # 1/x overflows for x < ~5.6e-309: e^{-inf} = 0, the limit
        out[pos] = np.exp(-1.0 / x[pos])
    return out


#: The six increasing CDFs on [0, ∞) of SPEC §5 that bound AAgFF's response.
RESPONSE_CDFS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "weibull": lambda x: -np.expm1(-(x**2)),  # 1 − e^{−x²}
    "exponential": lambda x: -np.expm1(-x),  # 1 − e^{−x}
    "frechet": _frechet,  # e^{−1/x}, 0 at x = 0
    "normal": lambda x: ndtr(x - 1.0),  # Φ_{N(1,1)}(x)
    "gumbel": lambda x: np.exp(-np.exp(-(x - 1.0))),  # exp(−e^{−(x−1)})
    "logistic": lambda x: 1.0 / (1.0 + np.exp(-(x - 1.0))),  # 1/(1 + e^{−(x−1)})
}


def _official_normal(x: np.ndarray) -> np.ndarray:
    # The public code's "normal CDF": ½(erfc((x − 1)/√2) + 1) = 1.5 − Φ_{N(1,1)}(x), written as
    # ½ + Φ(1 − x) so that no digits cancel where Φ(x − 1) is near 1.
    return 0.5 + ndtr(1.0 - x)


def aaggff_response(
    losses: Any, *, cdf: str = "weibull", scale: float = 1.0, variant: str = "paper"
) -> np.ndarray:
    """AAgFF's bounded response r_i = Φ(F_i / mean_{j∈S} F_j) · s (SPEC §5).

    ``variant="official"`` computes what the public code (vaseline555/AAggFF,
    ``AaggffServer.update``) computes. Its five other CDFs are the paper's, but its "normal CDF"
    is ½(erfc((x − 1)/√2) + 1) = 1.5 − Φ_{N(1,1)}(x). That is *decreasing* in the loss, with
    values in (½, 1.5), so a worse client gets a smaller response.

    Parameters
    ----------
    losses : array_like, shape (m,)
        Non-negative, finite losses F_i(θ^t) of the selected clients.
    cdf : str
        One of [`RESPONSE_CDFS`][fairagg.online.RESPONSE_CDFS].
    scale : float
        s > 0: 1/K cross-silo, C = m/K cross-device.
    variant : {"paper", "official"}
        Only ``cdf="normal"`` differs between them.

    Returns
    -------
    ndarray of float64, shape (m,)
        Responses in [0, s] (in (s/2, 3s/2) for the official normal). If every loss is 0 the
        ratios are taken as 1 (all clients equal).
    """
    F = as_float_array(losses, "losses", ndim=1, dtype=np.float64, allow_int=True, min_size=1)
    if np.any(F < 0):
        raise ValueError(f"losses must be non-negative; minimum is {F.min()}")
    name = check_choice(cdf, "cdf", tuple(RESPONSE_CDFS))
    s = check_real(scale, "scale", low=0.0, low_open=True)
    var = check_choice(variant, "variant", VARIANTS)
    top = float(F.max())
    if top == 0.0:
        x = np.ones_like(F)
    else:
        # x_i is scale-free: divide by the power of two of the largest loss (exact) so that the
        # mean neither overflows (losses near 1.8e308) nor loses digits to subnormals.
        Fs = np.ldexp(F, -math.frexp(top)[1])
        x = Fs / Fs.mean()
    phi = _official_normal if var == "official" and name == "normal" else RESPONSE_CDFS[name]
    return phi(x) * s


def _check_response_pair(p: Any, r: Any) -> tuple[np.ndarray, np.ndarray, float]:
    pv = check_simplex_point(p, "p")
    rv = as_float_array(r, "r", shape=(pv.size,), dtype=np.float64, allow_int=True)
    z = 1.0 + float(pv @ rv)
    if not z > 0:
        raise ValueError(f"the decision loss needs 1 + <p, r> > 0; got {z}")
    return pv, rv, z


def decision_loss(p: Any, r: Any) -> float:
    """ℓ(p) = −log(1 + ⟨p, r⟩), the AAgFF decision loss (SPEC §5). Needs 1 + ⟨p, r⟩ > 0."""
    _, _, z = _check_response_pair(p, r)
    return -math.log(z)


def decision_gradient(p: Any, r: Any) -> np.ndarray:
    """∇ℓ(p) = −r / (1 + ⟨p, r⟩) (SPEC §5)."""
    _, rv, z = _check_response_pair(p, r)
    return -rv / z


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


# --------------------------------------------------------------------------------------------
# AAgFF-S: quadratic FTRL (online Newton step in FTRL form)
# --------------------------------------------------------------------------------------------


class QuadraticFTRL(NamedTuple):
    """Running sums of AAgFF-S's FTRL objective after t rounds.

    Attributes
    ----------
    grad_sum : ndarray, shape (K,)
        Σ_τ g_τ.
    outer_sum : ndarray, shape (K, K)
        Σ_τ g_τ g_τᵀ.
    cross_sum : ndarray, shape (K,)
        Σ_τ g_τ ⟨g_τ, p_τ⟩.
    rounds : int
        t.
    """

    grad_sum: np.ndarray
    outer_sum: np.ndarray
    cross_sum: np.ndarray
    rounds: int


class LowRankFTRL(NamedTuple):
    """AAgFF-S's sums kept in O(K·min(t, 2K)) memory: Σ g gᵀ as RᵀR, never formed.

    The FTRL matrix A = αI + β Σ g gᵀ is diagonal plus rank ≤ t;
    [`quadratic_ftrl_step`][fairagg.online.quadratic_ftrl_step] and
    [`quadratic_ftrl_round`][fairagg.online.quadratic_ftrl_round] solve its QP through that
    structure ([`fairagg.online.quadratic_ftrl_init`][fairagg.online.quadratic_ftrl_init] with
    ``low_rank=True`` starts one). Same decisions as [`QuadraticFTRL`][fairagg.online.QuadraticFTRL]
    to round-off.

    Attributes
    ----------
    grad_sum : ndarray, shape (K,)
        Σ_τ g_τ.
    rows : ndarray, shape (r, K)
        R with RᵀR = Σ_τ g_τ g_τᵀ: the gradients g_τ themselves (r = t) until t reaches 2K, then
        the triangular factor of their QR decomposition (r = K), updated by appending each new
        gradient and re-factorising whenever r reaches 2K.
    cross_sum : ndarray, shape (K,)
        Σ_τ g_τ ⟨g_τ, p_τ⟩.
    rounds : int
        t.
    """

    grad_sum: np.ndarray
    rows: np.ndarray
    cross_sum: np.ndarray
    rounds: int

    @property
    def outer_sum(self) -> np.ndarray:
        """Σ_τ g_τ g_τᵀ = RᵀR, formed on request (K × K; the dense reference)."""
        return self.rows.T @ self.rows


def aaggff_s_defaults(
    num_clients: int, lipschitz: float | None = None
) -> tuple[float, float, float]:
    """SPEC §5 defaults (L∞, α, β) = (1/K, 4 K L∞, 1/(4 L∞)); ``lipschitz`` overrides L∞."""
    K = check_count(num_clients, "num_clients", low=1)
    L = 1.0 / K if lipschitz is None else check_real(lipschitz, "lipschitz", low=0.0, low_open=True)
    return L, 4.0 * K * L, 1.0 / (4.0 * L)


def quadratic_ftrl_init(num_clients: int, *, low_rank: bool = False) -> QuadraticFTRL | LowRankFTRL:
    """Empty sums for K clients (t = 0).

    ``low_rank=True`` keeps them as a [`LowRankFTRL`][fairagg.online.LowRankFTRL] (memory
    O(K·min(t, 2K)), each step O(K·t·min(t, |F|)) through A's diagonal-plus-low-rank structure)
    instead of the dense K × K Σ g gᵀ (memory O(K²), steps O(K²) to O(K³)); the decisions are the
    same to round-off. Worth it when the rounds t are fewer than the clients K.
    """
    K = check_count(num_clients, "num_clients", low=1)
    if not isinstance(low_rank, (bool, np.bool_)):
        raise TypeError(f"low_rank must be a bool; got {type(low_rank).__name__} {low_rank!r}")
    if low_rank:
        return LowRankFTRL(np.zeros(K), np.zeros((0, K)), np.zeros(K), 0)
    return QuadraticFTRL(np.zeros(K), np.zeros((K, K)), np.zeros(K), 0)


def quadratic_ftrl_update(
    state: QuadraticFTRL | LowRankFTRL, grad: Any, decision: Any
) -> QuadraticFTRL | LowRankFTRL:
    """Add round t's gradient g_t and played decision p_t to the sums (returns a new state)."""
    g, p = _check_round(state, grad, decision)
    return _add_round(state, g, p)


def _check_ftrl_state(state: Any) -> QuadraticFTRL | LowRankFTRL:
    if not isinstance(state, QuadraticFTRL | LowRankFTRL):
        raise TypeError(
            "state must be a fairagg.online.QuadraticFTRL (start from quadratic_ftrl_init, then "
            f"pass each round's returned state); got {type(state).__name__}"
        )
    return state


def _check_round(
    state: QuadraticFTRL | LowRankFTRL, grad: Any, decision: Any
) -> tuple[np.ndarray, np.ndarray]:
    K = _check_ftrl_state(state).grad_sum.size
    g = as_float_array(grad, "grad", shape=(K,), dtype=np.float64, allow_int=True)
    p = check_simplex_point(decision, "decision")
    if p.size != K:
        raise ValueError(f"decision must have shape ({K},); got {p.shape}")
    return g, p


def _state_arrays(state: QuadraticFTRL) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The sums as the compiled code takes them (float64, C-contiguous, shapes (K, K), (K,), (K,)),
    or None for a hand-made state that is not so (it then takes the NumPy path)."""
    outer, gs, cs = state.outer_sum, state.grad_sum, state.cross_sum
    for v, ndim in ((outer, 2), (gs, 1), (cs, 1)):
        if not (
            type(v) is np.ndarray
            and v.dtype == np.float64
            and v.ndim == ndim
            and v.flags.c_contiguous
        ):
            return None
    K = gs.shape[0]
    return (outer, gs, cs) if K > 0 and outer.shape == (K, K) and cs.shape == (K,) else None


@numba.njit(cache=True)
def _ftrl_sums(outer, gs, cs, g, gp):  # pragma: no cover - compiled
    """The sums after a round, Σggᵀ + ggᵀ, Σg + g and Σg⟨g, p⟩ + g·gp (gp = ⟨g, p⟩), entry by
    entry the IEEE operations of the NumPy code (np.outer, then +=; no fast-math, so no FMA):
    the same bits. Also returns whether all three are finite."""
    K = g.shape[0]
    O2 = np.empty((K, K))
    gs2 = np.empty(K)
    cs2 = np.empty(K)
    for i in range(K):
        gi = g[i]
        for j in range(K):
            O2[i, j] = gi * g[j] + outer[i, j]
        gs2[i] = gs[i] + gi
        cs2[i] = cs[i] + gi * gp
    return O2, gs2, cs2, _all_finite(O2) and _all_finite(gs2) and _all_finite(cs2)


@numba.njit(cache=True)
def _ftrl_system(outer, gs, cs, alpha, beta, paper):  # pragma: no cover - compiled
    """[`quadratic_ftrl_problem`][fairagg.online.quadratic_ftrl_problem]'s A and b, the same IEEE
    operations (the same bits), with what the QP's input check would find: max |A| and whether A is
    exactly symmetric and A and b are finite (``ok``)."""
    K = gs.shape[0]
    A = np.empty((K, K))
    for i in range(K):
        for j in range(K):
            A[i, j] = beta * outer[i, j]
    diag = alpha if paper else alpha * (1.0 + beta)
    for i in range(K):
        A[i, i] += diag
    b = gs - beta * cs if paper else gs.copy()
    unequal = 0
    for i in range(K):
        for j in range(i):
            unequal += A[i, j] != A[j, i]
    ok = unequal == 0 and _all_finite(A) and _all_finite(b)
    return A, b, _absmax(A), ok


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
    bscale = float(np.max(np.abs(b)))
    eps64 = 64 * np.finfo(np.float64).eps
    max_iter = 20 * K + 100
    nu = 0.0
    wood = _Woodbury(d, beta, R, free)
    it = 0
    # Primal-dual active set (Hintermüller, Ito & Kunisch 2002) first: F = {y > 0} ∪ {λ < 0}
    # at once, a handful of iterations from a warm start; if it has not settled in 30, the
    # primal method below (one coordinate at a time, monotone) finishes from a feasible point.
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
    if not np.array_equal(x > 0, free) or not np.isclose(x.sum(), 1.0):
        x = np.full(K, 1.0 / K) if x0 is None else project_simplex(x0)
        free = x > 0
        wood.reset(free)
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
    return QPResult(x, nu, ~free, np.zeros(K, dtype=bool), it, res)


# Up to this many clients a low-rank solve that ends off its KKT conditions is redone dense.
_DENSE_FALLBACK_CLIENTS = 4096


def _solve_low_rank(
    state: LowRankFTRL,
    alpha: float,
    beta: float,
    variant: str,
    x0: Any,
    shown: tuple[Any, Any],
    *,
    x0_checked: bool = False,
) -> QPResult:
    K = state.grad_sum.size
    with np.errstate(over="ignore", invalid="ignore"):
        d = alpha if variant == "paper" else alpha * (1.0 + beta)
        b = state.grad_sum - beta * state.cross_sum if variant == "paper" else state.grad_sum
        big = beta * float(np.max(np.einsum("ij,ij->j", state.rows, state.rows), initial=0.0))
    if not (math.isfinite(d) and math.isfinite(d + big) and np.isfinite(b).all()):
        raise _overflow(*shown)
    if x0 is not None and not x0_checked:
        x0 = as_float_array(x0, "x0", shape=(K,), dtype=np.float64, allow_int=True)
    try:
        try:
            return _low_rank_qp(d, beta, state.rows, np.asarray(b, dtype=np.float64), x0)
        except IllConditionedQPError:
            if K > _DENSE_FALLBACK_CLIENTS:
                raise
        # βΣggᵀ near 1/ε times α: the dense active-set solve (its KKT residual checked too)
        # resolves more of these than the Woodbury iterations, at O(K²) memory.
        A, bd = quadratic_ftrl_problem(state, alpha, beta, variant)
        out = _solve_simplex_qp(A, bd, 0.0, np.inf, 1.0, x0, None, False, None)
        return _kkt_checked(A, bd, *out)[0]
    except SingularSystemError as exc:
        raise _ill_conditioned(*shown) from exc
    except IllConditionedQPError as exc:
        a, bt = shown
        raise ValueError(
            f"alpha = {a!r} and beta = {bt!r} make the FTRL problem too ill-conditioned for "
            "float64: A = αI + βΣggᵀ spans more than float64 resolves, or is negligible against "
            "b = Σg − βΣg⟨g, p⟩; make alpha larger (or beta smaller)"
        ) from exc


def _kkt_checked(
    A: np.ndarray, b: np.ndarray, res: QPResult, factor: QPFactor
) -> tuple[QPResult, QPFactor]:
    """The dense solve's (result, factor), or ``IllConditionedQPError`` when the KKT residual of
    its point, recomputed from A and b (not the solver's own figure), exceeds ``_FTRL_KKT_TOL``:
    with βΣggᵀ ≳ 1e14 α the solver could end off its KKT conditions and say nothing."""
    with np.errstate(over="ignore", invalid="ignore"):
        amax = float(np.max(np.abs(np.diag(A))))
        r = _ftrl_kkt_residual(lambda y: A @ y, amax, b, res.x, ~res.active_lower, res.multiplier)
    if not r <= _FTRL_KKT_TOL:
        raise IllConditionedQPError(
            f"the QP is too ill-conditioned for float64: the active-set method ended {r:.3g} off "
            "its KKT conditions"
        )
    return res, factor


def _solve_ftrl(
    state: QuadraticFTRL,
    alpha: float,
    beta: float,
    variant: str,
    x0: Any,
    factor: QPFactor | None,
    shown: tuple[Any, Any],
    *,
    x0_checked: bool = False,
) -> tuple[QPResult, QPFactor]:
    """The simplex minimiser of [`quadratic_ftrl_problem`][fairagg.online.quadratic_ftrl_problem]
    (checked α, β and variant), warm-started from ``x0`` (the caller's, checked here after the
    problem as [`solve_simplex_qp`][fairagg.simplex.solve_simplex_qp] does, unless ``x0_checked``)
    or cold, from ``factor``'s buffers. ``shown``: the caller's alpha and beta, as its error
    messages name them.

    A = αI + β Σ g gᵀ (or α(1 + β)I + β Σ g gᵀ) with α > 0 is positive definite by construction,
    so a warm start skips the solver's Cholesky proof of that. The usual sums (float64 arrays,
    Σggᵀ exactly symmetric, everything finite) take the compiled path, which builds A and b and
    checks them in one call; anything else takes
    [`fairagg.simplex.solve_simplex_qp`][fairagg.simplex.solve_simplex_qp]'s checks, with their
    messages. Both give the same bits."""
    arrays = _state_arrays(state)
    if arrays is not None:
        A, b, amax, ok = _ftrl_system(*arrays, alpha, beta, variant == "paper")
        overflow = not ok and not (_all_finite(A) and _all_finite(b))
        if overflow and all(np.isfinite(v).all() for v in arrays):  # finite sums, as ours are
            raise _overflow(*shown)
    try:
        if arrays is None or not ok:
            A, b = quadratic_ftrl_problem(state, alpha, beta, variant)
            return _kkt_checked(
                A, b, *_solve_simplex_qp(A, b, 0.0, np.inf, 1.0, x0, None, False, factor)
            )
        K = b.size
        if x0 is None:
            start, warm = np.zeros(K), 0
        else:
            start, warm = x0, 1
            if not x0_checked:
                start = as_float_array(x0, "x0", shape=(K,), dtype=np.float64, allow_int=True)
        box = np.zeros(K), np.full(K, np.inf)
        out = _solve_checked(A, b, amax, *box, 1.0, start, warm, 20 * K + 100, False, factor)
        try:
            return _kkt_checked(A, b, *out)
        except IllConditionedQPError:
            if factor is None or factor.size < 0:
                raise
        # a kept (rank-one updated) factor that drifted: solve again from a fresh one
        out = _solve_checked(
            A, b, amax, *box, 1.0, start, warm, 20 * K + 100, False, _new_factor(K)
        )
        return _kkt_checked(A, b, *out)
    except SingularSystemError as exc:
        raise _ill_conditioned(*shown) from exc
    except IllConditionedQPError as exc:
        a, bt = shown
        raise ValueError(
            f"alpha = {a!r} and beta = {bt!r} make the FTRL problem too ill-conditioned for "
            "float64: A = αI + βΣggᵀ spans more than float64 resolves, or is negligible against "
            "b = Σg − βΣg⟨g, p⟩; make alpha larger (or beta smaller)"
        ) from exc


def _add_round_low_rank(state: LowRankFTRL, g: np.ndarray, p: np.ndarray) -> LowRankFTRL:
    K = g.size
    with np.errstate(over="ignore", invalid="ignore"):
        rows = np.vstack([state.rows, g[None, :]])
        if rows.shape[0] >= 2 * K:  # keep r ≤ 2K: RᵀR = Σ g gᵀ with R triangular (K × K)
            rows = np.ascontiguousarray(np.linalg.qr(rows, mode="r"))
        new = LowRankFTRL(
            state.grad_sum + g, rows, state.cross_sum + g * float(g @ p), state.rounds + 1
        )
        # Σ g gᵀ's largest entry is its largest diagonal entry, Σ_τ g_τi²: finite iff the dense
        # sum would be.
        finite = (
            np.isfinite(new.grad_sum).all()
            and np.isfinite(new.cross_sum).all()
            and np.isfinite(np.einsum("ij,ij->j", rows, rows)).all()
        )
    if not finite:
        raise ValueError(
            "grad is too large for the FTRL sums: Σ g gᵀ and Σ g ⟨g, p⟩ overflow float64 "
            f"(largest |grad| entry {float(np.max(np.abs(g))):.3g}; products of entries must "
            "stay below about 1.8e308)"
        )
    return new


def _add_round(
    state: QuadraticFTRL | LowRankFTRL, g: np.ndarray, p: np.ndarray
) -> QuadraticFTRL | LowRankFTRL:
    if isinstance(state, LowRankFTRL):
        return _add_round_low_rank(state, g, p)
    arrays = _state_arrays(state)
    if arrays is not None and arrays[1].size == g.size:
        outer, gs, cs, finite = _ftrl_sums(*arrays, g, float(g @ p))
        new = QuadraticFTRL(gs, outer, cs, state.rounds + 1)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            outer = np.outer(g, g)
            outer += state.outer_sum
            new = QuadraticFTRL(
                state.grad_sum + g, outer, state.cross_sum + g * float(g @ p), state.rounds + 1
            )
        finite = (
            np.isfinite(new.grad_sum).all()
            and np.isfinite(new.outer_sum).all()
            and np.isfinite(new.cross_sum).all()
        )
    if not finite:
        raise ValueError(
            "grad is too large for the FTRL sums: Σ g gᵀ and Σ g ⟨g, p⟩ overflow float64 "
            f"(largest |grad| entry {float(np.max(np.abs(g))):.3g}; products of entries must "
            "stay below about 1.8e308)"
        )
    return new


def quadratic_ftrl_problem(
    state: QuadraticFTRL | LowRankFTRL, alpha: float, beta: float, variant: str = "paper"
) -> tuple[np.ndarray, np.ndarray]:
    """The QP ½pᵀAp + bᵀp whose simplex minimiser is AAgFF-S's next decision (SPEC §5).

    ``variant="paper"``: Σ_τ⟨g_τ, p⟩ + (α/2)‖p‖² + (β/2)Σ_τ⟨g_τ, p − p_τ⟩² expands (dropping the
    constant) to A = αI + β Σ g gᵀ, b = Σ g − β Σ g⟨g, p_τ⟩. ``variant="official"``: the public
    code's A = α(1 + β)I + β Σ g gᵀ, b = Σ g.
    """
    _check_ftrl_state(state)
    a = check_real(alpha, "alpha", low=0.0, low_open=True)
    bt = check_real(beta, "beta", low=0.0)
    check_choice(variant, "variant", VARIANTS)
    K = state.grad_sum.size
    A = bt * state.outer_sum
    if variant == "paper":
        A.flat[:: K + 1] += a
        return A, state.grad_sum - bt * state.cross_sum
    A.flat[:: K + 1] += a * (1.0 + bt)
    return A, state.grad_sum.copy()


def quadratic_ftrl_step(
    state: QuadraticFTRL | LowRankFTRL,
    alpha: float,
    beta: float,
    variant: str = "paper",
    x0: Any = None,
) -> QPResult:
    """AAgFF-S's next decision p^{t+1}, the exact simplex minimiser of
    [`quadratic_ftrl_problem`][fairagg.online.quadratic_ftrl_problem] (warm-started from ``x0``,
    e.g. p^t).

    A = αI + β Σ g gᵀ (or α(1 + β)I + β Σ g gᵀ) with α > 0 is positive definite by construction,
    so the solver skips its Cholesky proof of that on a warm start.
    """
    _check_ftrl_state(state)
    a = check_real(alpha, "alpha", low=0.0, low_open=True)
    bt = check_real(beta, "beta", low=0.0)
    check_choice(variant, "variant", VARIANTS)
    if isinstance(state, LowRankFTRL):
        return _solve_low_rank(state, a, bt, variant, x0, (alpha, beta))
    return _solve_ftrl(state, a, bt, variant, x0, None, (alpha, beta))[0]


def _overflow(alpha: float, beta: float) -> ValueError:
    return ValueError(
        f"alpha = {alpha!r} and beta = {beta!r} make the FTRL problem overflow float64: "
        "β Σ g gᵀ, β Σ g ⟨g, p⟩ or the diagonal α (1 + β) exceeds about 1.8e308; make them "
        "smaller"
    )


def _ill_conditioned(alpha: float, beta: float) -> ValueError:
    return ValueError(
        f"A = αI + βΣggᵀ is singular to working precision with alpha = {alpha!r} and "
        f"beta = {beta!r}: make beta / alpha smaller"
    )


class FTRLRound(NamedTuple):
    """One AAgFF-S round: the new sums, the QP solution (``result.x`` = p^{t+1}) and the Cholesky
    factor to hand to the next round (opaque)."""

    state: QuadraticFTRL | LowRankFTRL
    result: QPResult
    factor: QPFactor | None


def quadratic_ftrl_round(
    state: QuadraticFTRL | LowRankFTRL,
    grad: Any,
    decision: Any,
    alpha: float,
    beta: float,
    variant: str = "paper",
    factor: QPFactor | None = None,
) -> FTRLRound:
    """One round of AAgFF-S: [`quadratic_ftrl_update`][fairagg.online.quadratic_ftrl_update] with
    (g_t, p_t), then [`quadratic_ftrl_step`][fairagg.online.quadratic_ftrl_step] warm-started at
    p_t, the decision just played.

    ``factor``, the one the previous round returned, lets the solver begin from its Cholesky
    factor of the free block updated by β g_tgₜᵀ (A grows by exactly that, in both variants), O(K²),
    instead of factorising afresh, O(K³); the active set usually changes by a coordinate or two
    between rounds. A factor of another (α, β, variant, t) is ignored, as is None (the first
    round). The answer is the same exact minimiser either way (to round-off), and the function is
    pure: ``factor`` is copied, not modified.
    """
    g, p = _check_round(state, grad, decision)
    new_state = _add_round(state, g, p)
    a = check_real(alpha, "alpha", low=0.0, low_open=True)
    bt = check_real(beta, "beta", low=0.0)
    check_choice(variant, "variant", VARIANTS)
    if isinstance(new_state, LowRankFTRL):
        res = _solve_low_rank(new_state, a, bt, variant, p, (alpha, beta), x0_checked=True)
        return FTRLRound(new_state, res, None)
    key = (a, bt, variant, new_state.rounds)
    if isinstance(factor, QPFactor) and factor.key == (a, bt, variant, state.rounds):
        start = _factor_rank_one(factor, math.sqrt(bt) * g, key)
    else:
        start = _new_factor(g.size)
    res, end = _solve_ftrl(new_state, a, bt, variant, p, start, (alpha, beta), x0_checked=True)
    return FTRLRound(new_state, res, end._replace(key=key))


# --------------------------------------------------------------------------------------------
# AAgFF-D: doubly-robust response and entropic FTRL
# --------------------------------------------------------------------------------------------


def dr_response(
    responses: Any,
    selected: Any,
    num_clients: int,
    *,
    inclusion_probability: float | None = None,
    variant: str = "paper",
) -> tuple[np.ndarray, float]:
    """Doubly-robust estimate ř ∈ R^K of the full response from the selected clients (SPEC §5).

    ``variant="paper"`` (the poster): r̄ = mean_{i∈S} r_i and
    ř_i = (1 − 𝟙[i∈S]/C) r̄ + (𝟙[i∈S]/C) r_i, i.e. r̄ for unselected clients and
    r̄ + (r_i − r̄)/C for selected ones. ``variant="official"``: the public code's (r_i − r̄)/C for
    selected clients (it drops + r̄), r̄ for the others. ``variant="leave-one-out"``: the paper's
    estimator with the baseline of client i taken over S∖{i} for selected clients.

    Unbiasedness. The poster states E[ř] = r. With the sample mean r̄ as the baseline this holds
    only for m = K: r̄ depends on whether i was sampled, and under uniform sampling of m of K
    E[ř_i] = r_i + (K − m)/(m (K − 1)) · (mean(r) − r_i) (e.g. K = 2, m = 1 gives E[ř] = mean(r)·1).
    The leave-one-out baseline is independent of 𝟙[i∈S] in mean, so that variant is exactly
    unbiased (m ≥ 2). The test suite checks all three by enumerating every m-subset.

    Parameters
    ----------
    responses : array_like, shape (m,)
        r_i of the selected clients, in the order of ``selected``.
    selected : array_like of int, shape (m,)
        Distinct client indices in [0, K).
    num_clients : int
        K.
    inclusion_probability : float, optional
        C = P(i ∈ S); default m/K, exact for uniform sampling of m of K without replacement.
    variant : {"paper", "official", "leave-one-out"}

    Returns
    -------
    r_check : ndarray of float64, shape (K,)
    r_bar : float
        The sample mean r̄ (which the first-order gradient expands around).
    """
    K = check_count(num_clients, "num_clients", low=1)
    idx = as_int_array(selected, "selected", min_value=0)
    r = as_float_array(responses, "responses", shape=(idx.size,), dtype=np.float64, allow_int=True)
    m = idx.size
    if m == 0:
        raise ValueError("selected must hold at least one client")
    if idx.max() >= K:
        raise ValueError(f"selected must hold indices below num_clients = {K}; got {idx.max()}")
    if np.unique(idx).size != m:
        raise ValueError("selected must hold distinct client indices")
    var = check_choice(variant, "variant", (*VARIANTS, "leave-one-out"))
    C = (
        m / K
        if inclusion_probability is None
        else check_real(
            inclusion_probability, "inclusion_probability", low=0.0, high=1.0, low_open=True
        )
    )
    r_bar = float(r.mean())
    out = np.full(K, r_bar)
    if var == "paper":
        out[idx] = r_bar + (r - r_bar) / C
    elif var == "official":
        out[idx] = (r - r_bar) / C
    else:
        if m < 2:
            raise ValueError("the leave-one-out baseline needs at least 2 selected clients")
        loo = (r.sum() - r) / (m - 1)
        out[idx] = loo + (r - loo) / C
    return out, r_bar


def dr_gradient(p: Any, r_check: Any, r_bar: float) -> np.ndarray:
    """First-order gradient estimate ĝ of g(r) = −r/(1 + ⟨p, r⟩) around r̄·1 (SPEC §5).

    With D = 1 + r̄ Σ_j p_j: ĝ = −ř/D + (r̄ ⟨p, ř − r̄ 1⟩ / D²) · 1, the Taylor expansion
    g(r̄1) + J(r̄1)(ř − r̄1) evaluated at the doubly-robust response ř (AAgFF-D).
    """
    pv = check_simplex_point(p, "p")
    rc = as_float_array(r_check, "r_check", shape=(pv.size,), dtype=np.float64, allow_int=True)
    rb = check_real(r_bar, "r_bar")
    return _dr_gradient(pv, rc, rb)


def _dr_gradient(p: np.ndarray, r_check: np.ndarray, r_bar: float) -> np.ndarray:
    # The formula for any non-negative p: the official AAgFF-D plays p¹ = C·1, off the simplex.
    D = 1.0 + r_bar * float(p.sum())
    if not D > 0:
        raise ValueError(f"dr_gradient needs 1 + r_bar * sum(p) > 0; got {D}")
    # (r̄/D)·(⟨p, ř − r̄1⟩/D) rather than r̄⟨p, ř − r̄1⟩/D²: both factors stay of the size of
    # the result, where D² or the product overflow for responses near 1e160.
    with np.errstate(over="ignore"):
        corr = (r_bar / D) * (float(p @ (r_check - r_bar)) / D)
        g = -r_check / D + corr * np.ones(p.size)
    if not np.all(np.isfinite(g)):
        raise ValueError(
            "the doubly-robust gradient overflows float64: responses beyond about 1e308 "
            f"(r_bar = {r_bar:.3g})"
        )
    return g


def official_first_decision(num_clients: int, inclusion_probability: float) -> np.ndarray:
    """The public AAgFF code's first decision p¹ = C·1 (``variant="official"``; SPEC §5's p¹ is
    uniform). Cross-silo C = 1 gives the all-ones vector; it is not a point of the simplex, and
    enters only the first round's gradient and decision loss (the aggregation of that round
    already uses p²)."""
    K = check_count(num_clients, "num_clients", low=1)
    C = check_real(inclusion_probability, "inclusion_probability", low=0.0, high=1.0, low_open=True)
    return np.full(K, C)


def aaggff_d_decision(grad_sum: Any, rounds: int, lipschitz: float) -> np.ndarray:
    """AAgFF-D's decision after t rounds: p_i ∝ exp(−√(log K) G_{t,i} / (L∞ √(t+1))) (SPEC §5).

    Entropic FTRL ([`entropic_ftrl`][fairagg.online.entropic_ftrl]) with η_{t+1} = L∞ √(t+1) / √(log
    K); t = 0 gives the uniform p¹; K = 1 gives [1].
    """
    G = as_float_array(grad_sum, "grad_sum", ndim=1, dtype=np.float64, min_size=1)
    t = check_int(rounds, "rounds", low=0)
    L = check_real(lipschitz, "lipschitz", low=0.0, low_open=True)
    K = G.size
    if K == 1:
        return np.ones(1)
    return log_normalize(-math.sqrt(math.log(K)) * G / (L * math.sqrt(t + 1)))


# --------------------------------------------------------------------------------------------
# Players: the learners run on a given response sequence
# --------------------------------------------------------------------------------------------


def play_aaggff_s(
    responses: Any,
    *,
    lipschitz: float | None = None,
    alpha: float | None = None,
    beta: float | None = None,
    variant: str = "paper",
) -> np.ndarray:
    """Decisions p_1..p_T of AAgFF-S on a full-information response sequence (Theorem 1's setting).

    p_1 is uniform (``variant="official"``: the public code's all-ones vector, see
    [`official_first_decision`][fairagg.online.official_first_decision]); after r_t, g_t = −r_t/(1 +
    ⟨p_t, r_t⟩) joins the sums and p_{t+1} is the exact quadratic-FTRL minimiser. Defaults:
    [`aaggff_s_defaults`][fairagg.online.aaggff_s_defaults] (L∞ = 1/K).

    Returns
    -------
    ndarray, shape (T, K)
        Row t is the decision played at round t, before r_t was seen (row 0 of the official
        variant is the all-ones vector, not a point of the simplex).
    """
    R = _check_responses(responses)
    T, K = R.shape
    L, a0, b0 = aaggff_s_defaults(K, lipschitz)
    a = a0 if alpha is None else alpha
    bt = b0 if beta is None else beta
    check_choice(variant, "variant", VARIANTS)
    state = quadratic_ftrl_init(K)
    uniform = np.full(K, 1.0 / K)
    p = official_first_decision(K, 1.0) if variant == "official" else uniform
    out = np.empty((T, K))
    factor = None
    for t in range(T):
        out[t] = p
        g = -R[t] / (1.0 + p @ R[t])
        # The official form never reads p_τ (b = Σ g): its off-simplex p¹ is replaced by the
        # uniform point, which serves only as the solver's warm start.
        played = uniform if t == 0 else p
        state, res, factor = quadratic_ftrl_round(state, g, played, a, bt, variant, factor)
        p = res.x
    return out


def play_aaggff_d(
    responses: Any,
    *,
    lipschitz: float | None = None,
    clients_per_round: int | None = None,
    seed: int = 0,
    gradient: str = "linearized",
    variant: str = "paper",
    inclusion_probability: float | None = None,
) -> np.ndarray:
    """Decisions p_1..p_T of AAgFF-D on a response sequence (Theorem 2 / Corollary 3's setting).

    Each round m = ``clients_per_round`` of K clients are drawn uniformly without replacement
    (default: all, full information) from ``default_rng(seed)``; the learner sees only their
    responses. ``gradient="linearized"`` uses the doubly-robust ř and the first-order ĝ as the rule
    does; ``gradient="exact"`` (full information only) uses g_t = −r_t/(1 + ⟨p_t, r_t⟩), the
    learner Theorem 2 analyses. C = ``inclusion_probability`` (default m/K) enters the
    doubly-robust estimate and the default L∞ = 2 + C (SPEC §5). p_1 is uniform, or C·1 with
    ``variant="official"`` ([`official_first_decision`][fairagg.online.official_first_decision]).

    Returns
    -------
    ndarray, shape (T, K)
        Row t is the decision played at round t, before r_t was seen.
    """
    R = _check_responses(responses)
    T, K = R.shape
    m = (
        K
        if clients_per_round is None
        else check_int(clients_per_round, "clients_per_round", low=1, high=K)
    )
    check_choice(gradient, "gradient", ("linearized", "exact"))
    if gradient == "exact" and m < K:
        raise ValueError("gradient='exact' needs full information (clients_per_round = K)")
    check_choice(variant, "variant", VARIANTS)
    C = (
        m / K
        if inclusion_probability is None
        else check_real(
            inclusion_probability, "inclusion_probability", low=0.0, high=1.0, low_open=True
        )
    )
    L = 2.0 + C if lipschitz is None else check_real(lipschitz, "lipschitz", low=0.0, low_open=True)
    rng = np.random.default_rng(seed)
    G = np.zeros(K)
    p = official_first_decision(K, C) if variant == "official" else np.full(K, 1.0 / K)
    out = np.empty((T, K))
    for t in range(T):
        out[t] = p
        if gradient == "exact":
            g = -R[t] / (1.0 + p @ R[t])
        else:
            S = np.sort(rng.choice(K, size=m, replace=False)) if m < K else np.arange(K)
            r_check, r_bar = dr_response(R[t, S], S, K, inclusion_probability=C, variant=variant)
            g = _dr_gradient(p, r_check, r_bar)
        G += g
        p = aaggff_d_decision(G, t + 1, L)
    return out
