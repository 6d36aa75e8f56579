"""The client side: what a client replies to the strategy's train, evaluate and id-query
messages, and the ClientApp that answers them.
"""

from __future__ import annotations

import pickle
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .._checks import check_choice, check_int
from ..local import client_gradients, train_clients, trained_accuracies
from ..models import FlatModel
from ._protocol import (
    _REPLY_KINDS,
    ACCURACY,
    CLIENT_ID,
    CONFIG_PREFIX,
    DELTA_KEY,
    GRADIENT_KEY,
    LOSS,
    NUM_EXAMPLES,
    PARTITION_ID,
    QUERY_ACTION,
    TRAIN_LOSS,
)
from ._records import _flatten, _single_record, _unflatten, arrays_to_params

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
