"""Tests of fairagg.rules.aaggff: AAgFF-S (cross-silo, quadratic FTRL) and AAgFF-D (cross-device,
entropic FTRL on a doubly-robust gradient estimate); AAgFF poster, SPEC §5.

Reference values are computed in the test from the formulas of SPEC §5 (the response CDFs with
``math``, the doubly-robust response, ĝ and the softmax written out), from cvxpy
(``fairagg.oracles.quadratic_ftrl``) and from the players of ``fairagg.online``.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fairagg import Aggregate, make_reports, make_rule, oracles, simulate
from fairagg.data import synthetic
from fairagg.models import LogisticRegression
from fairagg.online import (
    LowRankFTRL,
    QuadraticFTRL,
    aaggff_s_defaults,
    dr_response,
    play_aaggff_d,
    play_aaggff_s,
    quadratic_ftrl_init,
    quadratic_ftrl_round,
)
from fairagg.rules.aaggff import (
    LOW_RANK_CLIENTS,
    AAgFFDState,
    AAgFFSState,
    aaggff_d,
    aaggff_s,
)
from fairagg.simplex import QPFactor
from tests.tolerances import ORACLE_QP, assert_close

# The six response CDFs of SPEC §5, written out independently of fairagg.online.RESPONSE_CDFS.
CDFS = {
    "weibull": lambda x: 1.0 - math.exp(-(x**2)),
    "exponential": lambda x: 1.0 - math.exp(-x),
    "frechet": lambda x: math.exp(-1.0 / x) if x > 0 else 0.0,
    "normal": lambda x: 0.5 * (1.0 + math.erf((x - 1.0) / math.sqrt(2.0))),
    "gumbel": lambda x: math.exp(-math.exp(-(x - 1.0))),
    "logistic": lambda x: 1.0 / (1.0 + math.exp(-(x - 1.0))),
}
VARIANTS = ("paper", "official")
# The public code's "normal CDF" (vaseline555/AAggFF, AaggffServer.update, fair_const == 3),
# written as it is there: ½(erfc((x − 1)/√2) + 1) = 1.5 − Φ_{N(1,1)}(x), decreasing in x.
OFFICIAL_NORMAL = lambda x: 0.5 * (math.erfc((x - 1.0) / math.sqrt(2.0)) + 1.0)  # noqa: E731


def phi(cdf: str, variant: str = "paper"):
    """The response CDF of ``variant``: the official variant differs only in ``normal``."""
    return OFFICIAL_NORMAL if variant == "official" and cdf == "normal" else CDFS[cdf]


def response(losses, cdf: str, scale: float, variant: str = "paper") -> np.ndarray:
    """r_i = Φ(F_i / mean F) · s."""
    F = np.asarray(losses, dtype=np.float64)
    return np.array([phi(cdf, variant)(f / F.mean()) for f in F]) * scale


def first_decision(K: int, variant: str, C: float = 1.0) -> np.ndarray:
    """p¹: uniform (paper), C·1 (the public code's ``mix_coefs = ones(K) * C``)."""
    return np.full(K, C) if variant == "official" else np.full(K, 1.0 / K)


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


def minimise_on_segment(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin of ½pᵀAp + bᵀp over the 2-simplex, p = e2 + s(e1 − e2), s ∈ [0, 1] (1-D quadratic:
    f'(s) = dᵀA e2 + bᵀd + s dᵀAd = 0, clipped)."""
    d = np.array([1.0, -1.0])
    e2 = np.array([0.0, 1.0])
    s = -(d @ A @ e2 + b @ d) / (d @ A @ d)
    s = min(max(s, 0.0), 1.0)
    return np.array([s, 1.0 - s])


def ftrl_grads(R: np.ndarray, P: np.ndarray) -> np.ndarray:
    """g_τ = −r_τ/(1 + ⟨p_τ, r_τ⟩), row by row."""
    return -R / (1.0 + np.einsum("tk,tk->t", P, R))[:, None]


@pytest.fixture(scope="module")
def fed_data():
    return synthetic(1, 1, 4, seed=3, max_samples_per_client=40)


@pytest.fixture(scope="module")
def logistic():
    return LogisticRegression(60, 10)


# --------------------------------------------------------------------------------------------
# AAgFF-S: one hand-computed round
# --------------------------------------------------------------------------------------------

THETA = np.array([1.0, -1.0, 0.5])
DELTAS2 = np.array([[1.0, 0.0, 2.0], [0.0, 2.0, -1.0]])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("cdf", list(CDFS))
def test_aaggff_s_two_client_round_hand(cdf, variant):
    # K = 2 defaults: L∞ = 1/2, α = 4·K·L∞ = 4, β = 1/(4 L∞) = 1/2. F = [1, 3], mean 2,
    # x = [½, 3/2], r = Φ(x)/K; p¹ = [½, ½] (official: [1, 1]); ℓ(p¹) = −log(1 + ⟨p¹, r⟩);
    # g = −r/(1 + ⟨p¹, r⟩).
    K, alpha, beta = 2, 4.0, 0.5
    rule = make_rule("aaggff-s", cdf=cdf, variant=variant)
    state = rule.init(THETA, K)
    assert isinstance(state, AAgFFSState)
    u = [0.5, 0.5] if variant == "paper" else [1.0, 1.0]
    assert_close(state.p, u)
    u = np.array(u)
    agg = rule.step(THETA, make_reports(DELTAS2, [3, 5], losses=[1.0, 3.0]), state)
    r = np.array([phi(cdf, variant)(0.5), phi(cdf, variant)(1.5)]) / K
    assert_close(agg.info["response"], r)
    assert_close(agg.info["decision_loss"], -math.log(1.0 + u @ r))
    g = -r / (1.0 + u @ r)
    oracle = oracles.quadratic_ftrl([g], [u], alpha, beta, variant)
    np.testing.assert_allclose(agg.info["p"], oracle.x, rtol=0, atol=ORACLE_QP)
    # The same QP by hand: paper A = αI + β g gᵀ, b = g − β g⟨g, p¹⟩; official
    # A = α(1 + β)I + β g gᵀ, b = g. With K = 2 it is a 1-D quadratic on the segment.
    if variant == "paper":
        A = alpha * np.eye(2) + beta * np.outer(g, g)
        b = g - beta * g * (g @ u)
    else:
        A = alpha * (1 + beta) * np.eye(2) + beta * np.outer(g, g)
        b = g
    p = minimise_on_segment(A, b)
    assert_close(agg.info["p"], p)
    # Full participation: q = p; θ' = θ − Σ q_i δ_i.
    assert_close(agg.info["weights"], p)
    assert_close(agg.params, THETA - p[0] * DELTAS2[0] - p[1] * DELTAS2[1], scale=2.0)  # |δ| ≤ 2
    assert_close(agg.state.p, agg.info["p"])
    assert agg.state.ftrl.rounds == 1
    if variant == "official" and cdf == "normal":  # the code's decreasing "CDF"
        assert agg.info["p"][1] < agg.info["p"][0]
    else:
        assert agg.info["p"][1] > agg.info["p"][0]  # the larger loss gets the larger weight


@pytest.mark.parametrize("variant", VARIANTS)
def test_aaggff_s_hyperparameter_overrides(variant):
    # lipschitz overrides L∞ (α = 4 K L∞, β = 1/(4 L∞)); alpha and beta override those.
    K, F = 3, [0.5, 2.0, 1.0]
    D = np.eye(3)
    u = first_decision(K, variant)
    r = response(F, "weibull", 1 / K)
    g = -r / (1 + u @ r)
    for kw, (a, b) in [
        ({"lipschitz": 0.05}, (4 * K * 0.05, 1 / (4 * 0.05))),
        ({"alpha": 0.5, "beta": 3.0}, (0.5, 3.0)),
        ({"lipschitz": 0.05, "beta": 0.0}, (4 * K * 0.05, 0.0)),
    ]:
        rule = aaggff_s(variant=variant, **kw)
        agg = rule.step(
            np.zeros(3), make_reports(D, [1, 1, 1], losses=F), rule.init(np.zeros(3), K)
        )
        oracle = oracles.quadratic_ftrl([g], [u], a, b, variant)
        np.testing.assert_allclose(agg.info["p"], oracle.x, rtol=0, atol=ORACLE_QP)


# --------------------------------------------------------------------------------------------
# AAgFF-S over several rounds
# --------------------------------------------------------------------------------------------


def run_s_rounds(rule, K: int, T: int, seed: int):
    """T rounds of ``rule`` with changing losses and client_ids in a new order each round.
    Returns (played p_t (T, K), responses in client order (T, K), reported p_{t+1} (T, K))."""
    rng = np.random.default_rng(seed)
    d = 4
    theta = rng.normal(size=d)
    state = rule.init(theta, K)
    P, R, P_next = np.empty((T, K)), np.empty((T, K)), np.empty((T, K))
    for t in range(T):
        ids = rng.permutation(K)
        F = rng.uniform(0.05, 5.0, K)
        reports = make_reports(
            rng.normal(size=(K, d)), rng.integers(1, 100, K), losses=F, client_ids=ids
        )
        P[t] = state.p
        agg = rule.step(theta, reports, state)
        R[t, ids] = agg.info["response"]
        P_next[t] = agg.info["p"]
        assert_close(agg.info["weights"], agg.info["p"][ids])
        theta, state = agg.params, agg.state
        assert state.ftrl.rounds == t + 1
    return P, R, P_next


@pytest.mark.parametrize("variant", VARIANTS)
def test_aaggff_s_rounds_equal_play_aaggff_s(variant):
    K, T = 4, 6
    P, R, P_next = run_s_rounds(aaggff_s(variant=variant, cdf="logistic"), K, T, seed=11)
    assert np.ptp(R, axis=0).min() > 0  # the responses really change between rounds
    # play_aaggff_s returns the decisions p_1..p_T played before each response; one extra (dummy)
    # response makes it return p_{T+1} too.
    played = play_aaggff_s(np.vstack([R, np.zeros(K)]), variant=variant)
    assert_close(P, played[:T])
    assert_close(P_next, played[1:])


@pytest.mark.parametrize("variant", VARIANTS)
def test_aaggff_s_rounds_equal_oracle_resolved_from_history(variant):
    K, T = 3, 5
    alpha, beta = 4.0, K / 4.0  # L∞ = 1/K: α = 4 K L∞ = 4, β = 1/(4 L∞) = K/4
    P, R, P_next = run_s_rounds(aaggff_s(variant=variant), K, T, seed=5)
    G = ftrl_grads(R, P)
    for t in range(T):
        oracle = oracles.quadratic_ftrl(G[: t + 1], P[: t + 1], alpha, beta, variant)
        np.testing.assert_allclose(P_next[t], oracle.x, rtol=0, atol=ORACLE_QP)


def test_official_aaggff_s_warm_starts_each_qp_at_the_decision_played():
    """From the second round on, the official variant's QP starts from p_t, the decision played
    (the uniform point stands in only for the off-simplex p¹): the reported p and qp_iterations
    are those of quadratic_ftrl_round warm-started at p_t. α small and β large put p on faces
    of the simplex, where the start changes the number of active-set iterations."""
    K, alpha, beta = 6, 0.001, 10.0
    rule = aaggff_s(variant="official", alpha=alpha, beta=beta)
    rng = np.random.default_rng(1)
    theta = np.zeros(3)
    state = rule.init(theta, K)
    for t in range(3):
        F = rng.uniform(0.1, 3.0, K)
        reports = make_reports(rng.normal(size=(K, 3)), np.arange(1, K + 1), losses=F)
        agg = rule.step(theta, reports, state)
        if t > 0:
            r = agg.info["response"]
            g = -r / (1.0 + state.p @ r)
            ref = quadratic_ftrl_round(
                state.ftrl, g, state.p, alpha, beta, "official", state.factor
            )
            assert agg.info["qp_iterations"] == ref.result.iterations
            np.testing.assert_array_equal(agg.info["p"], ref.result.x)
        # The state hands this round's Cholesky factor to the next round (None only before the
        # first round).
        assert isinstance(agg.state.factor, QPFactor)
        state = agg.state


def test_aaggff_s_keeps_low_rank_sums_from_low_rank_clients_on():
    # K = 556 clients: the rule keeps Σ g gᵀ as the t gradients (no K × K matrix) and plays the
    # decisions the dense sums give, to round-off.
    below = LOW_RANK_CLIENTS - 1
    assert isinstance(make_rule("aaggff-s").init(np.zeros(2), below).ftrl, QuadraticFTRL)
    K, d = LOW_RANK_CLIENTS + 44, 3
    rule = make_rule("aaggff-s")
    _, alpha, beta = aaggff_s_defaults(K)
    rng = np.random.default_rng(0)
    theta = np.zeros(d)
    state = rule.init(theta, K)
    dense, p = quadratic_ftrl_init(K), np.full(K, 1.0 / K)
    for t in range(4):
        reports = make_reports(
            rng.standard_normal((K, d)), [1] * K, losses=rng.lognormal(0.0, 0.5, K)
        )
        agg = rule.step(theta, reports, state)
        state = agg.state
        assert isinstance(state.ftrl, LowRankFTRL) and state.ftrl.rows.shape == (t + 1, K)
        r = agg.info["response"]
        dense, res, _ = quadratic_ftrl_round(dense, -r / (1.0 + p @ r), p, alpha, beta)
        np.testing.assert_allclose(state.p, res.x, rtol=0, atol=1e-14)
        p = res.x


# --------------------------------------------------------------------------------------------
# AAgFF-S participation and client order
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ids", [None, [0, 2], [2]])
def test_aaggff_s_rejects_partial_participation(ids):
    rule = make_rule("aaggff-s")
    m = 2 if ids is None else len(ids)
    reports = make_reports(np.ones((m, 3)), [1] * m, losses=[1.0] * m, client_ids=ids)
    with pytest.raises(ValueError, match="aaggff-d"):
        rule.step(np.zeros(3), reports, rule.init(np.zeros(3), 3))


@given(data=st.data())
def test_aaggff_s_permutation_equivariant(data):
    K = data.draw(st.integers(2, 6))
    d = data.draw(st.integers(1, 5))
    rule = aaggff_s(
        cdf=data.draw(st.sampled_from(list(CDFS))), variant=data.draw(st.sampled_from(VARIANTS))
    )
    theta = data.draw(hnp.arrays(np.float64, (d,), elements=st.floats(-1.0, 1.0)))
    state_a = state_b = rule.init(theta, K)
    theta_a = theta_b = theta
    for _ in range(2):  # two rounds: the state carries the permutation-invariant sums
        D = data.draw(hnp.arrays(np.float64, (K, d), elements=st.floats(-1.0, 1.0)))
        F = data.draw(hnp.arrays(np.float64, (K,), elements=st.floats(0.05, 5.0)))
        n = data.draw(hnp.arrays(np.int64, (K,), elements=st.integers(1, 100)))
        perm = np.array(data.draw(st.permutations(range(K))), dtype=np.int64)
        a = rule.step(theta_a, make_reports(D, n, losses=F, client_ids=np.arange(K)), state_a)
        b = rule.step(
            theta_b, make_reports(D[perm], n[perm], losses=F[perm], client_ids=perm), state_b
        )
        assert_close(b.info["p"], a.info["p"])
        assert_close(b.info["weights"], a.info["weights"][perm])
        assert_close(b.info["response"], a.info["response"][perm])
        # Only the order of an m ≤ 6 term sum of entries ≤ 1 (plus the previous round's) changes.
        assert_close(b.params, a.params, scale=10.0)
        theta_a, state_a, theta_b, state_b = a.params, a.state, b.params, b.state


# --------------------------------------------------------------------------------------------
# fairness direction
# --------------------------------------------------------------------------------------------

FAIR_LOSSES = np.array([2.0, 0.5, 4.0, 1.0])


@pytest.mark.parametrize(
    ("name", "variant", "K", "ids"),
    [
        ("aaggff-s", "paper", 4, [2, 0, 3, 1]),
        ("aaggff-s", "official", 4, [2, 0, 3, 1]),
        ("aaggff-d", "paper", 4, [2, 0, 3, 1]),
        ("aaggff-d", "paper", 7, [5, 0, 3, 6]),
        ("aaggff-d", "official", 7, [5, 0, 3, 6]),
    ],
    ids=["s-paper", "s-official", "d-full", "d-partial", "d-official"],
)
@pytest.mark.parametrize("cdf", list(CDFS))
def test_larger_loss_gets_larger_weight(cdf, name, variant, K, ids):
    # ... except with the public code's "normal CDF" 1.5 − Φ_{N(1,1)}, which is decreasing: there
    # the order of the weights is reversed.
    rule = make_rule(name, cdf=cdf, variant=variant)
    reports = make_reports(np.eye(4), [10, 10, 10, 10], losses=FAIR_LOSSES, client_ids=ids)
    agg = rule.step(np.zeros(4), reports, rule.init(np.zeros(4), K))
    order = np.argsort(FAIR_LOSSES)
    if variant == "official" and cdf == "normal":
        order = order[::-1]
    w = agg.info["weights"]
    assert np.all(np.diff(w[order]) > 0), (w, FAIR_LOSSES)
    p_sel = agg.info["p"][np.asarray(ids)]
    assert np.all(np.diff(p_sel[order]) > 0)
    # Equal sample counts: FedAvg would give 1/4 each; the largest loss gets more than that.
    assert w[order[-1]] > 0.25 > w[order[0]]


# --------------------------------------------------------------------------------------------
# AAgFF-D: one hand-computed round
# --------------------------------------------------------------------------------------------


def d_round_by_hand(G, t, F, S, K, cdf, variant, L=None, C=None):
    """One AAgFF-D round from (G_{t−1}, t−1): returns r, ř, ĝ, G_t, p_t, p_{t+1}, q."""
    m = len(S)
    C = m / K if C is None else C
    L = 2.0 + C if L is None else L
    # p_t from G_{t−1} (p¹ at t = 1, where G = 0).
    if t > 1:
        p_t = softmax(-math.sqrt(math.log(K)) * G / (L * math.sqrt(t)))
    else:
        p_t = first_decision(K, variant, C)
    r = response(F, cdf, C, variant)
    r_bar = r.mean()
    r_check = np.full(K, r_bar)
    if variant == "paper":
        r_check[S] = (1 - 1 / C) * r_bar + r / C
    else:
        r_check[S] = (r - r_bar) / C
    D = 1.0 + r_bar * p_t.sum()
    g_hat = -r_check / D + (r_bar * (p_t @ (r_check - r_bar)) / D**2) * np.ones(K)
    G = G + g_hat
    p_new = softmax(-math.sqrt(math.log(K)) * G / (L * math.sqrt(t + 1)))
    q = p_new[S] / p_new[S].sum()
    return r, r_check, g_hat, G, p_t, p_new, q


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("cdf", list(CDFS))
def test_aaggff_d_round_hand(cdf, variant):
    # K = 4, m = 2, S = [3, 1] (arrival order), F = [1, 3]: C = ½, L∞ = 2 + C = 5/2,
    # r = Φ([½, 3/2])·C, r̄ = mean r; paper ř_S = r̄ + (r − r̄)/C, official ř_S = (r − r̄)/C, ř = r̄
    # elsewhere; p¹ uniform (official: C·1 = ½·1, Σp¹ = 2), D = 1 + r̄ Σp¹;
    # ĝ = −ř/D + r̄⟨p¹, ř − r̄⟩/D²·1; p² = softmax(−√(log 4) ĝ/(L∞ √2)); q = p²_S/Σ p²_S.
    K, S, F = 4, np.array([3, 1]), np.array([1.0, 3.0])
    C, L = 0.5, 2.5
    r = np.array([phi(cdf, variant)(0.5), phi(cdf, variant)(1.5)]) * C
    r_bar = (r[0] + r[1]) / 2
    r_check = np.full(K, r_bar)
    r_check[S] = r_bar + (r - r_bar) / C if variant == "paper" else (r - r_bar) / C
    if variant == "paper":
        D = 1.0 + r_bar
        g = -r_check / D + r_bar * (np.mean(r_check) - r_bar) / D**2
        observed = -math.log(1 + r.sum() / K)
    else:
        D = 1.0 + 2.0 * r_bar
        g = -r_check / D + r_bar * 0.5 * np.sum(r_check - r_bar) / D**2
        observed = -math.log(1 + 0.5 * r.sum())
    p_new = softmax(-math.sqrt(math.log(K)) * g / (L * math.sqrt(2.0)))
    q = p_new[S] / p_new[S].sum()

    rule = make_rule("aaggff-d", cdf=cdf, variant=variant)
    state = rule.init(THETA, K)
    assert isinstance(state, AAgFFDState) and state.rounds == 0
    agg = rule.step(THETA, make_reports(DELTAS2, [3, 5], losses=F, client_ids=S), state)
    assert_close(agg.info["response"], r)
    ours, _ = dr_response(r, S, K, variant=variant)
    assert_close(ours, r_check)
    assert_close(agg.state.grad_sum, g)
    assert agg.state.rounds == 1
    assert_close(agg.info["p"], p_new)
    assert_close(agg.info["weights"], q)
    assert_close(agg.params, THETA - q[0] * DELTAS2[0] - q[1] * DELTAS2[1], scale=2.0)  # |δ| ≤ 2
    assert_close(agg.info["decision_loss_observed"], observed)
    # Unselected clients share the same gradient (r̄), hence the same p.
    assert_close(agg.info["p"][0], agg.info["p"][2])
    # The helper used below agrees with this round.
    hr = d_round_by_hand(np.zeros(K), 1, F, S, K, cdf, variant)
    assert_close(hr[3], g)
    assert_close(hr[5], p_new)


@pytest.mark.parametrize("ids", [[0, 1, 2], [2, 0, 1]])
def test_aaggff_d_full_participation_dr_response_is_r(ids):
    K = 3
    ids = np.array(ids)
    F = np.array([0.5, 1.0, 3.0])
    r = response(F, "weibull", 1.0)  # C = m/K = 1
    r_check, r_bar = dr_response(r, ids, K)  # paper variant: r̄ + (r − r̄)/1
    expected = np.empty(K)
    expected[ids] = r
    assert_close(r_check, expected)
    assert_close(r_bar, r.mean())
    # In the rule: ĝ = −r/D + r̄⟨p¹, r − r̄⟩/D²·1 with the exact response r (client order).
    rule = aaggff_d()
    agg = rule.step(
        np.zeros(2),
        make_reports(np.ones((K, 2)), [1] * K, losses=F, client_ids=ids),
        rule.init(np.zeros(3), K),
    )
    D = 1.0 + r.mean()
    g = -expected / D + r.mean() * (expected.mean() - r.mean()) / D**2
    assert_close(agg.state.grad_sum, g)


# --------------------------------------------------------------------------------------------
# AAgFF-D over rounds
# --------------------------------------------------------------------------------------------

D_ROUNDS = [  # (selected clients in arrival order, their losses), K = 5, m = 2
    ([0, 2], [1.5, 0.4]),
    ([4, 1], [0.9, 2.7]),
    ([3, 0], [2.0, 1.0]),
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("cdf", ["weibull", "frechet", "normal"])
def test_aaggff_d_three_rounds_equal_reimplementation(cdf, variant):
    K, d = 5, 3
    rng = np.random.default_rng(2)
    rule = aaggff_d(cdf=cdf, variant=variant)
    theta = rng.normal(size=d)
    state = rule.init(theta, K)
    theta_ref, G, p_prev = theta.copy(), np.zeros(K), first_decision(K, variant, 2 / K)
    for t, (S, F) in enumerate(D_ROUNDS, start=1):
        S, F = np.array(S), np.array(F)
        deltas = rng.normal(size=(len(S), d))
        agg = rule.step(theta, make_reports(deltas, [5, 9], losses=F, client_ids=S), state)
        r, _, _, G, p_t, p_new, q = d_round_by_hand(G, t, F, S, K, cdf, variant)
        assert_close(p_t, p_prev)  # the decision played is the one reported last round
        theta_ref = theta_ref - q @ deltas
        assert_close(agg.info["response"], r)
        assert_close(agg.state.grad_sum, G)
        assert agg.state.rounds == t
        assert_close(agg.info["p"], p_new)
        assert_close(agg.info["weights"], q)
        assert_close(agg.info["decision_loss_observed"], -math.log1p(p_t[S] @ r))
        assert_close(agg.params, theta_ref, scale=10.0)  # three rounds of sums of N(0, 1) terms
        theta, state, p_prev = agg.params, agg.state, p_new


def test_aaggff_d_plays_the_decision_it_reported_when_m_changes():
    # L∞ = 2 + C depends on m: the decision played in round t + 1 must be the p reported in round
    # t (computed with round t's L∞), not one rebuilt from G_t with round t + 1's L∞.
    rule = aaggff_d()
    K = 4
    state = rule.init(np.zeros(2), K)
    rounds = [([3, 1], [0.5, 2.0]), ([0, 1, 2, 3], [1.0, 0.3, 0.7, 2.5]), ([2], [1.5])]
    reported = None
    for ids, losses in rounds:
        reports = make_reports(
            np.ones((len(ids), 2)),
            np.full(len(ids), 5),
            losses=losses,
            client_ids=ids,
            num_clients=K,
        )
        agg = rule.step(np.zeros(2), reports, state)
        if reported is not None:
            played = reported[ids]
            expected = -math.log1p(float(played @ agg.info["response"]))
            assert agg.info["decision_loss_observed"] == pytest.approx(expected, rel=1e-12)
        reported, state = agg.info["p"], agg.state


@pytest.mark.parametrize("variant", VARIANTS)
def test_aaggff_d_full_participation_equals_play_aaggff_d(variant):
    # With m = K there is no sampling, so the player and the rule see the same responses.
    K, T = 3, 5
    rng = np.random.default_rng(9)
    rule = aaggff_d(cdf="gumbel", variant=variant)
    state = rule.init(np.zeros(3), K)
    theta = np.zeros(2)
    R, P_next = np.empty((T, K)), np.empty((T, K))
    for t in range(T):
        ids = rng.permutation(K)
        agg = rule.step(
            theta,
            make_reports(
                rng.normal(size=(K, 2)), [1] * K, losses=rng.uniform(0.1, 3, K), client_ids=ids
            ),
            state,
        )
        R[t, ids] = agg.info["response"]
        P_next[t] = agg.info["p"]
        theta, state = agg.params, agg.state
    played = play_aaggff_d(np.vstack([R, np.zeros(K)]), variant=variant)
    assert_close(P_next, played[1:])


# --------------------------------------------------------------------------------------------
# variant="official" against the public code's server, transcribed
# --------------------------------------------------------------------------------------------


class PublicServer:
    """The server of the public AAgFF code (vaseline555/AAggFF: ``FedavgServer.__init__``'s
    ``mix_coefs``, ``AaggffServer.__init__`` and ``AaggffServer.update``), transcribed statement
    by statement into NumPy float64 (the code runs torch float32). ``C`` is its command-line
    client fraction (cross-silo when C == 1), ``fair_const`` its CDF switch. Its AAgFF-S step is
    solved by cvxpy, as there (here Clarabel at tight tolerances, to compare argmins); its
    learning-rate decay is left out (fairagg keeps η_s constant; lr_decay_step beyond the run)."""

    FAIR_CONST = {"weibull": 0, "exponential": 1, "frechet": 2, "normal": 3, "gumbel": 4,
                  "logistic": 5}  # fmt: skip

    def __init__(self, K: int, C: float, cdf: str, server_lr: float = 1.0):
        self.K, self.C, self.fair_const, self.lr = K, C, self.FAIR_CONST[cdf], server_lr
        self.mix_coefs = np.ones(K) * C
        if C == 1:
            lipschitz = 1 / K
            self.alpha = 4 * K * lipschitz
            self.beta = 1 / (4 * lipschitz)
            self.grad_hist = np.zeros(K)
            self.hess_hist = np.eye(K) * self.alpha
        else:
            self.grad_hist = np.zeros(K)
        self.round = 0

    def update(self, theta, selected_ids, losses, deltas):
        import cvxpy as cp

        self.round += 1  # main.py: server.round = curr_round, from 1
        K, C, sel = self.K, self.C, list(selected_ids)
        r_t = np.zeros(K)
        r_t[sel] = losses
        x = r_t[sel] / r_t[sel].mean()
        erfc = np.vectorize(math.erfc)
        r_t[sel] = [
            -np.exp(-(x**2)) + 1,
            -np.exp(-x) + 1,
            np.exp(-(1 / x)),
            (erfc((x - 1) / 2**0.5) + 1) * 0.5,
            np.exp(-np.exp(-(x - 1))),
            1 / (np.exp(-(x - 1)) + 1),
        ][self.fair_const]
        if C < 1:
            r_t[sel] = r_t[sel] * C
        else:
            r_t[sel] = r_t[sel] / K
        if C == 1:
            grad = -r_t / (self.mix_coefs @ r_t + 1)
            self.grad_hist += grad
            self.hess_hist += np.outer(grad, grad)
            p_var = cp.Variable(K)
            obj = (
                self.grad_hist @ p_var
                + 0.5 * self.alpha * cp.sum_squares(p_var)
                + 0.5 * self.beta * cp.quad_form(p_var, cp.psd_wrap(self.hess_hist))
            )
            cp.Problem(cp.Minimize(obj), [cp.sum(p_var) == 1, p_var >= 0]).solve(
                solver=cp.CLARABEL, tol_gap_abs=1e-13, tol_gap_rel=1e-13, tol_feas=1e-13
            )
            p_new = np.array(p_var.value)
        else:
            mean = r_t[sel].mean()
            r_dr_t = np.ones(K) * mean
            r_dr_t[sel] = (r_t[sel] - r_dr_t[sel]) / C
            denominator = self.mix_coefs.sum() * mean + 1
            first_term = -r_dr_t / denominator
            second_term = (
                (np.ones((K, 1)) @ self.mix_coefs.reshape(1, -1) * mean)
                @ (r_dr_t - np.ones(K) * mean).reshape(-1, 1)
                / denominator**2
            ).squeeze()
            self.grad_hist += first_term + second_term
            neg_sum_grads = -self.grad_hist
            z = neg_sum_grads * math.sqrt(math.log(K)) / math.sqrt(self.round + 1) / (2 + C)
            p_new = np.exp(z - z.max())
            p_new = p_new / p_new.sum()
        self.mix_coefs = p_new.copy()
        coef = self.mix_coefs[sel] / self.mix_coefs[sel].sum()
        return theta - self.lr * coef @ deltas, coef


def run_against_public(rule, server: PublicServer, K: int, m: int, T: int, seed: int):
    """T rounds of ``rule`` and ``server`` on the same sorted samples of m clients, losses and
    updates; returns the largest differences of (p, weights, θ) over the rounds."""
    rng = np.random.default_rng(seed)
    d = 5
    theta = theta_pub = rng.normal(size=d)
    state = rule.init(theta, K)
    worst = np.zeros(3)
    for _ in range(T):
        ids = np.sort(rng.choice(K, size=m, replace=False))
        F = rng.uniform(0.05, 4.0, m)
        deltas = rng.normal(size=(m, d))
        agg = rule.step(theta, make_reports(deltas, np.ones(m), losses=F, client_ids=ids), state)
        theta_pub, coef = server.update(theta_pub, ids, F, deltas)
        diffs = (agg.info["p"] - server.mix_coefs, agg.info["weights"] - coef,
                 agg.params - theta_pub)  # fmt: skip
        worst = np.maximum(worst, [np.max(np.abs(v)) for v in diffs])
        theta, state = agg.params, agg.state
    return worst


@pytest.mark.parametrize("cdf", list(CDFS))
def test_official_aaggff_s_is_the_public_cross_silo_server(cdf):
    # All-ones p¹, the decreasing "normal", A = α(1+β)I + βΣggᵀ, b = Σg: every round's decision,
    # weights and model equal the transcribed server's up to its QP solver's tolerance.
    K = 5
    worst = run_against_public(
        aaggff_s(cdf=cdf, variant="official", server_lr=0.7), PublicServer(K, 1.0, cdf, 0.7),
        K, K, 6, seed=21,
    )  # fmt: skip
    assert np.all(worst <= ORACLE_QP), worst


@pytest.mark.parametrize("cdf", list(CDFS))
def test_official_aaggff_d_is_the_public_cross_device_server(cdf):
    # C = 0.3 with K = 7: the code samples ⌊2.1⌋ = 2 clients but uses 0.3, not m/K = 2/7, as the
    # response scale, in the doubly-robust estimate, in L∞ = 2 + C and in p¹ = C·1. Closed forms
    # only: equal to round-off.
    K, C = 7, 0.3
    rule = aaggff_d(cdf=cdf, variant="official", inclusion_probability=C, server_lr=0.7)
    worst = run_against_public(rule, PublicServer(K, C, cdf, 0.7), K, 2, 8, seed=22)
    assert np.all(worst <= 1e-12), worst
    # Without the code's C the rule is another one: m/K ≠ C here.
    other = aaggff_d(cdf=cdf, variant="official", server_lr=0.7)
    assert run_against_public(other, PublicServer(K, C, cdf, 0.7), K, 2, 8, seed=22)[0] > 1e-6


def test_official_normal_response_is_decreasing_in_the_loss():
    # 1.5 − Φ_{N(1,1)}(x) at x = F/mean F = (0, 1, 2): 1.5 − Φ(−1), 1, 1.5 − Φ(1), times s.
    from fairagg.online import aaggff_response

    r = aaggff_response([0.0, 1.0, 2.0], cdf="normal", scale=0.5, variant="official")
    Phi1 = 0.5 * (1 + math.erf(1 / math.sqrt(2)))
    assert_close(r, 0.5 * np.array([0.5 + Phi1, 1.0, 1.5 - Phi1]))
    paper = aaggff_response([0.0, 1.0, 2.0], cdf="normal", scale=0.5)
    assert_close(paper, 0.5 * np.array([1 - Phi1, 0.5, Phi1]))
    for cdf in set(CDFS) - {"normal"}:  # the other five are the paper's
        F = [0.3, 1.0, 2.5]
        assert_close(aaggff_response(F, cdf=cdf, variant="official"), aaggff_response(F, cdf=cdf))


def test_inclusion_probability_is_the_c_of_every_formula():
    # Paper variant with C given: s = C, ř_S = r̄ + (r − r̄)/C, L∞ = 2 + C, p¹ uniform.
    K, S, F, C = 5, np.array([4, 1]), np.array([1.0, 3.0]), 0.55
    agg = aaggff_d(inclusion_probability=C).step(
        THETA, make_reports(DELTAS2, [3, 5], losses=F, client_ids=S), aaggff_d().init(THETA, K)
    )
    r, r_check, g, G, p_t, p_new, q = d_round_by_hand(np.zeros(K), 1, F, S, K, "weibull",
                                                      "paper", C=C)  # fmt: skip
    assert_close(agg.info["response"], r)
    assert_close(agg.state.grad_sum, g)
    assert_close(agg.info["p"], p_new)
    assert_close(agg.info["weights"], q)
    with pytest.raises(ValueError, match="inclusion_probability"):
        aaggff_d(inclusion_probability=1.5)
    with pytest.raises(ValueError, match="inclusion_probability"):
        aaggff_d(inclusion_probability=0.0)


# --------------------------------------------------------------------------------------------
# server learning rate, purity, backends
# --------------------------------------------------------------------------------------------


def _round(name: str):
    """θ, reports and K for one round: all 4 clients for AAgFF-S, 3 of 6 for AAgFF-D."""
    ids = np.array([2, 0, 3, 1]) if name == "aaggff-s" else np.array([5, 0, 3])
    m = ids.size
    rng = np.random.default_rng(1)
    reports = make_reports(
        rng.normal(size=(m, 6)),
        rng.integers(1, 50, m),
        losses=rng.uniform(0.1, 3, m),
        client_ids=ids,
    )
    return rng.normal(size=6), reports, (4 if name == "aaggff-s" else 6)


@pytest.mark.parametrize("name", ["aaggff-s", "aaggff-d"])
def test_server_lr_scales_the_step(name):
    theta, reports, K = _round(name)
    base = make_rule(name)
    state = base.init(theta, K)
    one = base.step(theta, reports, state)
    zero = make_rule(name, server_lr=0.0).step(theta, reports, state)
    two = make_rule(name, server_lr=2.0).step(theta, reports, state)
    np.testing.assert_array_equal(zero.params, theta)
    assert_close(theta - two.params, 2.0 * (theta - one.params), scale=10.0)  # |δ| ~ N(0, 1)
    # η_s only scales the update: the decision and the weights are unchanged.
    for other in (zero, two):
        np.testing.assert_array_equal(other.info["p"], one.info["p"])
        np.testing.assert_array_equal(other.info["weights"], one.info["weights"])


def _state_arrays(state):
    leaves = []
    for v in state:
        if isinstance(v, tuple):
            leaves.extend(_state_arrays(v))
        else:
            leaves.append(np.asarray(v))
    return leaves


@pytest.mark.parametrize("name", ["aaggff-s", "aaggff-d"])
def test_step_is_pure_and_deterministic(name):
    theta, reports, K = _round(name)
    rule = make_rule(name)
    state = rule.init(theta, K)
    state = rule.step(theta, reports, state).state  # a non-trivial state (after one round)
    saved = copy.deepcopy(state)
    theta_copy = theta.copy()
    report_copies = [None if f is None else np.copy(f) for f in reports[:6]]
    a = rule.step(theta, reports, state)
    b = rule.step(theta, reports, state)
    assert isinstance(a, Aggregate)
    for x, y in zip(_state_arrays(state), _state_arrays(saved), strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(theta, theta_copy)
    for field, c in zip(reports[:6], report_copies, strict=True):
        np.testing.assert_array_equal(field, c)
    np.testing.assert_array_equal(a.params, b.params)
    for x, y in zip(_state_arrays(a.state), _state_arrays(b.state), strict=True):
        np.testing.assert_array_equal(x, y)
    for key in a.info:
        np.testing.assert_array_equal(a.info[key], b.info[key])
    for x in _state_arrays(a.state):  # the new state shares no memory with the old one
        for y in _state_arrays(state):
            assert x.ndim == 0 or not np.shares_memory(x, y)


@pytest.mark.parametrize("name", ["aaggff-s", "aaggff-d"])
def test_numba_backend_equals_numpy(name):
    theta, reports, K = _round(name)
    a = make_rule(name).step(theta, reports, make_rule(name).init(theta, K))
    b = make_rule(name, backend="numba").step(theta, reports, make_rule(name).init(theta, K))
    np.testing.assert_array_equal(a.info["weights"], b.info["weights"])
    assert_close(b.params, a.params, scale=10.0)  # a sum of ≤ 4 terms of size ~N(0, 1)


# --------------------------------------------------------------------------------------------
# the simulator
# --------------------------------------------------------------------------------------------


def _replay_weights(name, history, K):
    """The rule's weights recomputed from the recorded selections and losses (the deltas do not
    enter the weights)."""
    rule = make_rule(name)
    state = rule.init(np.zeros(1), K)
    out = []
    for S, F in zip(history.selected, history.reported_losses, strict=True):
        reports = make_reports(np.zeros((S.size, 1)), [1] * S.size, losses=F, client_ids=S)
        agg = rule.step(np.zeros(1), reports, state)
        out.append(agg.info["weights"])
        state = agg.state
    return np.array(out)


@pytest.mark.parametrize(("name", "m"), [("aaggff-s", 4), ("aaggff-d", 2), ("aaggff-d", 4)])
def test_simulate_runs(name, m, logistic, fed_data):
    K = fed_data.num_clients
    h = simulate(name, logistic, fed_data, rounds=3, clients_per_round=m, epochs=1, lr=0.05, seed=1)
    assert h.status == "completed" and h.num_rounds == 3
    assert h.config["rule"] == name
    assert h.weights.shape == h.selected.shape == h.reported_losses.shape == (3, m)
    for field in ("weights", "reported_losses", "test_accuracy", "train_loss", "final_params"):
        assert np.all(np.isfinite(getattr(h, field)))
    assert np.all(h.weights > 0)
    assert_close(h.weights.sum(axis=1), np.ones(3))
    assert_close(h.weights, _replay_weights(name, h, K))
    # Once local training has made the clients' losses differ, the weights leave uniform.
    assert np.ptp(h.weights[1:]) > 0


def test_simulate_aaggff_s_with_sampling_fails(logistic, fed_data):
    with pytest.raises(ValueError, match="aaggff-d") as info:
        simulate("aaggff-s", logistic, fed_data, rounds=3, clients_per_round=2, lr=0.05)
    history = info.value.history
    assert history.num_rounds == 0
    assert history.status.startswith("stopped: ValueError")
    assert history.eval_round.tolist() == [0]  # the initial evaluation was kept


# --------------------------------------------------------------------------------------------
# bad hyper-parameters
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["aaggff-s", "aaggff-d"])
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cdf": "cauchy"}, "cdf"),
        ({"cdf": "Weibull"}, "cdf"),
        ({"variant": "leave-one-out"}, "variant"),
        ({"variant": "exact"}, "variant"),
        ({"server_lr": -1.0}, "server_lr"),
        ({"server_lr": np.nan}, "server_lr"),
        ({"lipschitz": 0.0}, "lipschitz"),
        ({"lipschitz": -0.5}, "lipschitz"),
        ({"backend": "tpu"}, "backend"),
    ],
)
def test_bad_hyperparameters_rejected(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_rule(name, **kwargs)


@pytest.mark.parametrize(("kwargs", "match"), [({"alpha": 0.0}, "alpha"), ({"beta": -1.0}, "beta")])
def test_aaggff_s_bad_alpha_beta_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        aaggff_s(**kwargs)


@pytest.mark.parametrize("name", ["aaggff-s", "aaggff-d"])
def test_missing_losses_and_bad_client_ids_rejected(name):
    rule = make_rule(name)
    state = rule.init(np.zeros(2), 2)
    with pytest.raises(ValueError, match="losses"):
        rule.step(np.zeros(2), make_reports(np.ones((2, 2)), [1, 1]), state)
    with pytest.raises(ValueError, match="client_ids"):
        rule.step(
            np.zeros(2),
            make_reports(np.ones((2, 2)), [1, 1], losses=[1, 2], client_ids=[0, 2]),
            state,
        )
    with pytest.raises(ValueError, match="client_ids"):
        rule.step(
            np.zeros(2),
            make_reports(np.ones((2, 2)), [1, 1], losses=[1, 2], client_ids=[1, 1]),
            state,
        )


def test_aaggff_aggregate_renormalises_the_decision_over_the_selected_clients():
    from fairagg.rules.aaggff import aaggff_aggregate

    p = np.array([0.1, 0.2, 0.3, 0.4])
    D = np.array([[1.0, 0.0], [0.0, 2.0]])
    out = aaggff_aggregate(np.zeros(2), D, p, [3, 1], server_lr=0.5)
    q = np.array([0.4, 0.2]) / 0.6
    np.testing.assert_allclose(out.weights, q, rtol=1e-15)
    np.testing.assert_allclose(out.params, -0.5 * q @ D, rtol=1e-15)
    # only p's restriction to S matters, and its scale cancels
    again = aaggff_aggregate(np.zeros(2), D, np.array([9.0, 2.0, 0.0, 4.0]), [3, 1], 0.5)
    np.testing.assert_allclose(again.params, out.params, rtol=1e-15)


@pytest.mark.parametrize(
    ("p", "selected", "rows", "match"),
    [
        ([0.5, -0.1, 0.6], [0, 1], 2, "p must be non-negative"),
        ([0.5, 0.5], [0, 2], 2, "selected must lie in \\[0, 2\\)"),
        ([0.5, 0.5], [1, 1], 2, "selected must be distinct"),
        ([0.5, 0.5], [], 0, "selected must name at least one client"),
        ([0.0, 0.0, 1.0], [0, 1], 2, "p must have a positive sum over the selected"),
        ([0.5, 0.5], [0, 1], 3, "deltas must have one row per selected client \\(2\\); got 3"),
    ],
)
def test_aaggff_aggregate_rejects_bad_input(p, selected, rows, match):
    from fairagg.rules.aaggff import aaggff_aggregate

    with pytest.raises(ValueError, match=match):
        aaggff_aggregate(np.zeros(2), np.ones((rows, 2)), p, np.array(selected, dtype=int))


# --------------------------------------------------------------------------------------------
# messages, hyper-parameters, K = 1 and 2, small constants (from mutation testing)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: aaggff_s(cdf="x"), ValueError, r"^cdf must be one of 'weibull', 'exponential'"),
        (lambda: aaggff_d(variant="x"), ValueError, r"^variant must be one of 'paper', 'official'"),
        (lambda: aaggff_s(server_lr=-1.0), ValueError, r"^server_lr must be >= 0.0; got -1.0"),
        (lambda: aaggff_d(server_lr=-1.0), ValueError, r"^server_lr must be >= 0.0; got -1.0"),
        (lambda: aaggff_s(lipschitz=0.0), ValueError, r"^lipschitz must be > 0.0; got 0.0"),
        (lambda: aaggff_d(lipschitz=0.0), ValueError, r"^lipschitz must be > 0.0; got 0.0"),
        (lambda: aaggff_s(alpha=0.0), ValueError, r"^alpha must be > 0.0; got 0.0"),
        (lambda: aaggff_s(beta=-1.0), ValueError, r"^beta must be >= 0.0; got -1.0"),
        (lambda: aaggff_d(inclusion_probability=2.0), ValueError,
         r"^inclusion_probability must be <= 1.0; got 2.0"),
        (lambda: aaggff_s().init(np.zeros(2), 0), ValueError, r"^num_clients must be >= 1; got 0$"),
        (lambda: aaggff_d().init(np.zeros(2), 0), ValueError, r"^num_clients must be >= 1; got 0$"),
        (lambda: aaggff_s().step(np.zeros(2), None, None), TypeError,
         r"^state must be the AAgFFSState that aaggff-s's init returns"),
        (lambda: aaggff_d().step(np.zeros(2), None, None), TypeError,
         r"^state must be the AAgFFDState that aaggff-d's init returns"),
    ],
)  # fmt: skip
def test_errors_name_the_argument_and_value(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize(
    ("p", "selected", "rows", "server_lr", "exc", "match"),
    [
        (np.ones((2, 2)), [0], 1, 1.0, ValueError, r"^p must be 1-dimensional"),
        ([], [0], 1, 1.0, ValueError, r"^p must have at least 1 entry"),
        ([0.5, 0.5], np.array([[0]]), 1, 1.0, ValueError, r"^selected must be 1-dimensional"),
        ([0.5, 0.5], [0.5], 1, 1.0, TypeError, r"^selected must hold integers"),
        ([0.5, 0.5], [0], 1, -1.0, ValueError, r"^server_lr must be >= 0.0; got -1.0"),
        ([0.5, -0.1, 0.6], [0, 1], 2, 1.0, ValueError, r"^p must be non-negative$"),
        ([0.5, 0.5], [], 0, 1.0, ValueError, r"^selected must name at least one client$"),
        ([0.5, 0.5], [1, 1], 2, 1.0, ValueError, r"^selected must be distinct$"),
        ([0.0, 0.0, 1.0], [0, 1], 2, 1.0, ValueError,
         r"^p must have a positive sum over the selected clients$"),
    ],
)  # fmt: skip
def test_aaggff_aggregate_messages(p, selected, rows, server_lr, exc, match):
    from fairagg.rules.aaggff import aaggff_aggregate

    with pytest.raises(exc, match=match):
        aaggff_aggregate(np.zeros(2), np.ones((rows, 2)), p, selected, server_lr)


def test_aaggff_aggregate_scalar_deltas_have_no_rows():
    from fairagg.rules.aaggff import aaggff_aggregate

    with pytest.raises(
        ValueError, match=r"^deltas must have one row per selected client \(1\); got None$"
    ):
        aaggff_aggregate(np.zeros(2), 5.0, [1.0], [0])


def test_aaggff_aggregate_one_client_and_a_list_of_deltas():
    from fairagg.rules.aaggff import aaggff_aggregate

    out = aaggff_aggregate(np.zeros(2), [[1.0, 2.0]], [0.3], [0])  # default η_s = 1
    np.testing.assert_array_equal(out.weights, [1.0])
    np.testing.assert_array_equal(out.params, [-1.0, -2.0])


def test_hyperparameters_are_reported():
    assert aaggff_s(cdf="gumbel", lipschitz=0.5, alpha=2.0, beta=0.5, variant="official",
                    server_lr=0.5, backend="numba").hyperparams == {
        "cdf": "gumbel", "lipschitz": 0.5, "alpha": 2.0, "beta": 0.5, "variant": "official",
        "server_lr": 0.5, "backend": "numba",
    }  # fmt: skip
    assert aaggff_d(cdf="frechet", lipschitz=0.5, variant="official", inclusion_probability=0.5,
                    server_lr=0.5, backend="numba").hyperparams == {
        "cdf": "frechet", "lipschitz": 0.5, "variant": "official",
        "inclusion_probability": 0.5, "server_lr": 0.5, "backend": "numba",
    }  # fmt: skip


@pytest.mark.parametrize("name", ["aaggff-s", "aaggff-d"])
def test_one_client_gets_all_the_weight(name):
    rule = make_rule(name)
    state = rule.init(np.zeros(2), 1)
    agg = rule.step(np.zeros(2), make_reports([[1.0, 2.0]], [3], losses=[0.5]), state)
    np.testing.assert_array_equal(agg.info["p"], [1.0])
    np.testing.assert_array_equal(agg.params, [-1.0, -2.0])


def test_aaggff_d_with_two_clients_moves_off_uniform():
    rule = aaggff_d()
    agg = rule.step(np.zeros(2), make_reports(np.eye(2), [1, 1], losses=[0.5, 2.0]),
                    rule.init(np.zeros(2), 2))  # fmt: skip
    assert agg.info["p"][1] > agg.info["p"][0]


def test_small_lipschitz_alpha_and_beta_are_accepted():
    theta, reports, K = _round("aaggff-s")
    for kw in ({"lipschitz": 0.5}, {"alpha": 0.5}, {"beta": 0.5}):
        rule = aaggff_s(**kw)
        assert np.all(np.isfinite(rule.step(theta, reports, rule.init(theta, K)).params))
    theta, reports, K = _round("aaggff-d")
    rule = aaggff_d(lipschitz=0.5)
    agg = rule.step(theta, reports, rule.init(theta, K))
    r = aaggff_d(lipschitz=2.0 + 3 / 6).step(theta, reports, rule.init(theta, K))
    assert not np.array_equal(agg.info["p"], r.info["p"])  # L∞ = 0.5 is used, not 2 + C


@pytest.mark.parametrize("name", ["aaggff-s", "aaggff-d"])
def test_cuda_backend_takes_device_arrays(name):
    from numba import cuda

    theta, reports, K = _round(name)
    ref = make_rule(name).step(theta, reports, make_rule(name).init(theta, K))
    rule = make_rule(name, backend="cuda")
    d_reports = reports._replace(deltas=cuda.to_device(reports.deltas))
    agg = rule.step(cuda.to_device(theta), d_reports, rule.init(theta, K))
    assert not isinstance(agg.params, np.ndarray)
    assert_close(agg.params.copy_to_host(), ref.params, scale=10.0)  # as the numba test above
