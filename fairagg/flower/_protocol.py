"""What fairagg's strategy and its ClientApp say to each other: the metric, record and config
keys of their messages, and the message type of the client-id query.
"""

from __future__ import annotations

from flwr.app import MessageType

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
