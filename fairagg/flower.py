"""Flower adapter: any fairagg rule as a Flower strategy, and the ClientApp its clients run.

Needs the ``flower`` extra (``pip install 'fairagg[flower]'``, Flower ≥ 1.22 and its Message
API); ``flower-sim`` adds Ray for Flower's simulation engine. ``import fairagg`` never imports
this module.

Server side, [`FairaggStrategy`][fairagg.flower.FairaggStrategy] subclasses Flower's ``FedAvg`` and
runs one round of ``fairagg.simulate`` per Flower round t = ``server_round`` − 1 (SPEC §0):

1. ``configure_train`` keeps θ^t (the ArrayRecord it sends, flattened to one float64 vector by
   [`arrays_to_params`][fairagg.flower.arrays_to_params]), builds the rule's state with
   ``rule.init(θ^0, K)`` on the first round, picks the clients and puts everything they need in the
   train config ([`TRAIN_CONFIG_KEYS`][fairagg.flower.TRAIN_CONFIG_KEYS]: the seed, t, the
   local-training settings and the rule's [`LocalSpec`][fairagg.types.LocalSpec]).
2. ``aggregate_train`` checks the replies with Flower's consistency rules, then reads each:
   one ArrayRecord, ``"delta"`` (δ_k = θ^t − θ_k), ``"gradient"`` (g_k = ∇F_k(θ^t), for the
   rules whose ``LocalSpec.report`` is ``"gradients"``) or, under any other name, the client's
   model θ_k (δ_k is then θ^t − θ_k), and one MetricRecord with the weighting metric n_k
   ([`NUM_EXAMPLES`][fairagg.flower.NUM_EXAMPLES] by default), optionally
   [`CLIENT_ID`][fairagg.flower.CLIENT_ID] k (else the client is the replying node),
   [`TRAIN_LOSS`][fairagg.flower.TRAIN_LOSS] F_k(θ^t) (the received model's mean training loss
   *before* local training; the strategy's ``train_loss_key``) and
   [`ACCURACY`][fairagg.flower.ACCURACY] (training accuracy of θ^t, or of θ_k for
   ``accuracy_source="local"``). It counts participations f_k itself, orders the clients as the
   simulator does, builds [`RoundReports`][fairagg.types.RoundReports] and returns
   ``rule.step(θ^t, reports, state).params`` as the next global ArrayRecord. Any Flower ClientApp
   written for ``FedAvg`` works unchanged (see [`FairaggStrategy`][fairagg.flower.FairaggStrategy]).

Client selection. With ``clients_per_round=m`` the strategy samples client ids exactly as
``fairagg.simulate``: ``sample_clients(K, m, default_rng([seed, 0, t]), scheme=sampling)``.
Flower addresses nodes, not clients, so before the first round it sends every connected node a
``"query.fairagg"`` message and learns which client id (and n_k) each node holds. Replies are
ordered by the draw order, as in the simulator, and every client trains with the shuffles of
``default_rng([seed, 1, t, k])``: a Flower run then reproduces ``fairagg.simulate`` bit for bit
(``validate/flower_simulation.py`` checks it). With ``clients_per_round=None`` Flower's own node
sampling (``fraction_train``, ``min_train_nodes``) picks the nodes, client ids come from the
replies, and replies are ordered by client id.

Client side, [`fairagg_client_app`][fairagg.flower.fairagg_client_app] builds the ClientApp: it
answers the id query, and for a train message computes F_k(θ^t) and the accuracy before training,
then trains with [`fairagg.local.train_clients`][fairagg.local.train_clients] (or computes
[`fairagg.local.client_gradients`][fairagg.local.client_gradients]) for its one client with the seed
and round of the config, so that its δ_k is the simulator's to the bit. A client's id is its node's
``"partition-id"`` (what Flower's simulation engine sets; start a SuperNode with
``--node-config "partition-id=3 num-partitions=30"``).

Failures. A reply that carries an error (the ClientApp raised, the node vanished), or that
cannot be aggregated (NaN or infinity, another layout, an invalid loss or weight, a client id out
of range), is logged and left out (``on_failure="raise"`` stops the run instead, naming the
node); a rule that needs all K clients (``RuleSpec.full_participation``) raises
``AggregationError`` naming the missing ones. Replies that break Flower's consistency rules
(several records, differing metric keys, no weighting metric) raise Flower's
``InconsistentMessageReplies``.

[`InProcessGrid`][fairagg.flower.InProcessGrid] runs a ClientApp on virtual nodes in this process
(no Ray, no SuperLink): the tests drive the strategy through it, and ``Strategy.start`` accepts it.
"""

from __future__ import annotations

import math
import numbers
import pickle
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Sequence
from logging import INFO, WARNING
from typing import Any, NamedTuple

import numpy as np

try:
    with warnings.catch_warnings():
        # typer, a Flower dependency, imports names that click >= 8.3 deprecates; nothing of
        # ours uses them.
        warnings.filterwarnings(
            "ignore", message=r"'click\.[\w.]+' is deprecated", category=DeprecationWarning
        )
        from flwr.app import (
            Array,
            ArrayRecord,
            ConfigRecord,
            Context,
            Error,
            Message,
            MessageType,
            MetricRecord,
            RecordDict,
        )
        from flwr.clientapp import ClientApp
        from flwr.common.constant import ErrorCode
        from flwr.common.logger import log
        from flwr.serverapp import Grid
        from flwr.serverapp.exception import AggregationError, InconsistentMessageReplies
        from flwr.serverapp.strategy import FedAvg
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fairagg.flower needs Flower >= 1.22 (its Message API): install the 'flower' extra, "
        "pip install 'fairagg[flower]' ('fairagg[flower-sim]' adds Ray for the simulation "
        f"engine). The import failed with: {exc}"
    ) from exc

from ._checks import check_choice, check_count, check_int, check_real
from .kernels import resolve_backend
from .local import check_propfair, client_gradients, train_clients, trained_accuracies
from .metrics import fairness_summary
from .models import FlatModel
from .rules import RULES, make_rule
from .sampling import SAMPLING_SCHEMES, sample_clients
from .simulation import SAMPLING_STREAM, _client_momentum, _rule_on_backend
from .types import Rule, check_local_spec, make_reports

__all__ = [
    "ACCURACY",
    "CLIENT_ID",
    "DELTA_KEY",
    "GRADIENT_KEY",
    "LOSS",
    "NUM_EXAMPLES",
    "PARTITION_ID",
    "QUERY_MESSAGE_TYPE",
    "CONFIG_PREFIX",
    "TRAIN_CONFIG_KEYS",
    "TRAIN_LOSS",
    "FairaggStrategy",
    "QFedAvg",
    "InProcessGrid",
    "RoundLog",
    "arrays_to_params",
    "evaluate_reply",
    "fairagg_client_app",
    "params_to_arrays",
    "query_reply",
    "train_reply",
]

#: Metric keys of a train reply: n_k (Flower's ``weighted_by_key`` default), the client id k in
#: [0, K), F_k(θ^t) before local training (under Flower's ``train_loss_key`` default), and the
#: training accuracy the rule asks for. An evaluate reply holds the test loss under ``LOSS``.
NUM_EXAMPLES = "num-examples"
CLIENT_ID = "client-id"
TRAIN_LOSS = "train_loss"
LOSS = "loss"
ACCURACY = "accuracy"
#: RecordDict keys of the ArrayRecord a client replies with: δ_k, or g_k for gradient rules.
DELTA_KEY = "delta"
GRADIENT_KEY = "gradient"
#: The node-config key that holds a node's client id (set by Flower's simulation engine).
PARTITION_ID = "partition-id"
#: Message type of the client-id query the strategy sends before sampling clients by id.
QUERY_ACTION = "fairagg"
QUERY_MESSAGE_TYPE = f"{MessageType.QUERY}.{QUERY_ACTION}"
#: The prefix of the strategy's own train-config keys: the app's keys (a template's ``"lr"``)
#: pass through untouched beside them.
CONFIG_PREFIX = "fairagg-"
#: What the strategy puts in every train config (besides Flower's ``"server-round"`` and the
#: keys of the ``train_config`` given to ``start``).
TRAIN_CONFIG_KEYS = tuple(
    CONFIG_PREFIX + key
    for key in (
        "rule",
        "round-index",
        "seed",
        "epochs",
        "batch-size",
        "lr",
        "momentum",
        "prox-mu",
        "report",
        "gradient-batch-size",
        "propfair-m",
        "propfair-epsilon",
        "propfair-huber",
        "accuracy-source",
    )
)
_REPLY_KINDS = ("delta", "model")
_ON_FAILURE = ("drop", "raise")


# --------------------------------------------------------------------------------------------
# Flat vectors <-> ArrayRecords
# --------------------------------------------------------------------------------------------

Layout = tuple[tuple[str, tuple[int, ...], str], ...]


def _is_param(dtype: np.dtype) -> bool:
    """Whether an array of this dtype is a parameter the rule aggregates (floating point)."""
    return dtype.kind == "f"


def _flatten(
    arrays: Any, name: str = "arrays", like: Layout | None = None
) -> tuple[np.ndarray, Layout]:
    """One vector of an ArrayRecord's floating-point arrays (raveled, concatenated in key order,
    in their common dtype: float32 stays float32, as in ``fairagg.simulate``; float16 is widened
    to float32) and the layout (key, shape, dtype) of every array, which ``_unflatten``
    inverts. Other arrays (integer counters such as BatchNorm's ``num_batches_tracked``) are in
    the layout but not in the vector: [`FairaggStrategy`][fairagg.flower.FairaggStrategy] averages
    them as Flower's FedAvg does.

    With ``like`` (the first round's layout), the arrays are read in its key order and which
    ones are parameters is its decision: a counter that Flower's average turned into float64
    stays a counter. A record whose keys or shapes differ raises ``ValueError``."""
    if not isinstance(arrays, ArrayRecord):
        raise TypeError(f"{name} must be a flwr.app.ArrayRecord; got {type(arrays).__name__}")
    if len(arrays) == 0:
        raise ValueError(f"{name} must hold at least one array")
    if like is not None:
        got = {k: tuple(v.numpy().shape) for k, v in arrays.items()}
        want = {k: tuple(shape) for k, shape, _ in like}
        if got != want:
            raise ValueError(f"{name} have the arrays {got}; θ^t has {want}")
        keys: list[tuple[str, bool | None]] = [(k, _is_param(np.dtype(d))) for k, _, d in like]
    else:
        keys = [(k, None) for k in arrays.keys()]
    pieces, layout = [], []
    for key, param in keys:
        a = arrays[key].numpy()
        if a.dtype.kind not in "biuf":
            raise TypeError(
                f"{name}[{key!r}] must be a numeric array (the floating-point ones are the "
                f"parameters); got dtype {a.dtype}"
            )
        if param is None:
            param = _is_param(a.dtype)
        if param:
            if a.dtype.kind != "f":
                a = a.astype(np.float64)
            pieces.append(a.ravel())
        layout.append(
            (key, tuple(a.shape), a.dtype.str if param or like is None else _dtype_of(like, key))
        )
    if not pieces:
        raise TypeError(f"{name} must hold at least one floating-point array (the parameters)")
    dtype = np.result_type(np.float32, *pieces)  # float16 computed in float32
    flat = pieces[0].astype(dtype) if len(pieces) == 1 else np.concatenate(pieces, dtype=dtype)
    return flat, tuple(layout)


def _dtype_of(layout: Layout, key: str) -> str:
    return next(d for k, _, d in layout if k == key)


def _others(arrays: ArrayRecord, like: Layout | None = None) -> dict[str, np.ndarray]:
    """The arrays of a record that are not parameters (see ``_flatten``)."""
    out = {}
    for key, value in arrays.items():
        a = value.numpy()
        param = _is_param(a.dtype) if like is None else _is_param(np.dtype(_dtype_of(like, key)))
        if not param:
            out[key] = a
    return out


def _unflatten(
    params: np.ndarray, layout: Layout, others: dict[str, np.ndarray] | None = None
) -> ArrayRecord:
    """The ArrayRecord of ``layout``: parameters from the vector ``params``, each in its own
    dtype and shape (0-d arrays stay 0-d), the other arrays from ``others``."""
    record = ArrayRecord()
    start = 0
    for key, shape, dtype in layout:
        if not _is_param(np.dtype(dtype)):
            if others is None or key not in others:
                raise ValueError(f"no value for the non-parameter array {key!r}")
            record[key] = Array(np.array(others[key], order="C"))
            continue
        size = math.prod(shape)
        piece = params[start : start + size].reshape(shape)
        record[key] = Array(np.array(piece, dtype=dtype, order="C"))  # a copy; 0-d stays 0-d
        start += size
    return record


def params_to_arrays(params: Any, key: str = "theta") -> ArrayRecord:
    """A flat parameter vector θ (shape (d,), float32/float64) as a one-array ArrayRecord."""
    p = np.asarray(params)
    if p.ndim != 1 or p.dtype.kind != "f" or p.size == 0:
        raise ValueError(f"params must be a non-empty 1-D float array; got {p.dtype} {p.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError("params must be finite")
    if not isinstance(key, str) or not key:
        raise TypeError("key must be a non-empty str")
    return ArrayRecord({key: Array(np.ascontiguousarray(p))})


def arrays_to_params(arrays: ArrayRecord) -> np.ndarray:
    """The parameter vector of an ArrayRecord: every array raveled, concatenated in key order,
    in the arrays' common dtype (float32 or float64)."""
    return _flatten(arrays)[0]


# --------------------------------------------------------------------------------------------
# Client side
# --------------------------------------------------------------------------------------------

_DATA_BY_RECIPE: dict[bytes, Any] = {}
_DATA_BY_OBJECT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _resolve_data(data: Any) -> Any:
    """``data``, or what the zero-argument loader ``data`` returns, loaded once per process
    (keyed by the loader's pickle, so that a loader Ray unpickles anew for every message still
    loads once)."""
    if not callable(data):
        return data
    try:
        key = pickle.dumps(data)
    except Exception:  # an unpicklable loader (a lambda): cache by the object itself
        if data not in _DATA_BY_OBJECT:
            _DATA_BY_OBJECT[data] = data()
        return _DATA_BY_OBJECT[data]
    if key not in _DATA_BY_RECIPE:
        _DATA_BY_RECIPE[key] = data()
    return _DATA_BY_RECIPE[key]


def _check_data(data: Any) -> tuple[np.ndarray, np.ndarray]:
    """Train and test sizes per client of a FederatedData-like object."""
    for name in ("X_train", "y_train", "train_offsets", "X_test", "y_test", "test_offsets"):
        if not hasattr(data, name):
            raise TypeError(
                f"data must be a fairagg.data.FederatedData (or a loader returning one); it has "
                f"no {name!r}"
            )
    return (
        np.diff(np.asarray(data.train_offsets, dtype=np.int64)),
        np.diff(np.asarray(data.test_offsets, dtype=np.int64)),
    )


def _check_client(client_id: Any, num_clients: int) -> int:
    if isinstance(client_id, str) and client_id.strip().lstrip("-").isdigit():
        client_id = int(client_id)
    return check_int(client_id, "client_id", low=0, high=num_clients - 1)


def _single_record(content: RecordDict, kind: str, where: str) -> tuple[str, Any]:
    by_kind: dict[str, Any] = {
        "ArrayRecord": content.array_records,
        "ConfigRecord": content.config_records,
        "MetricRecord": content.metric_records,
    }
    records = by_kind[kind]
    if len(records) != 1:
        raise ValueError(f"{where} must hold exactly one {kind}; got keys {sorted(records)}")
    return next(iter(records.items()))


def _config_value(cfg: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    key = CONFIG_PREFIX + key
    if key not in cfg:
        raise ValueError(
            f"the train config lacks {key!r}: send train messages with "
            "fairagg.flower.FairaggStrategy, which sets every key in TRAIN_CONFIG_KEYS"
        )
    value = cfg[key]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise TypeError(f"train config {key!r} must be {kind}; got a bool")
    if not isinstance(value, kind):
        raise TypeError(f"train config {key!r} must be {kind}; got {type(value).__name__}")
    return value


def train_reply(
    model: FlatModel, data: Any, client_id: int, content: RecordDict, *, reply: str = "delta"
) -> RecordDict:
    """What client ``client_id`` replies to a train message of
    [`FairaggStrategy`][fairagg.flower.FairaggStrategy].

    Reads θ^t (the message's one ArrayRecord) and the config (its one ConfigRecord,
    [`TRAIN_CONFIG_KEYS`][fairagg.flower.TRAIN_CONFIG_KEYS]), then, as ``fairagg.simulate`` does for
    this client in round t = ``config["round-index"]``: for ``report="deltas"``,
    [`fairagg.local.train_clients`][fairagg.local.train_clients] on ``[client_id]`` (serially) with
    the config's epochs, batch size, lr, momentum, proximal term and PropFair surrogate; for
    ``report="gradients"``, [`fairagg.local.client_gradients`][fairagg.local.client_gradients].
    Shuffles come from ``default_rng([seed, 1, t, client_id])``, so the update is the simulator's to
    the bit.

    Parameters
    ----------
    model : fairagg.models.FlatModel
    data : fairagg.data.FederatedData
        All clients' data (the client reads its own rows).
    client_id : int
        k in [0, K).
    content : RecordDict
        The train message's content.
    reply : {"delta", "model"}
        Send δ_k = θ^t − θ_k under ``"delta"`` (exact), or the trained model θ_k under the
        message's ArrayRecord key (what Flower's own strategies read). Gradients are always sent
        under ``"gradient"``.

    Returns
    -------
    RecordDict
        ``{"delta" | "gradient" | <arrays key>: ArrayRecord, "metrics": MetricRecord}`` with the
        metrics [`NUM_EXAMPLES`][fairagg.flower.NUM_EXAMPLES] n_k,
        [`CLIENT_ID`][fairagg.flower.CLIENT_ID] k, [`TRAIN_LOSS`][fairagg.flower.TRAIN_LOSS]
        F_k(θ^t) and [`ACCURACY`][fairagg.flower.ACCURACY] (of θ^t, or of θ_k when the config's
        ``accuracy-source`` is ``"local"``).
    """
    if not isinstance(model, FlatModel):
        raise TypeError(f"model must be a fairagg.models.FlatModel; got {type(model).__name__}")
    check_choice(reply, "reply", _REPLY_KINDS)
    n_train, _ = _check_data(data)
    k = _check_client(client_id, n_train.size)
    if not isinstance(content, RecordDict):
        raise TypeError(f"content must be a flwr.app.RecordDict; got {type(content).__name__}")
    arrays_key, arrays = _single_record(content, "ArrayRecord", "a train message")
    _, cfg = _single_record(content, "ConfigRecord", "a train message")
    theta, layout = _flatten(arrays, "the train message's arrays")
    t = _config_value(cfg, "round-index", int)
    seed = _config_value(cfg, "seed", int)
    report = _config_value(cfg, "report", str)
    ids = np.array([k], dtype=np.int64)
    if report == "gradients":
        bsz = _config_value(cfg, "gradient-batch-size", int)
        res = client_gradients(
            model, theta, data, ids, batch_size=bsz or None, seed=seed, round_index=t
        )
        key, vec, acc = GRADIENT_KEY, res.deltas[0], res.accuracies[0]
    elif report == "deltas":
        pf_m = _config_value(cfg, "propfair-m", (int, float))
        res = train_clients(
            model,
            theta,
            data,
            ids,
            epochs=_config_value(cfg, "epochs", int),
            batch_size=_config_value(cfg, "batch-size", int),
            lr=_config_value(cfg, "lr", (int, float)),
            momentum=_config_value(cfg, "momentum", (int, float)),
            prox_mu=_config_value(cfg, "prox-mu", (int, float)),
            seed=seed,
            round_index=t,
            parallel=False,
            propfair_m=pf_m or None,
            propfair_epsilon=_config_value(cfg, "propfair-epsilon", (int, float)),
            propfair_huber=_config_value(cfg, "propfair-huber", bool),
        )
        source = _config_value(cfg, "accuracy-source", str)
        check_choice(source, "train config 'accuracy-source'", ("global", "local"))
        acc = res.accuracies[0]
        if source == "local":
            acc = trained_accuracies(model, theta, res.deltas, data, ids)[0]
        if reply == "delta":
            key, vec = DELTA_KEY, res.deltas[0]
        else:
            key, vec = arrays_key, theta - res.deltas[0]
    else:
        raise ValueError(f"train config 'report' must be 'deltas' or 'gradients'; got {report!r}")
    metrics = MetricRecord(
        {
            NUM_EXAMPLES: int(res.num_samples[0]),
            CLIENT_ID: k,
            TRAIN_LOSS: float(res.losses[0]),
            ACCURACY: float(acc),
        }
    )
    return RecordDict({key: _unflatten(vec, layout), "metrics": metrics})


def evaluate_reply(model: FlatModel, data: Any, client_id: int, content: RecordDict) -> RecordDict:
    """Client ``client_id``'s evaluation of the message's model on its test split: mean loss and
    accuracy (the numbers ``fairagg.simulate`` records as ``test_loss`` / ``test_accuracy``)
    under [`LOSS`][fairagg.flower.LOSS] and [`ACCURACY`][fairagg.flower.ACCURACY], with the test-set
    size under [`NUM_EXAMPLES`][fairagg.flower.NUM_EXAMPLES].
    """
    if not isinstance(model, FlatModel):
        raise TypeError(f"model must be a fairagg.models.FlatModel; got {type(model).__name__}")
    n_train, n_test = _check_data(data)
    k = _check_client(client_id, n_train.size)
    if not isinstance(content, RecordDict):
        raise TypeError(f"content must be a flwr.app.RecordDict; got {type(content).__name__}")
    _, arrays = _single_record(content, "ArrayRecord", "an evaluate message")
    theta = arrays_to_params(arrays)
    lo, hi = int(data.test_offsets[k]), int(data.test_offsets[k + 1])
    if hi == lo:
        raise ValueError(f"client {k} has no test rows")
    loss, acc = model.evaluate_clients(
        theta, data.X_test[lo:hi], data.y_test[lo:hi], np.array([0, hi - lo])
    )
    metrics = MetricRecord(
        {NUM_EXAMPLES: int(n_test[k]), LOSS: float(loss[0]), ACCURACY: float(acc[0])}
    )
    return RecordDict({"metrics": metrics})


def query_reply(data: Any, client_id: int) -> RecordDict:
    """The answer to the strategy's [`QUERY_MESSAGE_TYPE`][fairagg.flower.QUERY_MESSAGE_TYPE] query:
    the client id and n_k."""
    n_train, _ = _check_data(data)
    k = _check_client(client_id, n_train.size)
    return RecordDict({"metrics": MetricRecord({CLIENT_ID: k, NUM_EXAMPLES: int(n_train[k])})})


def _node_client_id(context: Context, client_id: Any) -> Any:
    if client_id is None:
        if PARTITION_ID not in context.node_config:
            raise ValueError(
                f"the node config has no {PARTITION_ID!r} (Flower's simulation engine sets it; "
                'start a SuperNode with --node-config "partition-id=K num-partitions=N"), and '
                "fairagg_client_app was given no client_id"
            )
        return context.node_config[PARTITION_ID]
    if callable(client_id):
        return client_id(context)
    return client_id


def fairagg_client_app(
    model: FlatModel,
    data: Any,
    *,
    client_id: int | Callable[[Context], int] | None = None,
    reply: str = "delta",
) -> ClientApp:
    """A Flower ClientApp whose clients compute what a fairagg rule needs.

    It registers three handlers: ``train`` ([`train_reply`][fairagg.flower.train_reply]: F_k(θ^t)
    and the accuracy before training, then local training or the gradient, replying δ_k or g_k),
    ``evaluate`` ([`evaluate_reply`][fairagg.flower.evaluate_reply] on the client's test split) and
    ``query.fairagg`` ([`query_reply`][fairagg.flower.query_reply]: the client id and n_k, which
    [`FairaggStrategy`][fairagg.flower.FairaggStrategy] asks for before it samples clients by id).

    Parameters
    ----------
    model : fairagg.models.FlatModel
    data : FederatedData or callable
        The federated data, or a zero-argument loader returning it, called once per process.
        A picklable loader (``functools.partial(fairagg.data.load, "synthetic:1,1",
        num_clients=30, seed=0)``) keeps what Flower's Ray backend ships with every message
        small: Ray pickles the ClientApp, with whatever it holds, for each message.
    client_id : int or callable, optional
        The node's client id k. Default: the node config's ``"partition-id"``; a callable
        receives the Context.
    reply : {"delta", "model"}
        See [`train_reply`][fairagg.flower.train_reply].
    """
    if not isinstance(model, FlatModel):
        raise TypeError(f"model must be a fairagg.models.FlatModel; got {type(model).__name__}")
    if not callable(data):
        _check_data(data)
    check_choice(reply, "reply", _REPLY_KINDS)
    if client_id is not None and not callable(client_id):
        check_int(client_id, "client_id", low=0)
    app = ClientApp()

    @app.train()
    def _train(msg: Message, context: Context) -> Message:
        d = _resolve_data(data)
        k = _node_client_id(context, client_id)
        return Message(train_reply(model, d, k, msg.content, reply=reply), reply_to=msg)

    @app.evaluate()
    def _evaluate(msg: Message, context: Context) -> Message:
        d = _resolve_data(data)
        k = _node_client_id(context, client_id)
        return Message(evaluate_reply(model, d, k, msg.content), reply_to=msg)

    @app.query(QUERY_ACTION)
    def _query(msg: Message, context: Context) -> Message:
        d = _resolve_data(data)
        return Message(query_reply(d, _node_client_id(context, client_id)), reply_to=msg)

    return app


# --------------------------------------------------------------------------------------------
# Server side
# --------------------------------------------------------------------------------------------


class RoundLog(NamedTuple):
    """What [`FairaggStrategy`][fairagg.flower.FairaggStrategy] records per aggregated round
    (``strategy.rounds``).

    Attributes
    ----------
    server_round : int
        Flower's round number, t + 1.
    client_ids : ndarray of int64, shape (m,)
        The aggregated clients (dense indices in [0, K)) in the order given to the rule.
    weights : ndarray, shape (m,)
        The rule's ``info["weights"]``.
    losses : ndarray of float64, shape (m,), or None
        The reported losses.
    failed_nodes : tuple of int
        Nodes whose reply carried an error.
    info : dict
        The rule's whole ``info``.
    seconds : float
        Wall time from ``configure_train`` to the end of ``aggregate_train``: sending, the
        clients' work, receiving and the rule's step.
    dropped : tuple of (int, str)
        Nodes whose reply could not be aggregated (non-finite arrays, another layout, an invalid
        loss or weight, ...), with the reason; left out of the round.
    nodes : tuple of int
        The node of each aggregated client, in the order of ``client_ids``.
    """

    server_round: int
    client_ids: np.ndarray
    weights: np.ndarray
    losses: np.ndarray | None
    failed_nodes: tuple[int, ...]
    info: dict[str, Any]
    seconds: float
    dropped: tuple[tuple[int, str], ...] = ()
    nodes: tuple[int, ...] = ()


class _Reply(NamedTuple):
    node: int
    client: int | None  # the reply's client-id metric, if it has one
    vector: np.ndarray
    weight: float
    loss: float | None
    accuracy: float | None
    msg: Message


class _Unusable(Exception):
    """A reply that cannot be aggregated: left out (``on_failure="drop"``) or raised."""


def _scalar(value: Any) -> float | None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _counts(weights: np.ndarray) -> np.ndarray | None:
    """The weights as sample counts for
    [`fairagg.metrics.fairness_summary`][fairagg.metrics.fairness_summary]'s weighted mean, or None
    (unweighted) when they are not integers."""
    w = np.asarray(weights, dtype=np.float64)
    integral = np.all(w == np.round(w)) and np.all(w >= 1) and np.all(w < 2.0**53)
    return w.astype(np.int64) if integral else None


def _flower_average(contents: Sequence[RecordDict], weights: np.ndarray, keys: Iterable[str]):
    """Flower's FedAvg combination of the arrays ``keys`` of each reply's ArrayRecord:
    Σ_i value_i · (w_i / Σ w), summed in reply order (``strategy_utils.aggregate_arrayrecords``)."""
    factors = [float(w) / float(weights.sum()) for w in weights]
    out: dict[str, np.ndarray] = {}
    for content, f in zip(contents, factors, strict=True):
        record = next(iter(content.array_records.values()))
        for key in keys:
            value = record[key].numpy() * f
            out[key] = value if key not in out else out[key] + value
    return {k: np.asarray(v) for k, v in out.items()}


class FairaggStrategy(FedAvg):
    """A Flower strategy (Message API, a ``FedAvg`` subclass) that aggregates with a fairagg
    rule: θ^{t+1} = ``rule.step(θ^t, reports, state).params`` on the clients' replies.

    A drop-in for Flower's ``FedAvg``: ``FairaggStrategy("term")`` takes the replies of any
    Flower ClientApp that works with ``FedAvg`` (its model's arrays under any record name, a
    MetricRecord with the weighting metric and, for loss-driven rules, the training loss), and
    ``FedAvg``'s arguments. What it adds, and what differs:

    - Clients are the replying *nodes*, each given a dense index in [0, K) the first time it
      replies (new nodes of a round in increasing node id), kept for the whole run, so that
      stateful rules (AFL's λ, AAgFF, FedFa, FedFV's history) follow the same node. A reply
      carrying [`CLIENT_ID`][fairagg.flower.CLIENT_ID] (as
      [`fairagg_client_app`][fairagg.flower.fairagg_client_app]'s do) is that client instead, which
      reproduces ``fairagg.simulate`` exactly. K is ``num_clients``, or the number of connected
      nodes at the first round; it is fixed, since rules keep per-client state: a node that leaves
      keeps its index (and state, should it come back), and a node that joins once all K indices are
      taken has its replies left out, with that reason.
    - The floating-point arrays are the parameters the rule aggregates (float16 computed in
      float32 and returned in float16; float32 stays float32 as in ``fairagg.simulate``); other
      arrays (integer counters such as BatchNorm's ``num_batches_tracked``) are combined as
      ``FedAvg`` combines them (a weighted average, float64). 0-d arrays stay 0-d.
    - The loss a rule reads is the metric ``train_loss_key`` (Flower's ``"train_loss"``); the
      papers define it as F_k(θ^t), the loss of the received model *before* local training,
      which [`fairagg_client_app`][fairagg.flower.fairagg_client_app] sends; a template ClientApp's
      training loss is an average during training: a rule then aggregates with that instead.
    - The weighting metric (``weighted_by_key``) may be any positive number, as in ``FedAvg``.
    - The SGD-type rules (AFL, q-FedSGD: ``LocalSpec.report == "gradients"``) read g_k from a
      ``"gradient"`` ArrayRecord ([`fairagg_client_app`][fairagg.flower.fairagg_client_app] sends
      it); from a model or update reply they take the pseudo-gradient (θ^t − θ_k) / ``lr``, which is
      g_k when the client took one full-batch gradient step of size ``lr``, and an average of its
      steps' gradients otherwise.
    - Replies are validated with Flower's rules first (``InconsistentMessageReplies``), then
      fairagg's: a reply that cannot be aggregated (non-finite arrays, another layout, an
      invalid weight, or an invalid loss or accuracy where the rule reads it, a client index out
      of range) is treated as a failed reply: logged and left out with ``on_failure="drop"``
      (the round's metrics count it, the round log names it), an ``AggregationError`` naming
      the node with ``"raise"``. A metric the rule needs that no reply has (Flower's rules let
      a reply lack it only if every reply does) is an ``AggregationError`` naming the metric.
    - The strategy's own train-config keys start with ``"fairagg-"``; the ``train_config`` an
      app passes to ``start`` (a template's ``"lr"``) goes to the clients unchanged beside them.
    - Give ``num_clients`` and ``clients_per_round`` (or ``num_clients`` with a rule that needs
      every client, which then samples all K) only with
      [`fairagg_client_app`][fairagg.flower.fairagg_client_app] (or a ClientApp answering its
      client-id query): that is fairagg's sampling by client id. Without them, Flower samples the
      nodes (every node for a rule that needs all of them).
    - Metrics: every client metric is aggregated as ``FedAvg`` does (``train_metrics_aggr_fn`` /
      ``evaluate_metrics_aggr_fn``, weighted by ``weighted_by_key`` by default), and fairagg's
      summary is added under ``fairagg-*`` keys.

    The run reproduces ``fairagg.simulate(rule, model, data, rounds=T, clients_per_round=m,
    epochs=..., batch_size=..., lr=..., momentum=..., prox_mu=..., sampling=..., seed=...)``
    when every client runs [`fairagg_client_app`][fairagg.flower.fairagg_client_app] and
    ``clients_per_round`` is given (see the module docstring for that protocol).

    Parameters
    ----------
    rule : Rule or str
        A fairagg rule, or a registry name (default hyper-parameters, on ``backend``).
    num_clients : int, optional
        K. None: the number of connected nodes when the first round is configured (fairagg's own
        sampling, ``clients_per_round``, needs it given).
    clients_per_round : int, optional
        m in [1, K]: sample m client ids per round as ``fairagg.simulate`` does (this needs every
        one of the K clients connected, and learns their nodes with a ``query.fairagg`` message).
        None: Flower's node sampling (``fraction_train``, ``min_train_nodes``). A rule that needs
        full participation samples all K whatever is given (m must be K if given).
    sampling : {"uniform", "proportional"}
        fairagg's sampling scheme (proportional to n_k uses the n_k the clients reported).
    seed : int
        Seeds the sampling and the clients' shuffles.
    epochs, batch_size, lr, momentum, prox_mu
        The clients' local training ([`fairagg.local.train_clients`][fairagg.local.train_clients])
        when they run [`fairagg_client_app`][fairagg.flower.fairagg_client_app]; ``lr`` is also the
        ``RoundReports.lr`` the rules read (q-FFL's L = 1/lr, AFL's step). ``momentum=None`` takes
        the rule's (FedFa's) or 0, as ``fairagg.simulate`` does.
    on_failure : {"drop", "raise"}
        What a reply that carries an error, or cannot be aggregated, does: left out of the round
        (Flower's way), or ``AggregationError``.
    discovery_timeout : float
        Seconds to wait for all K clients to connect and answer the id query.
    train_loss_key : str
        The metric holding a client's loss in a train reply (Flower's QFedAvg's argument and
        default).
    evaluate_accuracy_key : str, optional
        The metric of an evaluate reply whose spread fairagg summarises (``fairagg-worst_10``,
        ...); None: ``"accuracy"``, else ``"eval_acc"`` (Flower's templates), else none.
    backend : {"auto", "numpy", "numba", "cuda"}
        The backend of a rule given by name, as in
        [`fairagg.simulate`][fairagg.simulation.simulate]: ``"auto"`` (the default) is numba on a
        CPU, cuda with a GPU ([`resolve_backend`][fairagg.kernels.resolve_backend]). A built
        ``Rule`` keeps its own.
    **fedavg_kwargs
        Passed to ``FedAvg`` (``fraction_evaluate``, ``min_evaluate_nodes``,
        ``weighted_by_key``, ``arrayrecord_key``, ``train_metrics_aggr_fn``,
        ``evaluate_metrics_aggr_fn``, ...). ``fraction_train`` and ``min_train_nodes`` only with
        ``clients_per_round=None``.

    Attributes
    ----------
    state : NamedTuple
        The rule's state after the last aggregated round.
    params : ndarray or None
        θ^t of the round being run, kept from ``configure_train`` (in the arrays' dtype).
    reported_params : ndarray or None
        The model the rule reports after the last round (``info["model"]`` for AFL, its average
        of iterates; θ^{t+1} otherwise); ``configure_evaluate`` sends it.
    participations : ndarray of int64, shape (K,)
        f_k: the number of rounds in which client k's reply was aggregated (the simulator's count
        of selections, when no reply fails).
    node_clients : dict of int to int
        Node id → client index.
    client_sizes : ndarray of int64, shape (K,)
        n_k as the clients answered the id query (0 until they have).
    rounds : list of RoundLog
    """

    def __init__(
        self,
        rule: Rule | str,
        num_clients: int | None = None,
        *,
        clients_per_round: int | None = None,
        sampling: str = "uniform",
        seed: int = 0,
        epochs: int = 1,
        batch_size: int = 10,
        lr: float = 0.01,
        momentum: float | None = None,
        prox_mu: float = 0.0,
        on_failure: str = "drop",
        discovery_timeout: float = 600.0,
        train_loss_key: str = TRAIN_LOSS,
        evaluate_accuracy_key: str | None = None,
        backend: str = "auto",
        **fedavg_kwargs: Any,
    ) -> None:
        rule = _rule_on_backend(rule, backend)
        self.rule = rule
        self.local = check_local_spec(rule.local)
        spec = RULES.get(rule.name)
        self.needs: tuple[str, ...] = spec.needs if spec is not None else ()
        self.full_participation = bool(spec is not None and spec.full_participation)
        K = None if num_clients is None else check_count(num_clients, "num_clients", low=1)
        if clients_per_round is not None:
            if K is None:
                raise ValueError(
                    "clients_per_round samples client ids in [0, K): give num_clients too (or "
                    "leave clients_per_round None for Flower's node sampling)"
                )
            clients_per_round = check_int(clients_per_round, "clients_per_round", low=1, high=K)
            if self.full_participation and clients_per_round != K:
                raise ValueError(
                    f"rule {rule.name!r} needs all K = {K} clients every round; got "
                    f"clients_per_round = {clients_per_round}"
                )
        elif self.full_participation and K is not None:
            clients_per_round = K
        self.clients_per_round = clients_per_round
        if clients_per_round is not None or self.full_participation:
            both = sorted({"fraction_train", "min_train_nodes"} & set(fedavg_kwargs))
            if both:
                raise ValueError(
                    f"{', '.join(both)} select Flower's node sampling; they cannot be combined "
                    "with fairagg's sampling (clients_per_round, or a rule that needs all K "
                    "clients)"
                )
        self.sampling = check_choice(sampling, "sampling", SAMPLING_SCHEMES)
        self.seed = check_int(seed, "seed", low=0)
        self.epochs = check_int(epochs, "epochs", low=1)
        self.batch_size = check_int(batch_size, "batch_size", low=1)
        self.lr = check_real(lr, "lr", low=0.0, low_open=True)
        self.momentum = _client_momentum(momentum, self.local, rule.name)
        self.prox_mu = check_real(prox_mu, "prox_mu", low=0.0)
        self.propfair = check_propfair(
            self.local.propfair_m, self.local.propfair_epsilon, self.local.propfair_huber
        )
        self.on_failure = check_choice(on_failure, "on_failure", _ON_FAILURE)
        self.discovery_timeout = check_real(discovery_timeout, "discovery_timeout", low=0.0)
        for name, key in (("train_loss_key", train_loss_key),) + (
            (("evaluate_accuracy_key", evaluate_accuracy_key),)
            if evaluate_accuracy_key is not None
            else ()
        ):
            if not isinstance(key, str) or not key:
                raise TypeError(f"{name} must be a non-empty str; got {key!r}")
        self.train_loss_key = train_loss_key
        self.evaluate_accuracy_key = evaluate_accuracy_key
        super().__init__(**fedavg_kwargs)

        self.num_clients: int | None = None
        self.state: Any = None
        self.params: np.ndarray | None = None
        self.reported_params: np.ndarray | None = None
        self._reported_is_model = False
        self._layout: Layout | None = None
        self._others: dict[str, np.ndarray] = {}
        self._round: int | None = None
        self._started = 0.0
        self._selected: np.ndarray | None = None
        self.node_clients: dict[int, int] = {}
        self._client_node: dict[int, int] = {}
        self.client_sizes = np.zeros(0, dtype=np.int64)
        self.participations = np.zeros(0, dtype=np.int64)
        self.rounds: list[RoundLog] = []
        if K is not None:
            self._set_num_clients(K)

    def _set_num_clients(self, K: int) -> None:
        self.num_clients = K
        self.client_sizes = np.zeros(K, dtype=np.int64)
        self.participations = np.zeros(K, dtype=np.int64)

    # --- configuration --------------------------------------------------------------------------
    def summary(self) -> None:
        """Log the rule and the local-training settings, then FedAvg's summary."""
        log(INFO, "\t├──> fairagg rule: %s %s", self.rule.name, dict(self.rule.hyperparams))
        log(
            INFO,
            "\t│\t├── K = %s, clients per round: %s (%s sampling), seed %d",
            self.num_clients if self.num_clients is not None else "the nodes of round 1",
            self.clients_per_round or "Flower's node sampling",
            self.sampling,
            self.seed,
        )
        log(
            INFO,
            "\t│\t└── local: %s, epochs %d, batch %d, lr %g, momentum %g, prox_mu %g; loss "
            "metric %r",
            self.local.report,
            self.epochs,
            self.batch_size,
            self.lr,
            self.momentum,
            self.prox_mu,
            self.train_loss_key,
        )
        super().summary()

    def train_config(self, server_round: int) -> dict[str, Any]:
        """The values of [`TRAIN_CONFIG_KEYS`][fairagg.flower.TRAIN_CONFIG_KEYS] for round
        ``server_round`` (t + 1)."""
        spec = self.local
        values = (
            self.rule.name,
            server_round - 1,
            self.seed,
            self.epochs,
            self.batch_size,
            self.lr,
            self.momentum,
            self.prox_mu,
            spec.report,
            spec.gradient_batch_size or 0,  # 0: full batch
            self.propfair[0],  # 0.0: train on the loss
            self.propfair[1],
            self.propfair[2],
            spec.accuracy_source,
        )
        return dict(zip(TRAIN_CONFIG_KEYS, values, strict=True))

    def _config(self, config: ConfigRecord, server_round: int) -> ConfigRecord:
        if not isinstance(config, ConfigRecord):
            raise TypeError(f"config must be a flwr.app.ConfigRecord; got {type(config).__name__}")
        ours = self.train_config(server_round)
        for key, value in ours.items():
            if key in config and config[key] != value:
                raise ValueError(
                    f"train_config[{key!r}] = {config[key]!r} contradicts the strategy's "
                    f"{value!r}; set it through FairaggStrategy"
                )
        merged = ConfigRecord(dict(config))
        for key, value in ours.items():
            merged[key] = value
        merged["server-round"] = server_round
        return merged

    def _discover(self, grid: Grid) -> None:
        """Learn which node holds which client id (and its n_k), until all K are known."""
        K = self.num_clients
        assert K is not None  # configure_train sets K (the connected nodes) before discovery
        deadline = time.monotonic() + self.discovery_timeout
        while True:
            nodes = list(grid.get_node_ids())
            live = set(nodes)
            for node in [n for n in self.node_clients if n not in live]:
                del self.node_clients[node]  # a node that left; its client may come back
            unknown = [n for n in nodes if n not in self.node_clients]
            if unknown:
                query = RecordDict({"config": ConfigRecord({"fairagg": "client-id"})})
                messages = [
                    Message(query, dst_node_id=n, message_type=QUERY_MESSAGE_TYPE) for n in unknown
                ]
                timeout = max(deadline - time.monotonic(), 1.0)
                for msg in grid.send_and_receive(messages, timeout=timeout):
                    self._learn_node(msg)
            if len(set(self.node_clients.values())) == K:
                break
            if time.monotonic() > deadline:
                have = sorted(set(self.node_clients.values()))
                raise AggregationError(
                    f"fairagg's sampling needs all K = {K} clients connected; after "
                    f"{self.discovery_timeout:g} s {len(have)} answered "
                    f"(missing: {sorted(set(range(K)) - set(have))[:20]})"
                )
            time.sleep(1.0)
        self._client_node = {c: n for n, c in self.node_clients.items()}

    def _learn_node(self, msg: Message) -> None:
        node = msg.metadata.src_node_id
        if msg.has_error():
            raise InconsistentMessageReplies(
                f"node {node} did not answer fairagg's client-id query ({QUERY_MESSAGE_TYPE!r}); "
                f"its ClientApp must be fairagg_client_app or register "
                f"@app.query({QUERY_ACTION!r}) returning {CLIENT_ID!r} and {NUM_EXAMPLES!r}: "
                f"{msg.error.reason}"
            )
        try:
            _, metrics = _single_record(msg.content, "MetricRecord", f"the query reply of {node}")
        except ValueError as exc:
            raise InconsistentMessageReplies(str(exc)) from exc
        k = self._int_metric(metrics, CLIENT_ID, node, None, "the query reply")
        n = self._int_metric(metrics, NUM_EXAMPLES, node, k, "the query reply")
        assert self.num_clients is not None  # only _discover asks, once K is known
        if k >= self.num_clients:
            raise InconsistentMessageReplies(
                f"node {node} holds client id {k}, outside [0, {self.num_clients})"
            )
        if n < 1:
            raise InconsistentMessageReplies(f"node {node} (client {k}) reports n_k = {n} < 1")
        for other, c in list(self.node_clients.items()):
            if c == k and other != node:
                raise InconsistentMessageReplies(
                    f"nodes {other} and {node} both hold client id {k}"
                )
        self.node_clients[node] = k
        self.client_sizes[k] = n

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Keep θ^t = ``arrays``, pick the round's clients and send them θ^t and the config."""
        server_round = check_int(server_round, "server_round", low=1)
        started = time.perf_counter()
        try:
            theta, layout = _flatten(arrays, "arrays", self._layout)
        except ValueError as exc:
            if self._layout is None:
                raise
            raise ValueError(f"arrays must keep the layout of the first round: {exc}") from None
        if not np.all(np.isfinite(theta)):
            raise ValueError("arrays must be finite (θ^t holds NaN or infinity)")
        cfg = self._config(config, server_round)
        if self.clients_per_round is None:
            # Flower's node sampling, which first waits for min_available_nodes
            messages = list(super().configure_train(server_round, arrays, cfg, grid))
            self._selected = None
            if self.num_clients is None:  # K: the nodes connected once Flower has waited
                K = len(list(grid.get_node_ids()))
                self._set_num_clients(K)
                log(INFO, "configure_train: K = %d clients (the connected nodes)", K)
        assert self.num_clients is not None  # given, or the connected nodes just above
        if self._layout is None:
            self.state = self.rule.init(theta, self.num_clients)
            self._layout = layout
        self._others = _others(arrays, self._layout)
        self.params, self._round, self._started = theta, server_round, started
        if self.clients_per_round is not None:
            self._discover(grid)
            rng = np.random.default_rng([self.seed, SAMPLING_STREAM, server_round - 1])
            S = sample_clients(
                self.num_clients,
                self.clients_per_round,
                rng,
                scheme=self.sampling,
                num_samples=self.client_sizes,
            )
            record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: cfg})
            messages = [
                Message(
                    record, dst_node_id=self._client_node[int(k)], message_type=MessageType.TRAIN
                )
                for k in S
            ]
            self._selected = S
            log(INFO, "configure_train: sampled clients %s (fairagg)", S.tolist())
        return messages

    # --- aggregation ----------------------------------------------------------------------------
    def _int_metric(self, metrics: Any, key: str, node: int, client: Any, what: str) -> int:
        who = f"node {node}" + ("" if client is None else f" (client {client})")
        if key not in metrics:
            raise InconsistentMessageReplies(
                f"{what} of {who} lacks the metric {key!r}; fairagg_client_app sends "
                f"{NUM_EXAMPLES!r}, {CLIENT_ID!r}, {TRAIN_LOSS!r} and {ACCURACY!r}"
            )
        v = metrics[key]
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise InconsistentMessageReplies(
                f"metric {key!r} of {who} must be a non-negative int; got {v!r}"
            )
        return int(v)

    @staticmethod
    def _real_metric(metrics: Any, key: str, what: str, low: float = 0.0) -> float | None:
        """A finite metric ≥ ``low`` (None when absent); ``_Unusable`` otherwise."""
        if key not in metrics:
            return None
        v = metrics[key]
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise _Unusable(f"its {what} {key!r} must be a finite number; got {v!r}")
        if v < low:
            raise _Unusable(f"its {what} {key!r} must be >= {low:g}; got {v!r}")
        return float(v)

    def _parse(self, msg: Message) -> _Reply:
        """One train reply, after Flower's consistency checks; ``_Unusable`` when it cannot be
        aggregated."""
        node = msg.metadata.src_node_id
        content = msg.content
        metrics = next(iter(content.metric_records.values()))
        key, arrays = next(iter(content.array_records.items()))
        k = None
        if CLIENT_ID in metrics:
            v = metrics[CLIENT_ID]
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise _Unusable(f"its metric {CLIENT_ID!r} must be an int; got {v!r}")
            assert self.num_clients is not None
            if not 0 <= v < self.num_clients:
                raise _Unusable(
                    f"its client id {v} is outside [0, {self.num_clients}) (num_clients)"
                )
            k = int(v)
            known = self.node_clients.get(node)
            if known is not None and known != k:
                raise InconsistentMessageReplies(
                    f"node {node} holds client {known} but its train reply says client {k}"
                )
        w = metrics[self.weighted_by_key]
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) or w <= 0:
            raise _Unusable(
                f"its weighting metric {self.weighted_by_key!r} must be a positive number; got "
                f"{w!r}"
            )
        gradients = self.local.report == "gradients"
        if not gradients and key == GRADIENT_KEY:
            raise InconsistentMessageReplies(
                f"the train reply of node {node} holds its arrays under {key!r} (a gradient); "
                f"rule {self.rule.name!r} aggregates updates or models"
            )
        assert self._layout is not None and self.params is not None
        try:
            vec, _ = _flatten(arrays, f"its {key!r} arrays", self._layout)
        except (TypeError, ValueError) as exc:
            raise _Unusable(f"another layout: {exc}") from None
        if vec.dtype != self.params.dtype:
            vec = vec.astype(np.result_type(vec, self.params))
        if not np.all(np.isfinite(vec)):
            raise _Unusable(f"its {key!r} arrays hold NaN or infinity")
        if key not in (DELTA_KEY, GRADIENT_KEY):
            vec = self.params - vec  # the client sent θ_k: δ_k = θ^t − θ_k
        if gradients and key != GRADIENT_KEY:
            # an SGD-type rule on updates: the pseudo-gradient δ_k / lr, g_k itself when the
            # client took one full-batch step of size lr (the class docstring says so)
            vec = vec / self.lr
        # only what the rule reads is checked: fedavg does not care for a loss of -1 or an
        # accuracy in percent
        loss = acc = None
        if "losses" in self.needs:
            loss = self._real_metric(metrics, self.train_loss_key, "loss")
        if "accuracies" in self.needs:
            acc = self._real_metric(metrics, ACCURACY, "accuracy")
            if acc is not None and acc > 1:
                raise _Unusable(f"its accuracy {ACCURACY!r} must lie in [0, 1]; got {acc!r}")
        return _Reply(node, k, vec, float(w), loss, acc, msg)

    def _needed(self, replies: Sequence[_Reply], attr: str, metric: str, need: str) -> Any:
        values = [getattr(r, attr) for r in replies]
        if all(v is not None for v in values):
            return np.array(values, dtype=np.float64)
        if need in self.needs:  # replies are consistent: none of them has it
            have = sorted(next(iter(replies[0].msg.content.metric_records.values())).keys())
            hint = " (set train_loss_key)" if need == "losses" else ""
            raise AggregationError(
                f"rule {self.rule.name!r} needs the {need} of the clients, under the metric "
                f"{metric!r} of each train reply; the replies have {have}{hint}"
            )
        return None

    def _assign(
        self, replies: list[_Reply], drop: list[tuple[int, str]]
    ) -> list[tuple[int, _Reply]]:
        """Client indices of the replies: their client-id metric, else their node's index (new
        nodes take the lowest free index, in increasing node id)."""
        assert self.num_clients is not None
        known = dict(self.node_clients)  # committed by aggregate_train once the rule stepped
        out = []
        for r in replies:
            if r.client is None:
                continue
            known.setdefault(r.node, r.client)
            out.append((r.client, r))
        by_node = sorted((r for r in replies if r.client is None), key=lambda r: r.node)
        taken = set(known.values())
        free = (i for i in range(self.num_clients) if i not in taken)
        for r in by_node:
            if r.node not in known:
                k = next(free, None)
                if k is None:
                    drop.append(
                        (
                            r.node,
                            f"it is a new node and all K = {self.num_clients} client indices "
                            "are taken (K is fixed at the first round: num_clients)",
                        )
                    )
                    continue
                known[r.node] = k
                taken.add(k)
            out.append((known[r.node], r))
        return out

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Build the round's RoundReports from the replies and step the rule.

        Replies are checked with Flower's rules first (``InconsistentMessageReplies``), then
        fairagg's (see the class docstring). Returns θ^{t+1} in θ^t's layout, and the
        MetricRecord of ``train_metrics_aggr_fn`` over the aggregated replies, with fairagg's
        ``fairagg-clients`` (m), ``fairagg-failures`` (error replies), ``fairagg-dropped``
        (replies left out), ``fairagg-loss-max``, ``fairagg-accuracy-min``, the fairness summary
        of the reported accuracies (``fairagg-worst_10``, ...) and every finite scalar of the
        rule's ``info`` as ``fairagg-rule-<name>``.
        """
        replies = list(replies)
        valid, failed = self._check_and_log_replies(replies, is_train=True)
        if self.params is None or self._round != server_round:
            raise AggregationError(
                f"aggregate_train(server_round={server_round}) without a matching "
                f"configure_train (θ^t is kept for round {self._round})"
            )
        for msg in failed:
            log(WARNING, "\t> left out: node %d: %s", msg.metadata.src_node_id, msg.error.reason)
        dropped: list[tuple[int, str]] = []
        parsed = []
        for msg in valid:
            try:
                parsed.append(self._parse(msg))
            except _Unusable as exc:
                dropped.append((msg.metadata.src_node_id, str(exc)))
        assigned = self._assign(parsed, dropped)
        for node, why in dropped:
            log(WARNING, "\t> left out: node %d: %s", node, why)
        if self.on_failure == "raise" and (failed or dropped):
            reasons = [f"node {m.metadata.src_node_id}: {m.error.reason}" for m in failed]
            reasons += [f"node {n}: {why}" for n, why in dropped]
            raise AggregationError(
                f"{len(reasons)} train replies failed or cannot be aggregated "
                f"(on_failure='raise'): {'; '.join(reasons[:5])}"
            )
        ids = [k for k, _ in assigned]
        if len(set(ids)) != len(ids):
            dup = sorted({k for k in ids if ids.count(k) > 1})
            raise InconsistentMessageReplies(f"several train replies claim client ids {dup}")
        assert self.num_clients is not None
        if self.full_participation and len(ids) != self.num_clients:
            missing = sorted(set(range(self.num_clients)) - set(ids))
            raise AggregationError(
                f"rule {self.rule.name!r} needs all K = {self.num_clients} clients every round; "
                f"round {server_round} has no usable reply from clients {missing[:20]}"
            )
        if not assigned:  # nothing to aggregate: the model stays, the round is still logged
            log(WARNING, "aggregate_train: no reply to aggregate in round %d", server_round)
            self.rounds.append(
                RoundLog(
                    server_round,
                    np.zeros(0, dtype=np.int64),
                    np.zeros(0),
                    None,
                    tuple(m.metadata.src_node_id for m in failed),
                    {},
                    time.perf_counter() - self._started,
                    tuple(dropped),
                    (),
                )
            )
            self._round = None
            if not (failed or dropped):
                return None, None
            return None, MetricRecord(
                {"fairagg-clients": 0, "fairagg-failures": len(failed),
                 "fairagg-dropped": len(dropped)}
            )  # fmt: skip
        if self._selected is not None:
            position = {int(k): i for i, k in enumerate(self._selected)}
            assigned.sort(key=lambda kr: position.get(kr[0], len(position) + kr[0]))
        else:
            assigned.sort(key=lambda kr: kr[0])
        usable = [r for _, r in assigned]
        ids_arr = np.array([k for k, _ in assigned], dtype=np.int64)
        weights = np.array([r.weight for r in usable], dtype=np.float64)
        counts_given = np.all(weights == np.round(weights)) and weights.max() < 2.0**53
        n = weights.astype(np.int64) if counts_given else weights  # counts, or real weights
        losses = self._needed(usable, "loss", self.train_loss_key, "losses")
        accs = self._needed(usable, "accuracy", ACCURACY, "accuracies")
        counts = self.participations[ids_arr] + 1  # committed once the rule has stepped
        matrix = np.stack([r.vector for r in usable])
        gradients = self.local.report == "gradients"
        reports = make_reports(
            None if gradients else matrix,
            n,
            losses=losses,
            accuracies=accs,
            participations=counts,
            client_ids=ids_arr,
            round_index=server_round - 1,
            num_clients=self.num_clients,
            gradients=matrix if gradients else None,
            lr=self.lr,
        )
        agg = self.rule.step(self.params, reports, self.state)
        reported = agg.info.get("model", agg.params)
        if not (np.all(np.isfinite(agg.params)) and np.all(np.isfinite(reported))):
            raise AggregationError(
                f"rule {self.rule.name!r} produced non-finite parameters in round {server_round}"
            )
        self.state = agg.state
        self.participations[ids_arr] = counts
        for k, r in assigned:  # the nodes' indices hold from now on
            self.node_clients[r.node] = k
        self.reported_params = np.asarray(reported)
        self._reported_is_model = "model" in agg.info
        used = {id(r.msg) for r in usable}
        contents = [m.content for m in valid if id(m) in used]  # arrival order, as FedAvg
        if self._others:  # summed in arrival order, as FedAvg sums
            arrival = {id(m): i for i, m in enumerate(valid)}
            in_order = sorted(usable, key=lambda r: arrival[id(r.msg)])
            self._others = _flower_average(
                [r.msg.content for r in in_order],
                np.array([r.weight for r in in_order]),
                list(self._others),
            )
        metrics = self.train_metrics_aggr_fn(contents, self.weighted_by_key)
        if metrics is None:
            metrics = MetricRecord()
        if CLIENT_ID in metrics:
            del metrics[CLIENT_ID]  # an average of client ids means nothing
        metrics["fairagg-clients"] = len(usable)
        metrics["fairagg-failures"] = len(failed)
        metrics["fairagg-dropped"] = len(dropped)
        if losses is not None:
            metrics["fairagg-loss-max"] = float(losses.max())
        if accs is not None:
            metrics["fairagg-accuracy-min"] = float(accs.min())
            for key, value in fairness_summary(accs, _counts(weights)).items():
                if value is not None:
                    metrics[f"fairagg-{key}"] = float(value)
        for name, value in agg.info.items():
            v = _scalar(value)
            if v is not None:
                metrics[f"fairagg-rule-{name}"] = v
        self.rounds.append(
            RoundLog(
                server_round,
                ids_arr,
                np.asarray(agg.info["weights"]),
                losses,
                tuple(m.metadata.src_node_id for m in failed),
                agg.info,
                time.perf_counter() - self._started,
                tuple(dropped),
                tuple(r.node for r in usable),
            )
        )
        self._round = None
        assert self._layout is not None
        return _unflatten(np.asarray(agg.params), self._layout, self._others), metrics

    # --- evaluation -----------------------------------------------------------------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """FedAvg's, sending the model the rule reports (AFL's average of iterates) when it is
        not the iterate ``arrays``."""
        if self._reported_is_model and self.reported_params is not None:
            assert self._layout is not None
            arrays = _unflatten(self.reported_params, self._layout, self._others)
        return super().configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """FedAvg's aggregation of the evaluate replies (``evaluate_metrics_aggr_fn``), with
        [`fairagg.metrics.fairness_summary`][fairagg.metrics.fairness_summary] of their accuracies
        added as ``fairagg-<key>`` (``fairagg-worst_10``, ``fairagg-variance``, ...: percent, as
        that function reports them) when the replies hold an accuracy
        (``evaluate_accuracy_key``)."""
        replies = list(replies)
        valid, _ = self._check_and_log_replies(replies, is_train=False)
        if not valid:
            return None
        contents = [m.content for m in valid]
        metrics = self.evaluate_metrics_aggr_fn(contents, self.weighted_by_key)
        records = [next(iter(c.metric_records.values())) for c in contents]
        keys = (
            (self.evaluate_accuracy_key,)
            if self.evaluate_accuracy_key is not None
            else (ACCURACY, "eval_acc")
        )
        key = next((k for k in keys if k in records[0]), None)
        scalars = key is not None and all(
            _scalar(r[key]) is not None and _scalar(r[self.weighted_by_key]) is not None
            for r in records
        )
        if metrics is not None and key is not None and scalars:  # a list or NaN: no summary
            acc = np.array([r[key] for r in records], dtype=np.float64)
            n = np.array([r[self.weighted_by_key] for r in records], dtype=np.float64)
            if np.all((acc >= 0) & (acc <= 1)) and np.all(n > 0):
                for name, value in fairness_summary(acc, _counts(n)).items():
                    if value is not None:
                        metrics[f"fairagg-{name}"] = float(value)
        return metrics


class QFedAvg(FairaggStrategy):
    """Flower's ``QFedAvg``, same arguments, fairagg's exact q-FedAvg (q-FFL, Alg. 1).

    ``QFedAvg(client_learning_rate, q=0.1, train_loss_key="train_loss", **fedavg_kwargs)`` is
    ``FairaggStrategy(make_rule("qfedavg", q=q, backend=...), lr=client_learning_rate,
    train_loss_key=train_loss_key, **fedavg_kwargs)`` (``backend="auto"`` unless a keyword says
    otherwise): L = 1/``client_learning_rate`` as in
    Flower, the loss read from ``train_loss_key``, replies with the clients' models under any
    record name. The defaults are Flower's (q = 0.1; fairagg's ``qfedavg`` rule defaults to
    q = 1). What differs from Flower's class: the step is computed with every F̃_k^q divided by
    the largest first, so large q or losses stay finite where Flower's overflows to NaN, and the
    summation order is fairagg's (the two agree to round-off elsewhere; tested); a reply that
    cannot be aggregated is left out (``on_failure``) instead of ending the run. The loss the
    paper means is F_k(θ^t), the received model's loss before local training.
    """

    def __init__(  # Flower's QFedAvg's parameters, in its order
        self,
        client_learning_rate: float,
        q: float = 0.1,
        train_loss_key: str = TRAIN_LOSS,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        weighted_by_key: str = NUM_EXAMPLES,
        arrayrecord_key: str = "arrays",
        configrecord_key: str = "config",
        train_metrics_aggr_fn: Callable | None = None,
        evaluate_metrics_aggr_fn: Callable | None = None,
        **fairagg_kwargs: Any,
    ) -> None:
        lr = check_real(client_learning_rate, "client_learning_rate", low=0.0, low_open=True)
        q = check_real(q, "q", low=0.0)
        backend = resolve_backend(fairagg_kwargs.pop("backend", "auto"))
        super().__init__(
            make_rule("qfedavg", q=q, backend=backend),
            lr=lr,
            train_loss_key=train_loss_key,
            fraction_train=fraction_train,
            fraction_evaluate=fraction_evaluate,
            min_train_nodes=min_train_nodes,
            min_evaluate_nodes=min_evaluate_nodes,
            min_available_nodes=min_available_nodes,
            weighted_by_key=weighted_by_key,
            arrayrecord_key=arrayrecord_key,
            configrecord_key=configrecord_key,
            train_metrics_aggr_fn=train_metrics_aggr_fn,
            evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn,
            **fairagg_kwargs,
        )
        self.client_learning_rate, self.q = lr, q


# --------------------------------------------------------------------------------------------
# A Grid without Ray
# --------------------------------------------------------------------------------------------


def _ensure_task_identity() -> None:
    """Give this process the task identity Flower's runtimes set (Flower >= 1.3x builds an
    instruction message's metadata from it), unless one is set already."""
    try:
        from flwr.supercore.task_identity import TaskIdentity
    except ImportError:  # older Flower: messages need no task identity
        return
    for attr, value in (("_run_id", 0), ("_node_id", 1), ("_task_id", 0)):  # 1: the SuperLink
        if getattr(TaskIdentity, attr, 0) is None:
            setattr(TaskIdentity, attr, value)


#: The most virtual nodes an [`InProcessGrid`][fairagg.flower.InProcessGrid] holds (each has a
#: Context in memory).
_MAX_NODES = 2**20


class InProcessGrid(Grid):
    """A Flower Grid that runs a ClientApp on ``num_nodes`` virtual nodes in this process.

    Node i (a random 63-bit node id, seeded) has node config ``{"partition-id": i,
    "num-partitions": num_nodes}`` and a Context that persists across messages, as in Flower's
    simulation engine; messages are handled one after another, and a ClientApp that raises
    yields an error reply (``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``) as Flower's runtimes do.
    For tests and for timing a strategy without Ray's transport; ``failing`` names nodes (by
    partition id) whose ClientApp raises on train messages, to exercise failures; ``run_config`` is
    every node's ``context.run_config`` (what ``flwr run`` reads from an app's
    ``[tool.flwr.app.config]``). Outside a
    Flower runtime it sets the process's Flower task identity (run 0, the SuperLink's node id 1)
    if none is set, which Flower needs to build messages.
    """

    def __init__(
        self,
        client_app: Callable[[Message, Context], Message],
        num_nodes: int,
        *,
        seed: int = 0,
        failing: Iterable[int] = (),
        run_config: dict[str, Any] | None = None,
    ) -> None:
        if not callable(client_app):
            raise TypeError(f"client_app must be a ClientApp; got {type(client_app).__name__}")
        num_nodes = check_count(num_nodes, "num_nodes", low=1, high=_MAX_NODES)
        seed = check_int(seed, "seed", low=0)
        if isinstance(failing, (str, bytes)) or not isinstance(failing, Iterable):
            raise TypeError(
                f"failing must be an iterable of partition ids; got {type(failing).__name__}"
            )
        failing = [check_int(i, "failing", low=0, high=num_nodes - 1) for i in failing]
        if run_config is None:
            run_config = {}
        if not isinstance(run_config, dict) or not all(isinstance(k, str) for k in run_config):
            raise TypeError(
                f"run_config must be a dict with str keys (a Flower run config); got "
                f"{type(run_config).__name__}"
            )
        rng = np.random.default_rng([seed, 7])
        ids: list[int] = []
        while len(ids) < num_nodes:
            v = int(rng.integers(1, 2**63 - 1))
            if v not in ids:
                ids.append(v)
        _ensure_task_identity()
        self.client_app = client_app
        self.partition_of = {nid: i for i, nid in enumerate(ids)}
        self.failing = set(failing)
        self.contexts = {
            nid: Context(
                run_id=0,
                node_id=nid,
                node_config={PARTITION_ID: i, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for nid, i in self.partition_of.items()
        }
        self._run: Any = None
        self._pending: dict[str, Message] = {}
        self.messages_handled = 0

    def set_run(self, run: Any) -> None:
        """Set the run this grid operates in (kept; unused)."""
        self._run = run

    @property
    def run(self) -> Any:
        """The run set with [`set_run`][fairagg.flower.InProcessGrid.set_run] (None by default)."""
        return self._run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """A new instruction message."""
        return Message(
            content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl
        )

    def get_node_ids(self) -> list[int]:
        """The virtual nodes' ids."""
        return list(self.contexts)

    def _handle(self, msg: Message) -> Message:
        node = msg.metadata.dst_node_id
        if node not in self.contexts:
            return Message(
                Error(code=ErrorCode.NODE_UNAVAILABLE, reason=f"no node {node}"), reply_to=msg
            )
        self.messages_handled += 1
        try:
            train = msg.metadata.message_type.split(".")[0] == MessageType.TRAIN
            if train and self.partition_of[node] in self.failing:
                raise RuntimeError(f"node {node} fails on purpose (InProcessGrid.failing)")
            return self.client_app(msg, self.contexts[node])
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            return Message(
                Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg
            )

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Handle each message now; returns ids under which
        [`pull_messages`][fairagg.flower.InProcessGrid.pull_messages] finds the replies."""
        out = []
        for msg in messages:
            key = f"m{len(self._pending)}-{time.perf_counter_ns()}"
            self._pending[key] = self._handle(msg)
            out.append(key)
        return out

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """The replies pushed under ``message_ids`` (each returned once)."""
        return [self._pending.pop(i) for i in message_ids if i in self._pending]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        """Handle the messages in order and return their replies."""
        del timeout
        return [self._handle(m) for m in messages]
