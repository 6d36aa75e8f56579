"""FedFa (SPEC §9, reconstructed): weights (eqs. 9-15), server momentum (eqs. 3-7), the rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fairagg import make_reports, make_rule, simulate
from fairagg.local import train_clients
from fairagg.models import LogisticRegression
from fairagg.rules.fedfa import (
    FedFaState,
    fedfa,
    fedfa_information,
    fedfa_server_step,
    fedfa_weights,
)
from fairagg.sampling import sample_clients
from tests.rules.test_convergence import federated_data
from tests.strategies import update_matrices
from tests.tolerances import assert_close

EA, EF = 1e-6, 1e-5


# --- weights: hand-computed cases ------------------------------------------------------------
def test_two_clients_by_hand():
    # acc = (0.5, 1.0): A = (1/3, 2/3); f = (1, 3): P = (1/4, 3/4).
    p = fedfa_weights([0.5, 1.0], [1, 3], alpha=0.5)
    ia = np.array([-math.log(1 / 3 + EA), -math.log(2 / 3 + EA)])
    if_ = np.array([-math.log(3 / 4 + EF), -math.log(1 / 4 + EF)])
    assert_close(p, 0.5 * ia / ia.sum() + 0.5 * if_ / if_.sum())
    # The same to four digits from ln 3 = 1.0986, ln 1.5 = 0.4055, ln(4/3) = 0.2877, ln 4 = 1.3863
    # (the ε shifts move these by under 1e-4 relative).
    np.testing.assert_allclose(p, [0.4511, 0.5489], rtol=1e-4)


def test_three_clients_by_hand():
    # A = (0.2, 0.4, 0.4): I^a = (ln 5, ln 2.5, ln 2.5) = (1.6094, 0.9163, 0.9163);
    # P = (1/4, 1/4, 1/2): I^f = (ln 4/3, ln 4/3, ln 2) = (0.2877, 0.2877, 0.6931).
    info = fedfa_information([0.1, 0.2, 0.2], [1, 1, 2])
    assert_close(info.accuracy_share, [0.2, 0.4, 0.4])
    assert_close(info.frequency_share, [0.25, 0.25, 0.5])
    np.testing.assert_allclose(info.accuracy_part, [0.4676, 0.2662, 0.2662], rtol=2e-4)
    np.testing.assert_allclose(info.frequency_part, [0.2268, 0.2268, 0.5464], rtol=2e-4)
    for alpha, want in [(0.5, [0.3472, 0.2465, 0.4063]), (0.25, [0.2870, 0.2366, 0.4764])]:
        np.testing.assert_allclose(
            fedfa_weights([0.1, 0.2, 0.2], [1, 1, 2], alpha=alpha), want, rtol=3e-4
        )


def test_literal_formula_where_no_guard_applies():
    rng = np.random.default_rng(0)
    for _ in range(50):
        m = int(rng.integers(2, 12))
        acc = rng.uniform(0.05, 1.0, m)
        f = rng.integers(1, 30, m)
        alpha = float(rng.uniform())
        A, P = acc / acc.sum(), f / f.sum()
        ia, if_ = -np.log(A + EA), -np.log(1 - P + EF)
        want = alpha * ia / ia.sum() + (1 - alpha) * if_ / if_.sum()
        assert_close(fedfa_weights(acc, f, alpha=alpha), want)


def test_log_base_cancels_as_in_the_public_code():
    """The public code takes log2; the normalised parts do not depend on the base."""
    acc, f = np.array([0.3, 0.8, 0.55, 0.1]), np.array([4, 1, 2, 7])
    A, P = acc / acc.sum(), f / f.sum()
    ia, if_ = -np.log2(A + EA), -np.log2(1 - P + EF)
    assert_close(fedfa_weights(acc, f, alpha=0.3), 0.3 * ia / ia.sum() + 0.7 * if_ / if_.sum())


# --- weights: properties ---------------------------------------------------------------------
accuracy_vectors = hnp.arrays(
    np.float64, st.integers(1, 12), elements=st.floats(0.0, 1.0, allow_subnormal=False)
)


@st.composite
def weight_inputs(draw):
    acc = draw(accuracy_vectors)
    m = acc.size
    f = draw(hnp.arrays(np.int64, (m,), elements=st.integers(1, 10**6)))
    alpha = draw(st.floats(0.0, 1.0))
    return acc, f, alpha


@given(weight_inputs())
def test_weights_lie_on_the_simplex(args):
    acc, f, alpha = args
    p = fedfa_weights(acc, f, alpha=alpha)
    assert p.shape == acc.shape
    assert np.all(np.isfinite(p)) and np.all(p >= 0.0)
    assert abs(p.sum() - 1.0) <= 1e-12 * acc.size
    info = fedfa_information(acc, f)
    for part in (info.accuracy_part, info.frequency_part):
        assert np.all(part >= 0.0) and abs(part.sum() - 1.0) <= 1e-12 * acc.size


@given(weight_inputs(), st.randoms(use_true_random=False))
def test_weights_are_permutation_equivariant(args, rnd):
    acc, f, alpha = args
    perm = np.array(rnd.sample(range(acc.size), acc.size), dtype=np.int64)
    p = fedfa_weights(acc, f, alpha=alpha)
    # Permuting reorders the sums' terms: equal to round-off, not bitwise.
    assert_close(fedfa_weights(acc[perm], f[perm], alpha=alpha), p[perm], scale=10.0)


@given(weight_inputs())
def test_alpha_one_reads_only_accuracy_and_beta_one_only_frequency(args):
    acc, f, _ = args
    info = fedfa_information(acc, f)
    assert np.array_equal(fedfa_weights(acc, f, alpha=1.0), info.accuracy_part)
    assert np.array_equal(fedfa_weights(acc, f, alpha=0.0, beta=1.0), info.frequency_part)
    # α = 1 ignores the participations entirely; β = 1 ignores the accuracies.
    assert np.array_equal(fedfa_weights(acc, np.ones_like(f), alpha=1.0), info.accuracy_part)
    if acc.size > 1:
        assert np.array_equal(fedfa_weights(np.ones_like(acc), f, alpha=0.0), info.frequency_part)


@given(
    hnp.arrays(np.int64, st.integers(2, 10), elements=st.integers(0, 100), unique=True),
    st.integers(1, 50),
    st.floats(0.01, 1.0),
)
def test_lower_accuracy_gets_more_weight(pct, f, alpha):
    acc = pct / 100.0
    if acc.sum() == 0.0:
        return
    p = fedfa_weights(acc, np.full(acc.size, f), alpha=alpha)
    order = np.argsort(acc)
    assert np.all(np.diff(p[order]) < 0.0)  # strictly decreasing in accuracy


@given(
    hnp.arrays(np.int64, st.integers(2, 10), elements=st.integers(1, 1000), unique=True),
    st.floats(0.0, 1.0),
    st.floats(0.01, 1.0),
)
def test_more_participation_gets_more_weight(f, acc, beta):
    p = fedfa_weights(np.full(f.size, acc), f, alpha=1.0 - beta, beta=beta)
    order = np.argsort(f)
    assert np.all(np.diff(p[order]) > 0.0)


# --- weights: guards -------------------------------------------------------------------------
@pytest.mark.parametrize("acc", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("f", [1, 7])
def test_one_selected_client_gets_weight_one(acc, f):
    for alpha in (0.0, 0.5, 1.0):
        assert np.array_equal(fedfa_weights([acc], [f], alpha=alpha), [1.0])


def test_all_zero_accuracies_give_a_uniform_accuracy_part():
    info = fedfa_information([0.0, 0.0, 0.0, 0.0], [1, 2, 3, 4])
    assert np.array_equal(info.accuracy_share, np.full(4, 0.25))  # 0/0 replaced, not NaN
    assert np.array_equal(info.accuracy_part, np.full(4, 0.25))
    p = fedfa_weights([0.0] * 4, [1, 2, 3, 4], alpha=0.5)
    assert_close(p, 0.125 + 0.5 * info.frequency_part)


def test_accuracies_of_exactly_one():
    # All equal to 1: equal shares, a uniform accuracy part.
    info = fedfa_information([1.0, 1.0, 1.0], [1, 1, 2])
    assert_close(info.accuracy_part, np.full(3, 1 / 3))
    # One client at 1, the others at 0: its share is 1 and the literal −log(1 + ε_a) < 0 would
    # give it a negative weight; the information is floored at 0.
    acc = [1.0, 0.0, 0.0]
    assert -math.log(1.0 + EA) < 0.0
    info = fedfa_information(acc, [1, 1, 1])
    assert info.accuracy_information[0] == 0.0
    assert np.array_equal(fedfa_weights(acc, [1, 1, 1], alpha=1.0), [0.0, 0.5, 0.5])
    # A share within ε_a of 1 is floored as well; just below that it is not.
    acc = np.array([1.0, 1e-7, 1e-7])
    assert fedfa_information(acc, [1, 1, 1]).accuracy_information[0] == 0.0
    acc = np.array([1.0, 1e-5, 1e-5])
    assert fedfa_information(acc, [1, 1, 1]).accuracy_information[0] > 0.0


def test_tiny_participation_share_is_floored_not_negative():
    # P_0 = 1/200001 < ε_f: the literal −log(1 − P_0 + ε_f) is negative.
    f = np.array([1, 100000, 100000])
    P0 = 1 / f.sum()
    assert -math.log(1 - P0 + EF) < 0.0
    info = fedfa_information([0.5, 0.5, 0.5], f)
    assert info.frequency_information[0] == 0.0
    assert np.all(fedfa_weights([0.5, 0.5, 0.5], f, alpha=0.0) >= 0.0)
    # Where P_k > ε_f the log1p form equals the literal formula.
    P = f / f.sum()
    assert_close(info.frequency_information[1:], -np.log(1 - P[1:] + EF))


def test_eps_f_too_large_for_the_round_is_a_clear_error():
    with pytest.raises(ValueError, match="eps_f"):
        fedfa_information([0.5, 0.5, 0.5, 0.5], [1, 1, 1, 1], eps_f=0.3)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(accuracies=[0.5, 1.2], participations=[1, 1]), ValueError, "accuracies"),
        (dict(accuracies=[0.5, np.nan], participations=[1, 1]), ValueError, "accuracies"),
        (dict(accuracies=[], participations=[]), ValueError, "accuracies"),
        (dict(accuracies=[0.5, 0.2], participations=[0, 1]), ValueError, "participations"),
        (dict(accuracies=[0.5, 0.2], participations=[1.5, 1]), TypeError, "participations"),
        (dict(accuracies=[0.5, 0.2], participations=[1, 1, 1]), ValueError, "participations"),
        (dict(accuracies=[0.5, 0.2], participations=[1, 1], alpha=1.5), ValueError, "alpha"),
        (
            dict(accuracies=[0.5, 0.2], participations=[1, 1], alpha=0.5, beta=0.4),
            ValueError,
            "alpha \\+ beta",
        ),
        (dict(accuracies=[0.5, 0.2], participations=[1, 1], eps_a=0.0), ValueError, "eps_a"),
        (dict(accuracies=[0.5, 0.2], participations=[1, 1], eps_f=0.5), ValueError, "eps_f"),
        (dict(accuracies=[0.5, 0.2], participations=[1, 1], alpha="a"), TypeError, "alpha"),
    ],
)
def test_weights_reject_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fedfa_weights(**kwargs)


@pytest.mark.parametrize("name", ["eps_a", "eps_f"])
@pytest.mark.parametrize(
    ("value", "match"), [(0.0, r"must be > 0\.0; got 0\.0$"), (0.5, r"must be < 0\.5; got 0\.5$")]
)
def test_eps_bounds_are_open_at_0_and_one_half(name, value, match):
    """ε_a and ε_f lie in the open interval (0, 1/2): both ends are refused, by the weights
    and by the rule, with the argument's name."""
    with pytest.raises(ValueError, match=f"^{name} {match}"):
        fedfa_information([0.5, 0.2], [1, 1], **{name: value})
    with pytest.raises(ValueError, match=f"^{name} {match}"):
        fedfa(**{name: value})


# --- server momentum -------------------------------------------------------------------------
def test_server_step_by_hand():
    theta, avg, mom = np.array([1.0, -2.0]), np.array([0.5, -1.0]), np.array([0.2, 0.0])
    # paper: Δ = θ − θ̄ = (0.5, −1); m = 0.5 (0.2, 0) + 0.5 Δ = (0.35, −0.5); θ' = θ̄ − 2 m.
    res = fedfa_server_step(theta, avg, mom, gamma=0.5, eta_s=2.0)
    assert_close(res.pseudo_gradient, [0.5, -1.0])
    assert_close(res.momentum, [0.35, -0.5])
    assert_close(res.params, [-0.2, 0.0])
    # flgo: Δ = θ̄ − θ = (−0.5, 1); m = (−0.15, 0.5); θ' = θ̄ − 2 m = (0.8, −2).
    res = fedfa_server_step(theta, avg, mom, gamma=0.5, eta_s=2.0, variant="flgo")
    assert_close(res.momentum, [-0.15, 0.5])
    assert_close(res.params, [0.8, -2.0])
    # Not a correction round: m is updated all the same, θ' = θ̄.
    res = fedfa_server_step(theta, avg, mom, gamma=0.5, eta_s=2.0, apply=False)
    assert_close(res.momentum, [0.35, -0.5])
    assert np.array_equal(res.params, avg) and res.params is not avg


@given(
    update_matrices(bound=1.0),
    st.floats(0.0, 1.0),
    st.booleans(),
    st.sampled_from(["paper", "flgo"]),
)
def test_no_server_momentum_reduces_to_the_average(U, gamma, apply, variant):
    theta, avg, mom = U[0], U[-1], U[0] - U[-1]
    # η_s = 0: θ̄ whatever m and γ.
    res = fedfa_server_step(theta, avg, mom, gamma=gamma, eta_s=0.0, apply=apply, variant=variant)
    assert np.array_equal(res.params, avg)
    # γ = 1 from m = 0: m stays 0, so θ̄ whatever η_s.
    res = fedfa_server_step(theta, avg, np.zeros_like(avg), gamma=1.0, eta_s=3.0, variant=variant)
    assert np.array_equal(res.momentum, np.zeros_like(avg))
    assert np.array_equal(res.params, avg)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(gamma=1.5, eta_s=1.0), ValueError, "gamma"),
        (dict(gamma=0.5, eta_s=-1.0), ValueError, "eta_s"),
        (dict(gamma=0.5, eta_s=1.0, variant="x"), ValueError, "variant"),
        (dict(gamma=0.5, eta_s=1.0, apply=1), TypeError, "apply"),
    ],
)
def test_server_step_rejects_bad_input(kwargs, exc, match):
    z = np.zeros(3)
    with pytest.raises(exc, match=match):
        fedfa_server_step(z, z, z, **kwargs)
    with pytest.raises(ValueError, match="average"):
        fedfa_server_step(z, np.zeros(2), z, gamma=0.5, eta_s=1.0)
    with pytest.raises(ValueError, match="momentum"):
        fedfa_server_step(z, z, np.full(3, np.nan), gamma=0.5, eta_s=1.0)


def test_server_step_near_the_float64_limit_is_computed_on_scaled_inputs():
    """θ^t − θ̄ and η_s m can overflow where the result does not: here η_s m = 1.89e308 while
    θ̄ − η_s m = −0.89e308. The step is then taken on the inputs divided by 2^8 and scaled back
    (exactly here), without a floating-point warning; float32 stays float32."""
    import warnings

    for dtype, big in ((np.float64, 1e308), (np.float32, 2e38)):
        theta, avg = np.array([1.7 * big], dtype), np.array([big], dtype)
        mom = np.zeros(1, dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            res = fedfa_server_step(theta, avg, mom, gamma=0.0, eta_s=2.7)
        delta = theta - avg
        assert res.params.dtype == res.momentum.dtype == res.pseudo_gradient.dtype == dtype
        np.testing.assert_array_equal(res.pseudo_gradient, delta)
        np.testing.assert_array_equal(res.momentum, delta)
        small = np.ldexp(avg, -8) - dtype(2.7) * np.ldexp(delta, -8)
        np.testing.assert_array_equal(res.params, np.ldexp(small, 8))
        assert np.all(np.isfinite(res.params))


def test_server_step_overflow_is_a_value_error_not_a_warning():
    """θ^t − θ̄ beyond float64 (so Δ_t itself is not representable): a ValueError that says
    so, and no floating-point warning on the way (with η_s = 0, 0·∞ would be one)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(
            ValueError,
            match=r"^the server step overflows float64: params, average and momentum near "
            r"1\.8e308, or eta_s too large$",
        ):
            fedfa_server_step([1.7e308], [-1.7e308], [0.0], gamma=0.5, eta_s=0.0)


def test_server_step_keeps_subnormal_inputs_exact():
    """Where nothing overflows the step is the plain one: a subnormal Δ_t is kept to the bit
    (dividing by 2^8 first would lose it)."""
    theta, avg = np.array([3 * 5e-324, 1e-320]), np.zeros(2)
    res = fedfa_server_step(theta, avg, np.zeros(2), gamma=0.0, eta_s=0.0)
    np.testing.assert_array_equal(res.pseudo_gradient, theta)
    np.testing.assert_array_equal(res.momentum, theta)


@pytest.mark.parametrize(
    "dtypes",
    [
        (np.float32, np.float32, np.float32),
        (np.float64, np.float32, np.float32),
        (np.float32, np.float64, np.float32),
        (np.float32, np.float32, np.float64),
    ],
)
@pytest.mark.parametrize("apply", [True, False])
def test_server_step_returns_the_promoted_dtype_of_its_inputs(dtypes, apply):
    theta, avg, mom = (np.array([1.0, -2.0, 0.1], dtype=t) for t in dtypes)
    res = fedfa_server_step(theta, 0.5 * avg, 0.3 * mom, gamma=0.3, eta_s=0.7, apply=apply)
    want = np.result_type(*dtypes)
    assert res.params.dtype == res.momentum.dtype == res.pseudo_gradient.dtype == want


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(gamma=-0.5, eta_s=1.0), r"^gamma must be >= 0\.0; got -0\.5$"),
        (dict(gamma=1.5, eta_s=1.0), r"^gamma must be <= 1\.0; got 1\.5$"),
        (dict(gamma=0.5, eta_s=-1.0), r"^eta_s must be >= 0\.0; got -1\.0$"),
        (dict(gamma=0.5, eta_s=1.0, variant="x"), r"^variant must be one of 'paper', 'flgo'"),
        (dict(gamma=0.5, eta_s=1.0, apply=1), r"^apply must be a bool; got int$"),
        (dict(params=np.zeros((1, 3))), r"^params must be 1-dimensional"),
        (dict(average=np.zeros(2)), r"^average must have shape \(3,\)"),
        (dict(momentum=np.zeros(2)), r"^momentum must have shape \(3,\)"),
    ],
)
def test_server_step_errors_name_the_argument_and_the_bound(kwargs, match):
    z = np.zeros(3)
    args = {"params": z, "average": z, "momentum": z, "gamma": 0.5, "eta_s": 1.0, **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        fedfa_server_step(args.pop("params"), args.pop("average"), args.pop("momentum"), **args)


def _quadratic_round(theta, c):
    """Two identical clients on F(θ) = θ²/2 each take one gradient step of size c from θ:
    θ_k = (1 − c) θ, so δ_k = c θ."""
    return make_reports(
        np.array([[c * theta[0]], [c * theta[0]]]),
        [5, 5],
        accuracies=[0.5, 0.5],
        participations=[1, 1],
    )


@pytest.mark.parametrize(
    "gamma, eta_s, c, paper_faster",
    [(0.5, 1.0, 0.1, True), (0.0, 1.0, 0.2, True), (0.5, 0.5, 0.05, True), (0.9, 0.5, 0.3, False)],
)
def test_flgo_sign_damps_where_the_paper_accelerates_on_a_1d_quadratic(
    gamma, eta_s, c, paper_faster
):
    """On θ²/2 the average is θ̄ = (1 − c) θ. Round 1 from θ⁰ = 1, m⁰ = 0:
    paper θ¹ = (1 − c − η_s (1 − γ) c) θ⁰, closer to the minimum 0 than θ̄ (acceleration);
    flgo  θ¹ = (1 − c + η_s (1 − γ) c) θ⁰, farther from it (damping).

    Later rounds follow the linear recursion (θ, m) ← M (θ, m), checked against an independent
    loop. Over many rounds the rate is M's spectral radius ρ against plain averaging's 1 − c: the
    flgo sign is never faster (with η_s = 1, γ = 0 it cancels the step, ρ = 1), and the paper's
    sign is faster except where heavy momentum meets an already strong contraction (γ = 0.9,
    c = 0.3: complex eigenvalues of modulus 0.79 > 0.7), where it ends farther from the minimum."""
    theta0 = np.array([1.0])
    rounds = 12
    out = {}
    for v in ("paper", "flgo"):
        rule = fedfa(gamma=gamma, eta_s=eta_s, variant=v)
        theta, state = theta0, rule.init(theta0, 2)
        th, mm = 1.0, 0.0  # the recursion by hand
        s = 1.0 if v == "paper" else -1.0
        for t in range(rounds):
            agg = rule.step(theta, _quadratic_round(theta, c), state)
            avg = (1 - c) * th
            mm = gamma * mm + (1 - gamma) * s * (th - avg)
            th = avg - eta_s * mm
            assert_close(agg.params, [th])
            if t == 0:
                assert_close(agg.params, [1 - c - s * eta_s * (1 - gamma) * c])
                if v == "paper":
                    assert agg.params[0] < avg  # moved past θ̄, toward 0
                else:
                    assert agg.params[0] > avg  # held back toward θ⁰
            theta, state = agg.params, agg.state
        out[v] = abs(theta[0])
        M = np.array(
            [[1 - c - s * eta_s * (1 - gamma) * c, -eta_s * gamma], [s * (1 - gamma) * c, gamma]]
        )
        out["rho_" + v] = max(abs(np.linalg.eigvals(M)))
    plain = fedfa(eta_s=0.0)
    theta, state = theta0, plain.init(theta0, 2)
    for _ in range(rounds):
        agg = plain.step(theta, _quadratic_round(theta, c), state)
        theta, state = agg.params, agg.state
    assert_close(theta, [(1 - c) ** rounds])
    assert out["rho_flgo"] >= 1 - c and out["flgo"] > abs(theta[0])
    assert (out["rho_paper"] < 1 - c) == paper_faster
    assert (out["paper"] < abs(theta[0])) == paper_faster


# --- the rule --------------------------------------------------------------------------------
def _random_round(rng, m, d, K):
    ids = rng.choice(K, m, replace=False)
    return make_reports(
        rng.normal(size=(m, d)),
        rng.integers(5, 50, m),
        accuracies=rng.uniform(0, 1, m),
        participations=rng.integers(1, 9, m),
        client_ids=ids,
        num_clients=K,
    )


@pytest.mark.parametrize("tau", [1, 3])
@pytest.mark.parametrize("variant", ["paper", "flgo"])
def test_rule_composes_the_weights_and_the_server_step(tau, variant):
    if variant == "flgo" and tau != 1:
        return
    rng = np.random.default_rng(tau)
    d, K = 7, 9
    rule = fedfa(alpha=0.3, gamma=0.7, eta_s=0.8, tau=tau, variant=variant)
    theta = rng.normal(size=d)
    state = rule.init(theta, K)
    ref_theta, ref_m = theta.copy(), np.zeros(d)
    sign = 1.0 if variant == "paper" else -1.0
    for t in range(1, 8):
        rep = _random_round(rng, 4, d, K)
        agg = rule.step(theta, rep, state)
        p = fedfa_weights(rep.accuracies, rep.participations, alpha=0.3)
        avg = ref_theta - p @ rep.deltas
        ref_m = 0.7 * ref_m + 0.3 * sign * (ref_theta - avg)
        ref_theta = avg - 0.8 * ref_m if t % tau == 0 else avg
        assert_close(agg.params, ref_theta, scale=10.0)  # a few rounds of accumulated round-off
        assert_close(agg.state.momentum, ref_m, scale=10.0)
        assert agg.state.rounds == t
        assert agg.info["server_correction"] == (t % tau == 0)
        assert_close(agg.info["weights"], p)
        theta, state = agg.params, agg.state


def test_tau_beyond_the_run_never_corrects():
    rng = np.random.default_rng(5)
    d, K = 6, 8
    late, off = fedfa(tau=9, eta_s=2.0), fedfa(eta_s=0.0)
    a = b = rng.normal(size=d)
    sa, sb = late.init(a, K), off.init(b, K)
    for _ in range(8):
        rep = _random_round(rng, 3, d, K)
        ga, gb = late.step(a, rep, sa), off.step(b, rep, sb)
        assert not ga.info["server_correction"]
        a, sa, b, sb = ga.params, ga.state, gb.params, gb.state
        assert np.array_equal(a, b)
    assert np.any(sa.momentum != 0.0)  # m accumulated all the same
    assert late.step(a, _random_round(rng, 3, d, K), sa).info["server_correction"]


def test_gamma_zero_and_eta_zero_is_information_weighted_averaging():
    rng = np.random.default_rng(2)
    d, K = 5, 6
    rule = fedfa(gamma=0.0, eta_s=0.0, alpha=0.7)
    theta = rng.normal(size=d)
    state = rule.init(theta, K)
    for _ in range(4):
        rep = _random_round(rng, 3, d, K)
        agg = rule.step(theta, rep, state)
        p = fedfa_weights(rep.accuracies, rep.participations, alpha=0.7)
        assert_close(agg.params, theta - p @ rep.deltas)
        theta, state = agg.params, agg.state


def test_rule_is_pure_and_keeps_float32():
    rng = np.random.default_rng(3)
    theta = rng.normal(size=4).astype(np.float32)
    rule = fedfa()
    state = rule.init(theta, 3)
    assert isinstance(state, FedFaState) and state.momentum.dtype == np.float32
    rep = make_reports(
        rng.normal(size=(3, 4)).astype(np.float32),
        [3, 4, 5],
        accuracies=[0.2, 0.5, 0.9],
        participations=[1, 2, 3],
    )
    m0 = state.momentum.copy()
    agg = rule.step(theta, rep, state)
    assert agg.params.dtype == np.float32 and agg.state.momentum.dtype == np.float32
    assert np.array_equal(state.momentum, m0) and agg.state.momentum is not state.momentum


def test_rule_needs_accuracies_and_participations():
    rule = fedfa()
    rep = make_reports(np.ones((2, 3)), [1, 2], participations=[1, 1])
    with pytest.raises(ValueError, match="accuracies"):
        rule.step(np.zeros(3), rep, rule.init(np.zeros(3), 2))
    rep = make_reports(np.ones((2, 3)), [1, 2], accuracies=[0.1, 0.2])
    with pytest.raises(ValueError, match="participations"):
        rule.step(np.zeros(3), rep, rule.init(np.zeros(3), 2))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(alpha=0.5, beta=0.6), ValueError, "alpha \\+ beta"),
        (dict(gamma=-0.1), ValueError, "gamma"),
        (dict(eta_s=float("inf")), ValueError, "eta_s"),
        (dict(tau=0), ValueError, "tau"),
        (dict(tau=2.0), TypeError, "tau"),
        (dict(variant="flgo", tau=3), ValueError, "tau"),
        (dict(client_momentum=1.0), ValueError, "client_momentum"),
        (dict(accuracy_source="test"), ValueError, "accuracy_source"),
        (dict(variant="fedavgm"), ValueError, "variant"),
        (dict(backend="gpu"), ValueError, "backend"),
        (dict(eps_a=0.7), ValueError, "eps_a"),
    ],
)
def test_rule_rejects_bad_hyperparameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fedfa(**kwargs)


def test_rule_prescribes_its_client_momentum_and_accuracy_source():
    rule = make_rule("fedfa", client_momentum=0.4, accuracy_source="local")
    assert rule.local.momentum == 0.4 and rule.local.accuracy_source == "local"
    assert rule.hyperparams["beta"] == 0.5 and rule.hyperparams["variant"] == "paper"


def test_numba_backend_equals_numpy():
    rng = np.random.default_rng(8)
    d, K = 300, 10
    a, b = fedfa(backend="numpy"), fedfa(backend="numba")
    x = y = rng.normal(size=d)
    sx, sy = a.init(x, K), b.init(y, K)
    for _ in range(3):
        rep = _random_round(rng, 5, d, K)
        gx, gy = a.step(x, rep, sx), b.step(y, rep, sy)
        assert_close(gy.params, gx.params, scale=10.0)  # sums in another order
        x, sx, y, sy = gx.params, gx.state, gy.params, gy.state


# --- in the simulator --------------------------------------------------------------------------
def test_simulated_fedfa_equals_the_spine_by_hand():
    """Three rounds of simulate(fedfa) = sampling, momentum SGD with the rule's μ, the
    participation counts, the weights and the server step, composed here by hand."""
    data = federated_data(4)
    model = LogisticRegression(data.n_features, data.n_classes)
    rule = fedfa(alpha=0.6, gamma=0.5, eta_s=0.7, client_momentum=0.5)
    kw = dict(epochs=2, batch_size=5, lr=0.05)
    h = simulate(rule, model, data, rounds=3, clients_per_round=2, seed=3, parallel=False, **kw)
    assert h.config["momentum"] == 0.5
    theta = model.init_params(3)
    mom = np.zeros_like(theta)
    counts = np.zeros(data.num_clients, dtype=np.int64)
    for t in range(3):
        S = sample_clients(data.num_clients, 2, np.random.default_rng([3, 0, t]))
        counts[S] += 1
        local = train_clients(
            model, theta, data, S, momentum=0.5, seed=3, round_index=t, parallel=False, **kw
        )
        p = fedfa_weights(local.accuracies, counts[S], alpha=0.6)
        assert_close(h.weights[t], p)
        res = fedfa_server_step(theta, theta - p @ local.deltas, mom, gamma=0.5, eta_s=0.7)
        theta, mom = res.params, res.momentum
    assert_close(h.final_params, theta)


def test_fedfa_runs_from_the_registry_in_the_simulator():
    data = federated_data(1)
    model = LogisticRegression(data.n_features, data.n_classes)
    h = simulate("fedfa", model, data, rounds=6, clients_per_round=3, lr=0.05, parallel=False)
    assert h.status == "completed" and h.config["local"]["momentum"] == 0.9
    w = h.weights
    assert np.all(w >= 0.0) and np.allclose(w.sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="contradicts"):
        simulate("fedfa", model, data, rounds=1, clients_per_round=3, momentum=0.0)


def test_flgo_eta_defaults_to_the_clients_learning_rate():
    """The public code steps by the client learning rate; with η_s = 1 its sign would cancel
    each round's progress once m settles (θ^{t+1} → θ^t), so the flgo default follows it."""
    rng = np.random.default_rng(4)
    d, K = 5, 6
    default, explicit = fedfa(variant="flgo"), fedfa(variant="flgo", eta_s=0.03)
    assert default.hyperparams["eta_s"] is None and fedfa().hyperparams["eta_s"] == 1.0
    theta = rng.normal(size=d)
    rep = _random_round(rng, 3, d, K)._replace(lr=0.03)
    a = default.step(theta, rep, default.init(theta, K))
    b = explicit.step(theta, rep, explicit.init(theta, K))
    assert np.array_equal(a.params, b.params)
    with pytest.raises(ValueError, match="reports.lr"):
        default.step(theta, rep._replace(lr=None), default.init(theta, K))


def test_rule_defaults_and_hyperparameters():
    """The documented defaults (α = β = 0.5, γ = 0.5, η_s = 1 for the paper's sign, τ = 1,
    μ = 0.9, the paper's ε, accuracies of θ^t, NumPy), each reported under its own name."""
    rule = fedfa()
    assert rule.name == "fedfa"
    assert dict(rule.hyperparams) == {
        "alpha": 0.5,
        "beta": 0.5,
        "gamma": 0.5,
        "eta_s": 1.0,
        "tau": 1,
        "client_momentum": 0.9,
        "eps_a": 1e-6,
        "eps_f": 1e-5,
        "accuracy_source": "global",
        "variant": "paper",
        "backend": "numpy",
    }
    kw = dict(
        alpha=0.25,
        beta=0.75,
        gamma=1.0,
        eta_s=0.0,
        tau=3,
        client_momentum=0.0,
        eps_a=0.01,
        eps_f=0.02,
        accuracy_source="local",
        variant="paper",
        backend="numba",
    )
    rule = fedfa(**kw)
    assert dict(rule.hyperparams) == kw
    assert rule.local.momentum == 0.0 and rule.local.accuracy_source == "local"
    state = rule.init(np.zeros(3, dtype=np.float32), 1)  # a single client is enough
    assert state.rounds == 0 and state.momentum.dtype == np.float32
    np.testing.assert_array_equal(state.momentum, np.zeros(3))


def test_rule_init_reads_only_the_shape_of_params():
    state = fedfa().init(np.full(3, np.nan), 2)
    np.testing.assert_array_equal(state.momentum, np.zeros(3))


@pytest.mark.parametrize(
    "kwargs",
    [{"eps_a": 0.3}, {"eps_f": 0.2}],
)
def test_rule_weights_use_its_eps(kwargs):
    rng = np.random.default_rng(6)
    rep = _random_round(rng, 4, 3, 6)
    rule = fedfa(**kwargs)
    agg = rule.step(np.zeros(3), rep, rule.init(np.zeros(3), 6))
    want = fedfa_weights(rep.accuracies, rep.participations, **kwargs)
    np.testing.assert_array_equal(agg.info["weights"], want)
    assert not np.array_equal(want, fedfa_weights(rep.accuracies, rep.participations))
    info = fedfa_information(rep.accuracies, rep.participations, **kwargs)
    assert set(agg.info) == {"weights", "accuracy_part", "frequency_part", "server_correction"}
    np.testing.assert_array_equal(agg.info["accuracy_part"], info.accuracy_part)
    np.testing.assert_array_equal(agg.info["frequency_part"], info.frequency_part)


def test_rule_average_runs_on_its_backend():
    """backend="numba" averages with the Numba kernel: bit for bit its weighted update (which
    sums in another order than NumPy's on this round)."""
    from fairagg.rules.fedavg import apply_weighted_update

    rng = np.random.default_rng(8)
    rep = _random_round(rng, 5, 300, 10)
    theta = rng.normal(size=300)
    rule = fedfa(backend="numba", eta_s=0.0)
    agg = rule.step(theta, rep, rule.init(theta, 10))
    p = fedfa_weights(rep.accuracies, rep.participations)
    want = apply_weighted_update(theta, rep.deltas, p, backend="numba")
    np.testing.assert_array_equal(agg.params, want)
    assert not np.array_equal(want, apply_weighted_update(theta, rep.deltas, p))


def test_rule_checks_reports_before_the_values_of_params():
    rule = fedfa()
    rep = make_reports(np.ones((2, 3)), [1, 2], participations=[1, 1])
    with pytest.raises(ValueError, match=r"this rule needs reports\.accuracies"):
        rule.step(np.full(3, np.nan), rep, rule.init(np.zeros(3), 2))


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: fedfa(gamma=1.5), ValueError, r"^gamma must be <= 1\.0; got 1\.5$"),
        (lambda: fedfa(gamma=-0.5), ValueError, r"^gamma must be >= 0\.0; got -0\.5$"),
        (lambda: fedfa(eta_s=-1.0), ValueError, r"^eta_s must be >= 0\.0; got -1\.0$"),
        (lambda: fedfa(tau=0), ValueError, r"^tau must be >= 1; got 0$"),
        (
            lambda: fedfa(client_momentum=-0.1),
            ValueError,
            r"^client_momentum must be >= 0\.0; got -0\.1$",
        ),
        (lambda: fedfa(accuracy_source="x"), ValueError, r"^accuracy_source must be one of"),
        (lambda: fedfa(variant="x"), ValueError, r"^variant must be one of 'paper', 'flgo'"),
        (lambda: fedfa().init(np.zeros((1, 3)), 2), ValueError, r"^params must be 1-dim"),
        (lambda: fedfa().init(np.zeros(3), 0), ValueError, r"^num_clients must be >= 1; got 0$"),
        (
            lambda: fedfa().step(np.zeros(3), _random_round(np.random.default_rng(0), 2, 3, 4), ()),
            TypeError,
            r"^state must be the FedFaState that fedfa's init returns",
        ),
        (
            lambda: fedfa().step(
                np.zeros((1, 3)),
                _random_round(np.random.default_rng(0), 2, 3, 4),
                fedfa().init(np.zeros(3), 4),
            ),
            ValueError,
            r"^params must be 1-dim",
        ),
        (
            lambda: fedfa(variant="flgo").step(
                np.zeros(3),
                _random_round(np.random.default_rng(0), 2, 3, 4),
                fedfa().init(np.zeros(3), 4),
            ),
            ValueError,
            r"^variant='flgo' takes eta_s from reports\.lr \(the clients' learning rate\), "
            r"which is None: pass eta_s$",
        ),
    ],
)
def test_rule_errors_name_the_argument_and_the_bound(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ---------------------------------------------------------------- found by mutation testing
def _message(fn) -> str:
    with pytest.raises(ValueError) as info:
        fn()
    return str(info.value)


def test_information_refuses_bad_input_with_exact_messages():
    assert _message(lambda: fedfa_information([[0.5]], [1])) == (
        "accuracies must be 1-dimensional; got shape (1, 1)"
    )
    assert _message(lambda: fedfa_information([], [])) == "accuracies must hold at least one client"
    assert _message(lambda: fedfa_information([-0.1, 0.5], [1, 1])) == (
        "accuracies must lie in [0, 1]; got -0.1..0.5"
    )
    assert _message(lambda: fedfa_information([0.1, 0.5], [0, 1])) == (
        "participations must be >= 1; got minimum 0"
    )
    assert _message(lambda: fedfa_information([0.2, 0.3, 0.4], [1, 1, 1], eps_f=0.4)) == (
        "eps_f = 0.4 is at least every participation share (largest 0.333): no client has "
        "positive frequency information; lower eps_f"
    )


def test_alpha_and_beta_are_checked_with_exact_messages():
    acc, part = [0.5, 0.5], [1, 1]
    assert _message(lambda: fedfa_weights(acc, part, alpha=-0.5)) == (
        "alpha must be >= 0.0; got -0.5"
    )
    assert _message(lambda: fedfa_weights(acc, part, alpha=0.5, beta=1.5)) == (
        "beta must be <= 1.0; got 1.5"
    )
    assert _message(lambda: fedfa_weights(acc, part, alpha=0.5, beta=-0.5)) == (
        "beta must be >= 0.0; got -0.5"
    )
    assert _message(lambda: fedfa_weights(acc, part, alpha=0.3, beta=0.3)) == (
        "alpha + beta must equal 1 (eq. 15); got 0.3 + 0.3 = 0.6"
    )


def test_information_takes_integer_accuracies_and_computes_in_float64():
    info = fedfa_information(np.array([0, 1]), [1, 2])  # an integer array: 0 and 100 %
    np.testing.assert_array_equal(info.accuracy_share, [0.0, 1.0])
    np.testing.assert_array_equal(info.accuracy_part, [1.0, 0.0])
    info32 = fedfa_information(np.array([0.2, 0.7], np.float32), [1, 2])
    for name in info32._fields:
        assert getattr(info32, name).dtype == np.float64, name


def test_information_of_one_client_fills_every_field():
    info = fedfa_information([0.4], [3])
    np.testing.assert_array_equal(info.accuracy_share, [1.0])
    np.testing.assert_array_equal(info.frequency_share, [1.0])
    np.testing.assert_array_equal(info.accuracy_information, [0.0])  # −log(1 + ε_a) floored at 0
    np.testing.assert_array_equal(info.frequency_information, [-np.log1p(1e-5 - 1.0)])
    np.testing.assert_array_equal(info.accuracy_part, [1.0])
    np.testing.assert_array_equal(info.frequency_part, [1.0])
