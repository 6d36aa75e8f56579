"""Tests of fairagg.metrics (SPEC §10): hand-computed cases, properties, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from fairagg.metrics import (
    accuracy_std,
    accuracy_variance,
    acf,
    alpha_fair_utility,
    angle_to_ones,
    average_accuracy,
    best_fraction,
    entropy,
    fairness_summary,
    gini,
    jain_index,
    kl_to_uniform,
    worst_fraction,
)
from tests.tolerances import CLOSED_FORM, assert_close

RTOL, ATOL = CLOSED_FORM[np.dtype(np.float64)]

SUMMARY_KEYS = [
    "average",
    "client_mean",
    "worst_10",
    "best_10",
    "worst_20",
    "best_20",
    "min",
    "max",
    "variance",
    "std",
    "angle",
    "kl",
    "entropy",
    "gini",
    "jain",
]
UNIFORMITY = [angle_to_ones, kl_to_uniform, entropy, gini, jain_index]

# Hypothesis strategies. Accuracies include 0, 1 and subnormals: every metric must stay
# warning-free on them (pyproject turns warnings into errors).
accuracy = st.floats(0.0, 1.0)
accuracy_vectors = st.lists(accuracy, min_size=1, max_size=30)
nonzero_vectors = accuracy_vectors.filter(lambda v: max(v) > 0.0)
# The direct O(T^2) reference has no rescaling: keep its squared deviations clear of underflow.
series_values = st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=40).filter(
    lambda s: max(s) - min(s) > 1e-6
)


def leq(x: float, y: float) -> bool:
    """``x <= y`` up to the closed-form tolerance (the two sides are summed in different orders)."""
    return x <= y + ATOL + RTOL * abs(y)


# ----------------------------------------------------------------------------------------------
# hand-computed cases


def test_average_accuracy_of_half_and_one_is_75_percent():
    assert_close(average_accuracy([0.5, 1.0]), 75.0)


def test_average_accuracy_with_num_samples_is_total_correct_over_total_samples():
    # client 1: 3 of 4 correct, client 2: 1 of 5 correct -> 4 of 9 overall.
    assert_close(average_accuracy([0.75, 0.2], num_samples=[4, 5]), 100.0 * 4.0 / 9.0)
    # a = [0.5, 1.0], n = [1, 3]: (0.5 + 3) / 4 = 0.875.
    assert_close(average_accuracy([0.5, 1.0], num_samples=np.array([1, 3])), 87.5)


def test_average_accuracy_with_equal_num_samples_is_client_mean():
    a = [0.1, 0.4, 0.9]
    assert_close(average_accuracy(a, num_samples=[7, 7, 7]), average_accuracy(a))


def test_integer_accuracies_are_cast_to_float():
    assert_close(average_accuracy([0, 1]), 50.0)
    assert_close(average_accuracy(np.array([1, 1, 0, 0])), 50.0)
    assert_close(accuracy_variance(np.array([0, 1])), 2500.0)


def test_worst_and_best_fraction_of_ten_clients():
    a = np.arange(10) / 10.0  # 0.0, 0.1, ..., 0.9
    assert_close(worst_fraction(a, 0.1), 0.0)  # 1 client
    assert_close(best_fraction(a, 0.1), 90.0)
    assert_close(worst_fraction(a, 0.2), 5.0)  # 2 clients: (0 + 10) / 2
    assert_close(best_fraction(a, 0.2), 85.0)  # (80 + 90) / 2
    assert_close(worst_fraction(a, 1.0), 45.0)  # everyone
    assert_close(best_fraction(a, 1.0), 45.0)


def test_worst_and_best_fraction_floor_the_count_for_fifteen_clients():
    a = np.arange(15) / 15.0
    # 0.1 * 15 = 1.5 -> 1 client; 0.2 * 15 = 3 -> 3 clients; 0.3 * 15 = 4.5 -> 4 clients.
    assert_close(worst_fraction(a, 0.1), 0.0)
    assert_close(best_fraction(a, 0.1), 100.0 * 14 / 15)
    assert_close(worst_fraction(a, 0.2), 100.0 * (0 + 1 + 2) / 3 / 15)
    assert_close(best_fraction(a, 0.2), 100.0 * (12 + 13 + 14) / 3 / 15)
    assert_close(worst_fraction(a, 0.3), 100.0 * (0 + 1 + 2 + 3) / 4 / 15)


def test_worst_and_best_fraction_take_at_least_one_client():
    assert_close(worst_fraction([0.3], 0.1), 30.0)
    assert_close(best_fraction([0.3], 0.1), 30.0)
    a = [0.9, 0.2, 0.5]  # 0.1 * 3 = 0.3 -> floor 0 -> at least 1
    assert_close(worst_fraction(a, 0.1), 20.0)
    assert_close(best_fraction(a, 0.1), 90.0)


def test_worst_fraction_counts_the_decimal_fraction_not_its_binary_rounding():
    # 0.29 * 100 == 28.999999999999996 in floating point; the count must be 29.
    a = np.arange(100) / 100.0
    assert_close(worst_fraction(a, 0.29), np.mean(np.arange(29)))  # 14.0, not 13.5
    assert_close(best_fraction(a, 0.29), np.mean(np.arange(71, 100)))


def test_variance_and_std_of_half_and_one():
    # percent accuracies [50, 100]: mean 75, deviations +-25 -> population variance 625.
    assert_close(accuracy_variance([0.5, 1.0]), 625.0)
    assert_close(accuracy_std([0.5, 1.0]), 25.0)
    # [20, 40, 60]: (400 + 0 + 400) / 3, population (divide by N).
    assert_close(accuracy_variance([0.2, 0.4, 0.6]), 800.0 / 3.0)
    assert_close(accuracy_std([0.2, 0.4, 0.6]), math.sqrt(800.0 / 3.0))


def test_angle_to_ones_hand_values():
    # [0.5, 1]: mean 0.75, ||a - mean|| = sqrt(2) / 4, sqrt(N) mean = 0.75 sqrt(2) -> tan = 1/3
    # (equivalently cos = 1.5 / (sqrt(2) sqrt(1.25)) = 3 / sqrt(10)).
    assert_close(angle_to_ones([0.5, 1.0]), math.degrees(math.atan(1.0 / 3.0)))
    assert_close(angle_to_ones([0.5, 1.0]), math.degrees(math.acos(3.0 / math.sqrt(10.0))))
    assert_close(angle_to_ones([1.0, 0.0]), 45.0)  # cos = 1 / sqrt(2)
    assert_close(angle_to_ones([1.0, 0.0, 0.0, 0.0]), 60.0)  # cos = 1 / (sqrt(4) * 1)
    assert_close(angle_to_ones([0.7]), 0.0)


def test_angle_to_ones_works_on_loss_vectors_above_one():
    # [2, 6]: mean 4, ||v - mean|| = sqrt(8), sqrt(2) * 4 = sqrt(32) -> tan = 1/2.
    assert_close(angle_to_ones([2.0, 6.0]), math.degrees(math.atan(0.5)))


def test_kl_and_entropy_of_half_and_one():
    # a_hat = [1/3, 2/3]: H = ln 3 - (2/3) ln 2, KL = ln 2 - H = (5/3) ln 2 - ln 3.
    assert_close(entropy([0.5, 1.0]), math.log(3.0) - 2.0 / 3.0 * math.log(2.0))
    assert_close(kl_to_uniform([0.5, 1.0]), 5.0 / 3.0 * math.log(2.0) - math.log(3.0))


def test_kl_and_entropy_use_zero_log_zero_equals_zero():
    # a_hat = [1, 0, 0]: H = -1 log 1 - 0 - 0 = 0; KL = 1 log(3 * 1) = ln 3.
    assert entropy([1.0, 0.0, 0.0]) == 0.0
    assert_close(kl_to_uniform([1.0, 0.0, 0.0]), math.log(3.0))
    assert_close(entropy([0.25, 0.25, 0.25, 0.25]), math.log(4.0))
    assert kl_to_uniform([0.25, 0.25, 0.25, 0.25]) == 0.0


def test_gini_hand_values():
    # [0.5, 1]: sum_ij |a_i - a_j| = 2 * 0.5 = 1; 2 N^2 mean = 2 * 4 * 0.75 = 6.
    assert_close(gini([0.5, 1.0]), 1.0 / 6.0)
    assert_close(gini([0.5, 1.0], sample=True), 1.0 / 3.0)  # times N / (N - 1) = 2
    # [1, 2, 3, 4]: sum_ij |.| = 2 * (1+2+3+1+2+1) = 20; 2 * 16 * 2.5 = 80.
    assert_close(gini([1.0, 2.0, 3.0, 4.0]), 0.25)
    # one client holds everything: 1 - 1/N (population), 1 (sample).
    assert_close(gini([1.0, 0.0, 0.0, 0.0]), 0.75)
    assert_close(gini([1.0, 0.0, 0.0, 0.0], sample=True), 1.0)
    assert gini([0.3, 0.3, 0.3]) == 0.0


def test_jain_index_hand_values():
    # [0.5, 1]: (1.5)^2 / (2 * 1.25) = 2.25 / 2.5.
    assert_close(jain_index([0.5, 1.0]), 0.9)
    assert_close(jain_index([1.0, 0.0, 0.0, 0.0]), 0.25)  # 1 / N
    assert jain_index([0.4, 0.4]) == 1.0


def test_alpha_fair_utility_hand_values():
    a = [0.5, 1.0]
    assert_close(alpha_fair_utility(a, 0.0), 1.5)  # utilitarian: the sum
    assert_close(alpha_fair_utility(a, 0.5), 2.0 * (math.sqrt(0.5) + 1.0))  # x^0.5 / 0.5
    assert_close(alpha_fair_utility(a, 1.0), -math.log(2.0))  # ln 0.5 + ln 1
    assert_close(alpha_fair_utility(a, 2.0), -3.0)  # -(1/0.5 + 1/1)


def test_alpha_fair_utility_of_a_zero_entry():
    assert alpha_fair_utility([0.0, 1.0], 1.0) == -math.inf
    assert alpha_fair_utility([0.0, 1.0], 3.0) == -math.inf
    assert_close(alpha_fair_utility([0.0, 1.0], 0.5), 2.0)  # 0^0.5 / 0.5 = 0
    assert_close(alpha_fair_utility([0.0, 1.0], 0.0), 1.0)


def test_acf_of_a_linear_series_by_hand():
    # f = [1, 2, 3, 4]: mean 2.5, deviations [-1.5, -0.5, 0.5, 1.5].
    # 4 r[0] = 2.25 + 0.25 + 0.25 + 2.25 = 5
    # 4 r[1] = 0.75 - 0.25 + 0.75 = 1.25       -> ACF 0.25
    # 4 r[2] = -0.75 - 0.75 = -1.5             -> ACF -0.3
    # 4 r[3] = -2.25                           -> ACF -0.45
    result = acf([1, 2, 3, 4], 3)
    assert result.shape == (4,)
    assert result.dtype == np.float64
    assert_close(result, [1.0, 0.25, -0.3, -0.45])


def test_acf_of_an_alternating_series_is_negative_at_lag_one():
    # f = [1, -1, 1, -1]: mean 0; 4 r = [4, -3, 2, -1].
    result = acf([1.0, -1.0, 1.0, -1.0], 3)
    assert result[1] < 0.0
    assert_close(result, [1.0, -0.75, 0.5, -0.25])


def test_acf_at_lag_zero_is_one():
    result = acf([0.3, 0.5, 0.4, 0.8, 0.7], 0)
    assert result.shape == (1,)
    assert result[0] == 1.0


def test_acf_is_warning_free_at_extreme_magnitudes():
    # Squares of these deviations underflow or overflow without rescaling.
    assert_close(acf([0.0, 5e-324, 0.0, 5e-324], 1), [1.0, -0.75])
    assert_close(acf([1e308, -1e308, 1e308, -1e308], 1), [1.0, -0.75])


def test_uniformity_metrics_are_warning_free_on_subnormals():
    v = [5e-324, 0.0]
    assert_close(angle_to_ones(v), 45.0)
    assert_close(jain_index(v), 0.5)
    assert_close(gini(v), 0.5)
    assert_close(kl_to_uniform(v), math.log(2.0))
    assert entropy(v) == 0.0


def test_fairness_summary_hand_values_and_key_order():
    s = fairness_summary([0.5, 1.0])
    assert list(s) == SUMMARY_KEYS
    expected = {
        "average": 75.0,
        "client_mean": 75.0,
        "worst_10": 50.0,
        "best_10": 100.0,
        "worst_20": 50.0,
        "best_20": 100.0,
        "min": 50.0,
        "max": 100.0,
        "variance": 625.0,
        "std": 25.0,
        "angle": math.degrees(math.atan(1.0 / 3.0)),
        "kl": 5.0 / 3.0 * math.log(2.0) - math.log(3.0),
        "entropy": math.log(3.0) - 2.0 / 3.0 * math.log(2.0),
        "gini": 1.0 / 6.0,
        "jain": 0.9,
    }
    for key, value in expected.items():
        assert_close(s[key], value, err_msg=key)


def test_fairness_summary_weights_only_the_average_by_num_samples():
    s = fairness_summary([0.5, 1.0], num_samples=[1, 3])
    assert_close(s["average"], 87.5)
    assert_close(s["client_mean"], 75.0)


def test_fairness_summary_is_plain_json_floats():
    s = fairness_summary(np.array([0.1, 0.9, 0.4], dtype=np.float32))
    assert all(type(value) is float for value in s.values())
    assert json.loads(json.dumps(s)) == s


def test_fairness_summary_of_all_zero_accuracies_reports_none_for_undefined_entries():
    s = fairness_summary([0.0, 0.0, 0.0])
    assert list(s) == SUMMARY_KEYS
    for key in ["angle", "kl", "entropy", "gini", "jain"]:
        assert s[key] is None, key
    for key in SUMMARY_KEYS[:10]:
        assert s[key] == 0.0, key
    assert json.loads(json.dumps(s)) == s


# ----------------------------------------------------------------------------------------------
# properties


@given(nonzero_vectors)
def test_uniformity_metrics_lie_in_their_ranges(values):
    n = len(values)
    jain = jain_index(values)
    assert leq(1.0 / n, jain) and jain <= 1.0
    g = gini(values)
    assert 0.0 <= g and leq(g, 1.0 - 1.0 / n)
    if n > 1:
        gs = gini(values, sample=True)
        assert 0.0 <= gs and leq(gs, 1.0)
    assert kl_to_uniform(values) >= 0.0
    assert 0.0 <= entropy(values) <= math.log(n)
    assert 0.0 <= angle_to_ones(values) <= 90.0


@given(nonzero_vectors)
def test_kl_equals_log_n_minus_entropy(values):
    assert_close(kl_to_uniform(values), math.log(len(values)) - entropy(values))


@given(nonzero_vectors)
def test_jain_index_is_squared_cosine_of_angle(values):
    assert_close(jain_index(values), math.cos(math.radians(angle_to_ones(values))) ** 2)


@given(accuracy_vectors.flatmap(lambda v: st.tuples(st.just(v), st.permutations(v))))
def test_fairness_summary_is_permutation_invariant(pair):
    values, permuted = pair
    s, sp = fairness_summary(values), fairness_summary(permuted)
    assert list(s) == list(sp)
    for key in s:
        if s[key] is None:
            assert sp[key] is None, key
        else:  # sums in a different order: equal to rounding
            assert_close(sp[key], s[key], err_msg=key)


@given(accuracy_vectors, st.floats(1e-3, 1e3))
def test_uniformity_metrics_are_scale_invariant(values, c):
    assume(max(values) >= 1e-3)  # keep c * v clear of the subnormal range
    scaled = [c * v for v in values]
    for metric in UNIFORMITY:
        assert_close(metric(scaled), metric(values), err_msg=metric.__name__)


@given(st.floats(0.0, 1.0).filter(lambda x: x > 0.0), st.integers(1, 30))
def test_constant_vector_is_perfectly_uniform(c, n):
    values = [c] * n
    assert_close(angle_to_ones(values), 0.0)
    assert kl_to_uniform(values) == 0.0
    assert gini(values) == 0.0
    assert jain_index(values) == 1.0
    assert_close(entropy(values), math.log(n))
    assert_close(accuracy_variance(values), 0.0)


@given(accuracy_vectors, st.floats(0.0, 1.0).filter(lambda x: x > 0.0))
def test_worst_le_mean_le_best(values, fraction):
    worst = worst_fraction(values, fraction)
    mean = average_accuracy(values)
    best = best_fraction(values, fraction)
    assert leq(worst, mean) and leq(mean, best)
    assert leq(100.0 * min(values), worst) and leq(best, 100.0 * max(values))


@given(
    accuracy_vectors.flatmap(
        lambda v: st.tuples(
            st.just(v), st.lists(st.integers(1, 1000), min_size=len(v), max_size=len(v))
        )
    )
)
def test_sample_weighted_average_lies_between_min_and_max(pair):
    values, num_samples = pair
    avg = average_accuracy(values, num_samples)
    assert leq(100.0 * min(values), avg) and leq(avg, 100.0 * max(values))


@given(nonzero_vectors)
def test_gini_by_sorting_equals_double_sum(values):
    assume(max(values) >= 1e-100)  # the unscaled reference underflows on subnormal inputs
    n = len(values)
    mean = sum(values) / n
    double_sum = sum(abs(x - y) for x in values for y in values)
    reference = double_sum / (2.0 * n * n * mean)
    # N^2 = 900 terms summed naively: a few hundred ulps of slack on a unit-scale result.
    assert_close(gini(values), reference, scale=10.0)
    if n > 1:
        assert_close(gini(values, sample=True), reference * n / (n - 1), scale=10.0)


@given(series_values.flatmap(lambda s: st.tuples(st.just(s), st.integers(0, len(s) - 1))))
def test_acf_equals_direct_loop_over_the_defining_sum(pair):
    series, max_lag = pair
    big_t = len(series)
    f_bar = sum(series) / big_t
    r = []
    for lag in range(max_lag + 1):
        total = 0.0
        for t in range(big_t - lag):
            total += (series[t] - f_bar) * (series[t + lag] - f_bar)
        r.append(total / big_t)
    expected = np.array(r) / r[0]
    result = acf(series, max_lag)
    assert result.shape == (max_lag + 1,)
    assert result[0] == 1.0
    # The loop sums up to 40 products in plain order; allow ten times the closed-form slack.
    assert_close(result, expected, scale=10.0)
    assert np.all(np.abs(result) <= 1.0 + 1e-12)  # |r[l]| <= r[0] (Cauchy-Schwarz)


# ----------------------------------------------------------------------------------------------
# bad input

ACCURACY_FUNCTIONS = [
    average_accuracy,
    accuracy_variance,
    accuracy_std,
    fairness_summary,
    lambda a: worst_fraction(a, 0.1),
    lambda a: best_fraction(a, 0.1),
]
VALUE_FUNCTIONS = [*UNIFORMITY, lambda v: alpha_fair_utility(v, 0.5)]


@pytest.mark.parametrize("func", ACCURACY_FUNCTIONS)
@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ([0.5, np.nan], ValueError, "accuracies must be finite"),
        ([0.5, np.inf], ValueError, "accuracies must be finite"),
        ([0.5, 1.5], ValueError, r"accuracies must lie in \[0, 1\]"),
        ([-0.1, 0.5], ValueError, r"accuracies must lie in \[0, 1\]"),
        ([50.0, 100.0], ValueError, "fractions, not percent"),
        ([], ValueError, "accuracies must have at least 1 entry"),
        ([[0.5, 0.5]], ValueError, "accuracies must be 1-dimensional"),
        (0.5, ValueError, "accuracies must be 1-dimensional"),
        (["a", "b"], TypeError, "accuracies must be an array of real numbers"),
        ("0.5", TypeError, "accuracies must be an array of real numbers"),
    ],
)
def test_bad_accuracies_are_rejected_naming_the_argument(func, bad, error, match):
    with pytest.raises(error, match=match):
        func(bad)


@pytest.mark.parametrize("func", VALUE_FUNCTIONS)
@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ([1.0, np.nan], ValueError, "values must be finite"),
        ([1.0, -0.5], ValueError, "values must be non-negative"),
        ([], ValueError, "values must have at least 1 entry"),
        (["x"], TypeError, "values must be an array of real numbers"),
    ],
)
def test_bad_values_are_rejected_naming_the_argument(func, bad, error, match):
    with pytest.raises(error, match=match):
        func(bad)


@pytest.mark.parametrize("func", UNIFORMITY)
def test_uniformity_metrics_of_all_zero_vector_raise(func):
    with pytest.raises(ValueError, match="values is all zero: .* is undefined"):
        func([0.0, 0.0, 0.0])


@pytest.mark.parametrize(
    ("num_samples", "error", "match"),
    [
        (
            [10, 20, 30],
            ValueError,
            "num_samples must have the same length|accuracies and num_samples",
        ),
        ([10, 0], ValueError, "num_samples must be >= 1"),
        ([10, -3], ValueError, "num_samples must be >= 1"),
        ([10, 1.5], TypeError, "num_samples must hold integers"),
        (["a", "b"], TypeError, "num_samples must be an array of integers"),
        ([[1, 2]], ValueError, "num_samples must be 1-dimensional"),
    ],
)
def test_bad_num_samples_are_rejected_naming_the_argument(num_samples, error, match):
    with pytest.raises(error, match=match):
        average_accuracy([0.5, 1.0], num_samples)
    with pytest.raises(error, match=match):
        fairness_summary([0.5, 1.0], num_samples)


@pytest.mark.parametrize("func", [worst_fraction, best_fraction])
@pytest.mark.parametrize(
    ("fraction", "error", "match"),
    [
        (0.0, ValueError, "fraction must be > 0"),
        (-0.1, ValueError, "fraction must be > 0"),
        (1.5, ValueError, "fraction must be <= 1"),
        (np.nan, ValueError, "fraction must be finite"),
        ("0.1", TypeError, "fraction must be a real number"),
    ],
)
def test_bad_fraction_is_rejected_naming_the_argument(func, fraction, error, match):
    with pytest.raises(error, match=match):
        func([0.5, 1.0], fraction)


@pytest.mark.parametrize(
    ("max_lag", "error", "match"),
    [
        (-1, ValueError, "max_lag must be >= 0"),
        (4, ValueError, "max_lag must be <= 3"),
        (1.0, TypeError, "max_lag must be an integer"),
    ],
)
def test_bad_max_lag_is_rejected_naming_the_argument(max_lag, error, match):
    with pytest.raises(error, match=match):
        acf([1.0, 2.0, 3.0, 4.0], max_lag)


@pytest.mark.parametrize("series", [[0.7, 0.7, 0.7], [0.2]])
def test_acf_of_constant_series_raises(series):
    with pytest.raises(ValueError, match="series is constant .*: the ACF is undefined"):
        acf(series, 0)


@pytest.mark.parametrize(
    ("series", "error", "match"),
    [
        ([1.0, np.nan, 2.0], ValueError, "series must be finite"),
        ("abc", TypeError, "series must be an array of real numbers"),
        ([], ValueError, "series must have at least 1 entry"),
    ],
)
def test_bad_series_is_rejected_naming_the_argument(series, error, match):
    with pytest.raises(error, match=match):
        acf(series, 0)


def test_gini_sample_form_needs_two_values():
    with pytest.raises(ValueError, match="sample=True needs at least two values"):
        gini([0.5], sample=True)
    with pytest.raises(TypeError, match="sample must be a bool"):
        gini([0.5, 1.0], sample="yes")


@pytest.mark.parametrize(
    ("alpha", "error", "match"),
    [
        (-0.5, ValueError, "alpha must be >= 0"),
        (np.inf, ValueError, "alpha must be finite"),
        ("1", TypeError, "alpha must be a real number"),
    ],
)
def test_bad_alpha_is_rejected_naming_the_argument(alpha, error, match):
    with pytest.raises(error, match=match):
        alpha_fair_utility([0.5, 1.0], alpha)


# ------------------------------------------------------------------------- found by mutation


@pytest.mark.parametrize(
    ("fn", "what"),
    [
        (angle_to_ones, "the angle to the all-ones vector"),
        (kl_to_uniform, "KL\\(a \\|\\| uniform\\)"),
        (entropy, "the entropy"),
        (gini, "the Gini coefficient"),
        (jain_index, "Jain's index"),
    ],
)
def test_an_all_zero_vector_is_refused_saying_what_is_undefined(fn, what):
    with pytest.raises(ValueError, match=f"^values is all zero: {what} is undefined$"):
        fn([0.0, 0.0, 0.0])


@pytest.mark.parametrize(
    "fn",
    [angle_to_ones, kl_to_uniform, entropy, gini, jain_index, accuracy_variance, average_accuracy],
)
def test_float32_input_is_computed_in_float64(fn):
    # The metrics promise float64 arithmetic: float32 input is widened first, so its result is
    # the float64 result on the same (float32-rounded) values, not float32 arithmetic (~1e-7).
    x32 = np.random.default_rng(3).uniform(0.05, 0.95, 40).astype(np.float32)
    got = fn(x32)
    want = fn(x32.astype(np.float64))
    assert type(got) is float
    assert got == pytest.approx(want, rel=1e-13, abs=1e-13)


def test_average_accuracy_names_the_argument_that_is_wrong():
    with pytest.raises(ValueError, match="^accuracies and num_samples must have the same length"):
        average_accuracy([0.5, 0.5, 0.5], [1, 2])
    for counts in ([[1, 2]], [[1], [2]]):  # 2-D counts, even with one row per client
        with pytest.raises(ValueError, match="num_samples"):
            average_accuracy([0.5, 0.5], counts)


def test_gini_sample_form_needs_two_values_and_says_why():
    with pytest.raises(ValueError, match=r"^sample=True needs at least two values \(factor"):
        gini([3.0], sample=True)


def test_gini_of_a_nearly_constant_vector_is_exact():
    # Shifting by the minimum (Σ(2i − N − 1) = 0 allows any shift) keeps the differences exact:
    # v = 1 − (3, 2, 1, 0)·h, h = 2⁻⁵³ (the spacing below 1; max 1, so the normalisation is
    # exact), has Gini Σ(2i − 5) d_i / (4 Σ v) = 10h / (4 Σ v). Shifted the other way
    # (v + v_min ≈ 2, where the spacing is 4h) the differences round and the numerator is 0.
    from fractions import Fraction

    h = 2.0**-53
    v = [1.0 - 3 * h, 1.0 - 2 * h, 1.0 - h, 1.0]
    exact = Fraction(10) * Fraction(h) / (4 * sum(Fraction(x) for x in v))
    assert gini(v) == pytest.approx(float(exact), rel=1e-12, abs=0)


def test_gini_sample_must_be_a_bool_and_the_message_shows_what_came():
    with pytest.raises(TypeError, match="sample must be a bool; got str 'yes'"):
        gini([1.0, 2.0], sample="yes")


def test_alpha_fair_utility_overflows_to_infinity_silently():
    # (1e-300)^(1−3)/(1−3) = −1e600/2: −inf, as documented, without a RuntimeWarning.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert alpha_fair_utility([1e-300, 1.0], 3.0) == -math.inf
