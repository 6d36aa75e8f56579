"""q-FFL on multinomial logistic regression: Lemma 12 against the exact Hessian.

The Hessian of a client's mean cross-entropy is written here independently of the model code:
for a row x with class probabilities π = softmax(Wx + b), the logits' Jacobian J (C × d, in the
flat layout W | b) gives the row's Hessian Jᵀ (diag π − ππᵀ) J; the mean over rows plus l2 on
the W block is ∇²F. Since λ_max(diag π − ππᵀ) ≤ ½ and the mean of JᵀJ is I_C ⊗ mean x̃x̃ᵀ
(x̃ = [x, 1]), L = ½ λ_max(mean x̃x̃ᵀ) + l2 bounds ‖∇²F‖ everywhere: a valid global constant
for Lemma 12.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fairagg.models import LogisticRegression
from fairagg.rules.qffl import lipschitz_q
from tests.tolerances import FINITE_DIFFERENCE


def exact_hessian(model: LogisticRegression, theta, X, y):
    p, C = model.n_features, model.n_classes
    d = model.num_params
    W = theta[: C * p].reshape(C, p)
    b = theta[C * p :]
    H = np.zeros((d, d))
    for x in X:
        z = W @ x + b
        pi = np.exp(z - z.max())
        pi /= pi.sum()
        A = np.diag(pi) - np.outer(pi, pi)
        J = np.zeros((C, d))
        for c in range(C):
            J[c, c * p : (c + 1) * p] = x
            J[c, C * p + c] = 1.0
        H += J.T @ A @ J
    H /= X.shape[0]
    H[: C * p, : C * p] += model.l2 * np.eye(C * p)
    del y  # the Hessian of the cross-entropy does not depend on the labels
    return H


def global_lipschitz(model: LogisticRegression, X):
    Xt = np.hstack([X, np.ones((X.shape[0], 1))])
    return 0.5 * np.linalg.eigvalsh(Xt.T @ Xt / X.shape[0])[-1] + model.l2


def hessian_of_power(f, g, H, q):
    """∇²(f^{q+1}/(q+1)) = f^q ∇²f + q f^{q−1} ∇f∇fᵀ."""
    out = f**q * H
    if q > 0:
        out = out + q * f ** (q - 1) * np.outer(g, g)
    return out


@st.composite
def problems(draw):
    p = draw(st.integers(1, 4))
    C = draw(st.integers(2, 4))
    n = draw(st.integers(2, 15))
    l2 = draw(st.sampled_from([0.0, 0.01, 0.5]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    scale = draw(st.sampled_from([0.3, 1.0, 3.0]))
    X = scale * rng.normal(size=(n, p))
    y = rng.integers(0, C, n)
    model = LogisticRegression(p, C, l2=l2)
    theta = draw(st.sampled_from([0.1, 1.0, 3.0])) * rng.normal(size=model.num_params)
    return model, X, y, theta


def test_exact_hessian_matches_finite_differences_of_the_gradient():
    rng = np.random.default_rng(0)
    model = LogisticRegression(3, 4, l2=0.2)
    X, y = rng.normal(size=(9, 3)), rng.integers(0, 4, 9)
    theta = rng.normal(size=model.num_params)
    h = 1e-6
    fd = np.array(
        [
            (model.grad(theta + h * e, X, y) - model.grad(theta - h * e, X, y)) / (2 * h)
            for e in np.eye(model.num_params)
        ]
    )
    np.testing.assert_allclose(
        exact_hessian(model, theta, X, y), fd, rtol=FINITE_DIFFERENCE[0], atol=FINITE_DIFFERENCE[1]
    )


@settings(max_examples=60, deadline=None)
@given(prob=problems(), q=st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0, 5.0]))
def test_lemma_12_bounds_the_exact_hessian_of_f_to_the_q_plus_1(prob, q):
    model, X, y, theta = prob
    f = model.loss(theta, X, y)
    g = model.grad(theta, X, y)
    H = exact_hessian(model, theta, X, y)
    L = global_lipschitz(model, X)
    assert np.linalg.norm(H, 2) <= L * (1 + 1e-12)  # the global constant is valid here
    Hq = hessian_of_power(f, g, H, q)
    Lq = lipschitz_q(f, float(g @ g), L, q)
    assert np.linalg.norm(Hq, 2) <= Lq * (1 + 1e-12)


def newton_minimum(model, X, y, theta, steps=50):
    for _ in range(steps):
        g = model.grad(theta, X, y)
        H = exact_hessian(model, theta, X, y)
        theta = theta - np.linalg.lstsq(H, g, rcond=None)[0]
    return theta


def test_lemma_12_is_tight_at_a_stationary_point_with_the_local_constant():
    """At a minimiser ∇f = 0, so ∇²(f^{q+1}/(q+1)) = f^q ∇²f and, with L = ‖∇²f(w)‖ (the
    constant the lemma's proof uses at w), L_q(w) equals the Hessian's norm: the lemma cannot be
    improved by any factor there."""
    rng = np.random.default_rng(1)
    model = LogisticRegression(2, 3, l2=0.3)
    X, y = rng.normal(size=(20, 2)), rng.integers(0, 3, 20)
    w = newton_minimum(model, X, y, np.zeros(model.num_params))
    g = model.grad(w, X, y)
    assert np.linalg.norm(g) < 1e-12
    f = model.loss(w, X, y)
    H = exact_hessian(model, w, X, y)
    L = np.linalg.norm(H, 2)
    for q in (0.5, 1.0, 5.0):
        ratio = np.linalg.norm(hessian_of_power(f, g, H, q), 2) / lipschitz_q(f, g @ g, L, q)
        assert 1 - 1e-9 < ratio <= 1 + 1e-12


def test_lemma_12_near_tight_when_the_gradient_dominates():
    """Away from the minimiser the q f^{q−1}‖∇f‖² term dominates for large q, and the rank-one
    term q f^{q−1}∇f∇fᵀ has exactly that norm: the bound is within a few per cent."""
    rng = np.random.default_rng(2)
    model = LogisticRegression(2, 3, l2=0.0)
    X, y = rng.normal(size=(20, 2)), rng.integers(0, 3, 20)
    theta = 2.0 * rng.normal(size=model.num_params)
    f, g = model.loss(theta, X, y), model.grad(theta, X, y)
    H = exact_hessian(model, theta, X, y)
    L = np.linalg.norm(H, 2)
    q = 20.0
    ratio = np.linalg.norm(hessian_of_power(f, g, H, q), 2) / lipschitz_q(f, g @ g, L, q)
    assert 0.95 < ratio <= 1 + 1e-12
