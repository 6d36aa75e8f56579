"""Tests of fairagg.local: the Numba local trainer against its NumPy specification (SPEC §0).

``train_clients`` must equal ``sgd_reference`` fed the same shuffles, be bitwise reproducible
(serial = parallel, a client's row independent of who else is trained), and report F_k(θ^t) and the
accuracy of θ^t on the client's training rows before training.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairagg.data import FederatedData, from_client_arrays
from fairagg.local import (
    LocalResult,
    client_gradients,
    client_shuffles,
    sgd_reference,
    train_clients,
)
from fairagg.models import MLP, FlatModel, LogisticRegression
from tests.tolerances import assert_close

P, C = 5, 3
#: Training-set sizes of the 4 clients: batch size 4 divides 12 and 16 but not 7 and 9.
TRAIN_SIZES = (12, 7, 9, 16)


def make_data(seed: int = 0) -> FederatedData:
    rng = np.random.default_rng(seed)
    # n_k + 1 rows with test_fraction=0.01: exactly one test row per client, n_k training rows.
    clients = [(rng.normal(size=(n + 1, P)), rng.integers(0, C, n + 1)) for n in TRAIN_SIZES]
    data = from_client_arrays(clients, n_classes=C, test_fraction=0.01)
    assert tuple(data.num_train_samples) == TRAIN_SIZES
    return data


DATA = make_data()

MODELS = {
    "logistic": LogisticRegression(P, C, l2=0.01),
    "mlp-tanh": MLP(P, C, n_hidden=4, activation="tanh", l2=0.01),
    "mlp-relu": MLP(P, C, n_hidden=4, activation="relu"),
}


def start_params(model: FlatModel, dtype=np.float64) -> np.ndarray:
    if isinstance(model, MLP):
        return model.init_params(seed=1, dtype=dtype)
    # Non-zero logistic parameters: at θ = 0 every client starts from the same symmetric point.
    return (0.3 * np.random.default_rng(2).normal(size=model.num_params)).astype(dtype)


def reference(
    model,
    theta,
    data,
    clients,
    *,
    epochs,
    batch_size,
    lr,
    momentum=0.0,
    prox_mu=0.0,
    seed=0,
    round_index=0,
    X=None,
):
    """``sgd_reference`` for each client, fed the shuffles ``train_clients`` uses."""
    X = data.X_train if X is None else X
    rows = []
    losses = []
    accs = []
    for k in clients:
        lo, hi = data.train_offsets[k], data.train_offsets[k + 1]
        order = client_shuffles(int(hi - lo), epochs, seed, round_index, int(k))
        delta, loss, acc = sgd_reference(
            model,
            theta,
            X[lo:hi],
            data.y_train[lo:hi],
            order,
            batch_size=batch_size,
            lr=lr,
            momentum=momentum,
            prox_mu=prox_mu,
        )
        rows.append(delta)
        losses.append(loss)
        accs.append(acc)
    return np.array(rows), np.array(losses), np.array(accs)


# --------------------------------------------------------------------------------------------
# Numba kernel = NumPy specification
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 4, 64], ids=["B1", "B4", "B64-full"])
@pytest.mark.parametrize("prox_mu", [0.0, 0.5], ids=["noprox", "prox"])
@pytest.mark.parametrize("momentum", [0.0, 0.9], ids=["sgd", "momentum"])
@pytest.mark.parametrize("name", list(MODELS))
def test_train_clients_equals_sgd_reference_float64(name, momentum, prox_mu, batch_size):
    model = MODELS[name]
    theta = start_params(model)
    clients = [3, 0, 1, 2]
    hyper = dict(epochs=2, batch_size=batch_size, lr=0.05, momentum=momentum, prox_mu=prox_mu)
    res = train_clients(model, theta, DATA, clients, seed=5, round_index=3, **hyper)
    deltas, losses, accs = reference(model, theta, DATA, clients, seed=5, round_index=3, **hyper)
    assert isinstance(res, LocalResult)
    assert res.deltas.shape == (4, model.num_params) and res.deltas.dtype == np.float64
    assert_close(res.deltas, deltas)
    assert_close(res.losses, losses)
    assert_close(res.accuracies, accs)
    np.testing.assert_array_equal(res.num_samples, np.array(TRAIN_SIZES)[clients])


@pytest.mark.parametrize("batch_size", [4, 64], ids=["B4", "B64-full"])
@pytest.mark.parametrize(("momentum", "prox_mu"), [(0.0, 0.0), (0.9, 0.5)], ids=["sgd", "mom-prox"])
@pytest.mark.parametrize("name", list(MODELS))
def test_train_clients_equals_sgd_reference_float32(name, momentum, prox_mu, batch_size):
    model = MODELS[name]
    theta32 = start_params(model, np.float32)
    clients = [0, 1, 2, 3]
    hyper = dict(epochs=2, batch_size=batch_size, lr=0.05, momentum=momentum, prox_mu=prox_mu)
    res = train_clients(model, theta32, DATA, clients, **hyper)
    assert res.deltas.dtype == np.float32
    assert res.losses.dtype == np.float64 and res.accuracies.dtype == np.float64
    # The reference runs in float64 on the same float32-rounded θ and X the kernel sees.
    X32 = DATA.X_train.astype(np.float32).astype(np.float64)
    deltas, losses, accs = reference(
        model, theta32.astype(np.float64), DATA, clients, X=X32, **hyper
    )
    assert_close(res.deltas, deltas, dtype=np.float32)
    assert_close(res.losses, losses, dtype=np.float32)
    np.testing.assert_array_equal(res.accuracies, accs)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("prox_mu", [0.0, 2.0])
@pytest.mark.parametrize("name", list(MODELS))
def test_one_full_batch_epoch_is_one_gradient_step(name, prox_mu, dtype):
    # epochs = 1, B ≥ n_k, momentum 0: one step from w = θ, where the proximal term vanishes,
    # so δ_k = lr·∇F_k(θ) exactly (up to round-off).
    model = MODELS[name]
    theta = start_params(model, dtype)
    lr = 0.3
    res = train_clients(
        model,
        theta,
        DATA,
        [0, 1, 2, 3],
        epochs=1,
        batch_size=max(TRAIN_SIZES),
        lr=lr,
        prox_mu=prox_mu,
    )
    for i in range(4):
        Xk, yk = DATA.client_train(i)
        if dtype == np.float32:
            Xk = Xk.astype(np.float32).astype(np.float64)
        expected = lr * model.grad(theta.astype(np.float64), Xk, yk)
        assert_close(res.deltas[i], expected, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(MODELS))
def test_reported_loss_and_accuracy_are_those_of_theta_before_training(name, dtype):
    model = MODELS[name]
    theta = start_params(model, dtype)
    clients = [2, 0, 3]
    res = train_clients(model, theta, DATA, clients, epochs=3, batch_size=2, lr=0.5)
    theta64 = theta.astype(np.float64)
    for i, k in enumerate(clients):
        Xk, yk = DATA.client_train(k)
        if dtype == np.float32:
            Xk = Xk.astype(np.float32).astype(np.float64)
        assert_close(res.losses[i], model.loss(theta64, Xk, yk), dtype=dtype)
        assert res.accuracies[i] == model.accuracy(theta64, Xk, yk)
        assert res.num_samples[i] == Xk.shape[0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(MODELS))
def test_reported_loss_and_accuracy_are_the_models_evaluation_bit_for_bit(name, dtype):
    # the reports come from the blocked evaluation: the numbers evaluate_clients gives on the
    # client's own rows, whatever the training hyper-parameters
    model = MODELS[name]
    theta = start_params(model, dtype)
    clients = [3, 1]
    res = train_clients(model, theta, DATA, clients, epochs=2, batch_size=5, lr=0.3, momentum=0.5)
    for i, k in enumerate(clients):
        Xk, yk = DATA.client_train(k)
        loss, acc = model.evaluate_clients(theta, Xk, yk, [0, Xk.shape[0]])
        assert res.losses[i] == loss[0]
        assert res.accuracies[i] == acc[0]


# --------------------------------------------------------------------------------------------
# bitwise reproducibility
# --------------------------------------------------------------------------------------------

HYPER = dict(epochs=2, batch_size=3, lr=0.1, momentum=0.5, prox_mu=0.1, seed=11, round_index=4)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(MODELS))
def test_parallel_and_serial_are_bitwise_identical(name, dtype, monkeypatch):
    from fairagg.kernels import _threads as _parallel

    monkeypatch.setattr(_parallel, "MIN_PARALLEL_MACS", 0)  # these clients are far below it
    model = MODELS[name]
    theta = start_params(model, dtype)
    par = train_clients(model, theta, DATA, [3, 1, 0, 2], parallel=True, **HYPER)
    ser = train_clients(model, theta, DATA, [3, 1, 0, 2], parallel=False, **HYPER)
    for a, b in zip(par, ser, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(MODELS))
def test_two_identical_calls_are_bitwise_identical(name, dtype):
    model = MODELS[name]
    theta = start_params(model, dtype)
    first = train_clients(model, theta, DATA, [0, 1, 2, 3], **HYPER)
    second = train_clients(model, theta, DATA, [0, 1, 2, 3], **HYPER)
    for a, b in zip(first, second, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(MODELS))
def test_client_delta_independent_of_other_selected_clients(name, dtype, parallel):
    model = MODELS[name]
    theta = start_params(model, dtype)
    together = train_clients(model, theta, DATA, [2, 0, 3], parallel=parallel, **HYPER)
    alone = train_clients(model, theta, DATA, [0], parallel=parallel, **HYPER)
    assert np.array_equal(together.deltas[1], alone.deltas[0])
    assert together.losses[1] == alone.losses[0]
    assert together.accuracies[1] == alone.accuracies[0]


def test_same_client_twice_gives_identical_rows():
    model = MODELS["mlp-tanh"]
    res = train_clients(model, start_params(model), DATA, [1, 1], **HYPER)
    assert np.array_equal(res.deltas[0], res.deltas[1])


def test_seed_and_round_index_select_the_shuffles():
    model = MODELS["logistic"]
    theta = start_params(model)
    hyper = dict(epochs=1, batch_size=2, lr=0.1)
    base = train_clients(model, theta, DATA, [0], seed=0, round_index=0, **hyper).deltas
    other_seed = train_clients(model, theta, DATA, [0], seed=1, round_index=0, **hyper).deltas
    other_round = train_clients(model, theta, DATA, [0], seed=0, round_index=1, **hyper).deltas
    assert not np.array_equal(base, other_seed)
    assert not np.array_equal(base, other_round)


def test_client_shuffles_are_documented_permutations():
    order = client_shuffles(9, 3, seed=4, round_index=2, client=7)
    rng = np.random.default_rng([4, 1, 2, 7])
    assert order.shape == (3, 9) and order.dtype == np.int64
    for row in order:
        np.testing.assert_array_equal(np.sort(row), np.arange(9))
        np.testing.assert_array_equal(row, rng.permutation(9))


@settings(max_examples=300, deadline=None)
@given(
    seed=st.one_of(st.integers(0, 2**32 - 1), st.integers(0, 2**80)),
    round_index=st.integers(0, 2**40),
    client=st.integers(0, 2**33),
    n=st.integers(1, 300),
    epochs=st.integers(1, 4),
)
def test_kernel_shuffles_are_client_shuffles(seed, round_index, client, n, epochs):
    # train_clients draws its orders in the kernel (NumPy's SeedSequence, PCG64 and shuffle
    # re-implemented); they must be client_shuffles', NumPy's own generator, number for number
    from fairagg.local import _seed_words
    from fairagg.models._kernels import shuffles

    words = np.array(_seed_words(seed, 1, round_index, client), dtype=np.uint64)
    want = client_shuffles(n, epochs, seed, round_index, client)
    np.testing.assert_array_equal(shuffles(words, n, epochs), want)


@pytest.mark.parametrize("n", [2**16 + 3, 2**20])
def test_kernel_shuffles_of_large_clients_are_client_shuffles(n):
    from fairagg.local import _seed_words
    from fairagg.models._kernels import shuffles

    words = np.array(_seed_words(7, 1, 3, 12), dtype=np.uint64)
    np.testing.assert_array_equal(shuffles(words, n, 2), client_shuffles(n, 2, 7, 3, 12))


def test_train_clients_refuses_a_client_beyond_the_shuffle_limit(monkeypatch):
    import fairagg.local as local

    monkeypatch.setattr(local, "MAX_SHUFFLE", 10)
    model = MODELS["logistic"]
    with pytest.raises(ValueError, match=r"^client 3 has 16 training rows; local SGD shuffles"):
        train_clients(model, start_params(model), DATA, [1, 3], epochs=1, batch_size=2, lr=0.1)


def test_client_gradients_refuses_a_client_beyond_the_shuffle_limit_it_would_shuffle(monkeypatch):
    """A minibatch gradient shuffles the client's rows: beyond the limit the error names the
    client, as train_clients' does (not client_shuffles' parameters). The full batch shuffles
    nothing, and a client no larger than the batch is not shuffled either."""
    import fairagg.local as local

    monkeypatch.setattr(local, "MAX_SHUFFLE", 10)
    model = MODELS["logistic"]
    theta = start_params(model)
    msg = r"^client 3 has 16 training rows; a minibatch gradient shuffles at most 10 rows a client$"
    with pytest.raises(ValueError, match=msg):
        client_gradients(model, theta, DATA, [1, 3], batch_size=2)
    full = client_gradients(model, theta, DATA, [1, 3])
    assert full.num_samples.max() == 16
    assert np.array_equal(
        client_gradients(model, theta, DATA, [1, 3], batch_size=16).deltas, full.deltas
    )  # n_k <= B: the full batch, no shuffle


# --------------------------------------------------------------------------------------------
# proximal term and the out= buffer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_huge_prox_mu_keeps_deltas_near_zero(name):
    # Full-batch steps (no minibatch noise), lr·prox_mu = 0.5 < 2 so the proximal iteration
    # δ ← (1 − lr·prox_mu) δ + lr ∇F(θ − δ) is a stable contraction: it settles at
    # δ ≈ ∇F/prox_mu = 2e-4·∇F, while plain SGD drifts ≈ steps·lr·∇F = 50·1e-4·∇F = 5e-3·∇F.
    model = MODELS[name]
    theta = start_params(model)
    hyper = dict(epochs=50, batch_size=64, lr=1e-4)
    free = train_clients(model, theta, DATA, [0, 1, 2, 3], prox_mu=0.0, **hyper).deltas
    held = train_clients(model, theta, DATA, [0, 1, 2, 3], prox_mu=5000.0, **hyper).deltas
    for i in range(4):
        assert np.linalg.norm(held[i]) < 0.1 * np.linalg.norm(free[i])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_out_buffer_is_returned_and_filled(dtype):
    model = MODELS["mlp-tanh"]
    theta = start_params(model, dtype)
    out = np.full((3, model.num_params), np.nan, dtype=dtype)
    res = train_clients(model, theta, DATA, [1, 3, 0], out=out, **HYPER)
    assert res.deltas is out
    expected = train_clients(model, theta, DATA, [1, 3, 0], **HYPER).deltas
    assert np.array_equal(out, expected)


@pytest.mark.parametrize(
    "out",
    [
        np.empty((2, MODELS["logistic"].num_params)),
        np.empty((3, MODELS["logistic"].num_params + 1)),
        np.empty(3 * MODELS["logistic"].num_params),
        np.empty((3, MODELS["logistic"].num_params), dtype=np.float32),
        np.empty((3, MODELS["logistic"].num_params), order="F"),
        np.empty((3, 2 * MODELS["logistic"].num_params))[:, ::2],
        [[0.0] * MODELS["logistic"].num_params] * 3,
    ],
    ids=["rows", "cols", "1d", "float32", "fortran", "strided", "list"],
)
def test_out_buffer_of_wrong_shape_dtype_or_layout_rejected(out):
    model = MODELS["logistic"]
    with pytest.raises(ValueError, match="out"):
        train_clients(model, start_params(model), DATA, [0, 1, 2], out=out, **HYPER)


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"lr": 0.0}, ValueError, "lr"),
        ({"lr": -0.1}, ValueError, "lr"),
        ({"lr": float("nan")}, ValueError, "lr"),
        ({"epochs": 0}, ValueError, "epochs"),
        ({"epochs": 1.5}, TypeError, "epochs"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"momentum": 1.0}, ValueError, "momentum"),
        ({"momentum": -0.1}, ValueError, "momentum"),
        ({"prox_mu": -1e-3}, ValueError, "prox_mu"),
        ({"clients": [0, 4]}, ValueError, "clients"),
        ({"clients": [-1]}, ValueError, "clients"),
        ({"clients": []}, ValueError, "clients"),
        ({"clients": [0.5]}, TypeError, "clients"),
        ({"params": np.zeros(3)}, ValueError, "params"),
        ({"model": "logistic"}, TypeError, "model"),
    ],
)
def test_train_clients_rejects_bad_arguments(kwargs, exc, match):
    model = MODELS["logistic"]
    args = dict(
        model=model,
        params=start_params(model),
        data=DATA,
        clients=[0, 1],
        epochs=1,
        batch_size=2,
        lr=0.1,
    )
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        train_clients(**args)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, "lr"),
        ({"batch_size": 0}, "batch_size"),
        ({"momentum": 1.0}, "momentum"),
        ({"prox_mu": -1.0}, "prox_mu"),
    ],
)
def test_sgd_reference_rejects_bad_hyperparameters(kwargs, match):
    model = MODELS["logistic"]
    Xk, yk = DATA.client_train(0)
    args = {"batch_size": 2, "lr": 0.1, **kwargs}
    with pytest.raises(ValueError, match=match):
        sgd_reference(model, start_params(model), Xk, yk, np.arange(12)[None, :], **args)


@pytest.mark.parametrize("name", list(MODELS))
def test_kernel_loss_without_gradient_ignores_need_loss(name):
    # need_loss only lets training steps skip the loss; a call without a gradient returns the
    # whole loss (penalty included) either way
    from fairagg.models._kernels import batch_loss_grad, work_size

    model = MODELS[name]
    theta = start_params(model)
    X, y = DATA.client_train(3)
    H, act = model._kernel_dims()
    rows = np.arange(X.shape[0], dtype=np.int64)
    work = np.empty(work_size(H, C))
    args = (theta, X, y, rows, 0, X.shape[0], H, C, act, float(model.l2), np.empty(0), work)
    assert batch_loss_grad(*args, False) == batch_loss_grad(*args, True)
    assert batch_loss_grad(*args, True)[0] == pytest.approx(model.loss(theta, X, y), rel=1e-12)
