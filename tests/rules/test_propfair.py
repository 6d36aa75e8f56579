"""Tests of fairagg.rules.propfair: PropFair as the full algorithm (SPEC §6). The surrogate's
local training is tested in tests/test_local_surrogate.py; here: the server side, the rule's
LocalSpec, the M check, and M → ∞ → FedAvg through the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from fairagg import LocalSpec, fedavg, make_reports, simulate
from fairagg.data import synthetic
from fairagg.models import LogisticRegression
from fairagg.rules.propfair import check_losses_below, propfair
from tests.tolerances import assert_close


def test_server_side_is_fedavg():
    rng = np.random.default_rng(0)
    D = rng.normal(size=(3, 4))
    reports = make_reports(D, [3, 1, 6], losses=[0.5, 1.0, 2.0])
    theta = rng.normal(size=4)
    got = propfair(M=5.0).step(theta, reports, ())
    want = fedavg().step(theta, reports, ())
    assert_close(got.params, want.params)
    assert_close(got.info["weights"], [0.3, 0.1, 0.6])


def test_rule_asks_the_clients_for_the_surrogate():
    rule = propfair(M=7.0, epsilon=0.1, huber=True)
    assert rule.local == LocalSpec(propfair_m=7.0, propfair_epsilon=0.1, propfair_huber=True)
    assert rule.hyperparams["M"] == 7.0


@pytest.mark.parametrize("worst", [5.0, 6.5])
def test_m_not_above_every_loss_is_an_error(worst):
    reports = make_reports(np.ones((2, 2)), [1, 1], losses=[1.0, worst])
    with pytest.raises(ValueError, match="losses must all be below PropFair's M"):
        propfair(M=5.0).step(np.zeros(2), reports, ())


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(M=0.0), ValueError, "M"),
        (dict(M=0.1), ValueError, "M must exceed epsilon"),
        (dict(M=float("inf")), ValueError, "M"),
        (dict(epsilon=-0.2), ValueError, "epsilon"),
        (dict(huber="yes"), TypeError, "huber"),
        (dict(backend="cuda-x"), ValueError, "backend"),
    ],
)
def test_bad_hyperparameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        propfair(**kwargs)


def test_m_none_is_a_type_error_not_training_on_the_loss():
    with pytest.raises(TypeError, match=r"^M must be a real number; got NoneType$"):
        propfair(M=None)


@pytest.mark.parametrize(
    ("losses", "m", "exc", "match"),
    [
        ([1.0], 0.0, ValueError, r"^m must be > 0\.0; got 0\.0$"),
        ([1.0], -2.0, ValueError, r"^m must be > 0\.0; got -2\.0$"),
        ([1.0], "5", TypeError, r"^m must be a real number; got str"),
        ([[1.0]], 5.0, ValueError, r"^losses must be 1-dimensional; got shape \(1, 1\)$"),
        ([], 5.0, ValueError, r"^losses must have at least 1 entry along its first axis"),
        ([1.0, np.nan], 5.0, ValueError, r"^losses must be finite"),
        ([-1.0, 2.0], 5.0, ValueError, r"^losses must be non-negative; minimum is -1\.0$"),
        ([1.0, 5.0], 5.0, ValueError, r"^losses must all be below PropFair's M = 5\.0; got a "),
    ],
)
def test_check_losses_below_errors_name_the_argument_and_value(losses, m, exc, match):
    with pytest.raises(exc, match=match):
        check_losses_below(losses, m)


@pytest.mark.parametrize(
    ("losses", "m"),
    [
        ([0.0, 1.0], 2.0),  # a zero loss is non-negative
        ([0.25], 0.5),  # one client; any M > 0 above the losses
        (np.array([0, 1]), 2.0),  # integer losses
    ],
)
def test_check_losses_below_accepts_losses_below_m(losses, m):
    assert check_losses_below(losses, m) is None


def test_propfair_tends_to_fedavg_in_a_simulation():
    """M → ∞ with the local lr scaled by M: the runs approach FedAvg's, with an error O(F/M)."""
    data = synthetic(1, 1, num_clients=6, seed=2)
    model = LogisticRegression(60, 10)
    kw = dict(rounds=3, clients_per_round=3, epochs=1, batch_size=10, eval_every=3, seed=1)
    base = simulate(fedavg(), model, data, lr=0.01, **kw).final_params
    errs = []
    for M in (1e2, 1e5):
        got = simulate(propfair(M=M), model, data, lr=0.01 * M, **kw).final_params
        errs.append(np.abs(got - base).max() / np.abs(base).max())
    assert errs[1] < errs[0] / 100 and errs[1] < 1e-4


def test_defaults_are_the_documented_m_10_epsilon_0_2_no_huber():
    rule = propfair()
    assert rule.local == LocalSpec(propfair_m=10.0, propfair_epsilon=0.2, propfair_huber=False)
    assert rule.hyperparams == {"M": 10.0, "epsilon": 0.2, "huber": False, "backend": "numpy"}


def test_errors_are_the_full_messages():
    reports = make_reports(np.ones((2, 2)), [1, 1], losses=[1.0, 6.5])
    with pytest.raises(ValueError) as info:
        propfair(M=5.0).step(np.zeros(2), reports, ())
    assert str(info.value) == (
        "losses must all be below PropFair's M = 5.0; got a loss of 6.5 (build the rule with a "
        "larger M)"
    )
    with pytest.raises(TypeError, match=r"^huber must be a bool; got str$"):
        propfair(huber="yes")
