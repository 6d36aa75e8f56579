"""FairaggStrategy as a drop-in for Flower's FedAvg.

1. Flower's own Message-API strategy tests (adap/flower, ``framework/py/flwr/serverapp/strategy``:
   ``fedavgm_test.py`` with server learning rate 1 and no momentum, which is FedAvg, and the
   parts of ``strategy_utils_test.py`` that go through a strategy), run against
   ``FairaggStrategy("fedavg")``. Changed: the construction lines, a ``configure_train`` before
   each ``aggregate_train`` (fairagg keeps θ^t from it; Flower's FedAvgM reads
   ``current_arrays``), and each mock reply has a node id, as every real reply does. Every
   assertion is kept, except the two that compare ``object_id`` (exact bytes) of the averaged
   arrays: fairagg computes θ^t − Σ a_k (θ^t − θ_k), Flower Σ a_k θ_k, equal to round-off.
2. An end-to-end run with a template-style NumPy ClientApp that imports nothing from fairagg
   (arrays under ``"arrays"``, a MetricRecord with ``train_loss`` and ``num-examples``), for
   several rules, with failing replies.
"""

from __future__ import annotations

import random
import warnings
from unittest.mock import Mock

import numpy as np
import pytest

pytest.importorskip("flwr")

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from flwr.app import (
        Array,
        ArrayRecord,
        ConfigRecord,
        Context,
        Message,
        MetricRecord,
        RecordDict,
    )
    from flwr.clientapp import ClientApp
    from flwr.serverapp.exception import InconsistentMessageReplies
    from flwr.serverapp.strategy import FedAvg

from fairagg import RULES  # noqa: E402
from fairagg.flower import FairaggStrategy, InProcessGrid  # noqa: E402

# --------------------------------------------------------------------------------------------
# 1. Flower's strategy tests
# --------------------------------------------------------------------------------------------

_NODES = iter(range(10**6, 2 * 10**6))


def create_mock_reply(arrays: ArrayRecord, num_examples: float) -> Message:
    """Flower's helper (strategy_utils_test.py), with a node id."""
    message = Mock(spec=Message)
    message.content = RecordDict(
        {"arrays": arrays, "metrics": MetricRecord({"num-examples": num_examples})}
    )
    message.has_error.side_effect = lambda: False
    message.has_content.side_effect = lambda: True
    message.metadata.src_node_id = next(_NODES)
    return message


def _idle_app() -> ClientApp:
    return ClientApp()


def _configured(strategy, arrays: ArrayRecord, server_round: int = 1, nodes: int = 3):
    """``configure_train`` on a grid of idle nodes: fairagg keeps θ^t from it."""
    grid = InProcessGrid(_idle_app(), nodes)
    strategy.configure_train(server_round, arrays, ConfigRecord(), grid)
    return strategy


def _prepare_strategy():
    weights0_0 = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    weights0_1 = np.array([7, 8, 9, 10], dtype=np.float32)
    weights1_0 = np.array([[29, 23, 19], [17, 13, 11]], dtype=np.float32)
    weights1_1 = np.array([7, 5, 3, 2], dtype=np.float32)
    replies = [
        create_mock_reply(ArrayRecord([weights0_0, weights0_1]), num_examples=1),
        create_mock_reply(ArrayRecord([weights1_0, weights1_1]), num_examples=2),
    ]
    expected = [
        (weights0_0 * 1 + weights1_0 * 2) / 3,
        (weights0_1 * 1 + weights1_1 * 2) / 3,
    ]
    initial_weights = [
        np.array([[0, 0, 0], [0, 0, 0]], dtype=np.float32),
        np.array([0, 0, 0, 0], dtype=np.float32),
    ]
    strategy = FairaggStrategy("fedavg", fraction_evaluate=0.0)
    return strategy, replies, expected, ArrayRecord(initial_weights)


def test_aggregate_fit_using_near_one_server_lr_and_no_momentum() -> None:
    strategy, replies, expected, initial = _prepare_strategy()
    actual, _ = _configured(strategy, initial).aggregate_train(1, replies)
    assert actual is not None
    for w_act, w_exp in zip(actual.to_numpy_ndarrays(), expected, strict=True):
        np.testing.assert_almost_equal(w_act, w_exp, decimal=5)


def test_aggregate_fit_server_learning_rate_and_momentum() -> None:
    strategy, replies, expected, initial = _prepare_strategy()
    actual, _ = _configured(strategy, initial, 1).aggregate_train(1, replies)
    actual, _ = _configured(strategy, actual, 2).aggregate_train(2, replies)
    assert actual is not None
    for w_act, w_exp in zip(actual.to_numpy_ndarrays(), expected, strict=True):
        np.testing.assert_almost_equal(w_act, w_exp, decimal=5)


def test_aggregate_fit_with_scalar_weights() -> None:
    strategy = FairaggStrategy("fedavg", fraction_evaluate=0.0)
    _configured(strategy, ArrayRecord([np.array(0.0)]))
    replies = [
        create_mock_reply(ArrayRecord([np.array(1.0)]), num_examples=1),
        create_mock_reply(ArrayRecord([np.array(3.0)]), num_examples=2),
    ]
    actual, _ = strategy.aggregate_train(1, replies)
    assert actual is not None
    scalar_weight = actual.to_numpy_ndarrays()[0]
    assert scalar_weight.shape == ()
    np.testing.assert_allclose(scalar_weight, np.array(7.0 / 3.0), rtol=1e-6)


def _records_strategy(records: list[RecordDict], weighting: str = "weight"):
    """A strategy configured with the first record's arrays (its θ^t is irrelevant to FedAvg
    on model replies) and mock replies carrying ``records``."""
    strategy = FairaggStrategy("fedavg", weighted_by_key=weighting, fraction_evaluate=0.0)
    first = next(iter(records[0].array_records.values()))
    zeros = ArrayRecord([np.zeros_like(a) for a in first.to_numpy_ndarrays()])
    _configured(strategy, zeros)
    replies = []
    for record in records:
        m = create_mock_reply(ArrayRecord(), 1)
        m.content = record
        replies.append(m)
    return strategy, replies


def test_arrayrecords_aggregation() -> None:
    num_replies = 3
    num_arrays = 4
    weights = [0.25, 0.4, 0.35]
    rng = np.random.default_rng(0)
    np_arrays = [[rng.standard_normal((7, 3)) for _ in range(num_arrays)] for _ in range(3)]
    avg_list = [
        np.average([lst[i] for lst in np_arrays], axis=0, weights=weights)
        for i in range(num_arrays)
    ]
    records = [
        RecordDict(
            {
                "arrays": ArrayRecord(np_arrays[i]),
                "metrics": MetricRecord({"weight": weights[i]}),
            }
        )
        for i in range(num_replies)
    ]
    strategy, replies = _records_strategy(records)
    aggrd, _ = strategy.aggregate_train(1, replies)
    assert all(np.allclose(a, b) for a, b in zip(aggrd.to_numpy_ndarrays(), avg_list, strict=True))


def test_arrayrecords_aggregation_with_ndim_zero() -> None:
    weights = [0.25, 0.4, 0.35]
    rng = np.random.default_rng(1)
    np_arrays = [np.array(rng.standard_normal()) for _ in range(3)]
    avg_list = [np.average(np_arrays, axis=0, weights=weights)]
    records = [
        RecordDict(
            {
                "arrays": ArrayRecord([np_arrays[i]]),
                "metrics": MetricRecord({"weight": weights[i]}),
            }
        )
        for i in range(3)
    ]
    strategy, replies = _records_strategy(records)
    aggrd, _ = strategy.aggregate_train(1, replies)
    assert np.isclose(aggrd.to_numpy_ndarrays()[0], avg_list[0])
    assert aggrd.to_numpy_ndarrays()[0].shape == ()


def test_metricrecords_aggregation() -> None:
    """Every client metric is aggregated as Flower's FedAvg does (its own function, on the same
    replies: the same record, byte for byte), fairagg's keys beside them."""
    from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

    weights = [0.25, 0.4, 0.35]
    rng = np.random.default_rng(2)
    metric_records = [
        MetricRecord({"a": 1, "b": 2.0, "c": rng.standard_normal(3).tolist()}) for _ in range(3)
    ]
    as_np_entries = [
        {k: np.array(v) if isinstance(v, (int, float, list)) else v for k, v in r.items()}
        for r in metric_records
    ]
    avg_list = [
        np.average(
            [list(entries.values())[i] for entries in as_np_entries], axis=0, weights=weights
        ).tolist()
        for i in range(len(as_np_entries[0]))
    ]
    expected_record = MetricRecord(dict(zip(as_np_entries[0].keys(), avg_list, strict=True)))
    expected_record["a"] = float(expected_record["a"])
    expected_record["b"] = float(expected_record["b"])
    records = [
        RecordDict(
            {
                "arrays": ArrayRecord([np.ones(2)]),
                "metrics": MetricRecord(dict(record.items()) | {"weight": weights[i]}),
            }
        )
        for i, record in enumerate(metric_records)
    ]
    strategy, replies = _records_strategy(records)
    _, aggrd = strategy.aggregate_train(1, replies)
    flower = MetricRecord({k: v for k, v in aggrd.items() if not k.startswith("fairagg-")})
    assert expected_record.object_id == flower.object_id
    assert flower.object_id == aggregate_metricrecords(records, "weight").object_id
    assert aggrd["fairagg-clients"] == 3


@pytest.mark.parametrize(
    ("is_valid", "content"),
    [
        (
            True,
            RecordDict(
                {
                    "global-model": ArrayRecord([np.ones((7, 3))]),
                    "metrics": MetricRecord({"weight": 0.123}),
                }
            ),
        ),
        (
            False,
            RecordDict(
                {
                    "global-model": ArrayRecord([np.ones((7, 3))]),
                    "metrics": MetricRecord({"weight": [0.123]}),
                }
            ),
        ),
        (
            False,
            RecordDict(
                {
                    "global-model": ArrayRecord([np.ones((7, 3))]),
                    "metrics": MetricRecord({"loss": 0.01}),
                }
            ),
        ),
        (
            False,
            RecordDict(
                {
                    "global-model": ArrayRecord([np.ones((7, 3))]),
                    "another-model": ArrayRecord([np.ones((7, 3))]),
                    "metrics": MetricRecord({"weight": 0.123}),
                }
            ),
        ),
        (
            False,
            RecordDict(
                {
                    "global-model": ArrayRecord([np.ones((7, 3))]),
                    "metrics": MetricRecord({"weight": 0.123}),
                    "more-metrics": MetricRecord({"loss": 0.123}),
                }
            ),
        ),
    ],
    ids=["compliant", "weight-is-a-list", "no-weight", "two-arrayrecords", "two-metricrecords"],
)
def test_consistency_check(is_valid: bool, content: RecordDict) -> None:
    """strategy_utils_test's consistency cases, as replies of a FairaggStrategy round."""
    records = [content, content]
    strategy, replies = _records_strategy(records)
    if not is_valid:
        with pytest.raises(InconsistentMessageReplies):
            strategy.aggregate_train(1, replies)
    else:
        arrays, _ = strategy.aggregate_train(1, replies)
        np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], np.ones((7, 3)))


# --------------------------------------------------------------------------------------------
# 2. A template-style ClientApp (imports nothing from fairagg)
# --------------------------------------------------------------------------------------------

P, C, NODES = 5, 3, 6


def _partitions(seed: int = 0):
    """Per-node data: a linear softmax problem with a different optimum per node."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(NODES):
        n = 20 + 15 * i
        X = rng.standard_normal((n, P)) + i * 0.3
        W = rng.standard_normal((C, P)) + (i % 3)
        y = np.argmax(X @ W.T, axis=1)
        out.append((X, y))
    return out


def template_app(parts, *, with_accuracy: bool = False, epochs: int = 2, lr: float = 0.1):
    """What ``flwr new`` gives, with NumPy instead of PyTorch: train on the partition, reply
    with the model under "arrays" and train_loss / num-examples."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        X, y = parts[int(context.node_config["partition-id"])]
        arrays = msg.content["arrays"].to_numpy_ndarrays()
        W, b = arrays[0].copy(), arrays[1].copy()
        loss0, _, _, acc0 = _loss_grad(W, b, X, y)
        for _ in range(epochs):
            _, gW, gb, _ = _loss_grad(W, b, X, y)
            W -= lr * gW
            b -= lr * gb
        metrics = {"train_loss": loss0, "num-examples": len(y)}
        if with_accuracy:
            metrics["accuracy"] = acc0
        content = RecordDict({"arrays": ArrayRecord([W, b]), "metrics": MetricRecord(metrics)})
        return Message(content=content, reply_to=msg)

    return app


def _initial():
    return ArrayRecord([np.zeros((C, P)), np.zeros(C)])


def _run(strategy, app, rounds: int, failing=()):
    random.seed(3)  # Flower's node sampling
    grid = InProcessGrid(app, NODES, seed=4, failing=failing)
    result = strategy.start(
        grid=grid, initial_arrays=_initial(), num_rounds=rounds, evaluate_fn=None
    )
    return result, grid


def test_fedavg_on_a_template_app_equals_flower_fedavg() -> None:
    parts = _partitions()
    ours, _ = _run(FairaggStrategy("fedavg", fraction_evaluate=0.0), template_app(parts), 3)
    theirs, _ = _run(FedAvg(fraction_evaluate=0.0), template_app(parts), 3)
    for a, b in zip(
        ours.arrays.to_numpy_ndarrays(), theirs.arrays.to_numpy_ndarrays(), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        assert a.dtype == b.dtype
    # Flower's train metrics are there, fairagg's beside them
    last = ours.train_metrics_clientapp[3]
    flower_last = theirs.train_metrics_clientapp[3]
    assert last["train_loss"] == pytest.approx(flower_last["train_loss"], rel=1e-12)
    assert last["fairagg-clients"] == NODES


@pytest.mark.parametrize("rule", sorted(RULES))
def test_rules_run_on_a_template_app_with_failing_nodes(rule: str) -> None:
    """Every registered rule, five rounds; node 2 always fails (except for the rules that need
    every client). Each node keeps its client index across rounds (the stateful rules follow
    it), the failing one is never aggregated, and the model moves."""
    parts = _partitions(1)
    strategy = FairaggStrategy(rule, fraction_evaluate=0.0)
    needs_all = strategy.full_participation
    app = template_app(parts, with_accuracy="accuracies" in RULES[rule].needs)
    failing = () if needs_all else (2,)
    result, grid = _run(strategy, app, 5, failing=failing)
    assert strategy.num_clients == NODES
    assert len(strategy.rounds) == 5
    first = {}
    for log in strategy.rounds:
        for node, k in zip(log.nodes, log.client_ids, strict=True):
            assert first.setdefault(node, int(k)) == int(k)
            assert strategy.node_clients[node] == int(k)
        if failing:
            assert len(log.failed_nodes) == 1
            assert grid.partition_of[log.failed_nodes[0]] == 2
            assert all(grid.partition_of[n] != 2 for n in log.nodes)
    assert len(set(first.values())) == len(first)  # distinct indices
    final = result.arrays.to_numpy_ndarrays()
    assert np.any(final[0] != 0) and all(np.all(np.isfinite(a)) for a in final)
    if failing:
        failed_index = strategy.node_clients.get(
            next(n for n, i in grid.partition_of.items() if i == 2)
        )
        assert failed_index is None  # never aggregated, never given an index


def test_a_node_beyond_k_is_left_out_with_the_reason() -> None:
    parts = _partitions(2)
    strategy = FairaggStrategy("fedavg", 3, fraction_evaluate=0.0)
    result, grid = _run(strategy, template_app(parts), 2)
    log = strategy.rounds[0]
    assert len(log.nodes) == 3 and len(log.dropped) == NODES - 3
    assert all("all K = 3 client indices are taken" in why for _, why in log.dropped)
    # the same three nodes in round 2
    assert set(strategy.rounds[1].nodes) == set(log.nodes)


def test_integer_and_float16_arrays() -> None:
    """BatchNorm's int64 counter is averaged as Flower's FedAvg averages it (float64); float16
    parameters are computed in float32 and returned in float16."""
    strategy = FairaggStrategy("fedavg", fraction_evaluate=0.0)
    initial = ArrayRecord(
        {
            "w": Array(np.zeros(4, dtype=np.float16)),
            "num_batches_tracked": Array(np.array(0, dtype=np.int64)),
        }
    )
    _configured(strategy, initial)
    replies = []
    for n, (w, count) in zip((1, 3), ((1.0, 10), (2.0, 30)), strict=True):
        rec = ArrayRecord(
            {
                "w": Array(np.full(4, w, dtype=np.float16)),
                "num_batches_tracked": Array(np.array(count, dtype=np.int64)),
            }
        )
        replies.append(create_mock_reply(rec, n))
    arrays, _ = strategy.aggregate_train(1, replies)
    assert arrays["w"].numpy().dtype == np.float16
    np.testing.assert_allclose(arrays["w"].numpy(), 1.75, rtol=1e-3)
    counter = arrays["num_batches_tracked"].numpy()
    flower = FedAvg()
    expected, _ = flower.aggregate_train(1, replies)
    assert counter.shape == () and counter == expected["num_batches_tracked"].numpy()
    assert counter.dtype == expected["num_batches_tracked"].numpy().dtype


@pytest.mark.parametrize("q", [0.0, 0.1, 2.0])
def test_qfedavg_with_flowers_arguments_equals_flowers_qfedavg(q: float) -> None:
    from flwr.serverapp.strategy import QFedAvg as FlowerQFedAvg

    from fairagg.flower import QFedAvg

    parts = _partitions(3)
    kw = {"client_learning_rate": 0.1, "q": q, "train_loss_key": "train_loss"}
    ours, _ = _run(QFedAvg(**kw, fraction_evaluate=0.0), template_app(parts), 3)
    theirs, _ = _run(FlowerQFedAvg(**kw, fraction_evaluate=0.0), template_app(parts), 3)
    for a, b in zip(
        ours.arrays.to_numpy_ndarrays(), theirs.arrays.to_numpy_ndarrays(), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
    assert QFedAvg(client_learning_rate=0.1).q == 0.1  # Flower's default


def test_qfedavg_names_its_arguments() -> None:
    from fairagg.flower import QFedAvg

    with pytest.raises(ValueError, match="client_learning_rate"):
        QFedAvg(client_learning_rate=0.0)
    with pytest.raises(ValueError, match="q must be"):
        QFedAvg(client_learning_rate=0.1, q=-1.0)


def test_template_evaluate_replies_get_fairaggs_summary() -> None:
    strategy = FairaggStrategy("fedavg")
    accs = [0.5, 0.75, 1.0]
    replies = []
    for i, a in enumerate(accs):
        m = create_mock_reply(ArrayRecord(), 1)
        m.content = RecordDict(
            {"metrics": MetricRecord({"eval_loss": 0.1 * i, "eval_acc": a, "num-examples": 10})}
        )
        replies.append(m)
    out = strategy.aggregate_evaluate(1, replies)
    assert out["eval_acc"] == pytest.approx(0.75) and out["eval_loss"] == pytest.approx(0.1)
    assert out["fairagg-min"] == pytest.approx(50.0) and out["fairagg-max"] == pytest.approx(100.0)


def test_the_users_metric_aggregation_functions_are_used() -> None:
    seen = {}

    def train_fn(records, key):
        seen["train"] = (len(records), key)
        return MetricRecord({"mine": 1.0})

    def evaluate_fn(records, key):
        seen["evaluate"] = (len(records), key)
        return MetricRecord({"mine-eval": 2.0})

    strategy = FairaggStrategy(
        "fedavg", train_metrics_aggr_fn=train_fn, evaluate_metrics_aggr_fn=evaluate_fn
    )
    _configured(strategy, ArrayRecord([np.zeros(3)]))
    replies = [create_mock_reply(ArrayRecord([np.full(3, v)]), n) for v, n in ((1.0, 1), (2.0, 3))]
    _, metrics = strategy.aggregate_train(1, replies)
    assert seen["train"] == (2, "num-examples")
    assert metrics["mine"] == 1.0 and metrics["fairagg-clients"] == 2
    ev = create_mock_reply(ArrayRecord(), 1)
    ev.content = RecordDict({"metrics": MetricRecord({"num-examples": 4, "eval_acc": 0.5})})
    out = strategy.aggregate_evaluate(1, [ev])
    assert seen["evaluate"] == (1, "num-examples") and out["mine-eval"] == 2.0


def test_replies_are_validated_before_the_missing_configure_train_is_reported() -> None:
    from flwr.serverapp.exception import AggregationError

    strategy = FairaggStrategy("fedavg")
    good = [create_mock_reply(ArrayRecord([np.ones(2)]), 1) for _ in range(2)]
    bad = [create_mock_reply(ArrayRecord([np.ones(2)]), 1) for _ in range(2)]
    bad[1].content = RecordDict(
        {"arrays": ArrayRecord([np.ones(2)]), "other": MetricRecord({"num-examples": 1})}
    )
    with pytest.raises(InconsistentMessageReplies):
        strategy.aggregate_train(1, bad)
    with pytest.raises(AggregationError, match="without a matching configure_train"):
        strategy.aggregate_train(1, good)


# --------------------------------------------------------------------------------------------
# Review findings: the cases a template app meets after round 1
# --------------------------------------------------------------------------------------------


def bn_app(parts):
    """A template app whose model has a BatchNorm-like int64 counter beside its weights: the
    counter arrives as Flower's average left it (float64) and goes back as int64 + 5."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        X, y = parts[int(context.node_config["partition-id"])]
        arrays = msg.content["arrays"]
        counter = int(np.asarray(arrays["nbt"].numpy()))
        W, b = arrays["w"].numpy().copy(), arrays["b"].numpy().copy()
        loss0 = _loss_grad(W, b, X, y)[0]
        for _ in range(2):
            _, gW, gb, _ = _loss_grad(W, b, X, y)
            W -= 0.1 * gW
            b -= 0.1 * gb
        out = ArrayRecord(
            {"w": Array(W), "b": Array(b), "nbt": Array(np.array(counter + 5, dtype=np.int64))}
        )
        metrics = MetricRecord({"num-examples": len(y), "train_loss": loss0})
        return Message(content=RecordDict({"arrays": out, "metrics": metrics}), reply_to=msg)

    return app


def _loss_grad(W, b, X, y):
    Z = X @ W.T + b
    Z -= Z.max(axis=1, keepdims=True)
    Pm = np.exp(Z)
    Pm /= Pm.sum(axis=1, keepdims=True)
    loss = float(-np.mean(np.log(Pm[np.arange(len(y)), y])))
    Pm[np.arange(len(y)), y] -= 1.0
    return loss, Pm.T @ X / len(y), Pm.mean(axis=0), float(np.mean(np.argmax(Z, 1) == y))


def test_an_integer_counter_survives_several_rounds() -> None:
    parts = _partitions(4)
    strategy = FairaggStrategy("term", fraction_evaluate=0.0)
    initial = ArrayRecord(
        {
            "w": Array(np.zeros((C, P))),
            "b": Array(np.zeros(C)),
            "nbt": Array(np.array(0, dtype=np.int64)),
        }
    )
    random.seed(3)
    result = strategy.start(
        grid=InProcessGrid(bn_app(parts), NODES), initial_arrays=initial, num_rounds=3
    )
    assert float(result.arrays["nbt"].numpy()) == 15.0  # 5 a round, averaged as FedAvg does
    assert len(strategy.rounds) == 3 and all(log.dropped == () for log in strategy.rounds)


def test_a_templates_train_config_passes_through() -> None:
    parts = _partitions(5)
    strategy = FairaggStrategy("fedavg", fraction_evaluate=0.0)
    random.seed(3)
    result = strategy.start(
        grid=InProcessGrid(template_app(parts), NODES),
        initial_arrays=_initial(),
        num_rounds=2,
        train_config=ConfigRecord({"lr": 0.1, "epochs": 3}),
    )
    assert len(strategy.rounds) == 2 and result.arrays is not None


def test_metrics_the_rule_does_not_read_are_not_checked() -> None:
    strategy = FairaggStrategy("fedavg")
    _configured(strategy, ArrayRecord([np.zeros(2)]))
    replies = []
    for v in (1.0, 3.0):
        m = create_mock_reply(ArrayRecord([np.full(2, v)]), 1)
        m.content = RecordDict(
            {
                "arrays": ArrayRecord([np.full(2, v)]),
                "metrics": MetricRecord({"num-examples": 1, "accuracy": 85.0, "train_loss": -1.0}),
            }
        )
        replies.append(m)
    arrays, metrics = strategy.aggregate_train(1, replies)
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], 2.0)
    assert metrics["fairagg-dropped"] == 0 and metrics["accuracy"] == 85.0


def test_k_is_the_nodes_connected_once_flower_has_waited() -> None:
    class LateGrid(InProcessGrid):
        calls = 0

        def get_node_ids(self):
            LateGrid.calls += 1
            ids = super().get_node_ids()
            return ids[:1] if LateGrid.calls == 1 else ids

    parts = _partitions(6)
    strategy = FairaggStrategy("fedavg", fraction_evaluate=0.0, min_available_nodes=NODES)
    grid = LateGrid(template_app(parts), NODES)
    strategy.configure_train(1, _initial(), ConfigRecord(), grid)
    assert strategy.num_clients == NODES


def test_a_raised_round_leaves_the_node_indices_as_they_were() -> None:
    from flwr.serverapp.exception import AggregationError

    strategy = FairaggStrategy("fedavg", on_failure="raise")
    _configured(strategy, ArrayRecord([np.zeros(2)]))
    good = create_mock_reply(ArrayRecord([np.ones(2)]), 1)
    bad = create_mock_reply(ArrayRecord([np.full(2, np.nan)]), 1)
    with pytest.raises(AggregationError, match=f"node {bad.metadata.src_node_id}"):
        strategy.aggregate_train(1, [good, bad])
    assert strategy.node_clients == {} and strategy.participations.sum() == 0


def test_a_per_class_evaluate_accuracy_is_aggregated_without_a_summary() -> None:
    strategy = FairaggStrategy("fedavg")
    replies = []
    for a in ([0.5, 1.0], [1.0, 0.0]):
        m = create_mock_reply(ArrayRecord(), 1)
        m.content = RecordDict({"metrics": MetricRecord({"accuracy": a, "num-examples": 2})})
        replies.append(m)
    out = strategy.aggregate_evaluate(1, replies)
    assert out["accuracy"] == pytest.approx([0.75, 0.5])
    assert not any(k.startswith("fairagg-") for k in out)


def test_train_metrics_are_aggregated_in_arrival_order() -> None:
    """As FedAvg sums them, whatever client index each node was given."""
    from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

    strategy = FairaggStrategy("fedavg")
    _configured(strategy, ArrayRecord([np.zeros(2)]))
    rng = np.random.default_rng(7)
    replies = []
    for node in (30, 10, 20):  # node ids not in arrival order
        m = create_mock_reply(ArrayRecord([np.ones(2)]), float(rng.uniform(0.1, 1.0)))
        m.metadata.src_node_id = node
        m.content["metrics"]["x"] = float(rng.normal())
        replies.append(m)
    _, metrics = strategy.aggregate_train(1, replies)
    expected = aggregate_metricrecords([m.content for m in replies], "num-examples")
    assert metrics["x"] == expected["x"]  # bit for bit


def test_qfedavg_takes_flowers_positional_arguments() -> None:
    from flwr.serverapp.strategy import QFedAvg as FlowerQFedAvg

    from fairagg.flower import QFedAvg

    ours, theirs = QFedAvg(0.1, 0.2, "train_loss", 0.5), FlowerQFedAvg(0.1, 0.2, "train_loss", 0.5)
    assert ours.fraction_train == theirs.fraction_train == 0.5 and ours.q == 0.2
