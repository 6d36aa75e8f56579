"""The Flower adapter (``fairagg.flower``): the strategy's aggregation equals the fairagg rule on
the same replies for every registered rule, a Flower run equals ``fairagg.simulate``, q-FedAvg
agrees with Flower's own ``QFedAvg`` under the documented conditions, and the ClientApp reports
what ``fairagg.local`` computes. No Ray: messages go through :class:`InProcessGrid` or are built
here as Flower's server would receive them. Skipped only when Flower (the ``flower`` extra) is
not installed."""

from __future__ import annotations

import importlib
import importlib.util
import random
import re
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

with warnings.catch_warnings():
    # typer, a Flower dependency, imports names click >= 8.3 deprecates (at import time only).
    warnings.filterwarnings(
        "ignore", message=r"'click\.[\w.]+' is deprecated", category=DeprecationWarning
    )
    pytest.importorskip("flwr")

from flwr.app import (  # noqa: E402
    Array,
    ArrayRecord,
    ConfigRecord,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp.exception import (  # noqa: E402
    AggregationError,
    InconsistentMessageReplies,
)
from flwr.serverapp.strategy import QFedAvg  # noqa: E402

from fairagg import RULES, make_reports, make_rule, simulate  # noqa: E402
from fairagg.data import load  # noqa: E402
from fairagg.flower import (  # noqa: E402
    ACCURACY,
    CLIENT_ID,
    DELTA_KEY,
    GRADIENT_KEY,
    LOSS,
    NUM_EXAMPLES,
    TRAIN_CONFIG_KEYS,
    TRAIN_LOSS,
    FairaggStrategy,
    InProcessGrid,
    arrays_to_params,
    fairagg_client_app,
    params_to_arrays,
    train_reply,
)
from fairagg.local import client_gradients, train_clients, trained_accuracies  # noqa: E402
from fairagg.models import LogisticRegression  # noqa: E402
from fairagg.rules.qffl import qfedavg_step  # noqa: E402
from tests.tolerances import assert_close  # noqa: E402

NAMES = sorted(RULES)
K = 7


@pytest.fixture(scope="module")
def fed():
    """K = 7 Synthetic(1,1) clients, a logistic model and the fairagg ClientApp."""
    data = load("synthetic:1,1", num_clients=K, seed=0)
    model = LogisticRegression(data.n_features, data.n_classes)
    return SimpleNamespace(
        data=data,
        model=model,
        app=fairagg_client_app(model, data),
        n_train=np.diff(data.train_offsets),
        d=model.num_params,
    )


def _strategy(rule, *, mode="fairagg", m=4, **kw):
    """A strategy that samples m clients with fairagg's sampler, or with Flower's."""
    spec = RULES[rule.name]
    if spec.full_participation:
        sampling = {}
    elif mode == "fairagg":
        sampling = {"clients_per_round": m}
    else:
        sampling = {"fraction_train": m / K, "min_train_nodes": m}
    kw.setdefault("fraction_evaluate", 0.0)
    return FairaggStrategy(rule, K, **sampling, **kw)


def _metrics(k, n, loss, acc, drop=()):
    values = {
        NUM_EXAMPLES: int(n),
        CLIENT_ID: int(k),
        TRAIN_LOSS: float(loss),
        ACCURACY: float(acc),
    }
    return MetricRecord({key: v for key, v in values.items() if key not in drop})


def _reply(msg, key, vector, metrics):
    arrays = params_to_arrays(vector)
    return Message(RecordDict({key: arrays, "metrics": metrics}), reply_to=msg)


# --------------------------------------------------------------------------------------------
# The strategy's aggregation equals the rule on the same replies, for every rule
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fairagg", "flower"])
@pytest.mark.parametrize("name", NAMES)
def test_aggregation_equals_rule_on_the_same_replies(name, mode, fed):
    """Three rounds of replies built by hand (random δ_k or g_k, n_k, F_k(θ^t), accuracies),
    delivered in a shuffled order, the δ rules' clients sending θ_k instead of δ_k in round 2
    (all replies of a round alike: Flower's consistency rules): the
    strategy's θ^{t+1} and weights equal ``rule.step`` on the same numbers, with the rule state
    carried across rounds and f_k counted as the rounds a client took part in."""
    rule = make_rule(name)
    random.seed(7)  # Flower's node sampling draws from the random module
    strategy = _strategy(rule, mode=mode, lr=0.1, seed=5)
    grid = InProcessGrid(fed.app, K, seed=1)
    rng = np.random.default_rng([3, len(name), len(mode)])
    theta = rng.normal(size=fed.d)
    arrays = params_to_arrays(theta)
    state = rule.init(theta, K)
    counts = np.zeros(K, dtype=np.int64)
    gradients = rule.local.report == "gradients"
    for r in (1, 2, 3):
        sent = list(strategy.configure_train(r, arrays, ConfigRecord(), grid))
        clients = [grid.partition_of[m.metadata.dst_node_id] for m in sent]
        m = len(clients)
        assert m == (K if RULES[name].full_participation else 4)
        rows = rng.normal(scale=0.1, size=(m, fed.d))
        n = rng.integers(1, 500, size=m)
        losses = rng.uniform(0.05, 5.0, size=m)
        accs = rng.uniform(0.0, 1.0, size=m)
        replies, used = [], np.empty_like(rows)
        for i, (msg, k) in enumerate(zip(sent, clients, strict=True)):
            metrics = _metrics(k, n[i], losses[i], accs[i])
            if gradients:
                replies.append(_reply(msg, GRADIENT_KEY, rows[i], metrics))
                used[i] = rows[i]
            elif r == 2:  # θ_k = θ^t − δ_k under the strategy's arrays key
                replies.append(_reply(msg, "arrays", theta - rows[i], metrics))
                used[i] = theta - (theta - rows[i])
            else:
                replies.append(_reply(msg, DELTA_KEY, rows[i], metrics))
                used[i] = rows[i]
        new, agg_metrics = strategy.aggregate_train(r, [replies[i] for i in rng.permutation(m)])

        # The reference: the rule itself, clients in the draw order of fairagg's sampler (or by
        # client id under Flower's sampling).
        if strategy.clients_per_round is not None:
            order = np.arange(m)
            assert [int(c) for c in strategy.rounds[-1].client_ids] == clients
        else:
            order = np.argsort(clients)
        ids = np.asarray(clients)[order]
        counts[ids] += 1
        reports = make_reports(
            None if gradients else used[order],
            n[order],
            losses=losses[order],
            accuracies=accs[order],
            participations=counts[ids],
            client_ids=ids,
            round_index=r - 1,
            num_clients=K,
            gradients=used[order] if gradients else None,
            lr=0.1,
        )
        agg = rule.step(theta, reports, state)
        assert_close(arrays_to_params(new), agg.params)
        assert_close(strategy.rounds[-1].weights, agg.info["weights"])
        np.testing.assert_array_equal(strategy.rounds[-1].client_ids, ids)
        np.testing.assert_array_equal(strategy.participations, counts)
        if "model" in agg.info:  # AFL's average of iterates, which configure_evaluate sends
            assert_close(strategy.reported_params, agg.info["model"])
        assert agg_metrics["fairagg-clients"] == m and agg_metrics["fairagg-failures"] == 0
        assert agg_metrics["fairagg-dropped"] == 0
        assert agg_metrics[TRAIN_LOSS] == pytest.approx(float(n @ losses / n.sum()), rel=1e-12)
        assert agg_metrics[ACCURACY] == pytest.approx(float(n @ accs / n.sum()), rel=1e-12)
        if "losses" in RULES[name].needs:  # only what the rule reads is read
            assert agg_metrics["fairagg-loss-max"] == losses.max()
        else:
            assert "fairagg-loss-max" not in agg_metrics
        assert CLIENT_ID not in agg_metrics
        theta, state, arrays = agg.params, agg.state, new


# --------------------------------------------------------------------------------------------
# A whole Flower run (ServerApp loop, ClientApp) equals fairagg.simulate, bit for bit
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_flower_run_equals_simulate(name, fed):
    rule = make_rule(name)
    m = K if RULES[name].full_participation else 3
    strategy = FairaggStrategy(
        rule, K, clients_per_round=m, seed=2, lr=0.05, epochs=2, batch_size=8, fraction_evaluate=0.0
    )
    theta0 = fed.model.init_params(2)
    result = strategy.start(
        grid=InProcessGrid(fed.app, K, seed=9),
        initial_arrays=params_to_arrays(theta0),
        num_rounds=3,
    )
    h = simulate(
        rule,
        fed.model,
        fed.data,
        rounds=3,
        clients_per_round=m,
        seed=2,
        lr=0.05,
        epochs=2,
        batch_size=8,
    )
    np.testing.assert_array_equal(strategy.reported_params, h.final_params)
    for log, selected, weights in zip(strategy.rounds, h.selected, h.weights, strict=True):
        np.testing.assert_array_equal(log.client_ids, selected)
        np.testing.assert_array_equal(log.weights, weights)
    np.testing.assert_array_equal(strategy.participations, np.bincount(h.selected.ravel(), None, K))
    if "model" not in strategy.rounds[-1].info:
        np.testing.assert_array_equal(arrays_to_params(result.arrays), h.final_params)


def test_simulate_and_the_strategy_share_one_server_round(fed, monkeypatch):
    """Both run their rounds through ``fairagg._round.ServerRound``: reports, step and commit
    once a round, in that order, on the same RoundReports (the strategy's from Flower
    replies, simulate's from its own training; the accuracies only where the rule reads
    them), each with its own error type."""
    from fairagg import _round

    calls = []
    real = {name: getattr(_round.ServerRound, name) for name in ("reports", "step", "commit")}

    def spy(name):
        def call(self, *args):
            out = real[name](self, *args)
            kept = None
            if name == "reports":  # simulate refills its (m, d) buffer: keep a copy
                kept = out._replace(deltas=out.deltas.copy())
            calls.append((self.error, name, kept))
            return out

        return call

    for name in real:
        monkeypatch.setattr(_round.ServerRound, name, spy(name))
    kw = dict(seed=3, lr=0.05, epochs=1, batch_size=8)
    strategy = FairaggStrategy("term", K, clients_per_round=3, fraction_evaluate=0.0, **kw)
    strategy.start(
        grid=InProcessGrid(fed.app, K),
        initial_arrays=params_to_arrays(fed.model.init_params(3)),
        num_rounds=2,
    )
    simulate("term", fed.model, fed.data, rounds=2, clients_per_round=3, **kw)
    flower = [c for c in calls if c[0] is AggregationError]
    sim = [c for c in calls if c[0] is FloatingPointError]
    assert len(flower) + len(sim) == len(calls)
    assert [c[1] for c in flower] == [c[1] for c in sim] == ["reports", "step", "commit"] * 2
    for (_, _, a), (_, _, b) in zip(flower[::3], sim[::3], strict=True):
        for field, x, y in zip(a._fields, a, b, strict=True):
            if field == "accuracies":  # read from the replies only for a rule that needs them
                assert x is None and "accuracies" not in RULES["term"].needs
                continue
            assert type(x) is type(y), field
            if isinstance(x, np.ndarray):
                assert x.dtype == y.dtype, field
            np.testing.assert_array_equal(x, y, err_msg=field)


def test_a_rule_that_diverges_is_an_aggregation_error_and_counts_nothing(fed):
    """The shared round's non-finite check raises the strategy's AggregationError with
    simulate's message; the round that diverged leaves the state and the participations as
    the round before left them."""
    from tests.test_simulate import nan_rule

    strategy = FairaggStrategy(nan_rule(2), K, clients_per_round=3, fraction_evaluate=0.0)
    with pytest.raises(AggregationError) as info:
        strategy.start(
            grid=InProcessGrid(fed.app, K),
            initial_arrays=params_to_arrays(fed.model.init_params(0)),
            num_rounds=3,
        )
    assert str(info.value) == "rule 'nan' produced non-finite parameters in round 2"
    assert len(strategy.rounds) == 1
    first = np.bincount(strategy.rounds[0].client_ids, minlength=K)
    np.testing.assert_array_equal(strategy.participations, first)


def test_the_strategy_checks_lr_and_momentum_once(fed):
    """The strategy checks lr and momentum where they enter (its TrainingSettings), then reads
    them as checked, every round (it had checked lr again in every round's reports)."""
    from tests.test_simulate import server_checks

    def run():
        strategy = FairaggStrategy(
            "qfedavg", K, clients_per_round=3, lr=0.05, momentum=0.5, fraction_evaluate=0.0
        )
        strategy.start(
            grid=InProcessGrid(fed.app, K),
            initial_arrays=params_to_arrays(fed.model.init_params(0)),
            num_rounds=3,
        )

    assert server_checks(("lr", "momentum"), run) == {"lr": 1, "momentum": 1}


def test_flower_run_equals_simulate_with_proportional_sampling_and_prox(fed):
    """Proportional sampling uses the n_k the clients report to the id query."""
    kw = dict(seed=4, lr=0.05, epochs=1, batch_size=5, prox_mu=0.3, sampling="proportional")
    strategy = FairaggStrategy("term", K, clients_per_round=4, fraction_evaluate=0.0, **kw)
    strategy.start(
        grid=InProcessGrid(fed.app, K),
        initial_arrays=params_to_arrays(fed.model.init_params(4)),
        num_rounds=2,
    )
    np.testing.assert_array_equal(strategy.client_sizes, fed.n_train)
    h = simulate("term", fed.model, fed.data, rounds=2, clients_per_round=4, **kw)
    np.testing.assert_array_equal(strategy.reported_params, h.final_params)


@pytest.mark.parametrize("name", ["fedavg", "qfedavg"])
def test_flower_run_in_float32_equals_simulate_in_float32(name, fed):
    """A float32 θ travels, trains and aggregates in float32, as ``simulate`` runs it."""
    theta0 = fed.model.init_params(1).astype(np.float32)
    kw = dict(seed=1, lr=0.05, epochs=1, batch_size=10)
    strategy = FairaggStrategy(name, K, clients_per_round=3, fraction_evaluate=0.0, **kw)
    result = strategy.start(
        grid=InProcessGrid(fed.app, K), initial_arrays=params_to_arrays(theta0), num_rounds=2
    )
    h = simulate(name, fed.model, fed.data, rounds=2, clients_per_round=3, params=theta0, **kw)
    final = arrays_to_params(result.arrays)
    assert final.dtype == np.float32 == h.final_params.dtype
    np.testing.assert_array_equal(final, h.final_params)


def test_federated_evaluation_reports_test_metrics(fed):
    strategy = FairaggStrategy("fedavg", K, clients_per_round=3, min_available_nodes=K)
    theta = fed.model.init_params(1)
    grid = InProcessGrid(fed.app, K)
    sent = strategy.configure_evaluate(1, params_to_arrays(theta), ConfigRecord(), grid)
    out = strategy.aggregate_evaluate(1, grid.send_and_receive(sent))
    loss, acc = fed.model.evaluate_clients(
        theta, fed.data.X_test, fed.data.y_test, fed.data.test_offsets
    )
    n_test = np.diff(fed.data.test_offsets)
    assert out[ACCURACY] == pytest.approx(float(acc @ n_test / n_test.sum()), rel=1e-12)
    assert out[LOSS] == pytest.approx(float(loss @ n_test / n_test.sum()), rel=1e-12)
    assert out["fairagg-min"] == pytest.approx(100.0 * acc.min(), rel=1e-12)
    assert out["fairagg-client_mean"] == pytest.approx(100.0 * acc.mean(), rel=1e-12)


# --------------------------------------------------------------------------------------------
# q-FedAvg through the adapter vs Flower's QFedAvg
# --------------------------------------------------------------------------------------------


def _run_both(fed, ours, theirs, rounds=3):
    """Each round: our strategy sends the train messages, the fairagg ClientApp (replying with
    its trained model θ_k, as Flower's strategies expect, and F_k(θ^t) before training) answers,
    and both strategies aggregate the same replies from the same θ^t."""
    app = fairagg_client_app(fed.model, fed.data, reply="model")
    grid = InProcessGrid(app, K)
    arrays = params_to_arrays(fed.model.init_params(0))
    out = []
    for r in range(1, rounds + 1):
        replies = grid.send_and_receive(ours.configure_train(r, arrays, ConfigRecord(), grid))
        theirs.configure_train(r, arrays, ConfigRecord(), grid)  # keeps θ^t; messages unused
        a, _ = ours.aggregate_train(r, replies)
        b, _ = theirs.aggregate_train(r, replies)  # reads (and empties) the replies' arrays
        out.append((arrays_to_params(a), arrays_to_params(b)))
        arrays = a
    return out


@pytest.mark.parametrize("q", [0.0, 0.1, 1.0, 5.0])
def test_qfedavg_matches_flower_qfedavg(q, fed):
    """Conditions: Flower's client_learning_rate = the clients' lr (L = 1/lr), the same q and
    ε = 1e-10, train_loss_key naming the pre-training loss F_k(θ^t), all arrays float64. Both
    then compute θ^t − Σ_k F̃_k^q L(θ^t − θ_k) / Σ_k (q F̃_k^{q−1} L²‖θ^t − θ_k‖² + L F̃_k^q)
    over the replies, without n_k weights; they differ in summation order and fairagg's
    rescaling by max F̃^q, so they agree to round-off."""
    lr = 0.05
    ours = FairaggStrategy(
        make_rule("qfedavg", q=q), K, lr=lr, epochs=2, fraction_evaluate=0.0, min_available_nodes=K
    )
    theirs = QFedAvg(
        client_learning_rate=lr,
        q=q,
        train_loss_key=TRAIN_LOSS,
        fraction_evaluate=0.0,
        min_available_nodes=K,
    )
    for a, b in _run_both(fed, ours, theirs):
        assert_close(a, b)
        assert not np.array_equal(a, fed.model.init_params(0))


def test_flower_qfedavg_at_q0_is_the_unweighted_mean_not_fedavg(fed):
    """Flower's QFedAvg docstring says q = 0 is FedAvg; its formula (like q-FFL's) has no n_k,
    so q = 0 is the unweighted mean of the client models: fairagg's ``fairavg``, which differs
    from ``fedavg`` whenever the n_k differ."""
    assert len(set(fed.n_train.tolist())) > 1
    pairs = {}
    for name in ("fairavg", "fedavg"):
        ours = FairaggStrategy(name, K, lr=0.05, fraction_evaluate=0.0, min_available_nodes=K)
        theirs = QFedAvg(
            client_learning_rate=0.05,
            q=0.0,
            train_loss_key=TRAIN_LOSS,
            fraction_evaluate=0.0,
            min_available_nodes=K,
        )
        pairs[name] = _run_both(fed, ours, theirs, rounds=1)[0]
    fair, flwr_q0 = pairs["fairavg"]
    assert_close(fair, flwr_q0)
    fedavg_, _ = pairs["fedavg"]
    gap = np.max(np.abs(fedavg_ - flwr_q0)) / np.linalg.norm(flwr_q0)
    assert gap > 1e-4  # far beyond round-off


def test_flower_qfedavg_overflows_where_fairagg_rescales(fed):
    """With F̃_k^q beyond float64 (q = 300, losses near 20) Flower's QFedAvg returns NaN;
    fairagg divides every F̃_k^q by the largest first and stays finite."""
    q, lr = 300.0, 0.05
    ours = FairaggStrategy(
        make_rule("qfedavg", q=q), K, lr=lr, fraction_evaluate=0.0, min_available_nodes=K
    )
    theirs = QFedAvg(
        client_learning_rate=lr,
        q=q,
        train_loss_key=TRAIN_LOSS,
        fraction_evaluate=0.0,
        min_available_nodes=K,
    )
    grid = InProcessGrid(fed.app, K)
    rng = np.random.default_rng(0)
    theta = rng.normal(size=fed.d)
    arrays = params_to_arrays(theta)
    sent = list(ours.configure_train(1, arrays, ConfigRecord(), grid))
    theirs.configure_train(1, arrays, ConfigRecord(), grid)
    models = theta - rng.normal(scale=0.1, size=(K, fed.d))
    losses = rng.uniform(18.0, 22.0, size=K)
    replies = [
        _reply(
            msg,
            "arrays",
            models[i],
            _metrics(grid.partition_of[msg.metadata.dst_node_id], 10, losses[i], 0.5),
        )
        for i, msg in enumerate(sent)
    ]
    a, _ = ours.aggregate_train(1, replies)
    with np.errstate(over="ignore", invalid="ignore"):
        b, _ = theirs.aggregate_train(1, replies)
    assert not np.all(np.isfinite(arrays_to_params(b)))
    ids = [grid.partition_of[m.metadata.dst_node_id] for m in sent]
    order = np.argsort(ids)
    expected = qfedavg_step(theta, (theta - models)[order], losses[order], q, lr).params
    assert np.all(np.isfinite(expected))
    assert_close(arrays_to_params(a), expected)


# --------------------------------------------------------------------------------------------
# The ClientApp
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "hyper", "extra"),
    [
        ("fedavg", {}, {"prox_mu": 0.2}),
        ("propfair", {"M": 3.0}, {}),
        ("fedfa", {"accuracy_source": "local"}, {}),
        ("qfedsgd", {"batch_size": 6}, {}),
        ("afl", {}, {}),
    ],
)
def test_client_reply_equals_local_training(name, hyper, extra, fed):
    """The ClientApp's δ_k (or g_k), F_k(θ^t), accuracy and n_k are those of
    ``fairagg.local`` for that one client, and those of the simulator's call for all the
    round's clients, bit for bit."""
    rule = make_rule(name, **hyper)
    strategy = FairaggStrategy(
        rule,
        K,
        clients_per_round=K if RULES[name].full_participation else 3,
        seed=6,
        lr=0.05,
        epochs=2,
        batch_size=7,
        **extra,
    )
    grid = InProcessGrid(fed.app, K)
    theta = fed.model.init_params(0) + 0.01
    sent = list(strategy.configure_train(2, params_to_arrays(theta), ConfigRecord(), grid))
    S = np.array([grid.partition_of[m.metadata.dst_node_id] for m in sent])
    spec = rule.local
    if spec.report == "gradients":
        together = client_gradients(
            fed.model,
            theta,
            fed.data,
            S,
            batch_size=spec.gradient_batch_size,
            seed=6,
            round_index=1,
        )
    else:
        local = dict(
            epochs=2,
            batch_size=7,
            lr=0.05,
            momentum=strategy.momentum,
            seed=6,
            round_index=1,
            prox_mu=extra.get("prox_mu", 0.0),
            propfair_m=spec.propfair_m,
            propfair_epsilon=spec.propfair_epsilon,
            propfair_huber=spec.propfair_huber,
        )
        together = train_clients(fed.model, theta, fed.data, S, **local)
    for i, (msg, k) in enumerate(zip(sent, S, strict=True)):
        out = fed.app(msg, grid.contexts[msg.metadata.dst_node_id])
        assert not out.has_error(), out.error.reason if out.has_error() else ""
        key = GRADIENT_KEY if spec.report == "gradients" else DELTA_KEY
        vec = arrays_to_params(out.content[key])
        metrics = out.content["metrics"]
        if spec.report == "gradients":
            alone = client_gradients(
                fed.model,
                theta,
                fed.data,
                [k],
                batch_size=spec.gradient_batch_size,
                seed=6,
                round_index=1,
            )
        else:
            alone = train_clients(fed.model, theta, fed.data, [k], parallel=False, **local)
        acc = alone.accuracies[0]
        if spec.accuracy_source == "local":
            acc = trained_accuracies(fed.model, theta, alone.deltas, fed.data, [k])[0]
        np.testing.assert_array_equal(vec, alone.deltas[0])
        np.testing.assert_array_equal(vec, together.deltas[i])
        assert metrics[TRAIN_LOSS] == alone.losses[0] == together.losses[i]
        assert metrics[ACCURACY] == acc
        assert metrics[NUM_EXAMPLES] == fed.n_train[k] and metrics[CLIENT_ID] == k


def test_client_model_reply_is_theta_minus_delta(fed):
    strategy = FairaggStrategy("fedavg", K, clients_per_round=2, seed=1)
    grid = InProcessGrid(fed.app, K)
    theta = fed.model.init_params(0)
    msg = list(strategy.configure_train(1, params_to_arrays(theta), ConfigRecord(), grid))[0]
    k = grid.partition_of[msg.metadata.dst_node_id]
    as_delta = train_reply(fed.model, fed.data, k, msg.content)
    as_model = train_reply(fed.model, fed.data, k, msg.content, reply="model")
    assert list(as_model.array_records) == ["arrays"]
    np.testing.assert_array_equal(
        arrays_to_params(as_model["arrays"]), theta - arrays_to_params(as_delta[DELTA_KEY])
    )


def test_client_app_loads_data_from_a_loader_once(fed):
    calls = []

    def loader():
        calls.append(1)
        return fed.data

    app = fairagg_client_app(fed.model, loader)
    strategy = FairaggStrategy("fedavg", K, clients_per_round=3, fraction_evaluate=0.0)
    strategy.start(
        grid=InProcessGrid(app, K),
        initial_arrays=params_to_arrays(fed.model.init_params(0)),
        num_rounds=2,
    )
    assert len(calls) == 1


# --------------------------------------------------------------------------------------------
# Failures, malformed replies and bad configuration
# --------------------------------------------------------------------------------------------


def test_error_replies_are_dropped_or_raise(fed):
    failing = [1, 4]
    strategy = FairaggStrategy("fedavg", K, fraction_evaluate=0.0, min_available_nodes=K)
    grid = InProcessGrid(fed.app, K, failing=failing)
    theta = fed.model.init_params(0)
    replies = grid.send_and_receive(
        strategy.configure_train(1, params_to_arrays(theta), ConfigRecord(), grid)
    )
    assert sum(r.has_error() for r in replies) == len(failing)
    new, metrics = strategy.aggregate_train(1, replies)
    assert metrics["fairagg-failures"] == 2 and metrics["fairagg-clients"] == K - 2
    ok = np.array([k for k in range(K) if k not in failing])
    local = train_clients(fed.model, theta, fed.data, ok, epochs=1, batch_size=10, lr=0.01)
    expected = make_rule("fedavg").step(
        theta, make_reports(local.deltas, local.num_samples), make_rule("fedavg").init(theta, K)
    )
    assert_close(arrays_to_params(new), expected.params)
    assert strategy.participations.tolist() == [0 if k in failing else 1 for k in range(K)]

    strict = FairaggStrategy("fedavg", K, on_failure="raise", min_available_nodes=K)
    replies = grid.send_and_receive(
        strict.configure_train(1, params_to_arrays(theta), ConfigRecord(), grid)
    )
    with pytest.raises(AggregationError, match="fails on purpose"):
        strict.aggregate_train(1, replies)


def test_full_participation_rule_names_the_missing_client(fed):
    strategy = FairaggStrategy("aaggff-s", K, fraction_evaluate=0.0)
    grid = InProcessGrid(fed.app, K, failing=[5])
    sent = strategy.configure_train(
        1, params_to_arrays(fed.model.init_params(0)), ConfigRecord(), grid
    )
    with pytest.raises(AggregationError, match=r"all K = 7 clients.*\[5\]"):
        strategy.aggregate_train(1, grid.send_and_receive(sent))


def _one_round(fed, name="fedavg"):
    strategy = FairaggStrategy(name, K, clients_per_round=3, seed=0)
    grid = InProcessGrid(fed.app, K)
    theta = fed.model.init_params(0)
    sent = list(strategy.configure_train(1, params_to_arrays(theta), ConfigRecord(), grid))
    ids = [grid.partition_of[m.metadata.dst_node_id] for m in sent]
    return strategy, sent, ids, theta


@pytest.mark.parametrize(
    ("name", "metric", "match"),
    [
        ("qfedavg", TRAIN_LOSS, "needs the losses of the clients, under the metric 'train_loss'"),
        ("fedfa", ACCURACY, "needs the accuracies of the clients, under the metric 'accuracy'"),
    ],
)
def test_a_metric_the_rule_needs_is_named(name, metric, match, fed):
    strategy, sent, ids, theta = _one_round(fed, name)
    replies = [
        _reply(msg, DELTA_KEY, np.full(fed.d, 0.01), _metrics(k, 10, 1.0, 0.5, drop=(metric,)))
        for msg, k in zip(sent, ids, strict=True)
    ]
    with pytest.raises(AggregationError, match=match):
        strategy.aggregate_train(1, replies)


def test_the_weighting_metric_is_checked_as_flower_does(fed):
    strategy, sent, ids, theta = _one_round(fed, "fedavg")
    replies = [
        _reply(
            msg, DELTA_KEY, np.full(fed.d, 0.01), _metrics(k, 10, 1.0, 0.5, drop=(NUM_EXAMPLES,))
        )
        for msg, k in zip(sent, ids, strict=True)
    ]
    with pytest.raises(InconsistentMessageReplies, match="Missing required key `num-examples`"):
        strategy.aggregate_train(1, replies)


def test_metric_missing_from_one_reply_only_is_inconsistent(fed):
    strategy, sent, ids, _ = _one_round(fed, "fedavg")  # fedavg reads no loss, but all or none
    replies = [
        _reply(
            msg, DELTA_KEY, np.full(fed.d, 0.01), _metrics(k, 10, 1.0, 0.5, drop=(TRAIN_LOSS,) * i)
        )
        for i, (msg, k) in enumerate(zip(sent, ids, strict=True))
    ]
    with pytest.raises(InconsistentMessageReplies, match="same keys"):
        strategy.aggregate_train(1, replies)
    # Without any loss, fedavg aggregates.
    strategy, sent, ids, theta = _one_round(fed, "fedavg")
    replies = [
        _reply(msg, DELTA_KEY, np.full(fed.d, 0.01), _metrics(k, 10, 1.0, 0.5, drop=(TRAIN_LOSS,)))
        for msg, k in zip(sent, ids, strict=True)
    ]
    new, metrics = strategy.aggregate_train(1, replies)
    assert_close(arrays_to_params(new), theta - 0.01)
    assert TRAIN_LOSS not in metrics and "fairagg-loss-max" not in metrics


def test_inconsistent_replies_raise(fed):
    def attempt(make, match):
        strategy, sent, ids, _ = _one_round(fed, "fedavg")
        replies = [make(i, msg, k) for i, (msg, k) in enumerate(zip(sent, ids, strict=True))]
        with pytest.raises(InconsistentMessageReplies, match=match):
            strategy.aggregate_train(1, replies)

    good = np.full(fed.d, 0.01)
    attempt(
        lambda i, msg, k: _reply(msg, GRADIENT_KEY, good, _metrics(k, 10, 1, 1)),
        "holds its arrays under 'gradient'",
    )
    attempt(
        lambda i, msg, k: _reply(msg, DELTA_KEY, good, _metrics((k + 1) % K, 10, 1, 1)),
        "holds client",
    )
    attempt(
        lambda i, msg, k: Message(RecordDict({"metrics": _metrics(k, 10, 1, 1)}), reply_to=msg),
        "exactly one ArrayRecord",
    )
    attempt(  # differently named MetricRecords (Flower's rule)
        lambda i, msg, k: Message(
            RecordDict({"arrays": params_to_arrays(good), f"metrics{i}": _metrics(k, 10, 1, 1)}),
            reply_to=msg,
        ),
        "same keys",
    )


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (
            lambda fed, i, msg, k: _reply(
                msg, DELTA_KEY, np.full(fed.d - 1, 0.01), _metrics(k, 10, 1, 1)
            ),
            "layout",
        ),
        (
            lambda fed, i, msg, k: Message(
                RecordDict(
                    {
                        DELTA_KEY: ArrayRecord({"theta": Array(np.full(fed.d, np.nan))}),
                        "metrics": _metrics(k, 10, 1, 1),
                    }
                ),
                reply_to=msg,
            ),
            "NaN or infinity",
        ),
        (
            lambda fed, i, msg, k: _reply(
                msg, DELTA_KEY, np.full(fed.d, 0.01), _metrics(K + i, 10, 1, 1)
            ),
            r"outside \[0, 7\)",
        ),
        (
            lambda fed, i, msg, k: _reply(
                msg, DELTA_KEY, np.full(fed.d, 0.01), _metrics(k, 10, float("nan"), 1)
            ),
            "'train_loss' must be a finite number",
        ),
        (
            lambda fed, i, msg, k: _reply(
                msg, DELTA_KEY, np.full(fed.d, 0.01), _metrics(k, 10, -1.0, 1)
            ),
            "'train_loss' must be >= 0",
        ),
        (
            lambda fed, i, msg, k: _reply(
                msg, DELTA_KEY, np.full(fed.d, 0.01), _metrics(k, 0, 1, 1)
            ),
            "must be a positive number",
        ),
    ],
    ids=["layout", "nan", "client-id", "nan-loss", "negative-loss", "zero-weight"],
)
def test_a_reply_that_cannot_be_aggregated_is_left_out_or_raises(make, why, fed):
    """The bad reply is the second of three: with on_failure="drop" the round goes on with the
    other two (logged, counted, named in the round log); with "raise" it is an AggregationError
    naming the node and the reason."""
    for on_failure in ("drop", "raise"):
        strategy = FairaggStrategy("qfedavg", K, clients_per_round=3, seed=0, on_failure=on_failure)
        grid = InProcessGrid(fed.app, K)
        theta = fed.model.init_params(0)
        sent = list(strategy.configure_train(1, params_to_arrays(theta), ConfigRecord(), grid))
        ids = [grid.partition_of[m.metadata.dst_node_id] for m in sent]
        replies = [
            make(fed, i, msg, k)
            if i == 1
            else _reply(msg, DELTA_KEY, np.full(fed.d, 0.01 * (i + 1)), _metrics(k, 10, 1.0, 1))
            for i, (msg, k) in enumerate(zip(sent, ids, strict=True))
        ]
        bad = sent[1].metadata.dst_node_id
        if on_failure == "raise":
            with pytest.raises(AggregationError, match=f"node {bad}: .*{why}"):
                strategy.aggregate_train(1, replies)
            continue
        new, metrics = strategy.aggregate_train(1, replies)
        assert metrics["fairagg-dropped"] == 1 and metrics["fairagg-clients"] == 2
        log = strategy.rounds[-1]
        assert [n for n, _ in log.dropped] == [bad] and re.search(why, log.dropped[0][1])
        assert bad not in log.nodes and sorted(log.client_ids) == sorted([ids[0], ids[2]])
        assert strategy.participations[ids[1]] == 0


@pytest.mark.parametrize("key", [DELTA_KEY, "arrays"])
def test_gradient_rule_takes_updates_as_pseudo_gradients(key, fed):
    """q-FedSGD on δ_k (or θ_k) replies reads g_k = δ_k / lr: the same step as on those
    gradients."""
    lr = 0.01
    results = {}
    for kind in ("gradient", key):
        strategy = FairaggStrategy("qfedsgd", K, clients_per_round=3, seed=0, lr=lr)
        grid = InProcessGrid(fed.app, K)
        theta = fed.model.init_params(0) + 0.1
        sent = list(strategy.configure_train(1, params_to_arrays(theta), ConfigRecord(), grid))
        ids = [grid.partition_of[m.metadata.dst_node_id] for m in sent]
        rows = np.random.default_rng(4).normal(scale=0.1, size=(3, fed.d))
        replies = []
        for i, (m, k) in enumerate(zip(sent, ids, strict=True)):
            vec = {"gradient": rows[i], DELTA_KEY: lr * rows[i], "arrays": theta - lr * rows[i]}[
                kind
            ]
            replies.append(
                _reply(m, GRADIENT_KEY if kind == "gradient" else kind, vec, _metrics(k, 10, 1, 1))
            )
        new, _ = strategy.aggregate_train(1, replies)
        results[kind] = arrays_to_params(new)
    assert_close(results[key], results["gradient"])


def test_a_client_without_the_query_handler_is_reported(fed):
    from flwr.clientapp import ClientApp

    strategy = FairaggStrategy("fedavg", K, clients_per_round=2)
    with pytest.raises(InconsistentMessageReplies, match="client-id query"):
        strategy.configure_train(
            1, params_to_arrays(np.zeros(fed.d)), ConfigRecord(), InProcessGrid(ClientApp(), K)
        )


def test_client_rejects_a_config_without_the_strategy_keys(fed):
    theta = fed.model.init_params(0)
    content = RecordDict({"arrays": params_to_arrays(theta), "config": ConfigRecord({"lr": 0.1})})
    with pytest.raises(ValueError, match="lacks 'fairagg-round-index'"):
        train_reply(fed.model, fed.data, 0, content)
    strategy = FairaggStrategy("fedavg", K)
    cfg = dict(strategy.train_config(1))
    del cfg["fairagg-batch-size"]
    content = RecordDict({"arrays": params_to_arrays(theta), "config": ConfigRecord(cfg)})
    with pytest.raises(ValueError, match="lacks 'fairagg-batch-size'"):
        train_reply(fed.model, fed.data, 0, content)
    assert set(strategy.train_config(1)) == set(TRAIN_CONFIG_KEYS)


def test_client_error_reply_names_the_missing_partition_id(fed):
    from flwr.app import Context

    strategy, sent, _, _ = _one_round(fed)
    ctx = Context(run_id=0, node_id=1, node_config={}, state=RecordDict(), run_config={})
    with pytest.raises(ValueError, match="partition-id"):
        fed.app(sent[0], ctx)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rule": "nope"}, ValueError, "rule must be one of"),
        ({"rule": 3}, TypeError, "rule must be"),
        ({"num_clients": 0}, ValueError, "num_clients"),
        ({"clients_per_round": K + 1}, ValueError, "clients_per_round"),
        ({"rule": "afl", "clients_per_round": 3}, ValueError, "needs all K"),
        ({"clients_per_round": 3, "fraction_train": 0.5}, ValueError, "fraction_train"),
        ({"rule": "aaggff-s", "min_train_nodes": 2}, ValueError, "min_train_nodes"),
        ({"rule": "fedfa", "momentum": 0.5}, ValueError, "momentum"),
        ({"sampling": "stratified"}, ValueError, "sampling"),
        ({"lr": 0.0}, ValueError, "lr"),
        ({"on_failure": "retry"}, ValueError, "on_failure"),
        ({"epochs": 1.5}, TypeError, "epochs"),
    ],
)
def test_bad_configuration(kwargs, error, match):
    kwargs = {"rule": "fedavg", "num_clients": K, **kwargs}
    with pytest.raises(error, match=match):
        FairaggStrategy(kwargs.pop("rule"), kwargs.pop("num_clients"), **kwargs)


def test_train_config_conflicts_and_round_mismatch(fed):
    strategy = FairaggStrategy("fedavg", K, clients_per_round=2, lr=0.1)
    grid = InProcessGrid(fed.app, K)
    arrays = params_to_arrays(fed.model.init_params(0))
    with pytest.raises(ValueError, match=r"train_config\['fairagg-lr'\]"):
        strategy.configure_train(1, arrays, ConfigRecord({"fairagg-lr": 0.5}), grid)
    with pytest.raises(AggregationError, match="without a matching configure_train"):
        strategy.aggregate_train(1, [])
    sent = list(strategy.configure_train(1, arrays, ConfigRecord({"lr": 0.1, "extra": 1}), grid))
    assert sent[0].content["config"]["extra"] == 1
    with pytest.raises(AggregationError, match="server_round=2"):
        strategy.aggregate_train(2, [])
    with pytest.raises(ValueError, match="layout"):
        strategy.configure_train(2, params_to_arrays(np.zeros(3)), ConfigRecord(), grid)
    # the app's own keys (a template's "lr") pass through beside fairagg's
    sent = list(strategy.configure_train(1, arrays, ConfigRecord({"lr": 0.5}), grid))
    config = sent[0].content["config"]
    assert config["lr"] == 0.5 and config["fairagg-lr"] == 0.1


def test_no_valid_reply_leaves_the_model(fed):
    strategy, sent, _, _ = _one_round(fed)
    replies = [Message(Error(code=2, reason="boom"), reply_to=m) for m in sent]
    new, metrics = strategy.aggregate_train(1, replies)
    assert new is None  # the model stays
    assert metrics["fairagg-failures"] == 3 and metrics["fairagg-clients"] == 0
    log = strategy.rounds[-1]
    assert log.server_round == 1 and len(log.failed_nodes) == 3 and log.client_ids.size == 0


def test_params_arrays_round_trip():
    theta = np.linspace(-1.0, 1.0, 11)
    record = params_to_arrays(theta)
    assert isinstance(record, ArrayRecord)
    np.testing.assert_array_equal(arrays_to_params(record), theta)
    with pytest.raises(ValueError, match="params"):
        params_to_arrays(np.ones((2, 2)))
    with pytest.raises(ValueError, match="finite"):
        params_to_arrays(np.array([np.nan]))


def test_validation_script_without_ray(tmp_path):
    """``validate/flower_simulation.py --engines inprocess``: the comparison and its files."""
    import csv
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "validate" / "flower_simulation.py"
    spec = importlib.util.spec_from_file_location("validate_flower_simulation", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = ["--clients", "5", "--clients-per-round", "3", "--rounds", "2", "--rule", "fedfv"]
    assert module.main([*args, "--engines", "inprocess", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["engine"] for r in rows] == ["fairagg", "flower-inprocess"]
    assert all(float(r["rel_diff"]) == 0.0 and r["same_clients"] == "True" for r in rows)
    assert json.loads((tmp_path / "summary.json").read_text())["agree"] is True


# --------------------------------------------------------------------------------------------
# The optional dependency
# --------------------------------------------------------------------------------------------


def test_import_without_flower_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "flwr" or m.startswith("flwr.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "flwr", None)
    monkeypatch.delitem(sys.modules, "fairagg.flower", raising=False)
    with pytest.raises(ImportError, match=r"fairagg\[flower\]"):
        importlib.import_module("fairagg.flower")


def test_import_fairagg_does_not_import_flower():
    code = "import sys, fairagg; print('fairagg.flower' in sys.modules, 'flwr' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
