"""Tests of fairagg.rules.oco: the AAgFF poster's table "Fair FL algorithms are OCO algorithms"
(SPEC §4). Each row is one exponentiated-gradient step from the sample-size weights w:

FedAvg ∝ w_i; q-FedAvg ∝ w_i F_i^q (AFL as q → ∞); TERM ∝ w_i exp(λ F_i); PropFair ∝ w_i/(M − F_i).

The closed forms below are written out independently of the library's EG step.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fairagg import EmptyState, RoundReports, fedavg_weights, make_reports, make_rule
from fairagg.online import exponentiated_gradient
from fairagg.rules.oco import (
    eg_fedavg_weights,
    eg_propfair_weights,
    eg_qffl_weights,
    eg_term_weights,
    propfair_eg,
    qffl_eg,
    term_eg,
)
from tests.strategies import update_matrices
from tests.tolerances import assert_close

# The poster's example losses (AAgFF poster, "Client-Level Fairness in Federated Learning").
POSTER_LOSSES = np.array([0.1, 2.3, 9.5, 0.6, 1.1])
POSTER_COUNTS = np.array([10, 20, 30, 40, 50])

# --------------------------------------------------------------------------------------------
# local strategies
# --------------------------------------------------------------------------------------------


def positive_losses() -> st.SearchStrategy[float]:
    """F_i in (0, 10] (normal floats only: subnormals test the FPU, not the formula)."""
    return st.floats(0.0, 10.0, exclude_min=True, allow_subnormal=False)


@st.composite
def loss_rows(draw, max_m: int = 20):
    """(F, n): losses in (0, 10] and positive counts for m ≤ 20 clients."""
    m = draw(st.integers(1, max_m))
    F = draw(hnp.arrays(np.float64, (m,), elements=positive_losses()))
    n = draw(hnp.arrays(np.int64, (m,), elements=st.integers(1, 1000)))
    return F, n


def fair_q() -> st.SearchStrategy[float]:
    return st.floats(0.0, 10.0, allow_subnormal=False)


def tilts() -> st.SearchStrategy[float]:
    return st.floats(-5.0, 5.0, allow_subnormal=False)


# --------------------------------------------------------------------------------------------
# independent closed forms
# --------------------------------------------------------------------------------------------


def _normalise_logs(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max())  # max-shift: never overflows
    return e / e.sum()


def closed_fedavg(n) -> np.ndarray:
    n = np.asarray(n, dtype=np.float64)
    return n / n.sum()


def closed_qffl(F, n, q) -> np.ndarray:
    # w_i F_i^q = w_i (F_max)^q (F_i / F_max)^q: in log space relative to the largest loss, so the
    # reference neither overflows nor underflows for any q.
    F = np.asarray(F, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if q == 0:
        return closed_fedavg(n)
    with np.errstate(divide="ignore"):  # log 0 = −inf: F_i = 0 gets weight 0
        s = np.log(n) + q * np.log(F / F.max())
    return _normalise_logs(s)


def closed_term(F, n, lam) -> np.ndarray:
    F = np.asarray(F, dtype=np.float64)
    return _normalise_logs(np.log(np.asarray(n, dtype=np.float64)) + lam * F)


def closed_propfair(F, n, M) -> np.ndarray:
    v = np.asarray(n, dtype=np.float64) / (M - np.asarray(F, dtype=np.float64))
    return v / v.sum()


# --------------------------------------------------------------------------------------------
# hand-computed rows
# --------------------------------------------------------------------------------------------


def test_qffl_weights_hand():
    # F = [1, 2, 4], n = [1, 1, 2] → w = [1/4, 1/4, 1/2]; q = 2: w F² = [1/4, 1, 8], Σ = 37/4,
    # p = [1, 4, 32]/37.
    assert_close(eg_qffl_weights([1.0, 2.0, 4.0], [1, 1, 2], 2.0), np.array([1, 4, 32]) / 37)


def test_term_weights_hand():
    # λ = log 2: exp(λF) = 2^F. F = [0, 1, 2], w = [1/4, 1/4, 1/2] → [1/4, 1/2, 2], Σ = 11/4,
    # p = [1, 2, 8]/11.
    assert_close(eg_term_weights([0.0, 1.0, 2.0], [1, 1, 2], np.log(2.0)), np.array([1, 2, 8]) / 11)


def test_propfair_weights_hand():
    # M = 5, F = [1, 3, 4]: 1/(M − F) = [1/4, 1/2, 1]; × w = [1/16, 1/8, 1/2], Σ = 11/16,
    # p = [1, 2, 8]/11.
    assert_close(eg_propfair_weights([1.0, 3.0, 4.0], [1, 1, 2], 5.0), np.array([1, 2, 8]) / 11)


def test_fedavg_row_hand():
    assert_close(eg_fedavg_weights([10, 30, 60]), [0.1, 0.3, 0.6])


# --------------------------------------------------------------------------------------------
# each row equals its closed form
# --------------------------------------------------------------------------------------------


@given(loss_rows())
def test_fedavg_row_is_proportional_to_n(row):
    _, n = row
    assert_close(eg_fedavg_weights(n), closed_fedavg(n))


@given(loss_rows(), fair_q())
def test_qffl_row_closed_form(row, q):
    F, n = row
    p = eg_qffl_weights(F, n, q)
    assert_close(p, closed_qffl(F, n, q))
    assert_close(p.sum(), 1.0)


@given(loss_rows(), tilts())
def test_term_row_closed_form(row, lam):
    F, n = row
    assert_close(eg_term_weights(F, n, lam), closed_term(F, n, lam))


@given(loss_rows(), st.floats(0.0, 100.0, allow_subnormal=False))
def test_propfair_row_closed_form(row, gap):
    F, n = row
    M = float(F.max()) + gap + 1e-3  # M > max F
    assert_close(eg_propfair_weights(F, n, M), closed_propfair(F, n, M))


# --------------------------------------------------------------------------------------------
# each row is the EG step with the table's (r, η)
# --------------------------------------------------------------------------------------------


@given(loss_rows(), fair_q(), tilts(), st.floats(1e-3, 100.0))
def test_rows_are_exponentiated_gradient_steps(row, q, lam, gap):
    F, n = row
    w = fedavg_weights(n)
    M = float(F.max()) + gap
    # FedAvg: r = 0, η = 1.
    assert_close(eg_fedavg_weights(n), exponentiated_gradient(w, np.zeros(F.size), 1.0))
    # q-FedAvg: r = q log F, η = 1.
    assert_close(eg_qffl_weights(F, n, q), exponentiated_gradient(w, q * np.log(F), 1.0))
    # TERM: r = F, η = 1/λ. For λ < 0 the table's η is negative, outside EG's domain (η > 0); the
    # same step is r = −F, η = 1/|λ| (exp(r/η) = exp(λF) either way). λ = 0 is FedAvg.
    if lam > 0:
        expected = exponentiated_gradient(w, F, 1.0 / lam)
    elif lam < 0:
        expected = exponentiated_gradient(w, -F, -1.0 / lam)
    else:
        expected = w
    assert_close(eg_term_weights(F, n, lam), expected)
    # PropFair: r = −log(M − F), η = 1.
    assert_close(eg_propfair_weights(F, n, M), exponentiated_gradient(w, -np.log(M - F), 1.0))


# --------------------------------------------------------------------------------------------
# reductions to FedAvg
# --------------------------------------------------------------------------------------------


@given(loss_rows())
def test_q_zero_is_fedavg(row):
    F, n = row
    assert_close(eg_qffl_weights(F, n, 0.0), closed_fedavg(n))


@given(loss_rows())
def test_tilt_zero_is_fedavg(row):
    F, n = row
    assert_close(eg_term_weights(F, n, 0.0), closed_fedavg(n))


@given(loss_rows())
def test_propfair_large_M_is_fedavg(row):
    F, n = row
    M = 1e12
    # p_i ∝ w_i/(M − F_i) = w_i (1 + F_i/M + O(F²/M²)) / Z: the weights differ from w by at most
    # about max F / M ≤ 10/1e12 = 1e-11 (relative), the model error of a finite M, hence 1e-10.
    np.testing.assert_allclose(eg_propfair_weights(F, n, M), closed_fedavg(n), rtol=1e-10, atol=0)


def test_rows_reduce_to_fedavg_on_poster_losses():
    w = closed_fedavg(POSTER_COUNTS)
    assert_close(eg_qffl_weights(POSTER_LOSSES, POSTER_COUNTS, 0.0), w)
    assert_close(eg_term_weights(POSTER_LOSSES, POSTER_COUNTS, 0.0), w)
    # Same model error as above: max F / M = 9.5e-12.
    np.testing.assert_allclose(
        eg_propfair_weights(POSTER_LOSSES, POSTER_COUNTS, 1e12), w, rtol=1e-10, atol=0
    )
    # Equal losses: every row is FedAvg whatever the parameter.
    F = np.full(5, 3.0)
    assert_close(eg_qffl_weights(F, POSTER_COUNTS, 7.0), w)
    assert_close(eg_term_weights(F, POSTER_COUNTS, -4.0), w)
    assert_close(eg_propfair_weights(F, POSTER_COUNTS, 3.5), w)


# --------------------------------------------------------------------------------------------
# the AFL limit q → ∞
# --------------------------------------------------------------------------------------------


QS = [0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0, 1e3, 1e5, 1e8]


@pytest.mark.parametrize(
    "F",
    [
        POSTER_LOSSES,
        np.array([9.49, 9.5, 0.1, 5.0]),  # a near tie: concentration only for q ≳ 1e4
        np.array([1e-3, 2e-3, 1.5e-3]),
    ],
    ids=["poster", "near-tie", "small"],
)
def test_afl_limit_concentrates_on_argmax(F):
    n = np.arange(1, F.size + 1) * 7
    top = int(np.argmax(F))
    on_top = []
    for q in QS:
        p = eg_qffl_weights(F, n, q)
        assert np.all(np.isfinite(p)) and np.all(p >= 0)
        assert_close(p.sum(), 1.0)
        on_top.append(p[top])
    on_top = np.array(on_top)
    # p_top(q) = 1/(1 + Σ_j (w_j/w_top)(F_j/F_top)^q) is non-decreasing in q.
    assert np.all(np.diff(on_top) >= -1e-15), on_top  # equal up to round-off once saturated
    assert_close(on_top[-1], 1.0)  # q = 1e8
    assert on_top[0] < 0.5  # q = 0 is FedAvg: the argmax does not dominate there


def test_afl_limit_near_tie_values():
    # F = [9.49, 9.5]: p_top = 1/(1 + (w0/w1)(9.49/9.5)^q). With w0 = w1, q = 1e3 leaves a visible
    # share on the runner-up, q = 1e5 none (ratio^1e5 = e^{-105.3} ≈ 1.8e-46).
    F = np.array([9.49, 9.5])
    ratio = 9.49 / 9.5
    for q in (1e3, 1e5, 1e8):
        expected_top = 1.0 / (1.0 + ratio**q)
        p = eg_qffl_weights(F, [3, 3], q)
        assert_close(p[1], expected_top)
    assert eg_qffl_weights(F, [3, 3], 1e3)[0] > 0.1


@pytest.mark.parametrize("q", [1e3, 1e5, 1e8])
@given(row=loss_rows(), data=st.data())
def test_afl_limit_with_unique_max(q, row, data):
    F, n = row
    # Make the maximum unique with a margin: F_top = 1.01 · max of the others (≤ 10.1).
    top = data.draw(st.integers(0, F.size - 1))
    F = F.copy()
    others = np.delete(F, top)
    F[top] = 1.01 * (others.max() if others.size else 1.0)
    p = eg_qffl_weights(F, n, q)
    assert np.all(np.isfinite(p))
    # Runner-up share ≤ (w_j/w_top)(1/1.01)^q ≤ 1000·e^{-9.95} ≈ 4.8e-2 for q = 1e3 and
    # 20·1000·e^{-995} = 0 for q ≥ 1e5.
    if q == 1e3:
        assert p[top] >= 1.0 - 1000 * 20 * 1.01**-q
    else:
        assert_close(p[top], 1.0)
        assert np.all(p[np.arange(F.size) != top] == 0.0)


@pytest.mark.parametrize("q", [1e5, 1e8])
@given(row=loss_rows(max_m=10), data=st.data())
def test_afl_limit_ties_split_proportionally_to_w(q, row, data):
    F, n = row
    m = F.size
    tied = np.array(sorted(data.draw(st.sets(st.integers(0, m - 1), min_size=1))), dtype=np.int64)
    F = F / 2.0  # every other loss is at most half the maximum
    F[tied] = 10.0  # (F_j / F_top)^q ≤ 2^{-1e5} = 0 for every other client
    p = eg_qffl_weights(F, n, q)
    expected = np.zeros(m)
    expected[tied] = n[tied] / n[tied].sum()
    assert_close(p, expected)


@pytest.mark.parametrize("q", [1e5, 1e8, 1e16])
def test_afl_limit_tie_hand(q):
    # F = [9.5, 1, 9.5, 2], n = [1, 2, 3, 4]: the tied maxima share ∝ n → [1/4, 0, 3/4, 0] for
    # every large q (F_i^q cancels exactly between tied clients).
    p = eg_qffl_weights([9.5, 1.0, 9.5, 2.0], [1, 2, 3, 4], q)
    assert_close(p, [0.25, 0.0, 0.75, 0.0])


@pytest.mark.parametrize("lam", [1e5, 1e8, 1e16])
def test_large_tilt_tie_hand(lam):
    # TERM's analogue: exp(λF_i) cancels between the tied maxima, which share ∝ n.
    p = eg_term_weights([9.5, 1.0, 9.5, 2.0], [1, 2, 3, 4], lam)
    assert_close(p, [0.25, 0.0, 0.75, 0.0])


@pytest.mark.parametrize("q", [1e3, 1e5, 1e8, 1e300, np.finfo(np.float64).max])
def test_large_q_does_not_overflow(q):
    # pyproject's filterwarnings = error turns any overflow RuntimeWarning into a failure. The
    # answer is well defined for every finite q (all weight on the unique argmax), so any finite q
    # the rule accepts must give it (SPEC §4: the closed forms never overflow).
    p = eg_qffl_weights(POSTER_LOSSES, POSTER_COUNTS, q)
    assert np.all(np.isfinite(p))
    assert_close(p, [0.0, 0.0, 1.0, 0.0, 0.0])


@pytest.mark.parametrize("lam", [50.0, 1e3, 1e8, -1e8, 1e300, np.finfo(np.float64).max])
def test_large_tilt_does_not_overflow(lam):
    # exp(λF) overflows for λF > 709; the weights must not (max-shift; SPEC §4). λ → +∞ puts all
    # weight on the largest loss, λ → −∞ on the smallest.
    p = eg_term_weights(POSTER_LOSSES, POSTER_COUNTS, lam)
    assert np.all(np.isfinite(p))
    if abs(lam) <= 1e3:
        assert_close(p, closed_term(POSTER_LOSSES, POSTER_COUNTS, lam))
    if abs(lam) >= 1e3:  # loss gaps ≥ 0.5: the runner-up gets ≤ e^{−500}/e^0 ≈ 7e-218 ≈ 0
        assert_close(p, np.eye(5)[2 if lam > 0 else 0])


def test_large_negative_tilt_does_not_overflow():
    p = eg_term_weights(POSTER_LOSSES, POSTER_COUNTS, -np.finfo(np.float64).max)
    assert np.all(np.isfinite(p))
    assert_close(p, np.eye(5)[0])


# --------------------------------------------------------------------------------------------
# zero losses
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("q", [1e-3, 0.5, 1.0, 3.0, 1e8])
def test_zero_loss_gets_zero_weight_for_positive_q(q):
    F = np.array([0.0, 1.0, 0.0, 2.0])
    n = np.array([5, 1, 7, 1])
    p = eg_qffl_weights(F, n, q)
    assert p[0] == 0.0 and p[2] == 0.0
    assert_close(p, closed_qffl(F, n, q))
    assert_close(p[1] / p[3], 2.0**-q)  # n_1 = n_3: the ratio is (F_1/F_3)^q


def test_zero_loss_with_q_zero_is_fedavg():
    # F^0 = 1, including 0^0 (the q = 0 row is FedAvg whatever the losses).
    assert_close(eg_qffl_weights([0.0, 1.0, 0.0], [1, 2, 1], 0.0), [0.25, 0.5, 0.25])


@pytest.mark.parametrize("q", [1e-3, 1.0, 1e8])
def test_all_zero_losses_with_positive_q_rejected(q):
    with pytest.raises(ValueError, match="losses"):
        eg_qffl_weights([0.0, 0.0, 0.0], [1, 2, 3], q)


def test_zero_losses_are_fine_for_term_and_propfair():
    F = np.array([0.0, 0.0, 1.0])
    assert_close(eg_term_weights(F, [1, 1, 1], 1.0), closed_term(F, [1, 1, 1], 1.0))
    assert_close(eg_propfair_weights(F, [1, 1, 1], 2.0), closed_propfair(F, [1, 1, 1], 2.0))


# --------------------------------------------------------------------------------------------
# the rules
# --------------------------------------------------------------------------------------------

ROUND_THETA = np.array([1.0, -2.0, 0.5])
ROUND_DELTAS = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, -1.0], [4.0, -1.0, 0.0]])


@pytest.mark.parametrize(
    ("name", "hyper", "losses", "counts", "p"),
    [
        ("qffl-eg", {"q": 2.0}, [1.0, 2.0, 4.0], [1, 1, 2], np.array([1, 4, 32]) / 37),
        (
            "term-eg",
            {"tilt": float(np.log(2.0))},
            [0.0, 1.0, 2.0],
            [1, 1, 2],
            np.array([1, 2, 8]) / 11,
        ),
        ("propfair-eg", {"M": 5.0}, [1.0, 3.0, 4.0], [1, 1, 2], np.array([1, 2, 8]) / 11),
    ],
)
def test_rule_step_hand(name, hyper, losses, counts, p):
    rule = make_rule(name, **hyper)
    assert rule.name == name
    reports = make_reports(ROUND_DELTAS, counts, losses=losses)
    agg = rule.step(ROUND_THETA, reports, rule.init(ROUND_THETA, 3))
    assert_close(agg.info["weights"], p)
    # θ − Σ p_i δ_i written out term by term.
    expected = ROUND_THETA - (
        p[0] * ROUND_DELTAS[0] + p[1] * ROUND_DELTAS[1] + p[2] * ROUND_DELTAS[2]
    )
    assert_close(agg.params, expected, scale=4.0)  # |δ| ≤ 4
    assert agg.state == EmptyState()


def test_qffl_rule_hand_numbers():
    # p = [1, 4, 32]/37 on δ = ROUND_DELTAS: Σ p δ = [(1 + 128)/37, (12 − 32)/37, (2 − 4)/37]
    # = [129, −20, −2]/37; θ' = [1 − 129/37, −2 + 20/37, 0.5 + 2/37].
    rule = qffl_eg(q=2.0)
    reports = make_reports(ROUND_DELTAS, [1, 1, 2], losses=[1.0, 2.0, 4.0])
    agg = rule.step(ROUND_THETA, reports, rule.init(ROUND_THETA, 3))
    assert_close(agg.params, [1 - 129 / 37, -2 + 20 / 37, 0.5 + 2 / 37])


RULE_ROWS = {
    "qffl-eg": (qffl_eg, "q", fair_q(), closed_qffl),
    "term-eg": (term_eg, "tilt", tilts(), closed_term),
    "propfair-eg": (propfair_eg, "M", st.floats(10.5, 100.0), closed_propfair),
}


@pytest.mark.parametrize("name", list(RULE_ROWS))
@given(data=st.data())
def test_rule_step_is_theta_minus_weighted_deltas(name, data):
    factory, arg, values, closed = RULE_ROWS[name]
    D = data.draw(update_matrices())
    m, d = D.shape
    theta = data.draw(hnp.arrays(np.float64, (d,), elements=st.floats(-10.0, 10.0)))
    F = data.draw(hnp.arrays(np.float64, (m,), elements=positive_losses()))
    n = data.draw(hnp.arrays(np.int64, (m,), elements=st.integers(1, 1000)))
    value = data.draw(values)
    rule = make_rule(name, **{arg: value})
    assert rule.hyperparams[arg] == value
    agg = rule.step(theta, make_reports(D, n, losses=F), rule.init(theta, m))
    p = closed(F, n, value)
    assert_close(agg.info["weights"], p)
    # |θ| ≤ 10 and Σ p δ is a convex combination of entries ≤ 10: values up to 20.
    assert_close(agg.params, theta - p @ D, scale=20.0)
    assert factory(**{arg: value}).name == name


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(RULE_ROWS))
@given(data=st.data())
def test_numba_backend_equals_numpy(name, dtype, data):
    _, arg, values, _ = RULE_ROWS[name]
    D = data.draw(update_matrices(dtype=dtype))
    m, d = D.shape
    theta = data.draw(hnp.arrays(dtype, (d,), elements=st.floats(-10.0, 10.0, width=32)))
    F = data.draw(hnp.arrays(np.float64, (m,), elements=positive_losses()))
    n = data.draw(hnp.arrays(np.int64, (m,), elements=st.integers(1, 1000)))
    value = data.draw(values)
    reports = make_reports(D, n, losses=F)
    a = make_rule(name, **{arg: value}).step(theta, reports, EmptyState())
    b = make_rule(name, **{arg: value}, backend="numba").step(theta, reports, EmptyState())
    np.testing.assert_array_equal(a.info["weights"], b.info["weights"])
    assert a.params.dtype == b.params.dtype == dtype
    assert_close(b.params, a.params, dtype=dtype, scale=10.0)  # |θ|, |δ| ≤ 10


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------


def test_propfair_M_not_above_max_loss_rejected():
    for M in (2.0, 1.5):
        with pytest.raises(ValueError, match="M"):
            eg_propfair_weights([1.0, 2.0], [1, 1], M)
    rule = make_rule("propfair-eg", M=2.0)
    reports = make_reports(np.ones((2, 3)), [1, 1], losses=[1.0, 2.0])
    with pytest.raises(ValueError, match="losses must all be below M"):
        rule.step(np.zeros(3), reports, rule.init(np.zeros(3), 2))


@pytest.mark.parametrize("M", [0.0, -1.0, np.inf, np.nan])
def test_propfair_bad_M_rejected_at_construction(M):
    with pytest.raises(ValueError, match="M"):
        make_rule("propfair-eg", M=M)


@pytest.mark.parametrize("q", [-1.0, -1e-9, np.inf, np.nan])
def test_bad_q_rejected(q):
    with pytest.raises(ValueError, match="q"):
        make_rule("qffl-eg", q=q)
    with pytest.raises(ValueError, match="q"):
        eg_qffl_weights([1.0, 2.0], [1, 1], q)


@pytest.mark.parametrize("tilt", [np.inf, -np.inf, np.nan])
def test_bad_tilt_rejected(tilt):
    with pytest.raises(ValueError, match="tilt"):
        make_rule("term-eg", tilt=tilt)


@pytest.mark.parametrize("name", list(RULE_ROWS))
def test_missing_losses_rejected(name):
    rule = make_rule(name)
    with pytest.raises(ValueError, match="losses"):
        rule.step(np.zeros(3), make_reports(np.ones((2, 3)), [1, 2]), rule.init(np.zeros(3), 2))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -1.0])
@pytest.mark.parametrize("name", list(RULE_ROWS))
def test_bad_loss_rejected(name, bad):
    # RoundReports built directly (make_reports would reject the losses itself).
    rule = make_rule(name)
    reports = RoundReports(np.ones((2, 3)), np.array([1, 2]), np.array([1.0, bad]))
    with pytest.raises(ValueError, match="losses"):
        rule.step(np.zeros(3), reports, rule.init(np.zeros(3), 2))


@pytest.mark.parametrize(
    "fn",
    [
        lambda F: eg_qffl_weights(F, [1, 1], 1.0),
        lambda F: eg_term_weights(F, [1, 1], 1.0),
        lambda F: eg_propfair_weights(F, [1, 1], 20.0),
    ],
    ids=["qffl", "term", "propfair"],
)
@pytest.mark.parametrize(
    "F", [[np.nan, 1.0], [1.0, -0.5], [1.0, 2.0, 3.0]], ids=["nan", "neg", "len"]
)
def test_weight_functions_reject_bad_losses(fn, F):
    with pytest.raises(ValueError, match="losses"):
        fn(F)


@pytest.mark.parametrize("factory", [qffl_eg, term_eg, propfair_eg])
def test_unknown_backend_rejected(factory):
    with pytest.raises(ValueError, match="backend"):
        factory(backend="tpu")


# --------------------------------------------------------------------------------------------
# messages, dtypes and defaults (from mutation testing)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: eg_qffl_weights([1.0, 2.0, 3.0], [1, 1], 1.0), ValueError,
         r"^losses must have shape \(2,\); got \(3,\)"),
        (lambda: eg_qffl_weights([1.0, 2.0], [1, 1], -1.0), ValueError,
         r"^q must be >= 0.0; got -1.0"),
        (lambda: eg_qffl_weights([0.0, 0.0], [1, 1], 1.0), ValueError,
         r"^losses are all zero: q-FedAvg's weights ∝ w_i F_i\^q are undefined for q > 0$"),
        (lambda: eg_term_weights([1.0, 2.0], [1, 1], np.inf), ValueError,
         r"^tilt must be finite; got inf"),
        (lambda: eg_propfair_weights([0.0, 0.0], [1, 1], 0.0), ValueError,
         r"^M must be > 0.0; got 0.0"),
        (lambda: eg_propfair_weights([0.0, 0.0], [1, 1], -1.0), ValueError,
         r"^M must be > 0.0; got -1.0"),
        (lambda: qffl_eg(q=-1.0), ValueError, r"^q must be >= 0.0; got -1.0"),
        (lambda: term_eg(tilt=np.nan), ValueError, r"^tilt must be finite; got nan"),
        (lambda: propfair_eg(M=0.0), ValueError, r"^M must be > 0.0; got 0.0"),
    ],
)  # fmt: skip
def test_errors_name_the_argument_and_value(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_integer_and_float32_losses_give_the_float64_weights():
    F32 = np.array([0.1, 1.3, 2.7], dtype=np.float32)
    F64 = F32.astype(np.float64)
    n = [1, 2, 3]
    for fn, arg in ((eg_qffl_weights, 1.7), (eg_term_weights, 0.3), (eg_propfair_weights, 3.1)):
        np.testing.assert_array_equal(fn(F32, n, arg), fn(F64, n, arg))
        np.testing.assert_array_equal(fn(np.array([0, 1, 3]), n, arg), fn([0.0, 1.0, 3.0], n, arg))


def test_small_positive_tilt_depends_only_on_loss_differences():
    # λ ∈ (0, 1] is referred to max F as any λ > 0: r = λ(F − max F) keeps the gap of 16 between
    # two huge losses exact, so p ∝ [0, 1, e^{−1.6}] (referring to min F would round λ(F − min F)
    # at the scale of 1e16 and lose the gap).
    p = eg_term_weights([0.5, 1e17 + 16, 1e17], [1, 1, 1], 0.1)
    e = np.exp(-1.6)
    assert_close(p, [0.0, 1 / (1 + e), e / (1 + e)])


def test_a_small_M_is_fine_when_it_exceeds_every_loss():
    assert_close(
        eg_propfair_weights([0.1, 0.3], [1, 1], 0.5), closed_propfair([0.1, 0.3], [1, 1], 0.5)
    )
    rule = propfair_eg(M=0.5)
    agg = rule.step(np.zeros(2), make_reports(np.eye(2), [1, 1], losses=[0.1, 0.3]), EmptyState())
    assert_close(agg.info["weights"], closed_propfair([0.1, 0.3], [1, 1], 0.5))


@pytest.mark.parametrize(
    ("name", "arg", "documented"),
    [("qffl-eg", "q", 1.0), ("term-eg", "tilt", 1.0), ("propfair-eg", "M", 10.0)],
)
def test_default_hyperparameters_are_documented(name, arg, documented):
    reports = make_reports(ROUND_DELTAS, [1, 1, 2], losses=[1.0, 2.0, 4.0])
    a = make_rule(name).step(ROUND_THETA, reports, EmptyState())
    b = make_rule(name, **{arg: documented}).step(ROUND_THETA, reports, EmptyState())
    np.testing.assert_array_equal(a.info["weights"], b.info["weights"])
    assert make_rule(name).hyperparams == {arg: documented, "backend": "numpy"}
