"""FedAvg and FairAvg (FairAvg paper, eqs. 3-5; SPEC §1).

Both rules average the models of the m selected clients,

.. math::

    \\theta^{t+1} = \\sum_{k \\in S} a_k \\theta_k = \\theta^t - \\sum_{k \\in S} a_k \\delta_k ,
    \\qquad \\text{(FairAvg, eq. 3)}

with FedAvg's sample-size weights a_k = n_k / Σ_{j∈S} n_j (eq. 4) and FairAvg's uniform weights
a_k = 1/|S| (eq. 5). The two forms of eq. 3 are equal because Σ a_k = 1; the rules use the update
form on the (m, d) matrix of updates.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._checks import (
    as_float_array,
    as_weights,
    check_count,
    check_device_array,
    check_finite,
    is_device_array,
    to_host,
)
from ..kernels import check_backend, weighted_update
from ..types import Aggregate, EmptyState, LocalSpec, RoundReports, Rule, check_reports

__all__ = [
    "apply_weighted_update",
    "fairavg",
    "fairavg_weights",
    "fedavg",
    "fedavg_weights",
]


def fedavg_weights(num_samples: Any) -> np.ndarray:
    """FedAvg's aggregation weights a_k = n_k / Σ_{j∈S} n_j (FairAvg, eq. 4).

    Parameters
    ----------
    num_samples : array_like of int or float, shape (m,)
        Positive training-set sizes of the selected clients, or any positive weights (a Flower
        weighting metric may be a fraction): only their ratios enter.

    Returns
    -------
    ndarray of float64, shape (m,)
        Non-negative weights summing to 1.
    """
    n = as_weights(num_samples, "num_samples")
    if n.size == 0:
        raise ValueError("num_samples must hold at least one client")
    if n.dtype.kind == "f":  # real weights: scale the largest into [0.5, 1) first (exact), so
        n = np.ldexp(n, -math.frexp(float(n.max()))[1])  # the sum neither overflows nor underflows
    return n / n.sum(dtype=np.float64)


def fairavg_weights(num_clients: int) -> np.ndarray:
    """FairAvg's uniform aggregation weights a_k = 1/|S| (FairAvg, eq. 5), shape (m,)."""
    m = check_count(num_clients, "num_clients", low=1)
    return np.full(m, 1.0 / m)


def apply_weighted_update(
    params: Any, deltas: Any, weights: Any, *, backend: str = "numpy"
) -> np.ndarray:
    """θ^t − Σ_k weights_k δ_k, the update form of FairAvg eq. 3.

    Parameters
    ----------
    params : ndarray, shape (d,)
        θ^t.
    deltas : ndarray, shape (m, d)
        δ_k = θ^t − θ_k, one row per client.
    weights : ndarray, shape (m,)
        Finite weights (not required to sum to 1: callers such as q-FedAvg pass their own).
    backend : {"numpy", "numba", "cuda"}
        ``"numpy"`` is the reference; ``"numba"`` makes one parallel pass over ``deltas``;
        ``"cuda"`` also takes ``params`` and ``deltas`` as CUDA device arrays, and returns a
        device array when ``params`` is one (nothing of size d or m·d leaves the device).

    Returns
    -------
    ndarray, shape (d,)
        A new array in the promoted dtype of ``params`` and ``deltas``.
    """
    theta = as_params(params, backend)
    if is_device_array(deltas):
        _device_backend(backend)
        D = check_device_array(deltas, "deltas", ndim=2, min_size=1)
        if D.shape[1] != theta.shape[0]:
            raise ValueError(f"deltas must have shape (m, {theta.shape[0]}); got {D.shape}")
    else:
        D = as_float_array(deltas, "deltas", shape=(None, theta.shape[0]), min_size=1, finite=False)
    w = as_float_array(weights, "weights", shape=(D.shape[0],), dtype=np.float64, allow_int=True)
    with np.errstate(over="ignore", invalid="ignore"):  # diagnosed below, with the argument's name
        out, maybe_finite = weighted_update(theta, D, w, backend)
    if not maybe_finite and not np.all(np.isfinite(to_host(out))):
        # Locate the culprit only on failure: checking (m, d) up front would double the cost.
        check_finite(to_host(theta), "params")
        check_finite(to_host(D), "deltas")
        raise ValueError("the weighted update overflowed: weights or deltas are too large")
    return out


def _device_backend(backend: str) -> None:
    if backend != "cuda":
        raise TypeError(
            f"CUDA device arrays need backend='cuda'; got backend={backend!r} (copy them to the "
            "host with .copy_to_host() for the CPU backends)"
        )


def as_params(params: Any, backend: str) -> Any:
    """θ^t as a rule's step takes it: a float NumPy vector (not checked for finiteness: the
    update's witness catches a NaN), or on ``backend="cuda"`` a 1-D float CUDA device array,
    kept there."""
    if is_device_array(params):
        _device_backend(backend)
        return check_device_array(params, "params", ndim=1)
    return as_float_array(params, "params", ndim=1, finite=False)


def stateless_rule(
    name: str,
    weights_of: Any,
    backend: str,
    *,
    needs: tuple[str, ...] = (),
    hyperparams: dict[str, Any] | None = None,
    local: LocalSpec | None = None,
) -> Rule:
    """A stateless rule θ^{t+1} = θ^t − Σ_k a_k δ_k with a_k = ``weights_of(reports)``.

    Shared by every rule whose step is a weighted average of the round's updates (FedAvg, FairAvg,
    the EG views of [`fairagg.rules.oco`][fairagg.rules.oco], PropFair, FedMGDA+). On
    ``backend="cuda"``, ``params`` and ``reports.deltas`` may be CUDA device arrays: the new θ is
    then one, and the round never moves the updates off the device. ``needs`` names the report
    fields it reads and ``info["weights"]`` holds a_k. ``weights_of`` may also return
    ``(a, extra)`` with a dict of further diagnostics for ``info``; ``local`` is what the clients
    compute ([`LocalSpec`][fairagg.types.LocalSpec]; local training when None).
    """
    check_backend(backend)

    def init(params: np.ndarray, num_clients: int) -> EmptyState:
        del params, num_clients
        return EmptyState()

    def step(params: np.ndarray, reports: RoundReports, state: EmptyState) -> Aggregate:
        theta = as_params(params, backend)
        check_reports(reports, theta, needs=needs, device=backend == "cuda")
        out = weights_of(reports)
        a, extra = out if isinstance(out, tuple) else (out, {})
        new = apply_weighted_update(theta, reports.deltas, a, backend=backend)
        return Aggregate(new, state, {"weights": a, **extra})

    return Rule(name, init, step, {**(hyperparams or {}), "backend": backend}, local or LocalSpec())


def fedavg(*, backend: str = "numpy") -> Rule:
    """FedAvg (McMahan et al. 2017) as a rule: weights ∝ n_k over the selected clients.

    See [`fedavg_weights`][fairagg.rules.fedavg.fedavg_weights] (FairAvg, eq. 4) and
    [`apply_weighted_update`][fairagg.rules.fedavg.apply_weighted_update] (eq. 3).
    ``info["weights"]`` holds a_k.

    Parameters
    ----------
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted update.

    References
    ----------
    .. [1] H. B. McMahan, E. Moore, D. Ramage, S. Hampson, B. Agüera y Arcas,
       "Communication-Efficient Learning of Deep Networks from Decentralized Data", AISTATS 2017.
    .. [2] U. Michieli, M. Ozay, "Are All Users Treated Fairly in Federated Learning Systems?", CVPR
       Workshops 2021.
    .. [3] The fairagg Specification: [SPEC §1 FedAvg and FairAvg][spec-1],
       [SPEC §0 What a selected client reports][spec-0].
    """
    return stateless_rule("fedavg", lambda r: fedavg_weights(r.num_samples), backend)


def fairavg(*, backend: str = "numpy") -> Rule:
    """FairAvg (Michieli & Ozay 2021) as a rule: uniform weights 1/m over the selected clients.

    See [`fairavg_weights`][fairagg.rules.fedavg.fairavg_weights] (FairAvg, eq. 5) and
    [`apply_weighted_update`][fairagg.rules.fedavg.apply_weighted_update] (eq. 3).
    ``info["weights"]`` holds a_k.

    Parameters
    ----------
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted update.

    References
    ----------
    .. [1] U. Michieli, M. Ozay, "Are All Users Treated Fairly in Federated Learning Systems?", CVPR
       Workshops 2021.
    .. [2] The fairagg Specification: [SPEC §1 FedAvg and FairAvg][spec-1],
       [SPEC §0 What a selected client reports][spec-0].
    """
    return stateless_rule("fairavg", lambda r: fairavg_weights(r.deltas.shape[0]), backend)
