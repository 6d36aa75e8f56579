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

import warnings

# Flower is imported here, before any of the rooms below, so that its absence is one clear error
# whichever of them is reached first (a re-import without Flower finds its submodules cached); the
# Flower names stay readable here, as they always were (the contract tests read RecordDict).
try:
    with warnings.catch_warnings():
        # typer, a Flower dependency, imports names that click >= 8.3 deprecates; nothing of
        # ours uses them.
        warnings.filterwarnings(
            "ignore", message=r"'click\.[\w.]+' is deprecated", category=DeprecationWarning
        )
        from flwr.app import Array as Array
        from flwr.app import ArrayRecord as ArrayRecord
        from flwr.app import ConfigRecord as ConfigRecord
        from flwr.app import Context as Context
        from flwr.app import Error as Error
        from flwr.app import Message as Message
        from flwr.app import MessageType as MessageType
        from flwr.app import MetricRecord as MetricRecord
        from flwr.app import RecordDict as RecordDict
        from flwr.clientapp import ClientApp as ClientApp
        from flwr.common.constant import ErrorCode as ErrorCode
        from flwr.common.logger import log as log
        from flwr.serverapp import Grid as Grid
        from flwr.serverapp.exception import AggregationError as AggregationError
        from flwr.serverapp.exception import (
            InconsistentMessageReplies as InconsistentMessageReplies,
        )
        from flwr.serverapp.strategy import FedAvg as FedAvg
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fairagg.flower needs Flower >= 1.22 (its Message API): install the 'flower' extra, "
        "pip install 'fairagg[flower]' ('fairagg[flower-sim]' adds Ray for the simulation "
        f"engine). The import failed with: {exc}"
    ) from exc

# In the order of the concepts, not sorted: the API page lists the names so.
# isort: off
from ._protocol import NUM_EXAMPLES, CLIENT_ID, TRAIN_LOSS, LOSS, ACCURACY, DELTA_KEY, GRADIENT_KEY
from ._protocol import PARTITION_ID, QUERY_MESSAGE_TYPE, CONFIG_PREFIX, TRAIN_CONFIG_KEYS
from ._records import params_to_arrays, arrays_to_params
from ._client import train_reply, evaluate_reply, query_reply, fairagg_client_app
from ._strategy import RoundLog, FairaggStrategy
from ._qfedavg import QFedAvg
from ._grid import InProcessGrid
# isort: on

# Besides __all__: the id query's action, as before the split.
from ._protocol import QUERY_ACTION as QUERY_ACTION

# The public names are documented, compared and pickled as fairagg.flower's. Their rooms are
# private modules: _protocol (the message keys the strategy and the ClientApp share), _records
# (flat vectors <-> ArrayRecords), _client (the ClientApp side), _replies (reading the train
# replies), _strategy (FairaggStrategy and its RoundLog), _qfedavg (Flower's QFedAvg) and _grid
# (InProcessGrid).
for _obj in (params_to_arrays, arrays_to_params, train_reply, evaluate_reply, query_reply,
             fairagg_client_app, RoundLog, FairaggStrategy, QFedAvg, InProcessGrid):  # fmt: skip
    _obj.__module__ = __name__
del _obj

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
