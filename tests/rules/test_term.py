"""Tests of fairagg.rules.term: TERM's tilted weights and the official running-normaliser
variant (SPEC §6)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fairagg import fairavg, fedavg, fedavg_weights, make_reports
from fairagg.rules.term import TERMState, term, term_official_weights, term_weights
from tests.strategies import num_samples, update_matrices
from tests.tolerances import FINITE_DIFFERENCE, assert_close


@st.composite
def term_rounds(draw):
    D = draw(update_matrices(bound=1.0))
    m, d = D.shape
    theta = draw(hnp.arrays(np.float64, (d,), elements=st.floats(-1, 1)))
    F = draw(hnp.arrays(np.float64, (m,), elements=st.floats(0.0, 5.0)))
    return theta, make_reports(D, draw(num_samples(m)), losses=F)


def tilted_objective(F, p, t):
    """(1/t) log Σ p_k exp(t F_k), TERM's client-level objective."""
    z = t * F + np.log(p)
    return (z.max() + math.log(np.exp(z - z.max()).sum())) / t


# --------------------------------------------------------------------------------------------
# paper variant
# --------------------------------------------------------------------------------------------


@given(r=term_rounds())
def test_tilt_zero_is_fedavg_and_fairavg(r):
    theta, reports = r
    for weighting, base in (("samples", fedavg()), ("uniform", fairavg())):
        got = term(tilt=0.0, weighting=weighting).step(theta, reports, TERMState())
        want = base.step(theta, reports, ())
        assert_close(got.info["weights"], want.info["weights"])
        assert_close(got.params, want.params)


def test_term_weights_hand():
    # F = [0, log 2], n = [1, 1], t = 1: ω ∝ [1, 2] → [1/3, 2/3]. With n = [3, 1]: ∝ [3, 2].
    assert_close(term_weights([0.0, math.log(2.0)], 1.0, [1, 1]), [1 / 3, 2 / 3])
    assert_close(term_weights([0.0, math.log(2.0)], 1.0, [3, 1]), [3 / 5, 2 / 5])
    # t = −1 reverses the tilt: ∝ [1, 1/2].
    assert_close(term_weights([0.0, math.log(2.0)], -1.0), [2 / 3, 1 / 3])


@given(
    F=hnp.arrays(np.float64, st.integers(1, 6), elements=st.floats(0.0, 4.0)),
    t=st.floats(-5.0, 5.0).filter(lambda v: abs(v) > 1e-3),
    data=st.data(),
)
def test_term_weights_are_the_gradient_of_the_tilted_objective(F, t, data):
    """ω_k = ∂/∂F_k (1/t) log Σ p_j e^{t F_j}: the weights make θ − Σ ω_k δ_k a step on TERM's
    objective (chain rule through F_k(θ))."""
    n = data.draw(num_samples(F.size))
    p = fedavg_weights(n)
    w = term_weights(F, t, n)
    h = 1e-6
    fd = np.array(
        [
            (tilted_objective(F + h * e, p, t) - tilted_objective(F - h * e, p, t)) / (2 * h)
            for e in np.eye(F.size)
        ]
    )
    np.testing.assert_allclose(w, fd, rtol=FINITE_DIFFERENCE[0], atol=FINITE_DIFFERENCE[1])


def test_large_tilt_follows_the_worst_client_without_overflow():
    F = np.array([1.0, 3.0, 2.999])
    w = term_weights(F, 1e4)
    assert np.all(np.isfinite(w))
    assert w[1] > 1 - 1e-4 and math.isclose(w.sum(), 1.0, rel_tol=1e-12)
    w = term_weights(F, -1e4)  # and the best client for a large negative tilt
    assert w[0] == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize(
    ("losses", "tilt", "want"),
    [
        ([1.0, 2.0], 1e308, [0.0, 1.0]),  # the docstring's example
        ([1.0, 3.0], 1e308, [0.0, 1.0]),  # t (F_k − F*) below the float range: −inf, weight 0
        ([1.0, 3.0], -1e308, [1.0, 0.0]),  # F* the smallest loss for t < 0
    ],
)
def test_term_weights_at_tilts_near_the_float_range_are_exact_limits_without_warnings(
    losses, tilt, want
):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(term_weights(losses, tilt), want)


def test_term_weights_of_equal_large_losses_follow_the_sample_sizes():
    # F = [1e17, 1e17, 0], t = 1, n = [1, 3, 1]: ω ∝ [e^{1e17}, 3 e^{1e17}, 1] → [1/4, 3/4, 0].
    # Shifting by the largest loss keeps log p_k exact next to t (F_k − F*) = 0.
    assert_close(term_weights([1e17, 1e17, 0.0], 1.0, [1, 3, 1]), [0.25, 0.75, 0.0])


def test_term_weights_keep_tiny_weights_that_do_not_underflow():
    # n = [1, 10^18], F = [720, 0], t = 1: ω_2 = 1 / (1 + e^720 / 10^18) ≈ exp(log 10^18 − 720),
    # about 1e-295, a normal float64: it must not be flushed to 0.
    N = 10**18
    w = term_weights([720.0, 0.0], 1.0, [1, N])
    log_w1 = -math.log1p(N * math.exp(-720.0))
    # Compared in logs: the closed-form tolerance is then relative on the tiny weight too.
    assert_close(np.log(w), [log_w1, math.log(N) - 720.0 + log_w1])


# --------------------------------------------------------------------------------------------
# official variant
# --------------------------------------------------------------------------------------------


def official_by_hand(losses_per_round, t, m):
    """The official loop: estimates = 0; each round estimates = ½ estimates + ½ mean(e),
    ω = e / (estimates · m), θ ← mean_k(θ − ω_k δ_k)."""
    estimates = 0.0
    out = []
    for L in losses_per_round:
        e = np.exp(t * (np.asarray(L) - max(L)))
        estimates = estimates * 0.5 + e.mean() * 0.5
        omega = e / (estimates * m)
        out.append((omega / m, estimates))
    return out


def test_official_variant_follows_the_public_loop_over_rounds():
    rng = np.random.default_rng(0)
    m, d, t = 3, 4, 2.0
    losses = [rng.uniform(0.2, 3.0, m) for _ in range(4)]
    rule = term(tilt=t, variant="official")
    theta = rng.normal(size=d)
    state = rule.init(theta, 10)
    for (w_ref, S_ref), L in zip(official_by_hand(losses, t, m), losses, strict=True):
        D = rng.normal(size=(m, d))
        agg = rule.step(theta, make_reports(D, [5, 6, 7], losses=L), state)
        assert_close(agg.info["weights"], w_ref)
        assert_close(agg.info["normaliser"], S_ref)
        # θ^{t+1} = mean_k(θ − ω_k δ_k): the public code's average of the scaled client models.
        assert_close(agg.params, np.mean(theta - (w_ref * m)[:, None] * D, axis=0))
        theta, state = agg.params, agg.state


def test_official_first_round_weights_sum_to_two_over_m_at_tilt_zero():
    # S = ½·0 + ½·1, ω_k = 1/(m S) = 2/m (Σ ω = 2), and the weight on δ_k is ω_k/m.
    w, S = term_official_weights([1.0, 2.0, 3.0], 0.0, 0.0)
    assert S == 0.5
    assert_close(w.sum(), 2.0 / 3.0)


def test_official_weights_settle_to_one_over_m_in_total():
    """With constant losses S → mean e, so Σ ω_k → 1 and the step is 1/m of FairAvg's."""
    S = 0.0
    for _ in range(60):
        w, S = term_official_weights([0.5, 1.0, 2.0, 0.7], 1.5, S)
    assert_close(w.sum(), 1.0 / 4.0)


def test_official_overflow_is_reported():
    with pytest.raises(ValueError, match="tilt"):
        term_official_weights([0.0, 1000.0], -10.0, 0.0)


def test_paper_variant_state_is_unchanged_and_rule_is_pure():
    rule = term(tilt=1.0)
    reports = make_reports(np.ones((2, 3)), [1, 2], losses=[0.1, 0.2])
    s0 = rule.init(np.zeros(3), 2)
    agg = rule.step(np.zeros(3), reports, s0)
    assert agg.state == s0 == TERMState(0.0)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: term(tilt=float("nan")), ValueError, "tilt"),
        (lambda: term(tilt="1"), TypeError, "tilt"),
        (lambda: term(weighting="n_k"), ValueError, "weighting"),
        (lambda: term(variant="fed"), ValueError, "variant"),
        (lambda: term(backend="gpu"), ValueError, "backend"),
        (lambda: term_weights([1.0, -0.5], 1.0), ValueError, "losses"),
        (lambda: term_weights([1.0, float("nan")], 1.0), ValueError, "losses"),
        (lambda: term_weights([1.0, 2.0], 1.0, [1, 2, 3]), ValueError, "num_samples"),
        (lambda: term_official_weights([1.0], 1.0, -1.0), ValueError, "normaliser"),
        (
            lambda: term().step(np.zeros(2), make_reports(np.ones((2, 2)), [1, 2]), TERMState()),
            ValueError,
            "losses",
        ),
    ],
)
def test_bad_input_raises_naming_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# --------------------------------------------------------------------------------------------
# messages, dtypes, defaults and the device path (from mutation testing)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: term_weights([1.0], "1"), TypeError, r"^tilt must be a real number"),
        (lambda: term_weights([1.0], np.inf), ValueError, r"^tilt must be finite; got inf"),
        (lambda: term_official_weights([1.0], np.nan, 0.0), ValueError, r"^tilt must be finite"),
        (lambda: term_official_weights([1.0], 1.0, -1.0), ValueError,
         r"^normaliser must be >= 0.0; got -1.0"),
        (lambda: term_official_weights([0.0, 1000.0], -10.0, 0.0), ValueError,
         r"^exp\(tilt·\(F_k − max F\)\) overflows for tilt = -10.0: a negative tilt this large "
         r"needs the paper variant$"),
        (lambda: term_weights(np.ones((2, 2)), 1.0), ValueError,
         r"^losses must be 1-dimensional; got shape \(2, 2\)"),
        (lambda: term_weights([], 1.0), ValueError, r"^losses must have at least 1 entry"),
        (lambda: term_weights([1.0, -0.5], 1.0), ValueError,
         r"^losses must be non-negative; minimum is -0.5"),
        (lambda: term(tilt=np.nan), ValueError, r"^tilt must be finite; got nan"),
        (lambda: term(weighting="n_k"), ValueError, r"^weighting must be one of 'samples'"),
        (lambda: term(variant="fed"), ValueError, r"^variant must be one of 'paper', 'official'"),
        (lambda: term().step(np.zeros(2), make_reports(np.ones((1, 2)), [1], losses=[1.0]), None),
         TypeError, r"^state must be the TERMState that term's init returns"),
    ],
)  # fmt: skip
def test_errors_name_the_argument_and_value(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_integer_and_float32_losses_give_the_float64_weights():
    F = np.array([0.1, 1.3, 2.7], dtype=np.float32)
    want = term_weights(F.astype(np.float64), 0.3, [1, 2, 3])
    np.testing.assert_array_equal(term_weights(F, 0.3, [1, 2, 3]), want)
    w, S = term_official_weights(F, 0.3, 0.5)
    w64, S64 = term_official_weights(F.astype(np.float64), 0.3, 0.5)
    np.testing.assert_array_equal(w, w64)
    assert S == S64
    ints = np.array([0, 1, 3])
    np.testing.assert_array_equal(term_weights(ints, 0.7), term_weights([0.0, 1.0, 3.0], 0.7))


def test_default_tilt_is_1_and_hyperparameters_are_reported():
    reports = make_reports(np.eye(3), [1, 2, 3], losses=[0.5, 1.0, 2.0])
    a = term().step(np.zeros(3), reports, TERMState())
    b = term(tilt=1.0, weighting="samples", variant="paper").step(np.zeros(3), reports, TERMState())
    np.testing.assert_array_equal(a.info["weights"], b.info["weights"])
    rule = term(tilt=0.5, weighting="uniform", variant="official", backend="numba")
    assert rule.hyperparams == {
        "tilt": 0.5,
        "weighting": "uniform",
        "variant": "official",
        "backend": "numba",
    }


@pytest.mark.parametrize("variant", ["paper", "official"])
def test_cuda_backend_takes_device_arrays(variant):
    """On ``backend="cuda"`` θ and the updates may be device arrays: the new θ is one too and
    equals the NumPy backend's."""
    from numba import cuda

    rng = np.random.default_rng(3)
    theta, D = rng.normal(size=5), rng.normal(size=(3, 5))
    reports = make_reports(D, [1, 2, 3], losses=[0.5, 1.0, 2.0])
    ref = term(tilt=0.7, variant=variant).step(theta, reports, TERMState())
    rule = term(tilt=0.7, variant=variant, backend="cuda")
    d_reports = make_reports(cuda.to_device(D), [1, 2, 3], losses=[0.5, 1.0, 2.0])
    agg = rule.step(cuda.to_device(theta), d_reports, TERMState())
    assert not isinstance(agg.params, np.ndarray)
    assert_close(agg.params.copy_to_host(), ref.params)
    with pytest.raises(TypeError, match="backend='cuda'"):
        term().step(cuda.to_device(theta), reports, TERMState())
