"""Reading and combining the clients' train replies: one reply as the strategy aggregates it,
its metrics, and Flower's average of the arrays that are not parameters.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
from flwr.app import Message, RecordDict
from flwr.serverapp.exception import InconsistentMessageReplies

from ._protocol import ACCURACY, CLIENT_ID, NUM_EXAMPLES, TRAIN_LOSS


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


def _int_metric(metrics: Any, key: str, node: int, client: Any, what: str) -> int:
    """A non-negative int metric of the reply of ``node`` (``client``, when known);
    ``InconsistentMessageReplies`` otherwise."""
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
