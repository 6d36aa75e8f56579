"""The ClientApp: fairagg's, training the NumPy model on its node's partition of the data.

A node's partition is its ``partition-id`` (Flower's simulation sets it; a SuperNode gets it
with ``--node-config "partition-id=3 num-partitions=10"``).
"""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fairagg.flower import fairagg_client_app

from .task import build_model, data_loader

app = ClientApp()
_apps: dict[tuple, ClientApp] = {}


def _app_for(context: Context) -> ClientApp:
    """fairagg's ClientApp for this run's config, built once per process."""
    cfg = context.run_config
    key = tuple(sorted((k, str(v)) for k, v in cfg.items()))
    if key not in _apps:
        loader = data_loader(cfg)
        data = loader()
        model = build_model(cfg, data.n_features, data.n_classes)
        _apps[key] = fairagg_client_app(model, loader)
    return _apps[key]


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local training from θ^t, replying δ_k and F_k(θ^t) (fairagg's protocol)."""
    return _app_for(context)(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Loss and accuracy of the received model on the node's test split."""
    return _app_for(context)(msg, context)


@app.query("fairagg")
def query(msg: Message, context: Context) -> Message:
    """The client id and n_k, which the strategy asks for before it samples clients by id."""
    return _app_for(context)(msg, context)
