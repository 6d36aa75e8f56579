"""The common rule test (optax ``_common_test.py`` style): every rule in ``fairagg.RULES`` goes
through the same structural checks, so a new rule is covered the moment it is registered."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fairagg
from fairagg import RULES, Aggregate, RoundReports, Rule, RuleSpec, make_reports, make_rule
from tests.strategies import finite_floats, num_samples, update_matrices

NAMES = sorted(RULES)


@st.composite
def full_rounds(draw, full_participation=False):
    """θ (d,), K and reports with every optional field filled, for m ≤ K clients (m = K for a
    rule that needs full participation)."""
    D = draw(update_matrices(bound=1.0))
    m, d = D.shape
    K = m if full_participation else draw(st.integers(m, m + 4))
    theta = draw(hnp.arrays(np.float64, (d,), elements=finite_floats(1.0)))
    reports = make_reports(
        D,
        draw(num_samples(m)),
        losses=draw(hnp.arrays(np.float64, (m,), elements=st.floats(0.05, 5.0))),
        accuracies=draw(hnp.arrays(np.float64, (m,), elements=st.floats(0.0, 1.0))),
        participations=draw(hnp.arrays(np.int64, (m,), elements=st.integers(1, 20))),
        client_ids=np.array(draw(st.permutations(range(K)))[:m], dtype=np.int64),
        round_index=draw(st.integers(0, 19)),
        num_clients=K,
        gradients=draw(hnp.arrays(np.float64, (m, d), elements=finite_floats(1.0))),
        lr=draw(st.floats(0.01, 1.0)),
    )
    return theta, K, reports


@pytest.mark.parametrize("name", NAMES)
def test_registry_entry_is_documented(name):
    spec = RULES[name]
    assert isinstance(spec, RuleSpec)
    assert spec.name == name
    for field in (spec.paper, spec.equations, spec.summary):
        assert isinstance(field, str) and field.strip()
    assert set(spec.needs) <= set(RoundReports._fields[2:6]) | {"gradients"}
    # A rule that reads gradients makes its clients report them, and conversely.
    assert ("gradients" in spec.needs) == (spec.factory().local.report == "gradients")


@pytest.mark.parametrize("name", NAMES)
def test_make_rule_builds_rule_of_that_name(name):
    rule = make_rule(name)
    assert isinstance(rule, Rule)
    assert rule.name == name
    assert callable(rule.init) and callable(rule.step)
    assert isinstance(rule.hyperparams, Mapping)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_rule_init_step_contract(name, data):
    theta, K, reports = data.draw(full_rounds(RULES[name].full_participation))
    m, d = reports.deltas.shape
    if "gradients" in RULES[name].needs:
        reports = reports._replace(deltas=None)  # as the simulator sends them
    rule = make_rule(name)
    state = rule.init(theta, K)
    theta_copy = theta.copy()
    arrays = [f for f in reports if isinstance(f, np.ndarray)]
    copies = [np.copy(f) for f in arrays]
    state_copy = state
    agg = rule.step(theta, reports, state)
    assert isinstance(agg, Aggregate)
    assert agg.params.shape == (d,)
    assert np.all(np.isfinite(agg.params))
    assert type(agg.state) is type(state)
    assert isinstance(agg.info, dict)
    weights = np.asarray(agg.info["weights"])
    assert weights.shape == (m,)
    assert np.all(np.isfinite(weights))
    # Purity: nothing the rule was given has changed.
    np.testing.assert_array_equal(theta, theta_copy)
    for field, copy in zip(arrays, copies, strict=True):
        np.testing.assert_array_equal(field, copy)
    assert state == state_copy
    # A second step on the returned state works too.
    again = rule.step(agg.params, reports, agg.state)
    assert np.all(np.isfinite(again.params)) and type(again.state) is type(state)


@pytest.mark.parametrize("name", NAMES)
def test_rule_rejects_reports_missing_needed_fields(name):
    needs = RULES[name].needs
    if not needs:
        # Nothing to omit: the rule must work on deltas and num_samples alone.
        agg = make_rule(name).step(
            np.zeros(2), make_reports(np.ones((2, 2)), [1, 2]), make_rule(name).init(np.zeros(2), 2)
        )
        assert np.all(np.isfinite(agg.params))
        return
    rule = make_rule(name)
    given_all = {
        "losses": [0.5, 1.0],
        "accuracies": [0.5, 0.25],
        "participations": [1, 2],
        "gradients": np.ones((2, 2)),
        "lr": 0.1,
    }
    for missing in needs:
        fields = {k: v for k, v in given_all.items() if k != missing}
        reports = make_reports(np.ones((2, 2)), [1, 2], **fields)
        with pytest.raises(ValueError, match=missing):
            rule.step(np.zeros(2), reports, rule.init(np.zeros(2), 2))


@pytest.mark.parametrize("name", ["fedprox", "FedAvg", "", "fed avg"])
def test_make_rule_rejects_unknown_name(name):
    with pytest.raises(ValueError, match=f"^name must be one of .*; got {name!r}$"):
        make_rule(name)


@pytest.mark.parametrize(("name", "kind"), [(3, "int"), (None, "NoneType"), (b"fedavg", "bytes")])
def test_make_rule_name_not_a_str_is_a_type_error_naming_its_type(name, kind):
    with pytest.raises(TypeError, match=rf"^name must be a registry name \(str\); got {kind}$"):
        make_rule(name)


@pytest.mark.parametrize("name", NAMES)
def test_make_rule_rejects_unknown_hyperparameter(name):
    with pytest.raises(ValueError, match="not_a_hyperparameter"):
        make_rule(name, not_a_hyperparameter=1.0)


def test_registry_is_the_public_one():
    assert fairagg.RULES is RULES
    assert {"fedavg", "fairavg"} <= set(RULES)


@pytest.mark.parametrize("name", NAMES)
def test_step_without_the_state_from_init_is_a_type_error_naming_state(name):
    """A stateful rule given ``None`` (or another rule's state) for ``state`` says to call
    ``rule.init`` instead of failing on an attribute; a stateless rule has nothing to read."""
    rule = make_rule(name)
    theta = np.zeros(2)
    reports = make_reports(
        np.eye(2),
        [1, 1],
        losses=[0.5, 1.0],
        accuracies=[0.5, 0.5],
        participations=[1, 1],
        client_ids=[0, 1],
        num_clients=2,
        gradients=np.eye(2),
        lr=0.1,
    )
    state = rule.init(theta, 2)
    if state == ():
        return  # EmptyState: a stateless rule ignores its state
    for wrong in (None, {}, ()):
        with pytest.raises(TypeError, match=r"state must be the .*call\s+rule\.init"):
            rule.step(theta, reports, wrong)


def test_make_rule_errors_list_the_rules_and_the_hyperparameters():
    with pytest.raises(ValueError) as info:
        make_rule("fedprox")
    assert str(info.value) == f"name must be one of {', '.join(NAMES)}; got 'fedprox'"
    with pytest.raises(ValueError) as info:
        make_rule("term", x=1, y=2)
    assert str(info.value) == (
        "rule 'term' has no hyper-parameter 'x', 'y'; it takes tilt, weighting, variant, backend"
    )
