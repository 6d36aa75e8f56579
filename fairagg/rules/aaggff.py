"""AAgFF-S and AAgFF-D: adaptive aggregation for fair federated learning as online learning
(AAgFF poster; SPEC §5; details of the public code vaseline555/AAggFF as ``variant="official"``).

Each round the server sees the selected clients' pre-training losses F_i(θ^t), turns them into a
bounded response r_i = Φ(F_i / mean_{j∈S} F_j)·s
([`fairagg.online.aaggff_response`][fairagg.online.aaggff_response]), suffers the decision loss
ℓ_t(p^t) = −log(1 + ⟨p^t, r⟩), updates its mixing coefficients and aggregates the client updates
with the fresh p^{t+1}, renormalised over the selected clients:

    q_i = p^{t+1}_i / Σ_{j∈S} p^{t+1}_j,   θ^{t+1} = θ^t − η_s Σ_{i∈S} q_i δ_i.

- **AAgFF-S** (cross-silo, K < T, every client every round): quadratic FTRL (online Newton step),
  the exact simplex QP of
  [`fairagg.online.quadratic_ftrl_round`][fairagg.online.quadratic_ftrl_round]; s = 1/K, L∞ = 1/K, α
  = 4K L∞, β = 1/(4L∞).
- **AAgFF-D** (cross-device, m of K sampled uniformly): entropic FTRL
  p_i ∝ exp(−√(log K) G_i / (L∞ √(t+1))) on the first-order gradient estimate ĝ of the
  doubly-robust response ([`fairagg.online.dr_response`][fairagg.online.dr_response],
  [`fairagg.online.dr_gradient`][fairagg.online.dr_gradient]); s = C = m/K, L∞ = 2 + C.

p¹ is uniform. ``info`` reports the full decision ``p`` (K,), the aggregation weights ``weights``
(m,), the responses and the decision loss of the decision played this round.

``variant="official"`` is the public code (vaseline555/AAggFF, ``AaggffServer``) wherever its
server computes something else than the poster: AAgFF-S's QP A = α(1+β)I + βΣggᵀ, b = Σg;
AAgFF-D's doubly-robust response without + r̄; p¹ = C·1 (all ones cross-silo), off the
simplex, which only the first round's gradient reads; its "normal CDF" 1.5 − Φ_{N(1,1)}(x),
decreasing in the loss; and C, the command line's client fraction, wherever C appears (AAgFF-D's
``inclusion_probability=``). What fairagg does not reproduce, with either variant:

- the code divides the server learning rate by its decay factor every ``lr_decay_step`` rounds
  (and multiplies the clients' by it); here η_s is constant, and the clients' learning rate is
  the simulator's;
- it computes in float32 (torch's default) and solves AAgFF-S's QP with cvxpy's default
  solver, so its p carries float32 rounding and that solver's stopping tolerance; fairagg
  solves the same QP exactly in float64;
- all-zero losses give 0/0 = NaN in the code; fairagg takes every ratio as 1;
- it samples max(⌊C·K⌋, 1) clients, sorted by index; here the caller (or the simulator) picks S;
- the cumulative objective it logs is −log(1 + ⟨p, F⟩) on the *raw* losses; fairagg's
  ``decision_loss`` is the poster's ℓ_t on the response.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .._checks import as_float_array, as_int_array, check_choice, check_real
from ..kernels import check_backend
from ..online import (
    RESPONSE_CDFS,
    LowRankFTRL,
    QuadraticFTRL,
    _dr_gradient,
    aaggff_response,
    aaggff_s_defaults,
    dr_response,
    official_first_decision,
    quadratic_ftrl_init,
    quadratic_ftrl_round,
)
from ..simplex import QPFactor, log_normalize
from ..types import Aggregate, RoundReports, Rule, check_reports, check_state, client_indices
from .fedavg import apply_weighted_update, as_params

__all__ = [
    "AAgFFDState",
    "AAgFFSState",
    "AAgFFUpdate",
    "aaggff_aggregate",
    "aaggff_d",
    "aaggff_s",
    "client_indices",
]


class AAgFFUpdate(NamedTuple):
    """AAgFF's aggregation: ``params`` θ^{t+1} and ``weights`` q (m,) over the selected clients."""

    params: np.ndarray
    weights: np.ndarray


def aaggff_aggregate(
    params: Any,
    deltas: Any,
    p: Any,
    selected: Any,
    server_lr: float = 1.0,
    *,
    backend: str = "numpy",
) -> AAgFFUpdate:
    """AAgFF's aggregation with the decision p over all K clients (AAgFF poster, the server's
    mixing step; SPEC §5):
    q_i = p_i / Σ_{j∈S} p_j for i ∈ S, θ^{t+1} = θ^t − η_s Σ_{i∈S} q_i δ_i.

    Parameters
    ----------
    params : array_like, shape (d,)
        θ^t.
    deltas : array_like, shape (m, d)
        δ_i of the selected clients, in the order of ``selected``.
    p : array_like, shape (K,)
        The decision, non-negative with a positive sum over ``selected`` (it need not sum to 1:
        only its restriction to S matters).
    selected : array_like of int, shape (m,)
        Distinct client indices in [0, K).
    server_lr : float
        η_s ≥ 0.
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted update.
    """
    P = as_float_array(p, "p", ndim=1, min_size=1)
    if P.min() < 0:
        raise ValueError("p must be non-negative")
    ids = as_int_array(selected, "selected", ndim=1)
    if ids.size == 0:
        raise ValueError("selected must name at least one client")
    if ids.min() < 0 or ids.max() >= P.size:
        raise ValueError(f"selected must lie in [0, {P.size}); got {ids.min()}..{ids.max()}")
    if np.unique(ids).size != ids.size:
        raise ValueError("selected must be distinct")
    shape = getattr(deltas, "shape", None)  # a device array's shape, without a copy
    shape = np.shape(deltas) if shape is None else shape
    rows = shape[0] if len(shape) else None
    if rows != ids.size:
        raise ValueError(f"deltas must have one row per selected client ({ids.size}); got {rows}")
    eta_s = check_real(server_lr, "server_lr", low=0.0)
    total = float(P[ids].sum())
    if not total > 0:
        raise ValueError("p must have a positive sum over the selected clients")
    q = P[ids] / total
    return AAgFFUpdate(apply_weighted_update(params, deltas, eta_s * q, backend=backend), q)


# From this many clients on, AAgFF-S keeps its FTRL sums low-rank (fairagg.online.LowRankFTRL):
# at t = 200 rounds the low-rank round was 1.8× faster than the dense one at K = 800 and 2.3×
# slower at K = 256 (validate/bench_aaggff.py). Past t ≈ K rounds the dense sums are the cheaper
# ones again (the low-rank rows are capped at 2K); the state does not switch.
LOW_RANK_CLIENTS = 512


class AAgFFSState(NamedTuple):
    """AAgFF-S's state: the decision p^t to play next, the FTRL sums (dense below
    ``LOW_RANK_CLIENTS`` clients, low-rank from there),
    and the QP solver's Cholesky factor from the round that chose p^t (None before the first
    round and with low-rank sums; see
    [`fairagg.online.quadratic_ftrl_round`][fairagg.online.quadratic_ftrl_round])."""

    p: np.ndarray
    ftrl: QuadraticFTRL | LowRankFTRL
    factor: QPFactor | None = None


class AAgFFDState(NamedTuple):
    """AAgFF-D's state: cumulative gradient estimate G_t, the round count t and the logits of the
    decision p^{t+1} to play next (computed with the L∞ of the round that produced it)."""

    grad_sum: np.ndarray
    rounds: int
    logits: np.ndarray


def _common(cdf: str, server_lr: float, variant: str, backend: str) -> float:
    check_choice(cdf, "cdf", tuple(RESPONSE_CDFS))
    check_choice(variant, "variant", ("paper", "official"))
    check_backend(backend)
    return check_real(server_lr, "server_lr", low=0.0)


def aaggff_s(
    *,
    cdf: str = "weibull",
    lipschitz: float | None = None,
    alpha: float | None = None,
    beta: float | None = None,
    variant: str = "paper",
    server_lr: float = 1.0,
    backend: str = "numpy",
) -> Rule:
    """AAgFF-S, the cross-silo rule: exact quadratic FTRL on the simplex (SPEC §5).

    Every round must include all K clients (``ValueError`` otherwise; use
    [`aaggff_d`][fairagg.rules.aaggff.aaggff_d] when clients are sampled). Round t: r = Φ(F/mean
    F)/K, g_t = −r/(1 + ⟨p_t, r⟩), p_{t+1} = argmin_{p∈Δ} Σ_τ⟨g_τ, p⟩ + (α/2)‖p‖² + (β/2)Σ_τ⟨g_τ, p
    − p_τ⟩² (``variant="paper"``) or the public code's A = α(1+β)I + βΣggᵀ, b = Σg
    (``variant="official"``), solved exactly
    ([`fairagg.simplex.solve_simplex_qp`][fairagg.simplex.solve_simplex_qp], warm-started at p_t).
    p¹ is uniform, or the public code's all-ones vector with ``variant="official"`` (which also
    takes the code's decreasing "normal" CDF,
    [`fairagg.online.aaggff_response`][fairagg.online.aaggff_response]; the module docstring lists
    what the code does that no variant reproduces).

    Parameters
    ----------
    cdf : str
        Response CDF, one of [`fairagg.online.RESPONSE_CDFS`][fairagg.online.RESPONSE_CDFS].
    lipschitz, alpha, beta : float, optional
        L∞ (default 1/K), α (default 4K L∞), β (default 1/(4 L∞)).
    variant : {"paper", "official"}
        The paper's FTRL objective (default) or the public code's (see above).
    server_lr : float
        η_s ≥ 0.
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted update.

    References
    ----------
    .. [1] S.-J. Hahn, G.-S. Kim, J. Lee, "Pursuing Overall Welfare in Federated Learning through
       Sequential Decision Making", ICML 2024.
    .. [2] The fairagg Specification: [SPEC §5 AAgFF][spec-5],
       [SPEC §4 Fair FL as online learning][spec-4].
    """
    eta_s = _common(cdf, server_lr, variant, backend)
    official = variant == "official"
    if lipschitz is not None:
        check_real(lipschitz, "lipschitz", low=0.0, low_open=True)
    if alpha is not None:
        check_real(alpha, "alpha", low=0.0, low_open=True)
    if beta is not None:
        check_real(beta, "beta", low=0.0)
    hyper = {
        "cdf": cdf,
        "lipschitz": lipschitz,
        "alpha": alpha,
        "beta": beta,
        "variant": variant,
        "server_lr": eta_s,
        "backend": backend,
    }

    def init(params: np.ndarray, num_clients: int) -> AAgFFSState:
        del params
        K = int(num_clients)
        if K < 1:
            raise ValueError(f"num_clients must be >= 1; got {num_clients}")
        p1 = official_first_decision(K, 1.0) if official else np.full(K, 1.0 / K)
        # From K = LOW_RANK_CLIENTS on, the sums are kept low-rank (memory O(K t), no K × K
        # matrix): the same decisions to round-off, and a step at K = 8000 ~8× one at K = 800
        # instead of ~800× (validate/bench_aaggff.py).
        return AAgFFSState(p1, quadratic_ftrl_init(K, low_rank=K >= LOW_RANK_CLIENTS))

    def step(params: np.ndarray, reports: RoundReports, state: AAgFFSState) -> Aggregate:
        check_state(state, AAgFFSState, "aaggff-s")
        theta = as_params(params, backend)
        check_reports(reports, theta, needs=("losses",), device=backend == "cuda")
        K = state.p.size
        ids = client_indices(reports, K)
        if ids.size != K:
            raise ValueError(
                f"aaggff-s is the cross-silo rule: every round needs all K = {K} clients; got "
                f"m = {ids.size}. Use aaggff-d for rounds that sample clients"
            )
        _, a0, b0 = aaggff_s_defaults(K, lipschitz)
        a = a0 if alpha is None else alpha
        bt = b0 if beta is None else beta
        r = np.empty(K)
        r[ids] = aaggff_response(reports.losses, cdf=cdf, scale=1.0 / K, variant=variant)
        p_t = state.p
        z = 1.0 + float(p_t @ r)
        g = -r / z
        # The official form never reads p_τ (b = Σ g): its off-simplex p¹ is replaced by the
        # uniform point, which serves only as the solver's warm start.
        played = np.full(K, 1.0 / K) if official and state.ftrl.rounds == 0 else p_t
        ftrl, qp, factor = quadratic_ftrl_round(state.ftrl, g, played, a, bt, variant, state.factor)
        p_new = qp.x
        out, q = aaggff_aggregate(theta, reports.deltas, p_new, ids, eta_s, backend=backend)
        info = {
            "weights": q,
            "p": p_new,
            "response": r[ids],
            "decision_loss": -math.log(z),
            "qp_iterations": qp.iterations,
        }
        return Aggregate(out, AAgFFSState(p_new, ftrl, factor), info)

    return Rule("aaggff-s", init, step, hyper)


def aaggff_d(
    *,
    cdf: str = "weibull",
    lipschitz: float | None = None,
    variant: str = "paper",
    inclusion_probability: float | None = None,
    server_lr: float = 1.0,
    backend: str = "numpy",
) -> Rule:
    """AAgFF-D, the cross-device rule: entropic FTRL on a doubly-robust gradient estimate (SPEC §5).

    Round t with m of K clients selected (C = m/K unless given): r_i = Φ(F_i/mean F)·C for
    i ∈ S; ř and r̄ from [`fairagg.online.dr_response`][fairagg.online.dr_response]
    (``variant="paper"``: r̄ + (r_i − r̄)/C for selected clients; ``"official"``: (r_i − r̄)/C); ĝ
    from [`fairagg.online.dr_gradient`][fairagg.online.dr_gradient] at p_t; G_t = G_{t−1} + ĝ;
    p_{t+1} ∝ exp(−√(log K) G_t / (L∞ √(t+1))), t counted from 1. The aggregation weights over
    S are computed from the logits (a softmax over S), so they never underflow. C = m/K is the
    exact inclusion probability of uniform sampling without replacement.
    ``variant="official"`` plays p¹ = C·1 (the public code's first decision; it is not on the
    simplex and enters only the first round's ĝ), and takes the code's decreasing "normal" CDF
    ([`fairagg.online.aaggff_response`][fairagg.online.aaggff_response]); the module docstring lists
    what the code does that no variant reproduces.

    Parameters
    ----------
    cdf : str
        Response CDF, one of [`fairagg.online.RESPONSE_CDFS`][fairagg.online.RESPONSE_CDFS].
    lipschitz : float, optional
        L∞ (default 2 + C, recomputed each round from m unless C is given).
    variant : {"paper", "official"}
        The paper's doubly-robust estimate (default) or the public code's (see above).
    inclusion_probability : float, optional
        C ∈ (0, 1], the probability that a client is selected, used as the response scale, in
        the doubly-robust estimate, in L∞ = 2 + C and (official) in p¹ = C·1. Default m/K of
        each round. The public code uses its command-line fraction C, which differs from m/K
        where C·K is not an integer (it samples ⌊C·K⌋ clients): pass that C to match it.
    server_lr : float
        η_s ≥ 0.
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted update.

    References
    ----------
    .. [1] S.-J. Hahn, G.-S. Kim, J. Lee, "Pursuing Overall Welfare in Federated Learning through
       Sequential Decision Making", ICML 2024.
    .. [2] The fairagg Specification: [SPEC §5 AAgFF][spec-5],
       [SPEC §4 Fair FL as online learning][spec-4].
    """
    eta_s = _common(cdf, server_lr, variant, backend)
    official = variant == "official"
    if lipschitz is not None:
        check_real(lipschitz, "lipschitz", low=0.0, low_open=True)
    if inclusion_probability is not None:
        inclusion_probability = check_real(
            inclusion_probability, "inclusion_probability", low=0.0, high=1.0, low_open=True
        )
    hyper = {
        "cdf": cdf,
        "lipschitz": lipschitz,
        "variant": variant,
        "inclusion_probability": inclusion_probability,
        "server_lr": eta_s,
        "backend": backend,
    }

    def logits(G: np.ndarray, t: int, L: float) -> np.ndarray:
        K = G.size
        return -math.sqrt(math.log(K)) * G / (L * math.sqrt(t + 1)) if K > 1 else np.zeros(1)

    def init(params: np.ndarray, num_clients: int) -> AAgFFDState:
        del params
        K = int(num_clients)
        if K < 1:
            raise ValueError(f"num_clients must be >= 1; got {num_clients}")
        return AAgFFDState(np.zeros(K), 0, np.zeros(K))

    def step(params: np.ndarray, reports: RoundReports, state: AAgFFDState) -> Aggregate:
        check_state(state, AAgFFDState, "aaggff-d")
        theta = as_params(params, backend)
        check_reports(reports, theta, needs=("losses",), device=backend == "cuda")
        K = state.grad_sum.size
        ids = client_indices(reports, K)
        m = ids.size
        C = m / K if inclusion_probability is None else inclusion_probability
        L = 2.0 + C if lipschitz is None else lipschitz
        if official and state.rounds == 0:
            p_t = official_first_decision(K, C)
        else:
            p_t = log_normalize(state.logits)  # the decision played this round (uniform at t = 1)
        r = aaggff_response(reports.losses, cdf=cdf, scale=C, variant=variant)
        r_check, r_bar = dr_response(r, ids, K, inclusion_probability=C, variant=variant)
        g_hat = _dr_gradient(p_t, r_check, r_bar)
        G = state.grad_sum + g_hat
        t = state.rounds + 1
        z = logits(G, t, L)
        p_new = log_normalize(z)
        q = log_normalize(z[ids])
        out = apply_weighted_update(theta, reports.deltas, eta_s * q, backend=backend)
        info = {
            "weights": q,
            "p": p_new,
            "response": r,
            "decision_loss_observed": -math.log1p(float(p_t[ids] @ r)),
        }
        return Aggregate(out, AAgFFDState(G, t, z), info)

    return Rule("aaggff-d", init, step, hyper)
