"""Tests of models.mlp: the one-hidden-layer perceptron (tanh and ReLU) on one flat vector.

The NumPy ``loss_and_grad`` (backpropagation) is the specification; it is checked against central
finite differences and hand values, and the Numba kernel against it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from fairagg.models import MLP, LogisticRegression, make_model
from tests.strategies import classification_data, flat_models, flat_params
from tests.tolerances import FINITE_DIFFERENCE, assert_close

H_FD = 1e-6
ACTIVATIONS = ["tanh", "relu"]

# At a ReLU kink (pre-activation exactly 0) the loss is not differentiable: central differences
# straddle the kink and return the average of the two one-sided slopes, and two correct
# implementations that round a ~0 pre-activation differently take opposite branches. Examples whose
# hidden pre-activations come within this margin of 0 are discarded. 1e-3 is far above both the
# FD step's effect on a pre-activation (h·max|x| ≤ 1e-6) and float32 rounding of W1 x + b1 (~1e-6).
RELU_MARGIN = 1e-3


def central_differences(f, theta: np.ndarray, h: float = H_FD) -> np.ndarray:
    """(f(θ + h e_i) − f(θ − h e_i)) / 2h for every coordinate i."""
    g = np.empty_like(theta)
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = h
        g[i] = (f(theta + e) - f(theta - e)) / (2.0 * h)
    return g


def pre_activations(model: MLP, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
    W1, b1, _, _ = model.unpack(theta.astype(np.float64))
    return X @ W1.T + b1


def away_from_kinks(model: MLP, theta: np.ndarray, X: np.ndarray) -> bool:
    if model.activation != "relu":
        return True
    return bool(np.all(np.abs(pre_activations(model, theta, X)) >= RELU_MARGIN))


@st.composite
def problems(draw, activation: str, dtype=np.float64, avoid_kinks: bool = True):
    """(model, θ, X, y); with ``avoid_kinks`` ReLU examples near a kink are discarded (for the
    tests that differentiate or compare two implementations, see RELU_MARGIN)."""
    X, y, C = draw(classification_data())
    model = draw(flat_models("mlp", X.shape[1], C, activation=activation))
    theta = draw(flat_params(model, dtype=dtype))
    if avoid_kinks:
        assume(away_from_kinks(model, theta, X))
    return model, theta, X, y


# --------------------------------------------------------------------------------------------
# gradient and kernel
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ACTIVATIONS)
@given(data=st.data())
def test_mlp_grad_matches_central_finite_differences(activation, data):
    model, theta, X, y = data.draw(problems(activation))
    _, grad = model.loss_and_grad(theta, X, y)
    fd = central_differences(lambda t: model.loss(t, X, y), theta)
    np.testing.assert_allclose(grad, fd, rtol=FINITE_DIFFERENCE[0], atol=FINITE_DIFFERENCE[1])


@pytest.mark.parametrize("activation", ACTIVATIONS)
@given(data=st.data())
def test_mlp_numba_equals_numpy_float64(activation, data):
    model, theta, X, y = data.draw(problems(activation))
    loss_ref, grad_ref = model.loss_and_grad(theta, X, y)
    loss, grad = model.loss_and_grad_numba(theta, X, y)
    assert grad.dtype == np.float64
    assert_close(loss, loss_ref)
    assert_close(grad, grad_ref)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@given(data=st.data())
def test_mlp_numba_equals_numpy_float32(activation, data):
    model, theta, X, y = data.draw(problems(activation, dtype=np.float32))
    loss_ref, grad_ref = model.loss_and_grad(theta.astype(np.float64), X, y)
    loss, grad = model.loss_and_grad_numba(theta, X, y)
    assert grad.dtype == np.float32
    assert_close(loss, loss_ref, dtype=np.float32)
    assert_close(grad, grad_ref, dtype=np.float32)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@given(data=st.data())
def test_mlp_evaluate_clients_equals_numpy_per_segment(activation, data):
    model, theta, X, y = data.draw(problems(activation))
    n = X.shape[0]
    cuts = data.draw(st.sets(st.integers(1, n - 1), max_size=min(n - 1, 5))) if n > 1 else set()
    offsets = np.array([0, *sorted(cuts), n], dtype=np.int64)
    losses, accs = model.evaluate_clients(theta, X, y, offsets)
    assert losses.shape == accs.shape == (offsets.size - 1,)
    for k in range(offsets.size - 1):
        lo, hi = offsets[k], offsets[k + 1]
        assert_close(losses[k], model.loss(theta, X[lo:hi], y[lo:hi]))
        assert_close(accs[k], model.accuracy(theta, X[lo:hi], y[lo:hi]))


# --------------------------------------------------------------------------------------------
# hand values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ACTIVATIONS)
@given(classification_data(), st.integers(1, 6))
def test_mlp_zero_params_loss_is_log_C_and_only_b2_has_gradient(activation, data, H):
    X, y, C = data
    model = MLP(X.shape[1], C, n_hidden=H, activation=activation)
    loss, grad = model.loss_and_grad(np.zeros(model.num_params), X, y)
    # θ = 0: hidden units are σ(0) = 0 for tanh and ReLU, logits are 0, probabilities 1/C.
    # ∂F/∂b2 = mean(1/C − onehot); ∂F/∂W2 = hᵀ(...) = 0 and the back-propagated signal W2ᵀ(...)
    # is 0, so W1 and b1 get no gradient either.
    assert_close(loss, np.log(C))
    gW1, gb1, gW2, gb2 = model.unpack(grad)
    assert_close(gb2, 1.0 / C - np.eye(C)[y].mean(axis=0))
    for block in (gW1, gb1, gW2):
        np.testing.assert_array_equal(block, 0.0)


def test_mlp_hand_forward_pass():
    # p = 1, H = 2, C = 2, x = 1, W1 = [1, −1], b1 = [0, 0.5], W2 = [[2, 0], [0, 3]], b2 = [0, 1].
    # tanh: h = [tanh 1, tanh(−0.5)], z = [2 tanh 1, 3 tanh(−0.5) + 1].
    # relu: h = [1, 0], z = [2, 1]; y = 0: F = log(e² + e) − 2 = log(1 + e^{−1}).
    theta = np.array([1.0, -1.0, 0.0, 0.5, 2.0, 0.0, 0.0, 3.0, 0.0, 1.0])
    X = np.array([[1.0]])
    y = np.array([0])
    tanh = MLP(1, 2, n_hidden=2, activation="tanh")
    z = np.array([2 * np.tanh(1.0), 3 * np.tanh(-0.5) + 1.0])
    assert_close(tanh.logits(theta, X), z[None, :])
    assert_close(tanh.loss(theta, X, y), np.log(np.exp(z).sum()) - z[0])
    relu = MLP(1, 2, n_hidden=2, activation="relu")
    assert_close(relu.logits(theta, X), [[2.0, 1.0]])
    assert_close(relu.loss(theta, X, y), np.log1p(np.exp(-1.0)))


@pytest.mark.parametrize("activation", ACTIVATIONS)
@given(data=st.data(), lam=st.floats(0.01, 5.0))
def test_mlp_l2_adds_half_lambda_weight_norms_not_biases(activation, data, lam):
    # One implementation, same data term in both losses: kinks do not matter here.
    model, theta, X, y = data.draw(problems(activation, avoid_kinks=False))
    plain = MLP(model.n_features, model.n_classes, n_hidden=model.n_hidden, activation=activation)
    reg = MLP(
        model.n_features, model.n_classes, n_hidden=model.n_hidden, activation=activation, l2=lam
    )
    W1, _, W2, _ = plain.unpack(theta)
    loss0, grad0 = plain.loss_and_grad(theta, X, y)
    loss1, grad1 = reg.loss_and_grad(theta, X, y)
    assert_close(loss1, loss0 + 0.5 * lam * (np.sum(W1 * W1) + np.sum(W2 * W2)))
    g0, g1 = plain.unpack(grad0), reg.unpack(grad1)
    assert_close(g1[0], g0[0] + lam * W1)
    assert_close(g1[2], g0[2] + lam * W2)
    np.testing.assert_array_equal(g1[1], g0[1])  # b1 not penalised
    np.testing.assert_array_equal(g1[3], g0[3])  # b2 not penalised


# --------------------------------------------------------------------------------------------
# layout and initialisation
# --------------------------------------------------------------------------------------------


@given(st.integers(1, 8), st.integers(2, 5), st.integers(1, 6))
def test_mlp_num_params_formula(p, C, H):
    assert MLP(p, C, n_hidden=H).num_params == p * H + H + H * C + C


@given(st.integers(1, 8), st.integers(2, 5), st.integers(1, 6))
def test_mlp_layout_blocks_in_documented_order(p, C, H):
    layout = MLP(p, C, n_hidden=H).layout()
    assert list(layout) == ["W1", "b1", "W2", "b2"]
    assert layout["W1"] == (slice(0, p * H), (H, p))
    assert layout["b1"] == (slice(p * H, p * H + H), (H,))
    assert layout["W2"] == (slice(p * H + H, p * H + H + H * C), (C, H))
    assert layout["b2"] == (slice(p * H + H + H * C, p * H + H + H * C + C), (C,))


@given(st.integers(1, 8), st.integers(2, 5), st.integers(1, 6))
def test_mlp_unpack_returns_row_major_views(p, C, H):
    model = MLP(p, C, n_hidden=H)
    theta = np.arange(model.num_params, dtype=np.float64)
    W1, b1, W2, b2 = model.unpack(theta)
    assert (W1.shape, b1.shape, W2.shape, b2.shape) == ((H, p), (H,), (C, H), (C,))
    for block in (W1, b1, W2, b2):
        assert np.shares_memory(block, theta)
    assert W1[H - 1, p - 1] == theta[(H - 1) * p + p - 1]
    assert W2[C - 1, 0] == theta[p * H + H + (C - 1) * H]
    np.testing.assert_array_equal(
        np.concatenate([W1.ravel(), b1, W2.ravel(), b2]), theta
    )  # round trip


@given(st.integers(1, 8), st.integers(2, 5), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_mlp_init_deterministic_by_seed_zero_biases_glorot_bound(p, C, H, seed):
    model = MLP(p, C, n_hidden=H)
    theta = model.init_params(seed=seed)
    np.testing.assert_array_equal(theta, model.init_params(seed=seed))
    W1, b1, W2, b2 = model.unpack(theta)
    np.testing.assert_array_equal(b1, 0.0)
    np.testing.assert_array_equal(b2, 0.0)
    assert np.all(np.abs(W1) <= np.sqrt(6.0 / (p + H)))
    assert np.all(np.abs(W2) <= np.sqrt(6.0 / (H + C)))
    # Documented draw order: one default_rng(seed), W1 then W2, uniform on ±bound.
    rng = np.random.default_rng(seed)
    b_1, b_2 = np.sqrt(6.0 / (p + H)), np.sqrt(6.0 / (H + C))
    np.testing.assert_array_equal(W1.ravel(), rng.uniform(-b_1, b_1, size=p * H))
    np.testing.assert_array_equal(W2.ravel(), rng.uniform(-b_2, b_2, size=H * C))


def test_mlp_init_differs_between_seeds_and_keeps_dtype():
    model = MLP(4, 3, n_hidden=5)
    assert not np.array_equal(model.init_params(seed=0), model.init_params(seed=1))
    theta32 = model.init_params(seed=3, dtype=np.float32)
    assert theta32.dtype == np.float32
    np.testing.assert_array_equal(theta32, model.init_params(seed=3).astype(np.float32))


def test_make_model_builds_mlp():
    assert make_model("mlp", 3, 2, n_hidden=4, activation="relu") == MLP(
        3, 2, n_hidden=4, activation="relu"
    )


# --------------------------------------------------------------------------------------------
# prediction and accuracy
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ACTIVATIONS)
@given(data=st.data())
def test_mlp_predict_is_argmax_of_logits_and_accuracy_in_unit_interval(activation, data):
    model, theta, X, y = data.draw(problems(activation, avoid_kinks=False))
    W1, b1, W2, b2 = model.unpack(theta)
    A = X @ W1.T + b1
    Hh = np.tanh(A) if activation == "tanh" else np.maximum(A, 0.0)
    np.testing.assert_array_equal(model.predict(theta, X), np.argmax(Hh @ W2.T + b2, axis=1))
    acc = model.accuracy(theta, X, y)
    assert 0.0 <= acc <= 1.0
    assert acc == np.mean(model.predict(theta, X) == y)


def test_mlp_predict_first_index_on_ties():
    # Only b2 = [0, 2, 2] is non-zero: classes 1 and 2 tie for every row, argmax takes 1.
    model = MLP(2, 3, n_hidden=2)
    theta = np.zeros(model.num_params)
    theta[model.layout()["b2"][0]] = [0.0, 2.0, 2.0]
    X = np.array([[1.0, -1.0], [0.0, 3.0]])
    np.testing.assert_array_equal(model.predict(theta, X), [1, 1])
    assert model.accuracy(theta, X, np.array([1, 2])) == 0.5


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------

_MODEL = MLP(2, 3, n_hidden=2, activation="relu")
_THETA = np.zeros(_MODEL.num_params)
_X = np.array([[0.5, -1.0], [2.0, 0.0], [1.0, 1.0]])
_Y = np.array([0, 2, 1])


@pytest.mark.parametrize(
    "method", ["loss", "grad", "loss_and_grad", "loss_and_grad_numba", "accuracy"]
)
@pytest.mark.parametrize(
    ("theta", "X", "y", "exc", "match"),
    [
        (np.zeros(_MODEL.num_params + 1), _X, _Y, ValueError, "params"),
        (np.zeros(_MODEL.num_params, dtype=np.int32), _X, _Y, TypeError, "params"),
        (_THETA, _X, np.array([0, 3, 1]), ValueError, "y"),
        (_THETA, _X, np.array([0.0, 2.0, 1.0]), TypeError, "y"),
        (_THETA, np.array([[0.5, -1.0], [np.nan, 0.0], [1.0, 1.0]]), _Y, ValueError, "X"),
        (_THETA, np.ones((3, 4)), _Y, ValueError, "X"),
    ],
    ids=[
        "params-length",
        "params-int",
        "label-out-of-range",
        "float-labels",
        "nan-in-X",
        "wrong-n-features",
    ],
)
def test_mlp_rejects_bad_input(method, theta, X, y, exc, match):
    with pytest.raises(exc, match=match):
        getattr(_MODEL, method)(theta, X, y)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n_classes": 1}, ValueError, "n_classes"),
        ({"n_hidden": 0}, ValueError, "n_hidden"),
        ({"n_hidden": 2.5}, TypeError, "n_hidden"),
        ({"l2": -1.0}, ValueError, "l2"),
        ({"activation": "sigmoid"}, ValueError, "activation"),
        ({"activation": "ReLU"}, ValueError, "activation"),
    ],
)
def test_mlp_constructor_rejects_bad_arguments(kwargs, exc, match):
    args = {"n_features": 2, "n_classes": 3, **kwargs}
    with pytest.raises(exc, match=match):
        MLP(**args)


def test_mlp_params_of_logistic_size_rejected():
    # A logistic vector of the same (p, C) is not an MLP vector.
    wrong = LogisticRegression(2, 3).init_params()
    with pytest.raises(ValueError, match="params"):
        _MODEL.loss(wrong, _X, _Y)
