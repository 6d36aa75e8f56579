"""The full algorithms reach the optima of the objectives they claim to solve (issue: q-FFL, AFL).

Small federated multinomial logistic-regression problems (convex), solved exactly by cvxpy
(:mod:`fairagg.oracles`); the rules run through :func:`fairagg.simulate` with every client every
round and full-batch gradients, and the objective is evaluated on the run's recorded training
losses (F_k of the final model, computed by the simulator's evaluation).
"""

from __future__ import annotations

import numpy as np
import pytest

from fairagg import oracles, simulate
from fairagg.data import from_client_arrays
from fairagg.models import LogisticRegression
from fairagg.rules.afl import afl
from fairagg.rules.qffl import qfedsgd, qffl_objective

K, P, C = 4, 3, 3
MODEL = LogisticRegression(P, C, l2=0.1)


def federated_data(seed: int):
    rng = np.random.default_rng(seed)
    clients = []
    # Unequal sizes: a rule that weighted its sums by n_k would reach another point.
    for n in (12, 19, 27, 35):
        X = rng.normal(size=(n, P)) + rng.normal(scale=1.5, size=P)  # client-specific shift
        y = rng.integers(0, C, n)
        y[:C] = np.arange(C)  # every class at every client
        clients.append((X, y))
    return from_client_arrays(clients, n_classes=C, test_fraction=0.2, seed=seed)


def smoothness(data) -> float:
    """max_k of ½ λ_max(mean x̃x̃ᵀ) + l2 over the clients: ∇F_k is L-Lipschitz for every k
    (see tests/rules/test_qffl_logistic.py), so lr = 1/L is Lemma 12's safe choice."""
    Xt = np.hstack([data.X_train, np.ones((data.X_train.shape[0], 1))])
    o = data.train_offsets
    return max(
        0.5 * np.linalg.eigvalsh(Xt[a:b].T @ Xt[a:b] / (b - a))[-1] + MODEL.l2
        for a, b in zip(o[:-1], o[1:], strict=True)
    )


def final_train_losses(rule, data, rounds, lr):
    h = simulate(
        rule,
        MODEL,
        data,
        rounds=rounds,
        clients_per_round=K,
        lr=lr,
        eval_every=rounds,
        parallel=False,
    )
    assert h.status == "completed"
    return h.train_loss[-1]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("q", [0.0, 1.0, 5.0])
def test_qfedsgd_full_participation_reaches_the_cvxpy_qffl_optimum(q, seed):
    """Objective gap below 1e-6 relative to min_θ (1/K) Σ_k F_k^{q+1}/(q+1) (q-FedSGD's sums are
    unweighted, so with every client every round it minimises the uniform-p objective); the
    run starts far from it (gap above 1e-3 after 5 rounds), and cannot go below it."""
    data = federated_data(seed)
    opt = oracles.qffl_optimum(MODEL, data.X_train, data.y_train, data.train_offsets, q)
    lr = 1.0 / smoothness(data)
    early = qffl_objective(final_train_losses(qfedsgd(q=q), data, 5, lr), q)
    assert (early - opt.value) / opt.value > 1e-3
    f = qffl_objective(final_train_losses(qfedsgd(q=q), data, 600, lr), q)
    gap = (f - opt.value) / opt.value
    # cvxpy's value is accurate to ~1e-7 relative (tests/test_oracles_fl.py): allow that below.
    assert -1e-6 < gap < 1e-6


def test_qfedsgd_static_step_at_q0_reaches_the_mean_loss_optimum():
    """``static_step=True`` (h_k = L F̃^q) is a fixed-step method on the F̃^q-weighted gradient: at
    q = 0 it is gradient descent on the mean loss and reaches the same optimum."""
    data = federated_data(2)
    opt = oracles.qffl_optimum(MODEL, data.X_train, data.y_train, data.train_offsets, 0.0)
    lr = 1.0 / smoothness(data)
    f = qffl_objective(final_train_losses(qfedsgd(q=0.0, static_step=True), data, 600, lr), 0.0)
    assert abs(f - opt.value) / opt.value < 1e-6


@pytest.mark.parametrize("seed", [0, 3])
def test_afl_averaged_iterate_approaches_the_cvxpy_minimax_value(seed):
    """max_k F_k of AFL's reported average approaches V* = min_θ max_k F_k at the rate 1/T here:
    ten times the rounds divide the gap by at least 5 (measured: by 15 to 18 for seeds 0, 3 and
    5; by 3.1 to 4.6 per tripling from 100 to 3000 rounds). The generic descent-ascent analysis
    promises only 1/√T, a division by 3.2, which this check rejects."""
    data = federated_data(seed)
    opt = oracles.afl_optimum(MODEL, data.X_train, data.y_train, data.train_offsets)
    lr = 1.0 / smoothness(data)
    gaps = []
    for T in (100, 1000):
        worst = final_train_losses(afl(lambda_lr=0.5), data, T, lr).max()
        gaps.append((worst - opt.value) / opt.value)
    assert gaps[0] > 1e-3  # far from V* at first, so that the ratio measures the rate
    assert gaps[1] < gaps[0] / 5
    assert -1e-7 < gaps[1]  # V* is a minimum: nothing lies below it (up to cvxpy)
