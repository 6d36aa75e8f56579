"""q-FFL formula functions (SPEC §2): q-FedAvg / q-FedSGD server steps, the objective, Lemma 12."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fairagg import EmptyState, fairavg, make_reports
from fairagg.rules.qffl import (
    lipschitz_q,
    qfedavg,
    qfedavg_step,
    qfedsgd,
    qfedsgd_step,
    qffl_objective,
)
from fairagg.types import LocalSpec
from tests.strategies import finite_floats
from tests.tolerances import assert_close


def literal_qfedavg(theta, deltas, losses, q, lr, eps=1e-10):
    """Alg. 1 term by term, as SPEC §2 writes it (no rescaling: moderate q and losses only)."""
    L = 1.0 / lr
    num = np.zeros_like(theta)
    h = 0.0
    for d, F in zip(deltas, losses, strict=True):
        dw = L * d
        Ft = F + eps
        num += Ft**q * dw
        h += q * Ft ** (q - 1) * float(dw @ dw) + L * Ft**q
    return theta - num / h, h


@st.composite
def rounds(draw, max_m=6, max_d=5):
    m = draw(st.integers(1, max_m))
    d = draw(st.integers(1, max_d))
    theta = draw(hnp.arrays(np.float64, (d,), elements=finite_floats(2.0), fill=st.nothing()))
    deltas = draw(hnp.arrays(np.float64, (m, d), elements=finite_floats(1.0), fill=st.nothing()))
    losses = draw(hnp.arrays(np.float64, (m,), elements=st.floats(0.01, 5.0), fill=st.nothing()))
    return theta, deltas, losses


@given(r=rounds(), q=st.sampled_from([0.0, 0.1, 1.0, 2.0, 5.0]), lr=st.sampled_from([0.01, 0.5]))
def test_qfedavg_step_equals_the_literal_formula(r, q, lr):
    theta, deltas, losses = r
    got = qfedavg_step(theta, deltas, losses, q, lr)
    want, h = literal_qfedavg(theta, deltas, losses, q, lr)
    assert_close(got.params, want, scale=10.0)
    assert_close(got.h_sum, h, scale=10.0)
    # the reported weights reproduce the step: θ − Σ w_k Δw_k with Δw_k = δ_k / lr
    assert_close(theta - got.weights @ (deltas / lr), got.params, scale=10.0)


@given(r=rounds(), lr=st.sampled_from([0.01, 0.5]))
def test_qfedavg_with_q_zero_is_the_unweighted_mean_of_the_client_models(r, lr):
    theta, deltas, losses = r
    got = qfedavg_step(theta, deltas, losses, 0.0, lr)
    assert_close(got.params, np.mean(theta - deltas, axis=0), scale=10.0)
    assert_close(got.h_sum, deltas.shape[0] / lr)


def test_qfedavg_hand():
    # Two clients, q = 1, lr = 1 (L = 1), ε = 0: Δw = δ; F̃ = (1, 3); δ = (1, 0), (0, 1).
    # Σ Δ_k = (1, 3); h = (1·1 + 1) + (1·1 + 3) = 6; θ⁺ = −(1, 3)/6.
    got = qfedavg_step(np.zeros(2), np.eye(2), [1.0, 3.0], 1.0, 1.0, epsilon=0.0)
    assert_close(got.params, [-1 / 6, -0.5])
    assert_close(got.h_sum, 6.0)
    assert_close(got.weights, [1 / 6, 0.5])


def test_qfedavg_large_q_does_not_overflow_and_follows_the_worst_client():
    # q = 1e4: F̃^q overflows float64 (2^1e4), the step does not. Only the worst client counts:
    # θ⁺ = θ − Δw_w / (q ‖Δw_w‖² / F̃_w + L).
    theta, deltas, losses, q, lr = (
        np.ones(3),
        np.array([[1.0, 0, 0], [0, 2.0, 0]]),
        [1.0, 2.0],
        1e4,
        0.1,
    )
    got = qfedavg_step(theta, deltas, losses, q, lr)
    dw = deltas[1] / lr
    want = theta - dw / (q * (dw @ dw) / (2.0 + 1e-10) + 1 / lr)
    np.testing.assert_allclose(got.params, want, rtol=1e-12, atol=0)
    assert np.all(np.isfinite(got.params)) and got.h_sum == np.inf


@given(r=rounds(), lr=st.sampled_from([0.01, 0.5]))
def test_qfedsgd_with_q_zero_is_the_mean_gradient_step(r, lr):
    theta, grads, losses = r
    got = qfedsgd_step(theta, grads, losses, 0.0, lr)
    assert_close(got.params, theta - lr * grads.mean(axis=0), scale=10.0)


@given(r=rounds(), q=st.sampled_from([0.5, 1.0, 3.0]))
def test_qfedsgd_static_step_is_fixed_step_gradient_descent_on_the_qffl_objective(r, q):
    """h_k = L (SPEC §2): θ − lr ∇f_q with f_q = (1/m) Σ F_k^{q+1}/(q+1), whose gradient is
    (1/m) Σ F_k^q ∇F_k (up to ε)."""
    theta, grads, losses = r
    m = losses.size
    got = qfedsgd_step(theta, grads, losses, q, 0.1, static_step=True)
    w = (losses + 1e-10) ** q / m
    assert_close(got.params, theta - 0.1 * (w @ grads), scale=10.0)
    assert_close(got.h_sum, m / 0.1)
    assert_close(got.weights, 0.1 * w)


def test_qfedsgd_static_step_overflow_is_reported():
    with pytest.raises(ValueError, match="overflows"):
        qfedsgd_step([0.0], [[1.0]], [10.0], 400.0, 0.1, static_step=True)


def _exact_qfedsgd(grads, losses, q, lr, eps=1e-10):
    """θ^1 − θ^0 and Σ h_k of q-FedSGD (SPEC §2) in exact rationals, each rounded once."""
    L = 1 / Fraction(lr)
    Ft = [Fraction(float(f)) + Fraction(eps) for f in losses]
    g = [[Fraction(float(x)) for x in row] for row in grads]
    num = [sum(Ft[k] ** q * g[k][j] for k in range(len(Ft))) for j in range(len(g[0]))]
    h = sum(
        q * Ft[k] ** (q - 1) * sum(x * x for x in g[k]) + L * Ft[k] ** q for k in range(len(Ft))
    )
    return [float(-n / h) for n in num], float(h)


@pytest.mark.parametrize("q", [1, 2])
def test_qfedsgd_step_in_scaled_form_is_exact_to_rounding(q):
    """Squared norms below 2^-968 take the scaled form: its step and Σ h_k are the exact
    values (rounded), with h_k's q F̃^(q-1) ‖g‖² term and the losses' largest power."""
    G = np.array([[2.0**-600, 0.0], [0.0, 3 * 2.0**-599]])
    got = qfedsgd_step([0.0, 0.0], G, [1.0, 2.0], float(q), 1.0)
    want, h = _exact_qfedsgd(G, [1.0, 2.0], q, 1.0)
    assert_close(got.params / np.array(want), [1.0, 1.0])
    assert_close(got.h_sum, h)


def test_qffl_step_beyond_float64_is_a_clear_error():
    msg = (
        r"^the q-FFL step overflows float64 for these deltas \(or grads\) and lr: its entries "
        r"exceed about 1\.8e308$"
    )
    with pytest.raises(ValueError, match=msg):  # lr · 1e10 = 1e310
        qfedsgd_step([0.0], [[1e10]], [1.0], 0.0, 1e300)


def test_qfedsgd_static_step_is_exact_to_rounding_where_the_plain_sum_is_not():
    """The static step Σ_k w_k ∇F_k with w_k = lr/m (q = 0) where the plain weighted sum
    overflows in a partial sum or lands among the subnormals: the exact sum, rounded once."""
    # 1·2^1023 + 1·2^1023 overflows before −2^1023 comes in; the sum is 2^1023.
    G = [[2.0**1023], [2.0**1023], [-(2.0**1023)]]
    got = qfedsgd_step([0.0], G, [1.0] * 3, 0.0, 3.0, static_step=True)
    np.testing.assert_array_equal(got.params, [-(2.0**1023)])
    # 2·2^1023 twice and −2·2^1023 twice: inf − inf in the plain sum, no warning, exactly 0.
    G = [[2.0**1023], [2.0**1023], [-(2.0**1023)], [-(2.0**1023)]]
    got = qfedsgd_step([1.0], G, [1.0] * 4, 0.0, 8.0, static_step=True)
    np.testing.assert_array_equal(got.params, [1.0])
    # ... and an entry far below that column's keeps its bits (2^-1000, not 0).
    G = [[2.0**1023, 2.0**-1000], [2.0**1023, 0.0], [-(2.0**1023), 0.0]]
    got = qfedsgd_step([0.0, 0.0], G, [1.0] * 3, 0.0, 3.0, static_step=True)
    np.testing.assert_array_equal(got.params, [-(2.0**1023), -(2.0**-1000)])
    # Below 2^-968: 2^-11 (2^-1000, 3·2^-1000) + 2^-11 (2^-1000, 2^-1000), exact.
    G = [[2.0**-1000, 3 * 2.0**-1000], [2.0**-1000, 2.0**-1000]]
    got = qfedsgd_step([0.0, 0.0], G, [1.0, 1.0], 0.0, 2.0**-10, static_step=True)
    np.testing.assert_array_equal(got.params, [-(2.0**-1010), -(2.0**-1009)])
    # Two terms of 0.6 subnormal units each: the exact sum 1.2 units rounds to 1 unit (the
    # rounded terms would sum to 2).
    G = [[0.6 * 2.0**-974], [0.6 * 2.0**-974]]
    got = qfedsgd_step([0.0], G, [1.0, 1.0], 0.0, 2.0**-99, static_step=True)
    np.testing.assert_array_equal(got.params, [-(2.0**-1074)])


def test_qfedsgd_static_step_beyond_float64_is_a_clear_error():
    msg = (
        r"^the step overflows float64 for these grads, losses and lr: its entries exceed "
        r"about 1\.8e308$"
    )
    with pytest.raises(ValueError, match=msg):
        qfedsgd_step([0.0], [[1e308], [1e308]], [1.0, 1.0], 0.0, 4.0, static_step=True)


@given(r=rounds(), q=st.sampled_from([0.0, 1.0, 2.0]))
def test_qfedsgd_is_qfedavg_with_the_gradient_in_place_of_delta_w(r, q):
    theta, grads, losses = r
    lr = 0.2
    assert_close(
        qfedsgd_step(theta, grads, losses, q, lr).params,
        qfedavg_step(theta, lr * grads, losses, q, lr).params,
        scale=10.0,
    )


def test_qffl_objective():
    assert_close(qffl_objective([1.0, 3.0], 0.0), 2.0)  # the mean loss
    assert_close(qffl_objective([1.0, 3.0], 1.0), (1 + 9) / 2 / 2)  # Σ F²/2 / m
    assert_close(qffl_objective([1.0, 3.0], 1.0, weights=[3, 1]), (0.75 * 1 + 0.25 * 9) / 2)
    # Beyond float64: a clear error, neither NaN nor a silent inf (nor 0 from an underflow).
    with pytest.raises(ValueError, match="q-FFL objective overflows float64"):
        qffl_objective([2.0], 5000.0)
    assert_close(qffl_objective([0.5], 999.0) / (2.0**-1000 / 1000), 1.0)


def test_qffl_objective_of_zero_losses_is_0():
    assert qffl_objective([0.0, 0.0], 1.0) == 0.0
    assert qffl_objective([0.0], 0.0) == 0.0


def test_qffl_objective_is_right_where_the_largest_power_leaves_float64():
    """F*^(q+1) beyond float64's range, f_q within it: the value itself (the docstring's
    example), exact where it is a power of two, the exactly rounded value at the edge, and the
    error just beyond 2^1024."""
    assert_close(qffl_objective([1.5e154], 1.0), 1.125e308)  # 1.5e154² / 2
    assert qffl_objective([2.0**-520], 1.0) == 2.0**-1041  # (2^-520)² / 2, F*^2 subnormal
    # F*^2 = 2^-1022, the smallest normal number: f_q = (F*² + x²) / 4 rounded once.
    x = 9.501354593527226e-155
    want = float((Fraction(2.0**-511) ** 2 + Fraction(x) ** 2) / 4)
    assert qffl_objective([2.0**-511, x], 1.0) == want
    # f_q = (2^513)² / 4 = 2^1024 exactly: just beyond float64.
    with pytest.raises(ValueError, match=r"^the q-FFL objective overflows float64 \(q = 1\.0, "):
        qffl_objective([2.0**513, 0.0], 1.0)


def test_qffl_objective_message_names_the_formula_and_the_limit():
    msg = (
        r"^the q-FFL objective overflows float64 \(q = 5000\.0, largest loss 2\): "
        r"f_q = Σ p_k F_k\^\(q\+1\)/\(q\+1\) exceeds about 1\.8e308$"
    )
    with pytest.raises(ValueError, match=msg):
        qffl_objective([2.0], 5000.0)


def test_qffl_objective_raises_no_floating_point_error_where_ratios_underflow():
    # (1e-300)^3 underflows next to the top term's 1: no error even under errstate "raise".
    with np.errstate(all="raise"):
        assert_close(qffl_objective([1.0, 1e-300], 2.0), 1 / 6)


def test_qffl_objective_zero_weights_and_low_losses_are_valid():
    # A zero loss, losses below 1 and a zero weight are all allowed (F ≥ 0, p ≥ 0).
    assert_close(qffl_objective([0.0, 0.5], 1.0), 0.25 / 2 / 2)
    assert_close(qffl_objective([1.0, 3.0], 1.0, weights=[0.0, 0.5]), 9 / 2)
    # Weights summing to less than 1 are normalised, not refused.
    assert_close(qffl_objective([1.0, 3.0], 1.0, weights=[0.25, 0.5]), (1 + 18) / 3 / 2)


def test_qffl_objective_computes_in_float64_from_any_input_dtype():
    # float32 and integer inputs are read as float64: the result equals the float64 call exactly.
    F32, p32 = np.array([0.1, 0.7], dtype=np.float32), np.array([1.0, 2.0], dtype=np.float32)
    want = qffl_objective(F32.astype(np.float64), 1.0, weights=p32.astype(np.float64))
    assert qffl_objective(F32, 1.0, weights=p32) == want
    assert qffl_objective(np.array([1, 3]), 1.0, weights=np.array([3, 1])) == qffl_objective(
        [1.0, 3.0], 1.0, weights=[3.0, 1.0]
    )


@pytest.mark.parametrize(
    ("losses", "weights", "match"),
    [
        ([], None, r"losses must have at least 1 entry"),
        ([[1.0, 2.0]], None, r"losses must be 1-dimensional"),
        ([1.0, -1.0], None, r"losses must be non-negative; minimum is -1\.0"),
        ([1.0, 2.0], [1.0, 2.0, 3.0], r"weights must have shape \(2,\)"),
        ([1.0, 2.0], [-1.0, 3.0], r"^weights must be non-negative with a positive sum$"),
        ([1.0, 2.0], [0.0, 0.0], r"^weights must be non-negative with a positive sum$"),
    ],
)
def test_qffl_objective_rejects_bad_input(losses, weights, match):
    with pytest.raises(ValueError, match=match):
        qffl_objective(losses, 1.0, weights=weights)


@given(
    d=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    q=st.sampled_from([0.0, 0.5, 1.0, 2.0, 5.0]),
)
def test_lemma_12_bounds_the_hessian_of_a_quadratic_loss(d, seed, q):
    # f(w) = ½ (w − a)ᵀ H (w − a) + c with H ⪰ 0, ∇f L-Lipschitz for L = λ_max(H). The Hessian of
    # f^{q+1}/(q+1) is f^q H + q f^{q−1} ∇f ∇fᵀ; its spectral norm must not exceed L_q.
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((d, d))
    H = G @ G.T
    a, w, c = rng.standard_normal(d), rng.standard_normal(d), rng.uniform(0.01, 1.0)
    f = 0.5 * (w - a) @ H @ (w - a) + c
    g = H @ (w - a)
    hess = f**q * H + q * f ** (q - 1) * np.outer(g, g)
    L = np.linalg.eigvalsh(H)[-1]
    bound = lipschitz_q(f, float(g @ g), L, q)
    assert np.linalg.eigvalsh(hess)[-1] <= bound * (1 + 1e-12)


def test_lemma_12_at_zero_loss_for_q_of_at_least_one():
    # f = 0: q = 1 gives L·0 + 1·0⁰·‖∇f‖² = ‖∇f‖²; q > 1 gives 0 (only 0 < q < 1 is refused).
    assert lipschitz_q(0.0, 2.0, 3.0, 1.0) == 2.0
    assert lipschitz_q(0.0, 2.0, 3.0, 1.5) == 0.0
    assert lipschitz_q(0.0, 2.0, 3.0, 0.0) == 3.0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1.0, 1.0, 1.0, 1.0), r"^loss must be >= 0\.0; got -1\.0$"),
        ((1.0, -1.0, 1.0, 1.0), r"^grad_norm_sq must be >= 0\.0; got -1\.0$"),
        ((1.0, 1.0, 0.0, 1.0), r"^L must be > 0\.0; got 0\.0$"),
        ((1.0, 1.0, 1.0, -1.0), r"^q must be >= 0\.0; got -1\.0$"),
        (
            (0.0, 1.0, 1.0, 0.5),
            r"^loss must be positive for 0 < q < 1 \(f\^\(q-1\) is undefined at 0\)$",
        ),
    ],
)
def test_lipschitz_q_rejects_bad_input_naming_it(args, match):
    with pytest.raises(ValueError, match=match):
        lipschitz_q(*args)


def test_lemma_12_is_tight_for_an_isotropic_quadratic():
    # H = cI: ∇f is an eigenvector of both terms, so ‖Hessian‖ = L f^q + q f^{q−1}‖∇f‖² exactly.
    c, q = 3.0, 2.0
    a, w = np.zeros(3), np.array([1.0, 2.0, -1.0])
    f = 0.5 * c * (w - a) @ (w - a) + 0.25
    g = c * (w - a)
    hess = f**q * c * np.eye(3) + q * f ** (q - 1) * np.outer(g, g)
    assert_close(np.linalg.eigvalsh(hess)[-1], lipschitz_q(f, float(g @ g), c, q))


T2, D2 = np.zeros(2), np.eye(2)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: qfedavg_step(T2, D2, [1.0, 1.0], -1.0, 0.1), ValueError, "q must be >= 0"),
        (lambda: qfedavg_step(T2, D2, [1.0, 1.0], 1.0, 0.0), ValueError, "lr must be > 0"),
        (
            lambda: qfedavg_step(T2, D2, [1.0, np.nan], 1.0, 0.1),
            ValueError,
            "losses must be finite",
        ),
        (lambda: qfedavg_step(T2, D2, [1.0, -1.0], 1.0, 0.1), ValueError, "non-negative"),
        (lambda: qfedavg_step(T2, D2, [1.0], 1.0, 0.1), ValueError, "losses must have shape"),
        (
            lambda: qfedavg_step(T2, np.eye(3), [1.0] * 3, 1.0, 0.1),
            ValueError,
            r"deltas .*\(m, 2\)",
        ),
        (lambda: qfedsgd_step(T2, np.eye(3), [1.0] * 3, 1.0, 0.1), ValueError, r"grads .*\(m, 2\)"),
        (lambda: qfedsgd_step(T2, [[np.inf, 0.0]], [1.0], 1.0, 0.1), ValueError, "grads must be"),
        (
            lambda: qfedavg_step(T2, D2, [0.0, 1.0], 0.5, 0.1, epsilon=0.0),
            ValueError,
            "losses \\+ epsilon must be positive",
        ),
        (lambda: qfedsgd_step(T2, D2, [1.0, 1.0], 1.0, 0.1, static_step=1), TypeError, "bool"),
        (lambda: qffl_objective([1.0, 2.0], -0.5), ValueError, "q must be >= 0"),
        (lambda: lipschitz_q(0.0, 1.0, 1.0, 0.5), ValueError, "loss must be positive"),
        (lambda: lipschitz_q(1.0, 1.0, 0.0, 1.0), ValueError, "L must be > 0"),
    ],
)
def test_bad_input_raises_naming_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# --------------------------------------------------------------------------------------------
# the registry rules
# --------------------------------------------------------------------------------------------


@given(r=rounds(), q=st.sampled_from([0.0, 1.0, 5.0]), lr=st.sampled_from([0.01, 0.5]))
def test_qfedavg_rule_is_the_step_with_l_from_the_round_lr(r, q, lr):
    theta, D, F = r
    reports = make_reports(D, np.ones(D.shape[0], dtype=np.int64), losses=F, lr=lr)
    agg = qfedavg(q=q).step(theta, reports, EmptyState())
    ref = qfedavg_step(theta, D, F, q, lr)
    assert_close(agg.params, ref.params)
    assert_close(agg.info["h_sum"], ref.h_sum)
    # info["weights"] multiply δ_k: θ^{t+1} = θ^t − Σ_k weights_k δ_k.
    # Re-summed in another order (L w_k δ_k instead of w_k (L δ_k)): a few ulps more apart.
    assert_close(agg.params, theta - agg.info["weights"] @ D, scale=100.0)
    # An explicit L overrides the round's lr.
    fixed = qfedavg(q=q, lipschitz=1.0 / lr).step(theta, reports._replace(lr=0.123), EmptyState())
    assert_close(fixed.params, ref.params)


@given(r=rounds())
def test_qfedavg_rule_with_q_zero_is_fairavg(r):
    theta, D, F = r
    reports = make_reports(D, np.arange(1, D.shape[0] + 1), losses=F, lr=0.1)
    got = qfedavg(q=0.0).step(theta, reports, EmptyState())
    want = fairavg().step(theta, reports, EmptyState())
    assert_close(got.params, want.params)
    assert_close(got.info["weights"], want.info["weights"])


@given(r=rounds(), q=st.sampled_from([0.0, 1.0, 5.0]), static=st.booleans())
def test_qfedsgd_rule_reads_the_gradients(r, q, static):
    theta, G, F = r
    reports = make_reports(None, np.ones(G.shape[0], dtype=np.int64), losses=F, gradients=G, lr=0.1)
    rule = qfedsgd(q=q, static_step=static)
    assert rule.local.report == "gradients"
    agg = rule.step(theta, reports, EmptyState())
    assert_close(agg.params, qfedsgd_step(theta, G, F, q, 0.1, static_step=static).params)


def test_rules_keep_float32_params():
    theta = np.ones(3, dtype=np.float32)
    D = np.ones((2, 3), dtype=np.float32)
    reports = make_reports(D, [1, 1], losses=[1.0, 2.0], gradients=D, lr=0.1)
    for rule in (qfedavg(), qfedsgd()):
        assert rule.step(theta, reports, EmptyState()).params.dtype == np.float32


def test_rules_need_l_or_the_round_lr():
    reports = make_reports(np.ones((2, 2)), [1, 1], losses=[1.0, 2.0], gradients=np.ones((2, 2)))
    for rule in (qfedavg(), qfedsgd()):
        with pytest.raises(ValueError, match="lipschitz"):
            rule.step(np.zeros(2), reports, EmptyState())


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: qfedavg(q=-1.0), ValueError, "q"),
        (lambda: qfedavg(lipschitz=0.0), ValueError, "lipschitz"),
        (lambda: qfedavg(epsilon=-1e-3), ValueError, "epsilon"),
        (lambda: qfedsgd(static_step=1), TypeError, "static_step"),
        (lambda: qfedsgd(batch_size=0), ValueError, "batch_size"),
        (lambda: qfedsgd(q=float("nan")), ValueError, "q"),
    ],
)
def test_rule_hyperparameters_are_checked(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_rule_defaults_and_hyperparameters():
    """The documented defaults: q = 1, L from the round's lr, ε = 1e-10, the dynamic step, full
    batches, NumPy; every hyper-parameter reported under its own name."""
    common = {"q": 1.0, "lipschitz": None, "epsilon": 1e-10, "backend": "numpy"}
    avg, sgd = qfedavg(), qfedsgd()
    assert (avg.name, sgd.name) == ("qfedavg", "qfedsgd")
    assert dict(avg.hyperparams) == common
    assert dict(sgd.hyperparams) == {**common, "static_step": False, "batch_size": None}
    assert sgd.local == LocalSpec(report="gradients", gradient_batch_size=None)
    assert avg.local == LocalSpec()
    kw = {"q": 2.0, "lipschitz": 0.5, "epsilon": 0.25, "backend": "numba"}
    assert dict(qfedavg(**kw).hyperparams) == kw
    rule = qfedsgd(static_step=True, batch_size=1, **kw)
    assert dict(rule.hyperparams) == {**kw, "static_step": True, "batch_size": 1}
    assert rule.local == LocalSpec(report="gradients", gradient_batch_size=1)
    for r in (avg, sgd):
        assert r.init(np.zeros(2), 3) == EmptyState()


def _round(lr=0.1):
    rng = np.random.default_rng(0)
    G, F = rng.normal(size=(4, 300)), rng.random(4) + 0.5
    return np.zeros(300), make_reports(G, [1] * 4, losses=F, gradients=G, lr=lr)


@pytest.mark.parametrize(
    ("kwargs", "step_kwargs"),
    [
        ({"q": 1.0}, {}),
        ({"q": 1.0, "lipschitz": 2.0}, {"lr": 0.5}),
        ({"q": 1.0, "epsilon": 0.5}, {"epsilon": 0.5}),
        ({"q": 1.0, "backend": "numba"}, {"backend": "numba"}),
        ({"q": 1.0, "static_step": True}, {"static_step": True}),
    ],
)
@pytest.mark.parametrize("name", ["qfedavg", "qfedsgd"])
def test_rule_step_is_the_step_function_with_the_rule_hyperparameters(name, kwargs, step_kwargs):
    """Bit for bit: the rule's step is qfedavg_step / qfedsgd_step with its q, L (1/lr of the
    round unless lipschitz is given), ε, backend and static_step; info holds its weights (times
    L on δ_k for q-FedAvg) and Σ h_k; the state is the EmptyState passed in."""
    if name == "qfedavg" and "static_step" in kwargs:
        return
    theta, reports = _round()
    rule = (qfedavg if name == "qfedavg" else qfedsgd)(**kwargs)
    agg = rule.step(theta, reports, EmptyState())
    step = {"lr": 0.1, **step_kwargs}
    if name == "qfedavg":
        ref = qfedavg_step(theta, reports.deltas, reports.losses, 1.0, **step)
        weights = (1.0 / step["lr"]) * ref.weights
    else:
        ref = qfedsgd_step(theta, reports.gradients, reports.losses, 1.0, **step)
        weights = ref.weights
    np.testing.assert_array_equal(agg.params, ref.params)
    assert set(agg.info) == {"weights", "h_sum"}
    np.testing.assert_array_equal(agg.info["weights"], weights)
    assert agg.info["h_sum"] == ref.h_sum
    assert agg.state == EmptyState() and agg.state is not None
    # Each hyper-parameter changes this round's step from its default's.
    plain = qfedavg_step if name == "qfedavg" else qfedsgd_step
    if step_kwargs:
        other = plain(theta, reports.deltas, reports.losses, 1.0, 0.1)
        assert not np.array_equal(other.params, ref.params)


def test_rules_check_reports_before_the_values_of_params():
    """A round without losses is refused as such, whatever params."""
    G = np.eye(2)
    reports = make_reports(G, [1, 1], gradients=G, lr=0.1)
    for rule in (qfedavg(), qfedsgd()):
        with pytest.raises(ValueError, match=r"this rule needs reports\.losses"):
            rule.step(np.full(2, np.nan), reports, EmptyState())


@pytest.mark.parametrize("name", ["qfedavg", "qfedsgd"])
def test_rule_without_l_or_lr_says_which_rule_and_how(name):
    rule = qfedavg() if name == "qfedavg" else qfedsgd()
    reports = make_reports(np.ones((2, 2)), [1, 1], losses=[1.0, 2.0], gradients=np.ones((2, 2)))
    msg = (
        f"^{name} needs L = 1/lr: build it with lipschitz=L, or pass reports with lr set "
        r"\(fairagg\.simulate does\)$"
    )
    with pytest.raises(ValueError, match=msg):
        rule.step(np.zeros(2), reports, EmptyState())
    with pytest.raises(ValueError, match=r"^params must be 1-dim"):
        rule.step(np.zeros((1, 2)), reports._replace(lr=0.1), EmptyState())


@pytest.mark.parametrize("rule", [qfedavg, qfedsgd])
@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"q": -1.0}, ValueError, r"^q must be >= 0\.0; got -1\.0$"),
        ({"lipschitz": 0.0}, ValueError, r"^lipschitz must be > 0\.0; got 0\.0$"),
        ({"epsilon": -1e-3}, ValueError, r"^epsilon must be >= 0\.0; got -0\.001$"),
    ],
)
def test_rule_hyperparameter_errors_name_the_argument_and_the_bound(rule, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        rule(**kwargs)
    rule(lipschitz=0.5)  # any L > 0


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"static_step": 1}, TypeError, r"^static_step must be a bool; got int$"),
        ({"batch_size": 0}, ValueError, r"^batch_size must be >= 1; got 0$"),
    ],
)
def test_qfedsgd_rule_errors_name_the_argument(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        qfedsgd(**kwargs)


@pytest.mark.parametrize("name", ["qfedavg_step", "qfedsgd_step"])
def test_step_functions_run_on_their_backend(name):
    """backend="numba" fuses the norms and the sum: on this round its step differs from
    NumPy's in the last bits, so the backend is the one asked for."""
    theta, reports = _round()
    f = qfedavg_step if name == "qfedavg_step" else qfedsgd_step
    a = f(theta, reports.gradients, reports.losses, 1.0, 0.1)
    b = f(theta, reports.gradients, reports.losses, 1.0, 0.1, backend="numba")
    assert not np.array_equal(a.params, b.params)


@pytest.mark.parametrize("f", [qfedavg_step, qfedsgd_step])
@pytest.mark.parametrize(
    ("lr", "epsilon", "match"),
    [
        (0.0, 1e-10, r"^lr must be > 0\.0; got 0\.0$"),
        (-0.1, 1e-10, r"^lr must be > 0\.0; got -0\.1$"),
        (0.1, -1.0, r"^epsilon must be >= 0\.0; got -1\.0$"),
    ],
)
def test_step_errors_name_the_argument_and_the_bound(f, lr, epsilon, match):
    with pytest.raises(ValueError, match=match):
        f(T2, D2, [1.0, 1.0], 1.0, lr, epsilon)


def test_qfedsgd_step_static_step_error_names_the_type():
    with pytest.raises(TypeError, match=r"^static_step must be a bool; got int$"):
        qfedsgd_step(T2, D2, [1.0, 1.0], 1.0, 0.1, static_step=1)


# ---------------------------------------------------------------- found by mutation testing
_DQ = np.array([[0.1, 0.2], [0.3, -0.1], [-0.2, 0.4]])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_q_zero_takes_a_zero_loss_with_epsilon_zero_as_fedavg(backend):
    # q = 0: F̃^0 = 1 for every client, a zero loss included (no log, no 0/0): h_k = L,
    # Σ h_k = m L = 30 exactly, weights 1/(m L), the step the plain mean of L δ_k / L.
    res = qfedavg_step(np.zeros(2), _DQ, [0.0, 1.0, 2.0], 0.0, 0.1, epsilon=0.0, backend=backend)
    assert res.h_sum == 30.0
    np.testing.assert_allclose(res.weights, np.full(3, 1 / 30), rtol=1e-15)
    np.testing.assert_allclose(res.params, -_DQ.mean(axis=0), rtol=1e-15)
    res = qfedsgd_step(np.zeros(2), _DQ, [0.0, 1.0, 2.0], 0.0, 0.1, epsilon=0.0, backend=backend)
    assert res.h_sum == 30.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: qfedavg_step(np.zeros(2), _DQ, [0.0, 1.0, 2.0], 1.0, 0.1, epsilon=0.0),
            "losses + epsilon must be positive for q > 0 (F̃^(q-1) is undefined at 0); keep "
            "epsilon > 0 or pass positive losses",
        ),
        (
            lambda: qfedsgd_step(np.zeros(2), _DQ, [1e300, 1.0, 2.0], 5.0, 0.1, static_step=True),
            "losses^q overflows float64 (q = 5.0, largest loss 1e+300); with static_step=True "
            "the step is lr times F̃^q-weighted gradients: lower q",
        ),
        (
            lambda: qfedavg_step(np.full(2, 1.7e308), -_DQ * 1e308, [1.0, 1.0, 1.0], 0.0, 1.0),
            "params minus the step overflows float64 (both are near 1.8e308 in magnitude)",
        ),
    ],
)
def test_q_step_messages_are_exact(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == message


# ------------------------------------------- the scaled path, against 60-digit decimals
def _decimal_q_step(theta, D, F, q, lr, eps, *, sgd):
    """q-FFL Alg. 1 (q-FedAvg, Δw = L δ) or Alg. 3 (q-FedSGD, Δw = g) in 60-digit decimals,
    whose exponents have no float64 limits: θ^{t+1}, Σ h_k and the weights F̃_k^q / Σ h_k."""
    from decimal import Decimal, localcontext

    with localcontext() as ctx:
        ctx.prec = 60
        L = 1 / Decimal(lr)
        qd = Decimal(q)
        dw = [[(Decimal(1) if sgd else L) * Decimal(x) for x in row] for row in D]
        Ft = [Decimal(f) + Decimal(eps) for f in F]
        Fq = [f**qd if q else Decimal(1) for f in Ft]
        h = [
            (qd * f ** (qd - 1) * sum(x * x for x in row) if q else 0) + L * fq
            for f, row, fq in zip(Ft, dw, Fq, strict=True)
        ]
        hs = sum(h)
        w = [fq / hs for fq in Fq]
        params = [
            Decimal(t) - sum(w[k] * dw[k][j] for k in range(len(dw))) for j, t in enumerate(theta)
        ]
        return (
            np.array([float(p) for p in params]),
            float(hs),
            np.array([float(x) for x in w]),
        )


@pytest.mark.parametrize("sgd", [False, True])
@pytest.mark.parametrize(
    ("case", "k_updates", "loss_scale", "q", "lr"),
    [
        ("updates whose squares overflow", 600, 1.0, 1.0, 0.1),
        ("updates whose squares underflow", -600, 1.0, 2.0, 0.1),
        ("losses whose powers underflow", 0, 1e-300, 3.0, 0.1),
        ("losses whose powers overflow", 0, 1e300, 2.0, 0.1),
        ("an lr whose inverse is huge", 0, 1.0, 1.5, 1e-300),
        ("q = 0 with squares that overflow", 600, 1.0, 0.0, 0.1),
        # ‖δ_k‖² underflows to 0 while L² ‖δ_k‖² is 1e239: not a zero update
        ("squares that underflow times a huge L", -600, 1.0, 1.0, 1e-300),
        # q F̃_k^(q-1) / max F̃^q spans e^-40000..1: the smallest terms vanish, exactly
        ("losses from 1e-300 to 1e300 at q = 30", 0, "span", 30.0, 0.1),
    ],
)
def test_the_scaled_step_equals_the_formula_in_decimals(case, k_updates, loss_scale, q, lr, sgd):
    # the step, Σ h_k and the weights the scaled path returns, each to rounding (h_sum is +inf
    # where Σ h_k exceeds float64, as documented)
    rng = np.random.default_rng(0)
    theta = np.ldexp(rng.standard_normal(3), max(k_updates, 0))
    D = np.ldexp(rng.standard_normal((4, 3)), k_updates)
    F = rng.uniform(0.1, 3.0, 4)
    F = F * (np.array([1e-300, 1e-100, 1e100, 1e300]) if loss_scale == "span" else loss_scale)
    step = qfedsgd_step if sgd else qfedavg_step
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the scaled path's over- and underflows stay inside
        got = step(theta, D, F, q, lr)
    params, h_sum, weights = _decimal_q_step(theta, D, F, q, lr, 1e-10, sgd=sgd)
    np.testing.assert_allclose(got.params, params, rtol=4e-15, err_msg=case)
    np.testing.assert_allclose(got.weights, weights, rtol=4e-15, atol=0, err_msg=case)
    assert got.h_sum == pytest.approx(h_sum, rel=4e-15) or got.h_sum == h_sum == np.inf, case


def test_the_objective_ignores_the_loss_of_a_client_of_weight_zero():
    # the largest loss belongs to a client of weight 0: dividing the others by it flushed
    # (1e-10 / 1e300)^2 to 0 and returned 0.0 for f_q = 1 · (1e-10)^2 / 2
    assert qffl_objective([1e300, 1e-10], 1.0, weights=[0, 1]) == pytest.approx(5e-21, rel=1e-15)
    assert qffl_objective([np.finfo(float).max, 2.0], 3.0, weights=[0.0, 1.0]) == 4.0


@pytest.mark.parametrize("q", [0.0, 0.5, 1.0, 2.5, 7.0])
@pytest.mark.parametrize("exp10", [-250, -120, -40, 0, 40, 120, 150])
def test_the_objective_equals_decimals_wherever_representable(q, exp10):
    # F_k = c_k 10^exp10: F*^(q+1) leaves float64's range at most of these, the value often not
    from decimal import Decimal, localcontext

    rng = np.random.default_rng(abs(exp10) + int(10 * q))
    F = rng.uniform(0.1, 3.0, 5) * 10.0**exp10
    w = rng.uniform(0.0, 1.0, 5)
    with localcontext() as ctx:
        ctx.prec = 60
        p = [Decimal(x) / sum(Decimal(y) for y in w) for x in w]
        exact = sum(pk * Decimal(f) ** Decimal(q + 1.0) for pk, f in zip(p, F, strict=True))
        exact /= Decimal(q + 1.0)
    if exact > Decimal(np.finfo(float).max):
        with pytest.raises(ValueError, match="the q-FFL objective overflows float64"):
            qffl_objective(F, q, weights=w)
        return
    got = qffl_objective(F, q, weights=w)
    if exact < Decimal(np.finfo(float).tiny):  # subnormal or 0: the nearest such float
        assert abs(got - float(exact)) <= 2.0**-1074, (got, exact)
    else:
        assert got == pytest.approx(float(exact), rel=1e-14, abs=0.0), (got, exact)


@pytest.mark.parametrize("step", [qfedavg_step, qfedsgd_step])
def test_steps_name_the_argument_that_is_wrong(step):
    name = "deltas" if step is qfedavg_step else "grads"
    th, D = np.zeros(2), np.array([[1.0, 2.0], [0.5, -1.0]])
    cases = [
        (lambda: step([[0.0, 0.0]], D, [1.0, 2.0], 1.0, 0.1),
         "params must be 1-dimensional; got shape (1, 2)"),
        (lambda: step(th, np.zeros((0, 2)), [], 1.0, 0.1),
         f"{name} must have at least 1 entry along its first axis; got shape (0, 2)"),
        (lambda: step(th, D[0], [1.0], 1.0, 0.1),
         f"{name} must be 2-dimensional; got shape (2,)"),
    ]  # fmt: skip
    for call, message in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == message


@pytest.mark.parametrize("step", [qfedavg_step, qfedsgd_step])
def test_integer_and_float32_losses_are_the_float64_values(step):
    th, D = np.zeros(2), np.array([[1.0, 2.0], [0.5, -1.0]])
    want = step(th, D, np.array([1.0, 2.0]), 1.5, 0.1)
    got = step(th, D, np.array([1, 2]), 1.5, 0.1)  # an integer array is accepted
    np.testing.assert_array_equal(got.params, want.params)
    f32 = np.array([0.1, 0.7], np.float32)
    a, b = step(th, D, f32, 1.5, 0.1), step(th, D, f32.astype(np.float64), 1.5, 0.1)
    np.testing.assert_array_equal(a.params, b.params)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert a.weights.dtype == np.float64 and a.h_sum == b.h_sum


@pytest.mark.parametrize("step", [qfedavg_step, qfedsgd_step])
def test_float32_params_step_in_float64(step):
    th32 = np.array([0.1, -0.3], np.float32)
    D = np.array([[1.0, 2.0], [0.5, -1.0]])
    got = step(th32, D, [0.4, 0.9], 1.5, 0.1)
    want = step(th32.astype(np.float64), D, [0.4, 0.9], 1.5, 0.1)
    assert got.params.dtype == np.float64
    np.testing.assert_array_equal(got.params, want.params)


def test_no_floating_point_warning_escapes_at_any_scale():
    # updates from subnormal to 2^1000, q from 0 to 30, losses from 1e-300 to 1e300, lr from
    # 1e-300 to 1e300: every step is a result or a ValueError, never a RuntimeWarning from an
    # intermediate over- or underflow (the code computes those on purpose, then rescales)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in (-1100, -1000, -600, -330, 0, 330, 600, 1000):
            for q in (0.0, 0.5, 3.0, 30.0):
                for loss_scale in (1e-300, 1.0, 1e300):
                    F = rng.uniform(0.0, 3.0, 4) * loss_scale
                    for lr in (1e-300, 1e-100, 0.1, 1e100, 1e300):
                        theta = rng.standard_normal(3)
                        D = np.ldexp(rng.standard_normal((4, 3)), k)
                        for step in (qfedavg_step, qfedsgd_step):
                            try:
                                step(theta, D, F, q, lr)
                            except ValueError:
                                pass
                    try:
                        qffl_objective(F, q)
                    except ValueError:
                        pass


@pytest.mark.parametrize("step", [qfedavg_step, qfedsgd_step])
def test_h_sum_is_finite_wherever_it_is_representable(step):
    # max F̃^q = 2e305 > e^700 on the plain path (every ratio u_k in range): Σ h_k ≈ 3e306 was
    # reported as +inf
    D = np.array([[1e-3, 0.0], [0.0, 1e-3]])
    F = np.array([1e305, 2e305])
    got = step(np.zeros(2), D, F, 1.0, 0.1)
    _, h_sum, _ = _decimal_q_step(np.zeros(2), D, F, 1.0, 0.1, 1e-10, sgd=step is qfedsgd_step)
    assert got.h_sum == pytest.approx(h_sum, rel=1e-13)


@pytest.mark.parametrize(
    ("k", "loss_scale", "q", "lr"),
    [
        (600, 1.0, 1.0, 0.1),
        (-600, 1.0, 2.0, 0.1),
        (0, 1e-300, 3.0, 0.1),
        (0, 1e100, 2.0, 0.1),
        (0, 1.0, 1.5, 1e300),
        (-300, 1.0, 1.0, 1e-300),
        (1000, 1e-100, 2.0, 1e-300),
    ],  # fmt: skip
)
def test_the_static_step_equals_decimals_at_every_scale(k, loss_scale, q, lr):
    # static_step: h_k = L, θ − Σ_k F̃_k^q g_k / (m L), the weights F̃_k^q / (m L) ranging over
    # 1e-900..1e200 and the gradients over 2^±600 (the plain weighted sum over- or underflows)
    from decimal import Decimal, localcontext

    rng = np.random.default_rng(k + 1000)
    theta = np.ldexp(rng.standard_normal(3), max(k, 0))
    G = np.ldexp(rng.standard_normal((4, 3)), k)
    F = rng.uniform(0.1, 3.0, 4) * loss_scale
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = qfedsgd_step(theta, G, F, q, lr, static_step=True)
    with localcontext() as ctx:
        ctx.prec = 60
        L, m = 1 / Decimal(lr), len(F)
        w = [(Decimal(f) + Decimal(1e-10)) ** Decimal(q) / (m * L) for f in F]
        want = [
            float(Decimal(t) - sum(w[i] * Decimal(G[i, j]) for i in range(m)))
            for j, t in enumerate(theta)
        ]
    np.testing.assert_allclose(got.params, want, rtol=4e-15)


def test_squares_that_underflow_to_zero_still_count_where_they_matter():
    # ‖δ_k‖² ≈ 1e-330 is 0 in float64, yet with F̃_k ≈ 1e-300 (ε = 0) and L = 1e30 the term
    # q F̃_k^(q-1) L² ‖δ_k‖² ≈ 1e30 is as large as L F̃_k^q / F̃_k: treating the updates as
    # zero would change the step by a factor near 2
    rng = np.random.default_rng(3)
    theta = rng.standard_normal(3) * 1e-165
    D = rng.standard_normal((3, 3)) * 1e-165
    F = rng.uniform(0.5, 2.0, 3) * 1e-300
    got = qfedavg_step(theta, D, F, 1.0, 1e-30, epsilon=0.0)
    params, h_sum, weights = _decimal_q_step(theta, D, F, 1.0, 1e-30, 0.0, sgd=False)
    np.testing.assert_allclose(got.params, params, rtol=1e-13)
    np.testing.assert_allclose(got.weights, weights, rtol=1e-13)
    assert got.h_sum == pytest.approx(h_sum, rel=1e-13)


def test_the_static_step_survives_a_partial_sum_that_overflows():
    # weights F̃ lr / m = 1e308 on gradients (0.95, 0.95, −0.95): the plain sum overflows at
    # its second term, the result (−9.5e307 after θ − step) does not
    G = np.array([[0.95], [0.95], [-0.95]])
    got = qfedsgd_step(np.zeros(1), G, [3e10, 3e10, 3e10], 1.0, 1e298, static_step=True)
    w = (3e10 + 1e-10) / 3 * 1e298
    assert got.params[0] == pytest.approx(-w * 0.95, rel=1e-15)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("rule", [qfedavg, qfedsgd])
def test_a_given_lipschitz_is_the_l_the_step_uses_bit_for_bit(rule, backend):
    """``lipschitz=L`` steps with L itself, not with 1/(1/L): for this L the round trip is one
    ulp off (0.031235726830310555). With q = 0 and one client, h = q F^(q-1)|Δ|² + L F^q is L
    exactly, so the reported h_sum shows the L the step used."""
    L = 0.03123572683031056
    assert 1.0 / (1.0 / L) != L  # the case: the round trip moves L
    rng = np.random.default_rng(3)
    theta, D, F = rng.normal(size=5), rng.normal(size=(1, 5)), np.array([1.3])
    sgd = rule is qfedsgd
    reports = make_reports(
        None if sgd else D, np.ones(1, dtype=np.int64), losses=F, gradients=D if sgd else None,
        lr=0.5,
    )  # fmt: skip
    got = rule(q=0.0, lipschitz=L, backend=backend).step(theta, reports, EmptyState())
    assert got.info["h_sum"] == L
