"""Tests of fairagg.rules.fedavg: FedAvg and FairAvg (FairAvg eqs. 3-5, SPEC §1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fairagg import (
    Aggregate,
    EmptyState,
    RoundReports,
    apply_weighted_update,
    fairavg,
    fairavg_weights,
    fedavg,
    fedavg_weights,
    make_reports,
)
from tests.strategies import finite_floats, num_samples, update_matrices
from tests.tolerances import assert_close

RULE_FACTORIES = {"fedavg": fedavg, "fairavg": fairavg}


def weights_of(name: str, n: np.ndarray) -> np.ndarray:
    return fedavg_weights(n) if name == "fedavg" else fairavg_weights(n.shape[0])


@st.composite
def rounds(draw, dtype=np.float64):
    """(θ, δ, n): params (d,), an (m, d) update matrix and positive sample counts (m,)."""
    D = draw(update_matrices(dtype=dtype))
    m, d = D.shape
    theta = draw(hnp.arrays(dtype, (d,), elements=finite_floats(10.0, width=8 * D.itemsize)))
    n = draw(num_samples(m))
    return theta, D, n


# --------------------------------------------------------------------------------------------
# hand-computed cases
# --------------------------------------------------------------------------------------------


def test_fedavg_two_clients_hand():
    # θ = [1, 2], δ1 = [1, 0], δ2 = [0, 4], n = [1, 3] → a = [1/4, 3/4],
    # Σ a δ = [1/4, 3], θ' = [3/4, −1]. Model form: θ1 = [0, 2], θ2 = [1, −2],
    # ¼·[0, 2] + ¾·[1, −2] = [3/4, −1].
    theta = np.array([1.0, 2.0])
    D = np.array([[1.0, 0.0], [0.0, 4.0]])
    agg = fedavg().step(theta, make_reports(D, [1, 3]), EmptyState())
    assert_close(agg.info["weights"], [0.25, 0.75])
    assert_close(agg.params, [0.75, -1.0])


def test_fairavg_two_clients_hand():
    # Same round, a = [1/2, 1/2]: Σ a δ = [1/2, 2], θ' = [1/2, 0] (n is ignored).
    theta = np.array([1.0, 2.0])
    D = np.array([[1.0, 0.0], [0.0, 4.0]])
    agg = fairavg().step(theta, make_reports(D, [1, 3]), EmptyState())
    assert_close(agg.info["weights"], [0.5, 0.5])
    assert_close(agg.params, [0.5, 0.0])


def test_fedavg_three_clients_hand():
    # θ = [0, 0, 1]; δ = [3, 0, −1], [0, 6, 1], [−3, 3, 0]; n = [2, 2, 4] → a = [1/4, 1/4, 1/2].
    # Σ a δ = [3/4 + 0 − 3/2, 0 + 3/2 + 3/2, −1/4 + 1/4 + 0] = [−3/4, 3, 0],
    # θ' = [3/4, −3, 1].
    theta = np.array([0.0, 0.0, 1.0])
    D = np.array([[3.0, 0.0, -1.0], [0.0, 6.0, 1.0], [-3.0, 3.0, 0.0]])
    agg = fedavg().step(theta, make_reports(D, [2, 2, 4]), EmptyState())
    assert_close(agg.info["weights"], [0.25, 0.25, 0.5])
    assert_close(agg.params, [0.75, -3.0, 1.0])


def test_fairavg_three_clients_hand():
    # Same round, a = 1/3 each: Σ a δ = [0, 9, 0]/3 = [0, 3, 0], θ' = [0, −3, 1].
    theta = np.array([0.0, 0.0, 1.0])
    D = np.array([[3.0, 0.0, -1.0], [0.0, 6.0, 1.0], [-3.0, 3.0, 0.0]])
    agg = fairavg().step(theta, make_reports(D, [2, 2, 4]), EmptyState())
    assert_close(agg.info["weights"], [1 / 3, 1 / 3, 1 / 3])
    assert_close(agg.params, [0.0, -3.0, 1.0])


def test_fedavg_weights_hand():
    # n = [10, 30, 60] → a = [0.1, 0.3, 0.6].
    a = fedavg_weights([10, 30, 60])
    assert a.dtype == np.float64
    assert_close(a, [0.1, 0.3, 0.6])


def test_fairavg_weights_hand():
    assert_close(fairavg_weights(4), [0.25] * 4)
    np.testing.assert_array_equal(fairavg_weights(1), [1.0])


def test_apply_weighted_update_hand_weights_need_not_sum_to_one():
    # θ − (2·[1, 1] − 1·[0, 3]) = [5, 5] − [2, −1] = [3, 6].
    out = apply_weighted_update([5.0, 5.0], np.array([[1.0, 1.0], [0.0, 3.0]]), [2.0, -1.0])
    assert_close(out, [3.0, 6.0])


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RULE_FACTORIES))
@given(rounds())
def test_model_form_equals_update_form(name, rnd):
    theta, D, n = rnd
    agg = RULE_FACTORIES[name]().step(theta, make_reports(D, n), EmptyState())
    a = weights_of(name, n)
    client_models = theta[None, :] - D  # θ_k = θ^t − δ_k
    # |θ|, |δ| ≤ 10 and Σ a_k = 1: both forms are sums of m ≤ 6 terms of size ≤ 20.
    assert_close(agg.params, a @ client_models, scale=20.0)


@given(rounds())
def test_fedavg_equal_sizes_is_fairavg(rnd):
    theta, D, n = rnd
    n_equal = np.full(D.shape[0], n[0])
    reports = make_reports(D, n_equal)
    avg = fedavg().step(theta, reports, EmptyState())
    fair = fairavg().step(theta, reports, EmptyState())
    assert_close(avg.info["weights"], fair.info["weights"])
    assert_close(avg.params, fair.params, scale=10.0)  # |δ| ≤ 10


@given(st.integers(1, 50).flatmap(num_samples))
def test_fedavg_weights_on_simplex_and_proportional_to_n(n):
    a = fedavg_weights(n)
    assert a.shape == n.shape
    assert np.all(a >= 0)
    assert_close(a.sum(), 1.0)
    assert_close(a * n.sum(), n.astype(np.float64), scale=1e3)  # n ≤ 1000: absolute scale


@given(st.integers(1, 100))
def test_fairavg_weights_on_simplex_and_uniform(m):
    a = fairavg_weights(m)
    assert a.shape == (m,)
    assert np.all(a > 0)
    assert np.all(a == a[0])
    assert_close(a.sum(), 1.0)


@pytest.mark.parametrize("name", list(RULE_FACTORIES))
@given(rnd=rounds(), data=st.data())
def test_permuting_clients_permutes_weights_same_params(name, rnd, data):
    theta, D, n = rnd
    perm = data.draw(st.permutations(range(D.shape[0])))
    perm = np.array(perm, dtype=np.int64)
    rule = RULE_FACTORIES[name]()
    agg = rule.step(theta, make_reports(D, n), EmptyState())
    agg_p = rule.step(theta, make_reports(D[perm], n[perm]), EmptyState())
    assert_close(agg_p.info["weights"], agg.info["weights"][perm])
    # Only the summation order changes: round-off of a sum of m ≤ 6 terms of size ≤ 10.
    assert_close(agg_p.params, agg.params, scale=10.0)


@pytest.mark.parametrize("name", list(RULE_FACTORIES))
@given(rounds(), st.data())
def test_step_is_pure(name, rnd, data):
    theta, D, n = rnd
    m = D.shape[0]
    losses = data.draw(hnp.arrays(np.float64, (m,), elements=st.floats(0.0, 5.0)))
    accs = data.draw(hnp.arrays(np.float64, (m,), elements=st.floats(0.0, 1.0)))
    reports = make_reports(
        D,
        n,
        losses=losses,
        accuracies=accs,
        participations=np.arange(1, m + 1),
        client_ids=np.arange(m),
        round_index=3,
        num_clients=m + 2,
    )
    copies = [None if f is None else np.copy(f) for f in reports[:6]]
    theta_copy = theta.copy()
    rule = RULE_FACTORIES[name]()
    state = rule.init(theta, m + 2)
    agg = rule.step(theta, reports, state)
    assert isinstance(agg, Aggregate)
    np.testing.assert_array_equal(theta, theta_copy)
    for field, copy in zip(reports[:6], copies, strict=True):
        np.testing.assert_array_equal(field, copy)
    assert agg.state == state
    assert not np.shares_memory(agg.params, theta)
    assert not np.shares_memory(agg.params, D)


@pytest.mark.parametrize("name", list(RULE_FACTORIES))
@given(update_matrices(max_m=1), st.integers(1, 1000))
def test_single_client_returns_theta_minus_delta(name, D, n):
    theta = np.linspace(-1.0, 1.0, D.shape[1])
    agg = RULE_FACTORIES[name]().step(theta, make_reports(D, [n]), EmptyState())
    np.testing.assert_array_equal(agg.info["weights"], [1.0])
    np.testing.assert_array_equal(agg.params, theta - D[0])


@pytest.mark.parametrize("name", list(RULE_FACTORIES))
@given(rounds(dtype=np.float32))
def test_float32_params_and_deltas_stay_float32(name, rnd):
    theta, D, n = rnd
    agg = RULE_FACTORIES[name]().step(theta, make_reports(D, n), EmptyState())
    assert agg.params.dtype == np.float32
    expected = theta.astype(np.float64) - weights_of(name, n) @ D.astype(np.float64)
    assert_close(agg.params, expected, dtype=np.float32, scale=10.0)  # |δ|, |θ| ≤ 10


def test_float32_deltas_with_float64_params_promote_to_float64():
    out = apply_weighted_update(np.zeros(3), np.ones((2, 3), dtype=np.float32), [0.5, 0.5])
    assert out.dtype == np.float64
    assert_close(out, -np.ones(3))


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------


NON_FINITE_DELTAS = {
    "nan": [[1.0, 2.0, 0.0], [np.nan, 3.0, 1.0]],
    "inf": [[1.0, 2.0, 0.0], [np.inf, 3.0, 1.0]],
    "-inf": [[1.0, 2.0, 0.0], [-np.inf, 3.0, 1.0]],
    # +inf and −inf in one column: the weighted sum is inf − inf = NaN. The documented outcome is
    # still the ValueError naming deltas (pyproject's filterwarnings = error also makes any NumPy
    # RuntimeWarning raised on the way a failure: users running with -W error see that warning
    # instead of the ValueError).
    "opposite-infs": [[np.inf, 2.0, 0.0], [-np.inf, 3.0, 1.0]],
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", list(NON_FINITE_DELTAS))
def test_apply_weighted_update_rejects_non_finite_deltas(case, dtype):
    D = np.array(NON_FINITE_DELTAS[case], dtype=dtype)
    with pytest.raises(ValueError, match="deltas"):
        apply_weighted_update(np.zeros(3, dtype=dtype), D, [0.5, 0.5])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", list(NON_FINITE_DELTAS))
@pytest.mark.parametrize("name", list(RULE_FACTORIES))
def test_step_rejects_non_finite_deltas(name, case, dtype):
    D = np.array(NON_FINITE_DELTAS[case], dtype=dtype)
    reports = RoundReports(D, np.array([1, 2]))  # unvalidated: the rule itself must catch it
    with pytest.raises(ValueError, match="deltas"):
        RULE_FACTORIES[name]().step(np.zeros(3, dtype=dtype), reports, EmptyState())


def test_make_reports_rejects_non_finite_deltas():
    with pytest.raises(ValueError, match="deltas"):
        make_reports(np.array(NON_FINITE_DELTAS["nan"]), [1, 2])


def test_apply_weighted_update_rejects_non_finite_params_and_weights():
    with pytest.raises(ValueError, match="params"):
        apply_weighted_update([np.nan, 0.0], np.ones((1, 2)), [1.0])
    with pytest.raises(ValueError, match="weights"):
        apply_weighted_update([0.0, 0.0], np.ones((1, 2)), [np.inf])


def test_apply_weighted_update_reports_overflow():
    # Finite inputs whose weighted sum overflows: 1e308 + 1e308 = inf. The documented error is the
    # ValueError "the weighted update overflowed", not a NumPy RuntimeWarning.
    D = np.full((2, 2), 1e308)
    with pytest.raises(ValueError, match="overflow"):
        apply_weighted_update(np.zeros(2), D, [1.0, 1.0])


def test_apply_weighted_update_finite_entries_near_float64_max_are_not_an_overflow():
    # Every entry of θ − Σ w_k δ_k is finite although their sum is not: no error.
    out = apply_weighted_update([1e308, 1e308], np.zeros((1, 2)), [1.0])
    np.testing.assert_array_equal(out, [1e308, 1e308])


@pytest.mark.parametrize(
    ("params", "deltas", "weights", "match"),
    [
        (np.zeros(3), np.ones((2, 4)), [0.5, 0.5], "deltas"),
        (np.zeros(3), np.ones(3), [1.0], "deltas"),
        (np.zeros(3), np.ones((0, 3)), [], "deltas"),
        (np.zeros(3), np.ones((2, 3)), [1.0], "weights"),
        (np.zeros((3, 1)), np.ones((2, 3)), [0.5, 0.5], "params"),
    ],
)
def test_apply_weighted_update_rejects_bad_shapes(params, deltas, weights, match):
    with pytest.raises(ValueError, match=match):
        apply_weighted_update(params, deltas, weights)


def test_apply_weighted_update_rejects_integer_deltas():
    with pytest.raises(TypeError, match="deltas"):
        apply_weighted_update(np.zeros(2), np.ones((1, 2), dtype=np.int64), [1.0])


@pytest.mark.parametrize("name", list(RULE_FACTORIES))
@pytest.mark.parametrize(
    "reports",
    [None, {"deltas": np.ones((1, 3)), "num_samples": [1]}, (np.ones((1, 3)), np.array([1]))],
    ids=["none", "dict", "tuple"],
)
def test_step_rejects_wrong_reports_type(name, reports):
    with pytest.raises(TypeError, match="reports"):
        RULE_FACTORIES[name]().step(np.zeros(3), reports, EmptyState())


@pytest.mark.parametrize("name", list(RULE_FACTORIES))
def test_step_rejects_deltas_width_not_len_params(name):
    reports = make_reports(np.ones((2, 4)), [1, 1])
    with pytest.raises(ValueError, match="deltas"):
        RULE_FACTORIES[name]().step(np.zeros(3), reports, EmptyState())


@pytest.mark.parametrize("name", list(RULE_FACTORIES))
def test_step_rejects_num_samples_of_wrong_length(name):
    reports = RoundReports(np.ones((2, 3)), np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="num_samples"):
        RULE_FACTORIES[name]().step(np.zeros(3), reports, EmptyState())


@pytest.mark.parametrize(
    ("num_samples", "exc"),
    [
        ([1, 0], ValueError),
        ([], ValueError),
        ([-3], ValueError),
        ([1.5, 0.0], ValueError),
        ([1.5, -2.0], ValueError),
        ([1.5, np.nan], ValueError),
        ([1.5, np.inf], ValueError),
        ([[1.5, 2.0]], ValueError),
    ],
)
def test_fedavg_weights_rejects_bad_counts(num_samples, exc):
    with pytest.raises(exc, match="num_samples"):
        fedavg_weights(num_samples)


def test_fedavg_weights_take_positive_real_weights():
    # Flower's weighting metric may be a fraction (its own tests use 0.25 / 0.4 / 0.35)
    w = fedavg_weights([0.25, 0.4, 0.35])
    assert w.dtype == np.float64
    np.testing.assert_allclose(w, [0.25, 0.4, 0.35], rtol=1e-15)
    assert np.array_equal(fedavg_weights([2.0, 6.0]), fedavg_weights([2, 6]))  # integral: counts
    # far from 1: the same weights, no overflow of the sum, no "64-bit integer" error
    for scale in (1e300, 5e307, 1e-300, 5e-324):  # 5e307: the plain sum overflows
        w = fedavg_weights([1.0 * scale, 3.0 * scale])
        np.testing.assert_allclose(w, [0.25, 0.75], rtol=1e-15 if scale > 1e-300 else 0.5)
        assert np.all(np.isfinite(w)) and w.sum() == pytest.approx(1.0)


@pytest.mark.parametrize(("m", "exc"), [(0, ValueError), (2.0, TypeError), (True, TypeError)])
def test_fairavg_weights_rejects_bad_count(m, exc):
    with pytest.raises(exc, match="num_clients"):
        fairavg_weights(m)


@pytest.mark.parametrize("factory", [fedavg, fairavg])
def test_unknown_backend_rejected(factory):
    with pytest.raises(ValueError, match="backend"):
        factory(backend="tpu")


def test_counts_beyond_int64_are_a_clear_error():
    """Huge counts wrapped around in the int64 cast before ("must be >= 1; got minimum
    -9223372036854775808"); integers beyond int64 are now refused with their own message, and
    floats beyond exact integers (2^53) are real weights, taken as such."""
    with pytest.raises(ValueError, match="num_samples must fit in a 64-bit integer"):
        fedavg_weights([2**70, 3])
    assert_close(fedavg_weights([1e18, 3e18]), [0.25, 0.75])
    assert_close(fedavg_weights([1e300, 1e300]), [0.5, 0.5])
    assert_close(fedavg_weights([2.0**63, 1.0]), [1.0, 2.0**-63])


def test_a_sequence_with_a_non_number_is_a_type_error_not_a_range_error():
    with pytest.raises(TypeError, match="num_samples must be an array of integers"):
        fedavg_weights([1, None])


# --------------------------------------------------------------------------------------------
# messages, dtypes and the device path (from mutation testing)
# --------------------------------------------------------------------------------------------


def test_fedavg_weights_sum_counts_in_float64_without_int64_overflow():
    # 6e18 + 6e18 overflows int64: the sum is taken in float64.
    np.testing.assert_array_equal(fedavg_weights([6 * 10**18, 6 * 10**18]), [0.5, 0.5])


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: fedavg_weights([]), ValueError, r"^num_samples must hold at least one client$"),
        (lambda: fairavg_weights(0), ValueError, r"^num_clients must be >= 1; got 0"),
        (lambda: apply_weighted_update([np.nan, 0.0], [[np.nan, 1.0]], [1.0]), ValueError,
         r"^params must be finite"),
        (lambda: apply_weighted_update([0.0, 0.0], [[np.nan, 1.0]], [1.0]), ValueError,
         r"^deltas must be finite"),
        (lambda: apply_weighted_update([np.nan, 0.0], [[1.0, 1.0]], [1.0, 2.0]), ValueError,
         r"^weights must have shape \(1,\); got \(2,\)$"),
        (lambda: apply_weighted_update([0.0, 0.0, 0.0], np.ones((2, 2)), [0.5, 0.5]), ValueError,
         r"^deltas must have shape \(\*, 3\); got \(2, 2\)$"),
        (lambda: apply_weighted_update(np.zeros((2, 1)), np.ones((1, 2)), [1.0]), ValueError,
         r"^params must be 1-dimensional; got shape \(2, 1\)$"),
        (lambda: apply_weighted_update([0.0], np.full((2, 1), 1e308), [1.0, 1.0]), ValueError,
         r"^the weighted update overflowed: weights or deltas are too large$"),
    ],
)  # fmt: skip
def test_errors_name_the_argument_and_value(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_apply_weighted_update_weights_in_float64_and_integer_arrays():
    theta = np.array([1.0, 2.0], dtype=np.float32)
    D = np.array([[0.1, 0.2], [0.3, 0.7]], dtype=np.float32)
    w32 = np.array([1 / 3, 2 / 3], dtype=np.float32)
    got = apply_weighted_update(theta, D, w32)
    np.testing.assert_array_equal(got, apply_weighted_update(theta, D, w32.astype(np.float64)))
    np.testing.assert_array_equal(
        apply_weighted_update([0.0], [[1.0], [2.0]], np.array([1, 2])), [-5.0]
    )


def test_hyperparameters_report_the_backend():
    assert fedavg(backend="numba").hyperparams == {"backend": "numba"}
    assert fairavg().hyperparams == {"backend": "numpy"}


def test_cuda_backend_takes_device_arrays_and_checks_them():
    from numba import cuda

    rng = np.random.default_rng(5)
    theta, D = rng.normal(size=3), rng.normal(size=(2, 3))
    want = theta - np.array([0.25, 0.75]) @ D
    d_out = apply_weighted_update(cuda.to_device(theta), cuda.to_device(D), [0.25, 0.75],
                                  backend="cuda")  # fmt: skip
    assert_close(d_out.copy_to_host(), want)
    agg = fedavg(backend="cuda").step(
        cuda.to_device(theta), make_reports(cuda.to_device(D), [1, 3]), EmptyState()
    )
    assert_close(agg.params.copy_to_host(), want)
    bad = [
        (cuda.to_device(np.ones((2, 4))), ValueError, r"^deltas must have shape \(m, 3\); got"),
        (cuda.to_device(np.ones(3)), ValueError, r"^deltas must be 2-D; got shape \(3,\)"),
        (cuda.to_device(np.ones((0, 3))), ValueError, r"^deltas must have at least 1 rows"),
    ]
    for deltas, exc, match in bad:
        with pytest.raises(exc, match=match):
            apply_weighted_update(theta, deltas, [1.0], backend="cuda")
    with pytest.raises(TypeError) as info:
        apply_weighted_update(theta, cuda.to_device(D), [0.5, 0.5])
    assert str(info.value) == (
        "CUDA device arrays need backend='cuda'; got backend='numpy' (copy them to the host with "
        ".copy_to_host() for the CPU backends)"
    )
    with pytest.raises(TypeError, match=r"^CUDA device arrays need backend='cuda'; got backend="):
        apply_weighted_update(cuda.to_device(theta), D, [0.5, 0.5])
    with pytest.raises(ValueError, match=r"^params must be 1-D; got shape \(1, 3\)"):
        apply_weighted_update(cuda.to_device(theta[None, :]), D, [0.5, 0.5], backend="cuda")
