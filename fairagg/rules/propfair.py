"""PropFair (Zhang, Kang, Zhang & Yu, TMLR 2023) as the full algorithm (SPEC §6).

PropFair maximises Σ_k log(M − F_k(θ)), the proportional-fairness objective. The official
algorithm moves it to the clients: each selected client trains on the surrogate −log(1 − f/M) of
each minibatch loss f (continued by f/M, or by the Huber continuation f/ε with ``huber=True``,
where M − f < ε; :mod:`fairagg.local`), and the server averages the updates with FedAvg's weights
n_k/Σ_S n. M must exceed every client's loss: the rule checks the reported losses F_k(θ^t).

As M → ∞ with the learning rate scaled by M the surrogate's gradient M∇f/(M − f) tends to ∇f, so
PropFair tends to FedAvg. The aggregation-weight view (weights ∝ n_k/(M − F_k), one EG step) is
the separate rule ``propfair-eg`` (:mod:`fairagg.rules.oco`).
"""

from __future__ import annotations

import numpy as np

from .._checks import as_float_array
from ..kernels import check_backend
from ..local import check_propfair
from ..types import Aggregate, EmptyState, LocalSpec, RoundReports, Rule, check_reports
from .fedavg import apply_weighted_update, fedavg_weights

__all__ = ["check_losses_below", "propfair"]


def check_losses_below(losses: np.ndarray, m: float) -> None:
    """Raise ``ValueError`` unless every loss is below PropFair's M."""
    worst = float(np.max(losses))
    if not worst < m:
        raise ValueError(
            f"PropFair needs M > every client's loss; got M = {m} and a loss of {worst}. "
            "Build the rule with a larger M"
        )


def propfair(
    *, M: float = 10.0, epsilon: float = 0.2, huber: bool = False, backend: str = "numpy"
) -> Rule:
    """PropFair as a rule: clients train on the surrogate, the server aggregates with FedAvg.

    Parameters
    ----------
    M : float
        The constant M > ε, above every client's loss (the paper's default for its image tasks is
        5; 10 here leaves room for the losses of a fresh model on 10 classes, log 10 ≈ 2.3).
    epsilon : float
        ε > 0, where the surrogate switches to its continuation.
    huber : bool
        Continue by f/ε (Huber) instead of f/M.
    backend : {"numpy", "numba"}
        Backend of the weighted update.

    ``info["weights"]``: FedAvg's n_k/Σ_S n.
    """
    Mv, eps, hub = check_propfair(M, epsilon, huber, ("M", "epsilon", "huber"))
    check_backend(backend)

    def init(params: np.ndarray, num_clients: int) -> EmptyState:
        del params, num_clients
        return EmptyState()

    def step(params: np.ndarray, reports: RoundReports, state: EmptyState) -> Aggregate:
        theta = as_float_array(params, "params", ndim=1, finite=False)
        check_reports(reports, theta, needs=("losses",))
        check_losses_below(reports.losses, Mv)
        a = fedavg_weights(reports.num_samples)
        out = apply_weighted_update(theta, reports.deltas, a, backend=backend)
        return Aggregate(out, state, {"weights": a})

    hyper = {"M": Mv, "epsilon": eps, "huber": hub, "backend": backend}
    local = LocalSpec(propfair_m=Mv, propfair_epsilon=eps, propfair_huber=hub)
    return Rule("propfair", init, step, hyper, local)
