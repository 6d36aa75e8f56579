"""Local SGD's kernel equals the NumPy reference loop step by step (issue 38, item 5).

The kernel (``models._kernels.sgd_one_client``) computes a step in another order than
``fairagg.local.sgd_reference``: whole minibatches in zero-padded scratch arrays, four rows of
logits at a time, its own vectorised e^x and tanh. It must still take the reference's steps to
round-off: after every step, ``max |δ_kernel − δ_reference| ≤ 1e-12 · max |δ_reference|`` in
float64 (δ = θ − w, the update so far), for every variant of the step (logistic and MLP with tanh
and ReLU, momentum, the proximal term, L2, PropFair's three branches) and in float32 to the
float32 tolerance.

Steps are observed through epochs: a client of ``n ≤ B`` rows takes one step an epoch, and the
kernel's run of e epochs is the first e epochs of a longer one (the same shuffles, the momentum
carried over), so the runs of 1, 2, ... epochs give the state after each step.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from fairagg.data import from_client_arrays
from fairagg.local import client_shuffles, sgd_reference, train_clients
from fairagg.models import MLP, LogisticRegression
from fairagg.models._kernels import _exp, _tanh
from tests.tolerances import CLOSED_FORM

SEED, ROUND = 7, 2


def one_client(n: int, p: int, C: int, seed: int = 0):
    """A dataset of one client with ``n`` training rows of ``p`` features, labels in [0, C)."""
    rng = np.random.default_rng(seed)
    # n + 1 rows with test_fraction=0.01: exactly one test row, n training rows.
    X, y = rng.normal(size=(n + 1, p)), rng.integers(0, C, n + 1)
    data = from_client_arrays([(X, y)], n_classes=C, test_fraction=0.01)
    assert data.num_train_samples[0] == n
    return data


#: name: (model, dtype, train_clients keywords); lr 0.05 and batch size 10 unless stated.
VARIANTS = {
    "logistic": (LogisticRegression(60, 10), np.float64, {}),
    "logistic-l2-momentum-prox": (
        LogisticRegression(60, 10, l2=0.01),
        np.float64,
        dict(momentum=0.9, prox_mu=0.1),
    ),
    "logistic-small-p": (LogisticRegression(5, 3), np.float64, dict(momentum=0.5)),
    "logistic-propfair": (LogisticRegression(60, 10, l2=0.01), np.float64, dict(propfair_m=4.0)),
    # M − f < ε at the start (f ≈ 2.86): the Huber and the 1/M continuations
    "logistic-propfair-huber": (
        LogisticRegression(60, 10),
        np.float64,
        dict(propfair_m=2.9, propfair_epsilon=0.3, propfair_huber=True),
    ),
    "logistic-propfair-continuation": (
        LogisticRegression(60, 10),
        np.float64,
        dict(propfair_m=2.9, propfair_epsilon=0.3, momentum=0.9),
    ),
    "mlp-tanh": (MLP(60, 10, n_hidden=32), np.float64, {}),
    "mlp-tanh-h13-prox": (MLP(60, 10, n_hidden=13, l2=0.001), np.float64, dict(prox_mu=0.2)),
    "mlp-relu-l2-momentum": (
        MLP(60, 10, n_hidden=16, activation="relu", l2=0.01),
        np.float64,
        dict(momentum=0.9),
    ),
    "mlp-tanh-propfair": (MLP(60, 10, n_hidden=32), np.float64, dict(propfair_m=4.0)),
    "logistic-float32": (
        LogisticRegression(60, 10, l2=0.01),
        np.float32,
        dict(momentum=0.5, prox_mu=0.1),
    ),
    "mlp-tanh-float32": (MLP(60, 10, n_hidden=32, l2=0.001), np.float32, dict(momentum=0.5)),
    "mlp-relu-float32": (MLP(60, 10, n_hidden=13, activation="relu"), np.float32, {}),
}


def start(model, dtype):
    if isinstance(model, MLP):
        theta = model.init_params(3) + 0.05
    else:  # logits that differ between classes from the first step on
        theta = 0.1 * np.random.default_rng(4).normal(size=model.num_params)
    return theta.astype(dtype)


def trajectories(name: str, n: int, batch_size: int, epochs: int):
    """(kernel, reference) updates δ = θ − w after each of 1..epochs epochs, shape (epochs, d).

    The reference runs in float64 on the θ and X the kernel sees (float32-rounded for float32)."""
    model, dtype, kw = VARIANTS[name]
    data = one_client(n, model.n_features, model.n_classes)
    theta = start(model, dtype)
    hyper = dict(batch_size=batch_size, lr=0.05) | kw
    kernel, ref = [], []
    X, y = data.client_train(0)
    X = X.astype(dtype).astype(np.float64)
    order = client_shuffles(n, epochs, SEED, ROUND, 0)
    for e in range(1, epochs + 1):
        res = train_clients(
            model, theta, data, [0], epochs=e, seed=SEED, round_index=ROUND, parallel=False, **hyper
        )
        kernel.append(res.deltas[0].astype(np.float64))
        ref.append(sgd_reference(model, theta.astype(np.float64), X, y, order[:e], **hyper)[0])
    return np.array(kernel), np.array(ref), dtype


def relative_errors(kernel: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """max |δ_kernel − δ_reference| / max |δ_reference| after each epoch."""
    return np.abs(kernel - ref).max(axis=1) / np.abs(ref).max(axis=1)


def bound(dtype) -> float:
    return CLOSED_FORM[np.dtype(dtype)][0]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_step_equals_the_reference(name):
    # 7 rows, batch 10: one step an epoch, six steps each checked
    kernel, ref, dtype = trajectories(name, n=7, batch_size=10, epochs=6)
    assert np.all(np.abs(ref).max(axis=1) > 0)
    err = relative_errors(kernel, ref)
    assert np.all(err <= bound(dtype)), err


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_epoch_of_several_batches_equals_the_reference(name):
    # 23 rows, batch 4: five full batches and one of 3 rows an epoch (the 4-, 2- and 1-row paths
    # of the blocked products), three epochs
    kernel, ref, dtype = trajectories(name, n=23, batch_size=4, epochs=3)
    err = relative_errors(kernel, ref)
    assert np.all(err <= bound(dtype)), err


def test_the_propfair_variants_take_their_branches():
    # PropFair's factor is 1/(M − f) where M − f ≥ ε, else 1/ε (Huber) or 1/M: the variants
    # above start on each side of ε
    data = one_client(7, 60, 10)
    X, y = data.client_train(0)
    gaps = {}
    for name in ("logistic-propfair", "logistic-propfair-huber", "logistic-propfair-continuation"):
        model, dtype, kw = VARIANTS[name]
        f = model.loss(start(model, dtype), X, y)
        gaps[name] = kw["propfair_m"] - f - kw.get("propfair_epsilon", 0.2)
    assert gaps["logistic-propfair"] > 0
    assert gaps["logistic-propfair-huber"] < 0 and gaps["logistic-propfair-continuation"] < 0


@njit(fastmath={"reassoc", "contract"})
def _in_a_fast_math_loop(x, out, which):
    # as the training kernel calls them: from a loop compiled with reassociation allowed
    for i in range(x.size):
        out[i] = _exp(x[i]) if which == 0 else _tanh(x[i])


def test_exp_is_within_two_ulp_of_numpy():
    x = np.concatenate([np.linspace(-708.0, 709.0, 200_001), np.linspace(-40.0, 0.0, 100_001)])
    got = np.empty_like(x)
    _in_a_fast_math_loop(x, got, 0)
    want = np.exp(x)
    assert np.all(np.abs(got - want) <= 2 * np.spacing(want))


def test_exp_below_its_range_is_zero_and_nan_stays_nan():
    x = np.array([-708.5, -745.2, -1e308, -np.inf, np.nan])
    got = np.empty_like(x)
    _in_a_fast_math_loop(x, got, 0)
    assert np.all(got[:4] == 0.0) and np.isnan(got[4])
    assert np.exp(-708.5) < 3.3e-308  # the values returned as 0


def test_tanh_is_within_round_off_of_numpy():
    x = np.concatenate(
        [
            np.linspace(-30.0, 30.0, 200_001),
            np.linspace(-0.2, 0.2, 100_001),  # both sides of the polynomial's 0.15
            np.geomspace(1e-300, 1.0, 1001),
            -np.geomspace(1e-300, 1.0, 1001),
            [np.inf, -np.inf],
        ]
    )
    got = np.empty_like(x)
    _in_a_fast_math_loop(x, got, 1)
    want = np.tanh(x)
    # a relative error of a few ulp: 1 − 2 / (e^{2|a|} + 1) loses up to 3 bits near |a| = 0.15
    assert np.all(np.abs(got - want) <= 4e-15 * np.abs(want))
    nan = np.empty(1)
    _in_a_fast_math_loop(np.array([np.nan]), nan, 1)
    assert np.isnan(nan[0])
