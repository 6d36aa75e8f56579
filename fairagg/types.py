"""The shapes every rule shares (DESIGN.md, "The spine: one round").

A rule is a pair of pure functions, in the optax ``init``/``update`` pattern:

- ``init(params, num_clients) -> state``
- ``step(params, reports, state) -> Aggregate(params, state, info)``

``step`` never mutates ``params``, ``reports`` or ``state``; the new state is returned anew and
``info`` holds at least ``"weights"``, the effective weight of each reporting client in the update
``θ^{t+1} = θ^t − Σ_k weights_k δ_k`` (for rules that are not of that form, the weights that
describe them best, documented by the rule), plus any diagnostic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from ._checks import as_float_array, as_int_array, check_int

__all__ = ["Aggregate", "EmptyState", "RoundReports", "Rule", "make_reports"]


class RoundReports(NamedTuple):
    """What the m clients selected in one round report (SPEC §0); clients on the leading axis.

    Attributes
    ----------
    deltas : ndarray, shape (m, d)
        δ_k = θ^t − θ_k, float32 or float64.
    num_samples : ndarray of int64, shape (m,)
        n_k, the size of each client's training split.
    losses : ndarray of float64, shape (m,), optional
        F_k(θ^t), mean training loss of the received model before local training.
    accuracies : ndarray of float64, shape (m,), optional
        Training accuracy of θ^t before local training, in [0, 1].
    participations : ndarray of int64, shape (m,), optional
        f_k, the number of rounds client k has been selected so far, this one included.
    client_ids : ndarray of int64, shape (m,), optional
        Global indices of the reporting clients, in arrival order.
    round_index : int
        t, counting rounds from 0.
    num_clients : int, optional
        K, the number of clients in the federation (0 when unknown).
    """

    deltas: np.ndarray
    num_samples: np.ndarray
    losses: np.ndarray | None = None
    accuracies: np.ndarray | None = None
    participations: np.ndarray | None = None
    client_ids: np.ndarray | None = None
    round_index: int = 0
    num_clients: int = 0


class Aggregate(NamedTuple):
    """What a rule's ``step`` returns.

    Attributes
    ----------
    params : ndarray, shape (d,)
        θ^{t+1}, a new array.
    state : NamedTuple
        The rule's new state.
    info : dict
        ``"weights"`` (shape (m,)) and any rule-specific diagnostic.
    """

    params: np.ndarray
    state: Any
    info: dict[str, Any]


class EmptyState(NamedTuple):
    """State of a stateless rule."""


class Rule(NamedTuple):
    """An aggregation rule: a name, its hyper-parameters and the pure ``init``/``step`` pair."""

    name: str
    init: Callable[[np.ndarray, int], Any]
    step: Callable[[np.ndarray, RoundReports, Any], Aggregate]
    hyperparams: Mapping[str, Any]


def make_reports(
    deltas: Any,
    num_samples: Any,
    *,
    losses: Any = None,
    accuracies: Any = None,
    participations: Any = None,
    client_ids: Any = None,
    round_index: int = 0,
    num_clients: int = 0,
) -> RoundReports:
    """Validate arrays and build a :class:`RoundReports`.

    Every array must have m entries along its first axis; ``deltas`` must be a finite 2-D float
    array, ``num_samples`` positive integers, ``losses`` finite and ≥ 0, ``accuracies`` in
    [0, 1], ``participations`` ≥ 1. Raises ``TypeError``/``ValueError`` naming the argument.
    """
    D = as_float_array(deltas, "deltas", ndim=2, min_size=1)
    m = D.shape[0]
    n = as_int_array(num_samples, "num_samples", min_value=1)

    def _vec(x: Any, name: str) -> np.ndarray | None:
        if x is None:
            return None
        a = as_float_array(x, name, shape=(m,), dtype=np.float64, allow_int=True)
        return a

    if n.shape != (m,):
        raise ValueError(f"num_samples must have shape ({m},) to match deltas; got {n.shape}")
    L = _vec(losses, "losses")
    if L is not None and np.any(L < 0):
        raise ValueError(f"losses must be >= 0 (mean training losses); got minimum {L.min()}")
    A = _vec(accuracies, "accuracies")
    if A is not None and (np.any(A < 0) or np.any(A > 1)):
        raise ValueError("accuracies must lie in [0, 1]")
    P = None
    if participations is not None:
        P = as_int_array(participations, "participations", min_value=1)
        if P.shape != (m,):
            raise ValueError(f"participations must have shape ({m},); got {P.shape}")
    ids = None
    if client_ids is not None:
        ids = as_int_array(client_ids, "client_ids", min_value=0)
        if ids.shape != (m,):
            raise ValueError(f"client_ids must have shape ({m},); got {ids.shape}")
    return RoundReports(
        D,
        n,
        L,
        A,
        P,
        ids,
        check_int(round_index, "round_index", low=0),
        check_int(num_clients, "num_clients", low=0),
    )


def check_reports(reports: Any, params: np.ndarray, needs: tuple[str, ...] = ()) -> RoundReports:
    """Cheap structural check of ``reports`` against ``params`` at a rule's boundary.

    Verifies the type, that ``deltas`` is (m, d) with d = len(params), that every present per-client
    array has m entries, and that the fields in ``needs`` (e.g. ``("losses",)``) are present.
    Finiteness of ``deltas`` is checked by the rules on their O(d) output (a NaN or infinity in
    ``deltas`` always reaches it), so that validation never costs a second pass over (m, d).
    """
    if not isinstance(reports, RoundReports):
        raise TypeError(
            f"reports must be a fairagg.RoundReports (see fairagg.make_reports); got "
            f"{type(reports).__name__}"
        )
    D = reports.deltas
    if not isinstance(D, np.ndarray) or D.ndim != 2 or D.dtype.kind != "f":
        raise TypeError("reports.deltas must be a 2-D float32/float64 array of shape (m, d)")
    m = D.shape[0]
    if m == 0:
        raise ValueError("reports must hold at least one client; got m = 0")
    if D.shape[1] != params.shape[0]:
        raise ValueError(
            f"reports.deltas must have d = {params.shape[0]} columns to match params; got "
            f"shape {D.shape}"
        )
    for name in ("num_samples", "losses", "accuracies", "participations", "client_ids"):
        v = getattr(reports, name)
        if v is None:
            if name in needs:
                raise ValueError(f"this rule needs reports.{name}; it is None")
            continue
        if np.shape(v) != (m,):
            raise ValueError(f"reports.{name} must have shape ({m},); got {np.shape(v)}")
    return reports
