"""Tests of the other two things clients compute (fairagg.local): training on PropFair's
surrogate (SPEC §6) and one gradient per client for the SGD-type rules (SPEC §0).

The Numba kernels must equal their NumPy specifications (``sgd_reference`` with the surrogate,
the models' NumPy gradient), the surrogate's gradient factor must be the derivative of
−log(1 − f/M) and of its continuations, and PropFair must tend to plain SGD as M → ∞ with the
learning rate scaled by M.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairagg.local import (
    check_propfair,
    client_gradients,
    client_shuffles,
    propfair_scale,
    sgd_reference,
    train_clients,
)
from tests.test_local import DATA, MODELS, TRAIN_SIZES, start_params
from tests.tolerances import FINITE_DIFFERENCE, assert_close

CLIENTS = [2, 0, 3, 1]


def propfair_reference(model, theta, clients, *, epochs, batch_size, lr, seed, round_index, **pf):
    rows, losses = [], []
    for k in clients:
        lo, hi = DATA.train_offsets[k], DATA.train_offsets[k + 1]
        order = client_shuffles(int(hi - lo), epochs, seed, round_index, int(k))
        delta, loss, _ = sgd_reference(
            model,
            theta,
            DATA.X_train[lo:hi],
            DATA.y_train[lo:hi],
            order,
            batch_size=batch_size,
            lr=lr,
            **pf,
        )
        rows.append(delta)
        losses.append(loss)
    return np.array(rows), np.array(losses)


# --------------------------------------------------------------------------------------------
# PropFair's surrogate
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("huber", [False, True])
@pytest.mark.parametrize("M", [10.0, 1.25], ids=["M-above", "M-near-losses"])
@pytest.mark.parametrize("name", list(MODELS))
def test_propfair_training_equals_reference(name, M, huber):
    model = MODELS[name]
    theta = start_params(model)
    hyper = dict(epochs=2, batch_size=4, lr=0.05, seed=3, round_index=1)
    pf = dict(propfair_m=M, propfair_epsilon=0.2, propfair_huber=huber)
    res = train_clients(model, theta, DATA, CLIENTS, **hyper, **pf)
    deltas, losses = propfair_reference(model, theta, CLIENTS, **hyper, **pf)
    assert_close(res.deltas, deltas)
    assert_close(res.losses, losses)
    if M == 1.25:
        # The continuation is exercised: some client starts with M − F_k below ε.
        assert np.any(M - res.losses < 0.2)


def test_propfair_huber_changes_only_the_continuation():
    model = MODELS["logistic"]
    theta = start_params(model)
    hyper = dict(epochs=1, batch_size=4, lr=0.05)
    far = [
        train_clients(model, theta, DATA, CLIENTS, **hyper, propfair_m=50.0, propfair_huber=h)
        for h in (False, True)
    ]
    np.testing.assert_array_equal(far[0].deltas, far[1].deltas)  # M − f ≥ ε throughout
    near = [
        train_clients(model, theta, DATA, CLIENTS, **hyper, propfair_m=1.25, propfair_huber=h)
        for h in (False, True)
    ]
    assert not np.allclose(near[0].deltas, near[1].deltas)


@given(f=st.floats(0.0, 4.0), M=st.floats(0.5, 20.0), huber=st.booleans())
def test_propfair_scale_is_the_surrogate_derivative(f, M, huber):
    eps = 0.2
    h = 1e-6
    if M - f > eps + 2 * h:
        fd = (-math.log1p(-(f + h) / M) + math.log1p(-(f - h) / M)) / (2 * h)
        expected = 1.0 / (M - f)
        # FD of −log(1 − f/M) matches 1/(M − f) to FD accuracy, scaled by its curvature.
        assert math.isclose(fd, expected, rel_tol=1e-5 * (1 + 1 / (M - f) ** 2))
    elif M - f < eps:
        expected = 1.0 / eps if huber else 1.0 / M
    else:
        return  # within h of the switch
    assert propfair_scale(f, M, eps, huber) == pytest.approx(expected, rel=1e-15, abs=0)


def test_propfair_scale_is_continuous_with_huber_only():
    M, eps = 3.0, 0.2
    at = M - eps
    assert propfair_scale(at, M, eps, True) == pytest.approx(1.0 / eps, rel=1e-15, abs=0)
    assert propfair_scale(np.nextafter(at, M), M, eps, True) == pytest.approx(
        1.0 / eps, rel=1e-15, abs=0
    )
    # Without Huber the factor jumps from 1/ε to 1/M at the switch (the official behaviour).
    assert propfair_scale(np.nextafter(at, M), M, eps, False) == pytest.approx(
        1.0 / M, rel=1e-15, abs=0
    )


@pytest.mark.parametrize("name", ["logistic", "mlp-tanh"])
def test_propfair_tends_to_sgd_as_m_grows_with_lr_scaled(name):
    """M → ∞ with lr·M fixed: M∇f/(M − f) → ∇f, so the update tends to plain SGD's, with an
    error O(f/M)."""
    model = MODELS[name]
    theta = start_params(model)
    eta = 0.05
    plain = train_clients(model, theta, DATA, CLIENTS, epochs=2, batch_size=4, lr=eta)
    errs = []
    for M in (1e2, 1e4, 1e6):
        pf = train_clients(
            model, theta, DATA, CLIENTS, epochs=2, batch_size=4, lr=eta * M, propfair_m=M
        )
        errs.append(np.abs(pf.deltas - plain.deltas).max() / np.abs(plain.deltas).max())
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 1e-5  # f ≈ 1, so O(f/M) = 1e-6 up to the accumulation over steps


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(propfair_m=0.0), ValueError, "propfair_m"),
        (dict(propfair_m=0.1), ValueError, "propfair_m must exceed"),
        (dict(propfair_m=float("nan")), ValueError, "propfair_m"),
        (dict(propfair_m=5.0, propfair_epsilon=0.0), ValueError, "propfair_epsilon"),
        (dict(propfair_m=5.0, propfair_huber=1), TypeError, "propfair_huber"),
        (dict(propfair_m="5"), TypeError, "propfair_m"),
    ],
)
def test_propfair_settings_are_checked(kwargs, exc, match):
    model = MODELS["logistic"]
    with pytest.raises(exc, match=match):
        train_clients(
            model, start_params(model), DATA, [0], epochs=1, batch_size=4, lr=0.1, **kwargs
        )


def test_check_propfair_off_returns_zero_m():
    assert check_propfair(None, 0.2, False) == (0.0, 0.2, False)


# --------------------------------------------------------------------------------------------
# One gradient per client
# --------------------------------------------------------------------------------------------


def client_rows(k):
    lo, hi = DATA.train_offsets[k], DATA.train_offsets[k + 1]
    return DATA.X_train[lo:hi], DATA.y_train[lo:hi]


@pytest.mark.parametrize("name", list(MODELS))
def test_full_batch_gradients_equal_the_models_numpy_gradient(name):
    model = MODELS[name]
    theta = start_params(model)
    res = client_gradients(model, theta, DATA, CLIENTS)
    for i, k in enumerate(CLIENTS):
        X, y = client_rows(k)
        assert_close(res.deltas[i], model.grad(theta, X, y))
        assert_close(res.losses[i], model.loss(theta, X, y))
        assert res.accuracies[i] == model.accuracy(theta, X, y)
    np.testing.assert_array_equal(res.num_samples, np.array(TRAIN_SIZES)[CLIENTS])


@pytest.mark.parametrize("name", list(MODELS))
def test_minibatch_gradients_use_the_seeded_shuffle(name):
    model = MODELS[name]
    theta = start_params(model)
    B = 5
    res = client_gradients(model, theta, DATA, CLIENTS, batch_size=B, seed=4, round_index=7)
    for i, k in enumerate(CLIENTS):
        X, y = client_rows(k)
        n = X.shape[0]
        rows = client_shuffles(n, 1, 4, 7, k)[0][:B] if n > B else np.arange(n)
        assert_close(res.deltas[i], model.grad(theta, X[rows], y[rows]))
        # The reported loss is over all the client's rows, whatever the batch.
        assert_close(res.losses[i], model.loss(theta, X, y))


def test_gradients_batch_at_least_n_is_the_full_batch():
    model = MODELS["logistic"]
    theta = start_params(model)
    full = client_gradients(model, theta, DATA, CLIENTS)
    big = client_gradients(model, theta, DATA, CLIENTS, batch_size=max(TRAIN_SIZES))
    np.testing.assert_array_equal(full.deltas, big.deltas)


def test_gradients_float32_and_out_buffer():
    model = MODELS["mlp-tanh"]
    theta32 = start_params(model, np.float32)
    out = np.empty((len(CLIENTS), model.num_params), dtype=np.float32)
    res = client_gradients(model, theta32, DATA, CLIENTS, out=out)
    assert res.deltas is out
    X32 = DATA.X_train.astype(np.float32).astype(np.float64)
    for i, k in enumerate(CLIENTS):
        lo, hi = DATA.train_offsets[k], DATA.train_offsets[k + 1]
        g = model.grad(theta32.astype(np.float64), X32[lo:hi], DATA.y_train[lo:hi])
        assert_close(out[i], g, dtype=np.float32)


def test_gradients_match_finite_differences():
    """An independent check of the gradient path: central differences of the client's loss."""
    model = MODELS["mlp-tanh"]
    theta = start_params(model)
    g = client_gradients(model, theta, DATA, [1]).deltas[0]
    X, y = client_rows(1)
    h = 1e-6
    fd = np.array(
        [
            (model.loss(theta + h * e, X, y) - model.loss(theta - h * e, X, y)) / (2 * h)
            for e in np.eye(theta.size)
        ]
    )
    np.testing.assert_allclose(g, fd, rtol=FINITE_DIFFERENCE[0], atol=FINITE_DIFFERENCE[1])


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(batch_size=0), ValueError, "batch_size"),
        (dict(batch_size=2.5), TypeError, "batch_size"),
        (dict(out=np.empty((3, 3))), ValueError, "out"),
    ],
)
def test_gradient_arguments_are_checked(kwargs, exc, match):
    model = MODELS["logistic"]
    with pytest.raises(exc, match=match):
        client_gradients(model, start_params(model), DATA, [0, 1], **kwargs)


def test_gradients_reject_bad_clients():
    model = MODELS["logistic"]
    with pytest.raises(ValueError, match="clients"):
        client_gradients(model, start_params(model), DATA, [9])
    with pytest.raises(TypeError, match="model"):
        client_gradients("logistic", start_params(model), DATA, [0])
