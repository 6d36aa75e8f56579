"""The learners AAgFF-S and AAgFF-D run on a given response sequence (the theorems' settings)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import check_choice, check_int, check_real
from ._doubly_robust import _dr_gradient, aaggff_d_decision, dr_response, official_first_decision
from ._ftrl import quadratic_ftrl_round
from ._regret import _check_responses
from ._response import VARIANTS
from ._sums import aaggff_s_defaults, quadratic_ftrl_init


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
