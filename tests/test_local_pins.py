"""Local SGD's trained models pinned to their bits: every branch of the kernel (momentum, the
proximal term, L2, ReLU and tanh, float32, PropFair's surrogate, one-row and full batches),
recorded before the kernel's optimisations of issue 22 so that a faster kernel provably trains
the same models, and re-recorded once when issue 38 allowed new training bits (the blocked
minibatch kernel: round-off from the NumPy loop step by step, ``test_local_steps.py``); pinned
since. ``test_parallel.py`` pins a whole FedAvg trajectory of the default configuration; this
file pins one round of ``train_clients`` for each variant.

Bitwise on the CPU the pins were recorded on; Numba compiles for the host, so another CPU may
reassociate the dot products differently and is held to round-off. Re-record (only for a change
that is meant to change training bits, and say so in its commit) with
``python -m tests.test_local_pins --record``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

from fairagg.data import synthetic
from fairagg.local import train_clients
from fairagg.models import MLP, LogisticRegression

PATH = Path(__file__).parent / "data" / "local_sgd_variants.npz"
DATA = synthetic(1, 1, 12, seed=5)
CLIENTS = [7, 0, 3, 11]

#: name: (model, dtype, train_clients keywords)
VARIANTS = {
    "logistic-plain": (LogisticRegression(60, 10), np.float64, {}),
    "logistic-l2-momentum-prox": (
        LogisticRegression(60, 10, l2=0.01),
        np.float64,
        dict(momentum=0.9, prox_mu=0.1),
    ),
    "logistic-float32": (LogisticRegression(60, 10, l2=0.01), np.float32, dict(momentum=0.5)),
    "logistic-B1": (LogisticRegression(60, 10), np.float64, dict(batch_size=1)),
    "logistic-full-batch": (LogisticRegression(60, 10), np.float64, dict(batch_size=10_000)),
    "logistic-propfair": (LogisticRegression(60, 10), np.float64, dict(propfair_m=3.0)),
    "logistic-propfair-huber": (
        LogisticRegression(60, 10),
        np.float64,
        dict(propfair_m=2.4, propfair_epsilon=0.3, propfair_huber=True),
    ),
    "mlp-tanh": (MLP(60, 10, n_hidden=8), np.float64, {}),
    "mlp-tanh-float32": (MLP(60, 10, n_hidden=8, l2=0.001), np.float32, dict(prox_mu=0.2)),
    "mlp-relu-l2-momentum": (
        MLP(60, 10, n_hidden=16, activation="relu", l2=0.01),
        np.float64,
        dict(momentum=0.9),
    ),
    "mlp-propfair": (MLP(60, 10, n_hidden=8), np.float64, dict(propfair_m=3.0)),
}


def train(name: str) -> np.ndarray:
    model, dtype, kw = VARIANTS[name]
    theta = model.init_params(1, dtype=dtype) + dtype(0.05)
    args = dict(epochs=2, batch_size=10, lr=0.05, seed=4, round_index=2) | kw
    return train_clients(model, theta, DATA, CLIENTS, parallel=False, **args).deltas.copy()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_local_sgd_variant_is_pinned(name):
    pins = np.load(PATH)
    got, want = train(name), pins[name]
    assert got.dtype == want.dtype
    if str(pins["cpu"]) == llvm.get_host_cpu_name():
        assert np.array_equal(got, want)
    else:
        tol = 1e-4 if got.dtype == np.float32 else 1e-9
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 1e-3)


def test_every_variant_has_a_pin():
    assert set(np.load(PATH).files) == set(VARIANTS) | {"cpu"}


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    np.savez(PATH, cpu=np.array(llvm.get_host_cpu_name()), **{n: train(n) for n in VARIANTS})
    print(f"wrote {PATH}")
