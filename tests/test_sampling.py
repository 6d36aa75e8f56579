"""Tests of fairagg.sampling: m of K clients without replacement, uniform or ∝ n_k (SPEC §1).

Frequency checks draw many rounds from a fixed seed (so they are deterministic) and compare each
count with its exact binomial mean at 5 standard deviations: for a correct sampler a 5σ deviation
of one count has probability ≈ 6e-7, so the tolerance cannot flake if the seed ever changes, while
any real bias in the inclusion probabilities (≥ ~0.03 here) is > 5σ and caught.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairagg.sampling import SAMPLING_SCHEMES, sample_clients

Z = 5.0  # standard deviations allowed for a binomial count, see the module docstring


def assert_binomial(counts: np.ndarray, probs: np.ndarray, draws: int) -> None:
    """Each count is Binomial(draws, p): within Z standard deviations of draws·p."""
    mean = draws * probs
    sd = np.sqrt(draws * probs * (1.0 - probs))
    z = np.abs(counts - mean) / sd
    assert np.all(z < Z), f"counts {counts} vs means {mean}: z-scores {z}"


def inclusion_probabilities(n: np.ndarray, m: int) -> np.ndarray:
    """Exact P(k ∈ S) for successive sampling ∝ n without replacement (enumerates draw orders)."""
    p = n / n.sum()
    K = n.size
    out = np.zeros(K)
    for order in permutations(range(K), m):
        prob, left = 1.0, 1.0
        for k in order:
            prob *= p[k] / left
            left -= p[k]
        out[list(order)] += prob
    return out


# --------------------------------------------------------------------------------------------
# structure
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SAMPLING_SCHEMES)
@given(
    st.integers(1, 30).flatmap(lambda K: st.tuples(st.just(K), st.integers(1, K))),
    st.integers(0, 2**32 - 1),
)
def test_sample_is_distinct_indices_in_range(scheme, Km, seed):
    K, m = Km
    n = np.arange(1, K + 1)
    S = sample_clients(K, m, np.random.default_rng(seed), scheme=scheme, num_samples=n)
    assert S.shape == (m,) and S.dtype == np.int64
    assert np.unique(S).size == m
    assert S.min() >= 0 and S.max() < K


@pytest.mark.parametrize("scheme", SAMPLING_SCHEMES)
@given(st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_m_equals_K_returns_permutation_of_all(scheme, K, seed):
    S = sample_clients(K, K, np.random.default_rng(seed), scheme=scheme, num_samples=np.full(K, 7))
    np.testing.assert_array_equal(np.sort(S), np.arange(K))


@pytest.mark.parametrize("scheme", SAMPLING_SCHEMES)
@given(st.integers(0, 2**32 - 1))
def test_deterministic_per_generator_seed(scheme, seed):
    n = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    a = sample_clients(8, 3, np.random.default_rng(seed), scheme=scheme, num_samples=n)
    b = sample_clients(8, 3, np.random.default_rng(seed), scheme=scheme, num_samples=n)
    np.testing.assert_array_equal(a, b)


def test_successive_calls_on_one_generator_differ():
    rng = np.random.default_rng(0)
    draws = {tuple(sample_clients(20, 5, rng)) for _ in range(10)}
    assert len(draws) > 1


def test_uniform_ignores_num_samples():
    n = np.array([1, 1000, 1, 1000, 1])
    a = sample_clients(5, 2, np.random.default_rng(3), scheme="uniform", num_samples=n)
    b = sample_clients(5, 2, np.random.default_rng(3), scheme="uniform")
    np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------------------------
# frequencies
# --------------------------------------------------------------------------------------------


def test_uniform_inclusion_frequencies_are_m_over_K():
    K, m, draws = 10, 3, 4000
    rng = np.random.default_rng(12345)
    counts = np.zeros(K)
    first = np.zeros(K)
    for _ in range(draws):
        S = sample_clients(K, m, rng)
        counts[S] += 1
        first[S[0]] += 1
    # P(k ∈ S) = m/K = 0.3 (sd of the count ≈ 29); P(k drawn first) = 1/K (sd ≈ 19).
    assert_binomial(counts, np.full(K, m / K), draws)
    assert_binomial(first, np.full(K, 1 / K), draws)


def test_proportional_single_draw_frequency_is_n_over_total():
    n = np.array([10, 20, 30, 40])
    draws = 4000
    rng = np.random.default_rng(7)
    counts = np.zeros(4)
    for _ in range(draws):
        counts[sample_clients(4, 1, rng, scheme="proportional", num_samples=n)] += 1
    assert_binomial(counts, n / n.sum(), draws)


def test_proportional_inclusion_frequency_increases_with_n():
    n = np.array([10, 20, 40, 80, 160])
    K, m, draws = 5, 2, 4000
    rng = np.random.default_rng(99)
    counts = np.zeros(K)
    for _ in range(draws):
        counts[sample_clients(K, m, rng, scheme="proportional", num_samples=n)] += 1
    assert np.all(np.diff(counts) > 0)
    # Exact successive-sampling inclusion probabilities, e.g. the largest client:
    # P = 160/310 + Σ_j (n_j/310)(160/(310 − n_j)) ≈ 0.83.
    probs = inclusion_probabilities(n, m)
    assert np.isclose(probs.sum(), m, rtol=1e-12, atol=0)  # sanity of the enumeration: E|S| = m
    assert_binomial(counts, probs, draws)


def test_proportional_client_with_almost_all_mass_is_almost_always_drawn():
    n = np.array([1, 1, 1_000_000, 1])
    rng = np.random.default_rng(2024)
    hits = sum(
        2 in sample_clients(4, 1, rng, scheme="proportional", num_samples=n) for _ in range(1000)
    )
    # P(miss) = 3/1000003 per draw: expected 0.003 misses in 1000 draws; ≥ 3 has prob ≈ 5e-9.
    assert hits >= 998


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [
        ((5, 6), {}, ValueError, "clients_per_round"),
        ((5, 0), {}, ValueError, "clients_per_round"),
        ((5, 2.0), {}, TypeError, "clients_per_round"),
        ((0, 1), {}, ValueError, "num_clients"),
        ((5, 2), {"scheme": "proportional"}, ValueError, "num_samples"),
        ((5, 2), {"scheme": "proportional", "num_samples": [1, 2, 3]}, ValueError, "num_samples"),
        (
            (5, 2),
            {"scheme": "proportional", "num_samples": [1, 2, 0, 3, 4]},
            ValueError,
            "num_samples",
        ),
        (
            (5, 2),
            {"scheme": "proportional", "num_samples": [1.5, 2, 1, 3, 4]},
            TypeError,
            "num_samples",
        ),
        ((5, 2), {"scheme": "weighted"}, ValueError, "scheme"),
        ((5, 2), {"scheme": "Uniform"}, ValueError, "scheme"),
    ],
)
def test_sample_clients_rejects_bad_arguments(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        sample_clients(args[0], args[1], np.random.default_rng(0), **kwargs)


@pytest.mark.parametrize("rng", [0, None, np.random.RandomState(0)], ids=["int", "none", "legacy"])
def test_sample_clients_rejects_non_generator_rng(rng):
    with pytest.raises(TypeError, match="rng"):
        sample_clients(5, 2, rng)
