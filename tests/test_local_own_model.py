"""A model of the user's own plugs into local training and ``simulate`` through the public
contract of ``FlatModel`` alone (issue 39, item 2).

``OwnLogistic`` re-implements multinomial logistic regression from the contract's NumPy methods
only (``num_params``, ``init_params``, ``logits``, ``loss_and_grad``): it has no compiled kernel,
so local training runs the NumPy reference loop for it (``sgd_reference``, the same shuffles),
and its results equal the built-in ``LogisticRegression``'s, whose kernel is tested equal to that
loop to round-off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from fairagg import simulate
from fairagg.data import from_client_arrays
from fairagg.local import (
    client_gradients,
    client_shuffles,
    sgd_reference,
    train_clients,
    trained_accuracies,
)
from fairagg.models import FlatModel, LogisticRegression
from tests.tolerances import assert_close

P, C = 5, 3
TRAIN_SIZES = (12, 7, 9, 16, 5, 11)


def make_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    clients = [(rng.normal(size=(n + 2, P)), rng.integers(0, C, n + 2)) for n in TRAIN_SIZES]
    return from_client_arrays(clients, n_classes=C, test_fraction=0.1)


DATA = make_data()


@dataclass(frozen=True)
class OwnLogistic(FlatModel):
    """Softmax regression written against the public contract only: W (C, p) then b (C,)."""

    n_features: int
    n_classes: int
    l2: float = 0.0

    @property
    def num_params(self) -> int:
        return self.n_classes * self.n_features + self.n_classes

    def init_params(self, seed: int = 0, dtype: Any = np.float64) -> np.ndarray:
        return np.zeros(self.num_params, dtype=dtype)

    def _unpack(self, params: Any) -> tuple[np.ndarray, np.ndarray]:
        theta = self.check_params(params)
        cut = self.n_classes * self.n_features
        return theta[:cut].reshape(self.n_classes, self.n_features), theta[cut:]

    def logits(self, params: Any, X: Any) -> np.ndarray:
        W, b = self._unpack(params)
        return np.asarray(X) @ W.T + b

    def loss_and_grad(self, params: Any, X: Any, y: Any) -> tuple[float, np.ndarray]:
        W, b = self._unpack(params)
        X, y = self.check_data(X, y)
        n = X.shape[0]
        Z = X @ W.T + b
        Z = Z - Z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(Z).sum(axis=1))
        rows = np.arange(n)
        loss = float(np.mean(lse - Z[rows, y]) + 0.5 * self.l2 * float(np.sum(W * W)))
        G = np.exp(Z - lse[:, None])
        G[rows, y] -= 1.0
        return loss, np.concatenate([(G.T @ X / n + self.l2 * W).ravel(), G.mean(axis=0)])


@dataclass(frozen=True)
class LeastSquares(FlatModel):
    """Linear scores fitted to one-hot labels by squared error: not a cross-entropy model."""

    n_features: int
    n_classes: int

    @property
    def num_params(self) -> int:
        return self.n_features * self.n_classes

    def init_params(self, seed: int = 0, dtype: Any = np.float64) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return (0.01 * rng.normal(size=self.num_params)).astype(dtype)

    def logits(self, params: Any, X: Any) -> np.ndarray:
        W = self.check_params(params).reshape(self.n_features, self.n_classes)
        return np.asarray(X) @ W

    def loss_and_grad(self, params: Any, X: Any, y: Any) -> tuple[float, np.ndarray]:
        X, y = self.check_data(X, y)
        R = self.logits(params, X) - np.eye(self.n_classes)[y]
        n = X.shape[0]
        return float(0.5 * np.sum(R * R) / n), (X.T @ R / n).ravel()


class ScaledLogistic(LogisticRegression):
    """A built-in model whose loss the subclass redefines: it must not run the built-in kernel."""

    def loss_and_grad(self, params: Any, X: Any, y: Any) -> tuple[float, np.ndarray]:
        loss, g = super().loss_and_grad(params, X, y)
        return 2.0 * loss, 2.0 * g


OWN, BUILTIN = OwnLogistic(P, C, l2=0.01), LogisticRegression(P, C, l2=0.01)
THETA = 0.3 * np.random.default_rng(2).normal(size=BUILTIN.num_params)
CLIENTS = np.array([3, 0, 5, 1])
SGD = {"epochs": 2, "batch_size": 4, "lr": 0.1}


def test_the_contract_needs_no_private_method():
    """OwnLogistic defines only the contract's names (and a private helper of its own)."""
    own = (set(vars(OwnLogistic)) | set(OwnLogistic.__annotations__)) - {"_unpack"}
    assert {n for n in own if not n.startswith("__")} == {
        "n_features",
        "n_classes",
        "l2",
        "num_params",
        "init_params",
        "logits",
        "loss_and_grad",
    }
    assert OWN._kernel_dims() is None and BUILTIN._kernel_dims() == (0, 0)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"momentum": 0.9},
        {"prox_mu": 0.5},
        {"propfair_m": 5.0},
        {"propfair_m": 1.3, "propfair_huber": True},
    ],
    ids=["plain", "momentum", "prox", "propfair", "propfair-huber"],
)
def test_own_model_trains_on_the_reference_loop_with_the_documented_shuffles(extra):
    res = train_clients(OWN, THETA, DATA, CLIENTS, seed=4, round_index=2, **SGD, **extra)
    off = DATA.train_offsets
    for i, k in enumerate(CLIENTS):
        rows = slice(off[k], off[k + 1])
        order = client_shuffles(off[k + 1] - off[k], SGD["epochs"], 4, 2, int(k))
        delta, loss, acc = sgd_reference(
            OWN,
            THETA,
            DATA.X_train[rows],
            DATA.y_train[rows],
            order,
            batch_size=SGD["batch_size"],
            lr=SGD["lr"],
            **extra,
        )
        np.testing.assert_array_equal(res.deltas[i], delta)  # the same loop: bit for bit
        assert (res.losses[i], res.accuracies[i]) == (loss, acc)
    np.testing.assert_array_equal(res.num_samples, np.diff(off)[CLIENTS])


@pytest.mark.parametrize("extra", [{}, {"momentum": 0.5, "prox_mu": 0.1}, {"propfair_m": 5.0}])
def test_own_logistic_trains_as_the_builtin_kernel_does(extra):
    own = train_clients(OWN, THETA, DATA, CLIENTS, seed=4, round_index=2, **SGD, **extra)
    ref = train_clients(BUILTIN, THETA, DATA, CLIENTS, seed=4, round_index=2, **SGD, **extra)
    assert_close(own.deltas, ref.deltas)
    assert_close(own.losses, ref.losses)
    np.testing.assert_array_equal(own.accuracies, ref.accuracies)


@pytest.mark.parametrize("batch_size", [None, 6])
def test_own_logistic_gradients_equal_the_builtin_kernels(batch_size):
    own = client_gradients(OWN, THETA, DATA, CLIENTS, batch_size=batch_size, seed=1)
    ref = client_gradients(BUILTIN, THETA, DATA, CLIENTS, batch_size=batch_size, seed=1)
    assert_close(own.deltas, ref.deltas)
    assert_close(own.losses, ref.losses)
    np.testing.assert_array_equal(own.accuracies, ref.accuracies)
    off = DATA.train_offsets
    for i, k in enumerate(CLIENTS):  # the minibatch: the first B rows of the round's shuffle
        n = off[k + 1] - off[k]
        rows = np.arange(n) if batch_size is None or n <= batch_size else None
        if rows is None:
            rows = client_shuffles(n, 1, 1, 0, int(k))[0][:batch_size]
        X, y = DATA.X_train[off[k] : off[k + 1]], DATA.y_train[off[k] : off[k + 1]]
        np.testing.assert_array_equal(own.deltas[i], OWN.grad(THETA, X[rows], y[rows]))


def test_own_logistic_evaluates_as_the_builtin():
    d = DATA
    splits = ((d.X_test, d.y_test, d.test_offsets), (d.X_train, d.y_train, d.train_offsets))
    for X, y, off in splits:
        own = OWN.evaluate_clients(THETA, X, y, off)
        ref = BUILTIN.evaluate_clients(THETA, X, y, off)
        assert_close(own[0], ref[0])
        np.testing.assert_array_equal(own[1], ref[1])
    deltas = train_clients(BUILTIN, THETA, DATA, CLIENTS, **SGD).deltas
    np.testing.assert_array_equal(
        trained_accuracies(OWN, THETA, deltas, DATA, CLIENTS),
        trained_accuracies(BUILTIN, THETA, deltas, DATA, CLIENTS),
    )


@pytest.mark.parametrize("rule", ["fedavg", "qfedsgd", "fedfa"])
def test_own_logistic_runs_simulate_as_the_builtin(rule):
    """Whole runs: SGD deltas (fedavg), one gradient a client (qfedsgd), accuracies of the
    trained models (fedfa), with the evaluation of every round."""
    kw = {"rounds": 2, "clients_per_round": 3, "batch_size": 4, "lr": 0.1, "seed": 3}
    own = simulate(rule, OWN, DATA, params=THETA, backend="numpy", **kw)
    ref = simulate(rule, BUILTIN, DATA, params=THETA, backend="numpy", **kw)
    assert own.status == ref.status == "completed"
    for key in ("selected", "test_accuracy", "train_accuracy"):
        np.testing.assert_array_equal(own.latest(key), ref.latest(key), err_msg=key)
    for key in ("weights", "reported_losses", "test_loss", "train_loss"):
        assert_close(own.latest(key), ref.latest(key), err_msg=key)
    assert_close(own.final_params, ref.final_params)


def test_a_least_squares_model_runs_a_whole_simulate_round():
    model = LeastSquares(P, C)
    h = simulate("qfedavg", model, DATA, rounds=1, clients_per_round=4, lr=0.05)
    assert h.status == "completed" and h.num_rounds == 1
    assert h.final_params.shape == (P * C,) and np.all(np.isfinite(h.final_params))
    X, y, off = DATA.X_train, DATA.y_train, DATA.train_offsets
    theta0 = model.init_params(0)
    losses = np.array(
        [model.loss(theta0, X[a:b], y[a:b]) for a, b in zip(off[:-1], off[1:], strict=True)]
    )
    np.testing.assert_array_equal(h.latest("reported_losses"), losses[h.latest("selected")])


def test_a_subclass_redefining_the_loss_trains_on_its_own_loss_not_the_kernel():
    model = ScaledLogistic(P, C, l2=0.01)
    assert model._kernel_dims() is None
    twice = train_clients(model, THETA, DATA, CLIENTS, **{**SGD, "lr": 0.05})
    base = train_clients(BUILTIN, THETA, DATA, CLIENTS, **SGD)  # 2F at lr/2 is F at lr
    assert_close(twice.deltas, base.deltas)
    assert_close(twice.losses, 2.0 * base.losses)


def test_a_model_missing_a_method_is_refused_naming_it():
    @dataclass(frozen=True)
    class NoLogits(FlatModel):
        n_features: int = P
        n_classes: int = C

        @property
        def num_params(self) -> int:
            return P * C

        def init_params(self, seed: int = 0, dtype: Any = np.float64) -> np.ndarray:
            return np.zeros(P * C, dtype=dtype)

        def loss_and_grad(self, params, X, y):
            return 0.0, np.zeros(P * C)

    with pytest.raises(NotImplementedError, match=r"NoLogits must define logits\(params, X\)"):
        train_clients(NoLogits(), np.zeros(P * C), DATA, CLIENTS, **SGD)


def test_an_object_that_is_not_a_flat_model_is_refused():
    class Duck:
        n_features, n_classes, num_params = P, C, P * C

    for call in (train_clients, client_gradients):
        kw = SGD if call is train_clients else {}
        with pytest.raises(TypeError, match="model must be a fairagg.models.FlatModel; got Duck"):
            call(Duck(), np.zeros(P * C), DATA, CLIENTS, **kw)
