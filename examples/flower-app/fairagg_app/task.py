"""What the ServerApp and the ClientApp share: the run config read into fairagg's objects."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from fairagg import RULES, make_rule
from fairagg.data import load
from fairagg.kernels import resolve_backend
from fairagg.models import MLP, FlatModel, LogisticRegression

#: The run-config keys of the app; every other key is a hyper-parameter of the rule.
APP_KEYS = (
    "num-server-rounds",
    "rule",
    "num-clients",
    "clients-per-round",
    "local-epochs",
    "batch-size",
    "lr",
    "seed",
    "data",
    "model",
    "fraction-evaluate",
    "out-dir",
    "backend",
)


def data_loader(config: Mapping[str, Any]) -> functools.partial:
    """A picklable loader of the federated data (each Flower worker loads it once)."""
    return functools.partial(
        load, str(config["data"]), num_clients=int(config["num-clients"]), seed=int(config["seed"])
    )


def build_model(config: Mapping[str, Any], n_features: int, n_classes: int) -> FlatModel:
    """fairagg's NumPy model named by the config's ``model``: ``logistic`` or ``mlp``."""
    name = str(config["model"])
    if name == "logistic":
        return LogisticRegression(n_features, n_classes)
    if name == "mlp":
        return MLP(n_features, n_classes, n_hidden=32)
    raise ValueError(f"run config 'model' must be 'logistic' or 'mlp'; got {name!r}")


def build_rule(config: Mapping[str, Any]):
    """The rule named by ``rule`` with its hyper-parameters from the (flattened) run config:
    ``RULE.NAME`` keys of that rule, and unprefixed keys the app does not know; ``-`` in a name
    reads as ``_``. Keys of other rules are left for when the config names them. ``backend``
    (default ``"auto"``: numba on a CPU, cuda with a GPU) is where the server aggregates."""
    name = str(config["rule"])
    params = {}
    for key, value in config.items():
        if key in APP_KEYS:
            continue
        prefix, dot, rest = key.partition(".")
        if dot:
            if prefix not in RULES:
                raise ValueError(f"run config {key!r}: {prefix!r} is not a rule of fairagg.RULES")
            if prefix != name:
                continue
            key = rest
        params[key.replace("-", "_")] = value
    backend = resolve_backend(str(config.get("backend", "auto")))
    return make_rule(name, backend=backend, **params)
