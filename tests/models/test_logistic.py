"""Tests of models.logistic: multinomial logistic regression on one flat parameter vector.

The NumPy ``loss_and_grad`` is the specification; it is checked against central finite differences
and hand values, and the Numba kernel (``loss_and_grad_numba``, ``evaluate_clients``) against it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairagg.models import LogisticRegression, make_model
from tests.strategies import classification_data, flat_models, flat_params
from tests.tolerances import FINITE_DIFFERENCE, assert_close

H_FD = 1e-6


def central_differences(f, theta: np.ndarray, h: float = H_FD) -> np.ndarray:
    """(f(θ + h e_i) − f(θ − h e_i)) / 2h for every coordinate i."""
    g = np.empty_like(theta)
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = h
        g[i] = (f(theta + e) - f(theta - e)) / (2.0 * h)
    return g


@st.composite
def problems(draw, dtype=np.float64, min_n: int = 1):
    X, y, C = draw(classification_data(min_n=min_n))
    model = draw(flat_models("logistic", X.shape[1], C))
    theta = draw(flat_params(model, dtype=dtype))
    return model, theta, X, y


# --------------------------------------------------------------------------------------------
# gradient and kernel
# --------------------------------------------------------------------------------------------


@given(problems())
def test_logistic_grad_matches_central_finite_differences(problem):
    model, theta, X, y = problem
    _, grad = model.loss_and_grad(theta, X, y)
    fd = central_differences(lambda t: model.loss(t, X, y), theta)
    np.testing.assert_allclose(grad, fd, rtol=FINITE_DIFFERENCE[0], atol=FINITE_DIFFERENCE[1])


@given(problems())
def test_logistic_loss_and_grad_agree_with_loss_and_grad_methods(problem):
    model, theta, X, y = problem
    loss, grad = model.loss_and_grad(theta, X, y)
    assert model.loss(theta, X, y) == loss
    np.testing.assert_array_equal(model.grad(theta, X, y), grad)
    assert grad.shape == (model.num_params,)


@given(problems())
def test_logistic_numba_equals_numpy_float64(problem):
    model, theta, X, y = problem
    loss_ref, grad_ref = model.loss_and_grad(theta, X, y)
    loss, grad = model.loss_and_grad_numba(theta, X, y)
    assert grad.dtype == np.float64
    assert_close(loss, loss_ref)
    assert_close(grad, grad_ref)


@given(problems(dtype=np.float32))
def test_logistic_numba_equals_numpy_float32(problem):
    model, theta, X, y = problem
    loss_ref, grad_ref = model.loss_and_grad(theta.astype(np.float64), X, y)
    loss, grad = model.loss_and_grad_numba(theta, X, y)
    assert grad.dtype == np.float32
    assert_close(loss, loss_ref, dtype=np.float32)
    assert_close(grad, grad_ref, dtype=np.float32)


# --------------------------------------------------------------------------------------------
# hand values
# --------------------------------------------------------------------------------------------


@given(classification_data())
def test_logistic_zero_params_loss_is_log_C_and_bias_grad_is_uniform_minus_label_freq(data):
    X, y, C = data
    model = LogisticRegression(X.shape[1], C)
    loss, grad = model.loss_and_grad(model.init_params(), X, y)
    onehot = np.eye(C)[y]
    # All logits are 0, so every softmax probability is 1/C: the loss is log C, ∂F/∂b is
    # mean(1/C − onehot) and ∂F/∂W = (1/C − onehot)ᵀX/n (W is (C, p), as nn.Linear).
    assert_close(loss, np.log(C))
    W_grad, b_grad = model.unpack(grad)
    assert_close(b_grad, -onehot.mean(axis=0) + 1.0 / C)
    assert_close(W_grad, (1.0 / C - onehot).T @ X / X.shape[0])


def test_logistic_zero_params_hand_example():
    # 2 samples, 1 feature, 3 classes, y = [0, 2], x = [2, −1]. At θ = 0 every probability is
    # 1/3, so P − Y has rows r0 = [−2/3, 1/3, 1/3] and r1 = [1/3, 1/3, −2/3]:
    #   ∂F/∂W = (2·r0 − 1·r1)/2 = ([−4/3, 2/3, 2/3] − [1/3, 1/3, −2/3])/2 = [−5/6, 1/6, 2/3],
    #   ∂F/∂b = (r0 + r1)/2 = [−1/6, 1/3, −1/6],   F = log 3.
    model = LogisticRegression(1, 3)
    X = np.array([[2.0], [-1.0]])
    y = np.array([0, 2])
    loss, grad = model.loss_and_grad(np.zeros(6), X, y)
    assert_close(loss, np.log(3.0))
    assert_close(grad, [-5 / 6, 1 / 6, 2 / 3, -1 / 6, 1 / 3, -1 / 6])


@given(problems(), st.floats(0.01, 5.0))
def test_logistic_l2_adds_half_lambda_weight_norm_not_bias(problem, lam):
    plain, theta, X, y = problem
    plain = LogisticRegression(plain.n_features, plain.n_classes)
    reg = LogisticRegression(plain.n_features, plain.n_classes, l2=lam)
    W, _ = plain.unpack(theta)
    loss0, grad0 = plain.loss_and_grad(theta, X, y)
    loss1, grad1 = reg.loss_and_grad(theta, X, y)
    assert_close(loss1, loss0 + 0.5 * lam * np.sum(W * W))
    gW0, gb0 = plain.unpack(grad0)
    gW1, gb1 = reg.unpack(grad1)
    assert_close(gW1, gW0 + lam * W)
    np.testing.assert_array_equal(gb1, gb0)  # the bias is not penalised: bitwise the same


def test_logistic_l2_does_not_touch_bias_hand():
    # W = 0, b = [5, −5]: the penalty λ/2‖W‖² is 0 whatever b is.
    X = np.array([[1.0, -1.0]])
    y = np.array([0])
    theta = np.array([0.0, 0.0, 0.0, 0.0, 5.0, -5.0])
    plain = LogisticRegression(2, 2)
    reg = LogisticRegression(2, 2, l2=3.0)
    assert reg.loss(theta, X, y) == plain.loss(theta, X, y)


# --------------------------------------------------------------------------------------------
# layout
# --------------------------------------------------------------------------------------------


@given(st.integers(1, 8), st.integers(2, 5))
def test_logistic_num_params_is_pC_plus_C(p, C):
    model = LogisticRegression(p, C)
    assert model.num_params == p * C + C
    assert model.init_params().shape == (p * C + C,)


@given(st.integers(1, 8), st.integers(2, 5))
def test_logistic_layout_blocks_in_documented_order(p, C):
    layout = LogisticRegression(p, C).layout()
    assert list(layout) == ["W", "b"]
    assert layout["W"] == (slice(0, p * C), (C, p))
    assert layout["b"] == (slice(p * C, p * C + C), (C,))


@given(st.integers(1, 8), st.integers(2, 5))
def test_logistic_unpack_returns_row_major_views(p, C):
    model = LogisticRegression(p, C)
    theta = np.arange(model.num_params, dtype=np.float64)
    W, b = model.unpack(theta)
    assert W.shape == (C, p) and b.shape == (C,)
    assert np.shares_memory(W, theta) and np.shares_memory(b, theta)
    for c in range(C):
        for j in range(p):
            assert W[c, j] == theta[c * p + j]
    np.testing.assert_array_equal(b, theta[p * C :])
    # Round trip: concatenating the blocks gives back the flat vector.
    np.testing.assert_array_equal(np.concatenate([W.ravel(), b]), theta)


def test_logistic_init_params_is_zeros_in_requested_dtype():
    model = LogisticRegression(3, 4)
    np.testing.assert_array_equal(model.init_params(seed=7), np.zeros(16))
    assert model.init_params(dtype=np.float32).dtype == np.float32


def test_make_model_builds_logistic():
    assert make_model("logistic", 3, 2, l2=0.5) == LogisticRegression(3, 2, l2=0.5)


# --------------------------------------------------------------------------------------------
# prediction, accuracy, per-client evaluation
# --------------------------------------------------------------------------------------------


def test_logistic_predict_first_index_on_ties():
    # One feature, 3 classes, W = 0 and b = [1, 3, 3]: classes 1 and 2 tie, argmax takes 1.
    model = LogisticRegression(1, 3)
    theta = np.array([0.0, 0.0, 0.0, 1.0, 3.0, 3.0])
    X = np.array([[0.5], [-2.0]])
    np.testing.assert_array_equal(model.predict(theta, X), [1, 1])
    # At zero parameters every class ties: class 0.
    np.testing.assert_array_equal(model.predict(np.zeros(6), X), [0, 0])


@given(problems())
def test_logistic_predict_is_argmax_of_logits(problem):
    model, theta, X, _ = problem
    W = theta[: model.n_features * model.n_classes].reshape(model.n_classes, model.n_features)
    b = theta[model.n_features * model.n_classes :]
    pred = model.predict(theta, X)
    assert pred.dtype == np.int64
    np.testing.assert_array_equal(pred, np.argmax(X @ W.T + b, axis=1))


@given(problems())
def test_logistic_accuracy_in_unit_interval_and_is_mean_of_hits(problem):
    model, theta, X, y = problem
    acc = model.accuracy(theta, X, y)
    assert 0.0 <= acc <= 1.0
    assert acc == np.mean(model.predict(theta, X) == y)


def test_logistic_accuracy_hand_values():
    model = LogisticRegression(2, 3)
    X = np.ones((4, 2))
    zero = np.zeros(model.num_params)  # predicts class 0 everywhere
    assert model.accuracy(zero, X, np.zeros(4, dtype=np.int64)) == 1.0
    assert model.accuracy(zero, X, np.ones(4, dtype=np.int64)) == 0.0
    assert model.accuracy(zero, X, np.array([0, 1, 0, 2])) == 0.5


@st.composite
def segmented_problems(draw, dtype=np.float64):
    model, theta, X, y = draw(problems(dtype=dtype))
    n = X.shape[0]
    cuts = draw(st.sets(st.integers(1, n - 1), max_size=min(n - 1, 5))) if n > 1 else set()
    offsets = np.array([0, *sorted(cuts), n], dtype=np.int64)
    return model, theta, X, y, offsets


@given(segmented_problems())
def test_logistic_evaluate_clients_equals_numpy_per_segment(problem):
    model, theta, X, y, offsets = problem
    losses, accs = model.evaluate_clients(theta, X, y, offsets)
    K = offsets.size - 1
    assert losses.shape == (K,) and accs.shape == (K,)
    for k in range(K):
        lo, hi = offsets[k], offsets[k + 1]
        assert_close(losses[k], model.loss(theta, X[lo:hi], y[lo:hi]))
        assert_close(accs[k], model.accuracy(theta, X[lo:hi], y[lo:hi]))


@given(segmented_problems(dtype=np.float32))
def test_logistic_evaluate_clients_float32_params(problem):
    model, theta, X, y, offsets = problem
    losses, accs = model.evaluate_clients(theta, X, y, offsets)
    theta64 = theta.astype(np.float64)
    for k in range(offsets.size - 1):
        lo, hi = offsets[k], offsets[k + 1]
        assert_close(losses[k], model.loss(theta64, X[lo:hi], y[lo:hi]), dtype=np.float32)
        assert 0.0 <= accs[k] <= 1.0


@pytest.mark.parametrize(
    "offsets",
    [[0, 2], [0, 0, 4], [1, 4], [0, 3, 2, 4], [[0, 4]]],
    ids=["short", "empty-client", "not-from-0", "decreasing", "2-d"],
)
def test_logistic_evaluate_clients_rejects_bad_offsets(offsets):
    model = LogisticRegression(2, 2)
    X = np.zeros((4, 2))
    y = np.zeros(4, dtype=np.int64)
    with pytest.raises(ValueError, match="offsets"):
        model.evaluate_clients(np.zeros(model.num_params), X, y, offsets)


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------

_X = np.array([[0.5, -1.0], [2.0, 0.0], [1.0, 1.0]])
_Y = np.array([0, 2, 1])
_MODEL = LogisticRegression(2, 3)
_THETA = np.zeros(_MODEL.num_params)


@pytest.mark.parametrize(
    "method", ["loss", "grad", "loss_and_grad", "loss_and_grad_numba", "accuracy"]
)
@pytest.mark.parametrize(
    ("theta", "X", "y", "exc", "match"),
    [
        (np.zeros(8), _X, _Y, ValueError, "params"),
        (np.zeros((3, 3)), _X, _Y, ValueError, "params"),
        (np.zeros(9, dtype=np.int64), _X, _Y, TypeError, "params"),
        (_THETA, _X, np.array([0, 3, 1]), ValueError, "y"),
        (_THETA, _X, np.array([0, -1, 1]), ValueError, "y"),
        (_THETA, _X, np.array([0.0, 2.0, 1.0]), TypeError, "y"),
        (_THETA, _X, np.array([0, 2]), ValueError, "y"),
        (_THETA, np.array([[0.5, np.nan], [2.0, 0.0], [1.0, 1.0]]), _Y, ValueError, "X"),
        (_THETA, np.array([[0.5, np.inf], [2.0, 0.0], [1.0, 1.0]]), _Y, ValueError, "X"),
        (_THETA, np.ones((3, 3)), _Y, ValueError, "X"),
        (_THETA, np.ones(3), _Y, ValueError, "X"),
        (_THETA, np.ones((3, 2), dtype=np.int64), _Y, TypeError, "X"),
        (_THETA, np.ones((0, 2)), np.zeros(0, dtype=np.int64), ValueError, "X"),
    ],
    ids=[
        "params-length",
        "params-2d",
        "params-int",
        "label-too-large",
        "label-negative",
        "float-labels",
        "labels-length",
        "nan-in-X",
        "inf-in-X",
        "wrong-n-features",
        "X-1d",
        "X-int",
        "X-empty",
    ],
)
def test_logistic_rejects_bad_input(method, theta, X, y, exc, match):
    with pytest.raises(exc, match=match):
        getattr(_MODEL, method)(theta, X, y)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n_features": 2, "n_classes": 1}, ValueError, "n_classes"),
        ({"n_features": 0, "n_classes": 2}, ValueError, "n_features"),
        ({"n_features": 2.0, "n_classes": 2}, TypeError, "n_features"),
        ({"n_features": 2, "n_classes": True}, TypeError, "n_classes"),
        ({"n_features": 2, "n_classes": 2, "l2": -0.1}, ValueError, "l2"),
        ({"n_features": 2, "n_classes": 2, "l2": float("nan")}, ValueError, "l2"),
        ({"n_features": 2, "n_classes": 2, "l2": "0.1"}, TypeError, "l2"),
    ],
)
def test_logistic_constructor_rejects_bad_dims(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        LogisticRegression(**kwargs)


def test_logistic_predict_rejects_wrong_n_features():
    with pytest.raises(ValueError, match="X"):
        _MODEL.predict(_THETA, np.ones((2, 5)))


def test_make_model_rejects_unknown_name():
    with pytest.raises(ValueError, match="^name must be 'logistic' or 'mlp'; got 'svm'$"):
        make_model("svm", 2, 2)
