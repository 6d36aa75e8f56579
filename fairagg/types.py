"""The shapes every rule shares (the Layout guide, "The spine: one round").

A rule is a pair of pure functions, in the optax ``init``/``update`` pattern:

- ``init(params, num_clients) -> state``
- ``step(params, reports, state) -> Aggregate(params, state, info)``

``step`` never mutates ``params``, ``reports`` or ``state``; the new state is returned anew and
``info`` holds at least ``"weights"``, the effective weight of each reporting client in the update
``θ^{t+1} = θ^t − Σ_k weights_k δ_k`` (for rules that are not of that form, the weights that
describe them best, documented by the rule), plus any diagnostic. A rule whose reported model is
not its iterate (AFL reports the running average of its iterates) also puts that model in
``info["model"]``; the simulator evaluates it and keeps it as the run's final model.

What the clients compute for a rule is its [`LocalSpec`][fairagg.types.LocalSpec] (``Rule.local``):
local training that reports displacements δ_k (the default), local training on PropFair's surrogate
loss, or one gradient ∇F_k(θ^t) per client for the SGD-type rules (SPEC §0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

import numpy as np

from ._checks import (
    as_float_array,
    as_int_array,
    as_weights,
    check_count,
    check_device_array,
    check_int,
    check_real,
    is_device_array,
)

__all__ = ["Aggregate", "EmptyState", "LocalSpec", "RoundReports", "Rule", "make_reports"]


class RoundReports(NamedTuple):
    """What the m clients selected in one round report (SPEC §0); clients on the leading axis.

    Attributes
    ----------
    deltas : ndarray, shape (m, d), or None
        δ_k = θ^t − θ_k, float32 or float64. None in rounds of an SGD-type rule, whose clients
        report ``gradients`` instead.
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
    gradients : ndarray, shape (m, d), optional
        g_k = ∇F_k(θ^t), full-batch or on one minibatch, for the SGD-type rules (q-FedSGD, AFL).
    lr : float, optional
        The round's learning rate: the clients' local step, or for the SGD-type rules the step
        the rule takes. q-FFL's L = 1/lr reads it when the rule is not given one.
    """

    deltas: np.ndarray | None
    num_samples: np.ndarray
    losses: np.ndarray | None = None
    accuracies: np.ndarray | None = None
    participations: np.ndarray | None = None
    client_ids: np.ndarray | None = None
    round_index: int = 0
    num_clients: int = 0
    gradients: np.ndarray | None = None
    lr: float | None = None


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


#: What [`LocalSpec`][fairagg.types.LocalSpec] ``report`` may name.
LOCAL_REPORTS = ("deltas", "gradients")
_Spec = TypeVar("_Spec", bound="LocalSpec")

#: Which model's training accuracy the clients report ([`LocalSpec`][fairagg.types.LocalSpec]
#: ``accuracy_source``).
ACCURACY_SOURCES = ("global", "local")


class _LocalSpecFields(NamedTuple):
    report: str = "deltas"
    gradient_batch_size: int | None = None
    propfair_m: float | None = None
    propfair_epsilon: float = 0.2
    propfair_huber: bool = False
    momentum: float | None = None
    accuracy_source: str = "global"


class LocalSpec(_LocalSpecFields):
    """What the selected clients compute for a rule (SPEC §0, §6).

    Validated when it is built (and by ``_replace``): a bad field is a ``TypeError`` or
    ``ValueError`` naming it.

    Attributes
    ----------
    report : {"deltas", "gradients"}
        ``"deltas"``: local training, reporting δ_k = θ^t − θ_k in ``RoundReports.deltas``.
        ``"gradients"``: no training; each client reports g_k = ∇F_k(θ^t) in
        ``RoundReports.gradients`` (``deltas`` is None).
    gradient_batch_size : int, optional
        For ``report="gradients"``: None for the full-batch gradient, else the mean gradient over
        the first ``gradient_batch_size`` rows of the client's seeded shuffle of the round (all its
        rows when it has fewer).
    propfair_m : float, optional
        For ``report="deltas"``: train on PropFair's surrogate −log(1 − f/M) of each minibatch
        loss f instead of f itself (SPEC §6); None trains on the loss.
    propfair_epsilon : float
        PropFair's ε: where M − f < ε the surrogate is continued by f/M, or by f/ε when
        ``propfair_huber``.
    propfair_huber : bool
        Use the Huber continuation f/ε.
    momentum : float, optional
        For ``report="deltas"``: the client momentum μ ∈ [0, 1) the rule prescribes (FedFa's
        eqs. 1-2). None leaves it to the caller (the simulator's ``momentum``, 0 by default).
    accuracy_source : {"global", "local"}
        ``RoundReports.accuracies`` holds the training accuracy of θ^t before local training
        (``"global"``, SPEC §0) or of the locally trained model θ^t − δ_k (``"local"``, for
        ``report="deltas"`` only).
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> LocalSpec:
        spec = super().__new__(cls, *args, **kwargs)
        _check_local_fields(spec)
        return spec

    # What _replace builds through. The ignore: typeshed types NamedTuple._make with a self-type
    # bound to the bare field tuple, which no subclass's own signature can match.
    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> LocalSpec:  # type: ignore[override]
        return cls(*iterable)


def check_local_spec(spec: Any) -> LocalSpec:
    """Validate a [`LocalSpec`][fairagg.types.LocalSpec] (``TypeError``/``ValueError`` naming the
    field)."""
    if not isinstance(spec, LocalSpec):
        raise TypeError(f"rule.local must be a fairagg.LocalSpec; got {type(spec).__name__}")
    return _check_local_fields(spec)


def _check_local_fields(spec: _Spec) -> _Spec:
    if not isinstance(spec.report, str) or spec.report not in LOCAL_REPORTS:
        raise ValueError(f"LocalSpec.report must be one of {LOCAL_REPORTS}; got {spec.report!r}")
    if spec.gradient_batch_size is not None:
        check_int(spec.gradient_batch_size, "LocalSpec.gradient_batch_size", low=1)
    if spec.propfair_m is not None:
        check_real(spec.propfair_m, "LocalSpec.propfair_m", low=0.0, low_open=True)
    check_real(spec.propfair_epsilon, "LocalSpec.propfair_epsilon", low=0.0, low_open=True)
    if not isinstance(spec.propfair_huber, (bool, np.bool_)):
        raise TypeError(
            f"LocalSpec.propfair_huber must be a bool; got {type(spec.propfair_huber).__name__}"
        )
    if spec.propfair_m is not None and spec.report != "deltas":
        raise ValueError("LocalSpec.propfair_m applies to local training (report='deltas')")
    if spec.momentum is not None:
        check_real(spec.momentum, "LocalSpec.momentum", low=0.0, high=1.0, high_open=True)
        if spec.report != "deltas":
            raise ValueError("LocalSpec.momentum applies to local training (report='deltas')")
    if not isinstance(spec.accuracy_source, str) or spec.accuracy_source not in ACCURACY_SOURCES:
        raise ValueError(
            f"LocalSpec.accuracy_source must be one of {ACCURACY_SOURCES}; got "
            f"{spec.accuracy_source!r}"
        )
    if spec.accuracy_source == "local" and spec.report != "deltas":
        raise ValueError("LocalSpec.accuracy_source='local' needs local training (report='deltas')")
    return spec


class Rule(NamedTuple):
    """An aggregation rule: a name, its hyper-parameters, the pure ``init``/``step`` pair and what
    the clients must compute for it ([`LocalSpec`][fairagg.types.LocalSpec]; local training by
    default)."""

    name: str
    init: Callable[[np.ndarray, int], Any]
    step: Callable[[np.ndarray, RoundReports, Any], Aggregate]
    hyperparams: Mapping[str, Any]
    local: LocalSpec = LocalSpec()


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
    gradients: Any = None,
    lr: float | None = None,
) -> RoundReports:
    """Validate arrays and build a [`RoundReports`][fairagg.types.RoundReports].

    Every array must have m entries along its first axis; ``deltas`` and ``gradients`` must be
    finite 2-D float arrays of the same shape (``deltas`` may be None when ``gradients`` is
    given; it may also be a CUDA device array, kept on the device for a rule built with
    ``backend="cuda"`` that takes one, see ``check_reports``), ``num_samples`` positive
    integers (sample counts) or positive reals (weights, kept as float64), ``losses`` finite and
    ≥ 0, ``accuracies`` in [0, 1], ``participations`` ≥ 1, ``lr`` > 0. Raises
    ``TypeError``/``ValueError`` naming the argument.
    """
    if deltas is None and gradients is None:
        raise ValueError("deltas may be None only when gradients are given")
    if is_device_array(deltas):  # kept on the device; finiteness is checked by the rule's kernel
        D = check_device_array(deltas, "deltas", ndim=2, min_size=1)
    else:
        D = None if deltas is None else as_float_array(deltas, "deltas", ndim=2, min_size=1)
    G = None
    if gradients is not None:
        G = as_float_array(
            gradients, "gradients", ndim=2, min_size=1, shape=None if D is None else D.shape
        )
    first_array = D if D is not None else G
    assert first_array is not None  # deltas and gradients are not both None: raised above
    m = first_array.shape[0]
    n = as_weights(num_samples, "num_samples")

    def _vec(x: Any, name: str) -> np.ndarray | None:
        if x is None:
            return None
        a = as_float_array(x, name, shape=(m,), dtype=np.float64, allow_int=True)
        return a

    first = "deltas" if D is not None else "gradients"
    if n.shape != (m,):
        raise ValueError(f"num_samples must have shape ({m},) to match {first}; got {n.shape}")
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
        if np.unique(ids).size != m:
            u, c = np.unique(ids, return_counts=True)
            raise ValueError(
                f"client_ids must be distinct (one report per client); {int(u[c > 1][0])} "
                "appears more than once"
            )
    K = check_count(num_clients, "num_clients", low=0)
    if K and ids is not None and ids.max() >= K:
        raise ValueError(
            f"client_ids must lie in [0, num_clients) = [0, {K}); got {int(ids.max())}"
        )
    if K and ids is None and m > K:
        raise ValueError(f"{first} hold m = {m} clients, more than num_clients = {K}")
    return RoundReports(
        D,
        n,
        L,
        A,
        P,
        ids,
        check_int(round_index, "round_index", low=0),
        K,
        G,
        None if lr is None else check_real(lr, "lr", low=0.0, low_open=True),
    )


def check_state(state: Any, cls: type, rule: str) -> Any:
    """``state`` if it is the ``cls`` that ``rule``'s ``init`` returns, else a TypeError naming
    ``state`` (a stateful rule's ``step`` needs the state of the previous round)."""
    if not isinstance(state, cls):
        raise TypeError(
            f"state must be the {cls.__name__} that {rule}'s init returns (call "
            f"rule.init(params, num_clients) before the first step, then pass each step's "
            f"Aggregate.state to the next); got {type(state).__name__}"
        )
    return state


def check_reports(
    reports: Any, params: Any, needs: tuple[str, ...] = (), *, device: bool = False
) -> RoundReports:
    """Cheap structural check of ``reports`` against ``params`` at a rule's boundary.

    Verifies the type, that the client matrix is (m, d) with d = len(params) (``gradients`` for a
    rule whose ``needs`` include ``"gradients"``, ``deltas`` otherwise), that every present
    per-client array has m entries, and that the fields in ``needs`` (e.g. ``("losses",)``) are
    present. Finiteness of the matrix is checked by the rules on their O(d) output (a NaN or
    infinity in it always reaches it), so that validation never costs a second pass over (m, d).

    ``device``: whether the rule takes ``deltas`` as a CUDA device array (the weighted-average
    rules on ``backend="cuda"``); otherwise a device array is a ``TypeError`` that says so.
    """
    if not isinstance(reports, RoundReports):
        raise TypeError(
            f"reports must be a fairagg.RoundReports (see fairagg.make_reports); got "
            f"{type(reports).__name__}"
        )
    key = "gradients" if "gradients" in needs else "deltas"
    D = getattr(reports, key)
    if D is None and key == "gradients":
        raise ValueError(
            "this rule needs reports.gradients (g_k = ∇F_k(θ^t) per client); it is None"
        )
    if is_device_array(D):
        if not device or key != "deltas":
            raise TypeError(
                f"reports.{key} is a CUDA device array; this rule takes NumPy arrays (the "
                "weighted-average rules built with backend='cuda' keep device updates there)"
            )
    elif not isinstance(D, np.ndarray) or D.ndim != 2 or D.dtype.kind != "f":
        raise TypeError(f"reports.{key} must be a 2-D float32/float64 array of shape (m, d)")
    m = D.shape[0]
    if m == 0:
        raise ValueError("reports must hold at least one client; got m = 0")
    if D.shape[1] != params.shape[0]:
        raise ValueError(
            f"reports.{key} must have d = {params.shape[0]} columns to match params; got "
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
    ids = reports.client_ids
    if ids is not None and np.unique(ids).size != m:
        raise ValueError("reports.client_ids must be distinct (one report per client)")
    return reports


def client_indices(reports: RoundReports, num_clients: int) -> np.ndarray:
    """Indices in [0, K) of the reporting clients (``client_ids``, or 0..m−1 when absent)."""
    if not isinstance(reports, RoundReports):
        raise TypeError(
            f"reports must be a fairagg.RoundReports (see fairagg.make_reports); got "
            f"{type(reports).__name__}"
        )
    num_clients = check_count(num_clients, "num_clients", low=1)
    m = len(reports.num_samples)
    if reports.client_ids is None:
        if m > num_clients:
            raise ValueError(
                f"reports hold m = {m} clients but the rule was built for K = {num_clients}"
            )
        return np.arange(m)
    ids = np.asarray(reports.client_ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= num_clients):
        raise ValueError(
            f"reports.client_ids must lie in [0, {num_clients}); got {ids.min()}..{ids.max()}"
        )
    if np.unique(ids).size != ids.size:
        raise ValueError("reports.client_ids must be distinct")
    return ids
