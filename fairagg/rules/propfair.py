"""PropFair (Zhang, Malekmohammadi, Chen & Yu, TMLR 2023) as the full algorithm (SPEC §6).

PropFair maximises Σ_k log(M − F_k(θ)), the proportional-fairness objective. The official
algorithm moves it to the clients: each selected client trains on the surrogate −log(1 − f/M) of
each minibatch loss f (continued by f/M, or by the Huber continuation f/ε with ``huber=True``,
where M − f < ε; [`fairagg.local`][fairagg.local]), and the server averages the updates with
FedAvg's weights n_k/Σ_S n. M must exceed every client's loss: the rule checks the reported losses
F_k(θ^t).

As M → ∞ with the learning rate scaled by M the surrogate's gradient M∇f/(M − f) tends to ∇f, so
PropFair tends to FedAvg. The aggregation-weight view (weights ∝ n_k/(M − F_k), one EG step) is
the separate rule ``propfair-eg`` ([`fairagg.rules.oco`][fairagg.rules.oco]).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import as_float_array, check_real
from ..local import check_propfair
from ..types import LocalSpec, RoundReports, Rule
from .fedavg import fedavg_weights, stateless_rule

__all__ = ["check_losses_below", "propfair"]


def check_losses_below(losses: Any, m: float) -> None:
    """Raise ``ValueError`` unless every loss is below PropFair's M.

    ``losses`` is a 1-D array of finite, non-negative losses (at least one), ``m`` a positive
    real; anything else is a ``TypeError``/``ValueError`` naming the argument.
    """
    M = check_real(m, "m", low=0.0, low_open=True)
    F = as_float_array(losses, "losses", ndim=1, dtype=np.float64, allow_int=True, min_size=1)
    if F.min() < 0:
        raise ValueError(f"losses must be non-negative; minimum is {F.min()}")
    worst = float(np.max(F))
    m = M
    if not worst < m:
        raise ValueError(
            f"losses must all be below PropFair's M = {m}; got a loss of {worst} (build the "
            "rule with a larger M)"
        )


def propfair(
    *, M: float = 10.0, epsilon: float = 0.2, huber: bool = False, backend: str = "numpy"
) -> Rule:
    """PropFair as a rule: clients train on the surrogate, the server aggregates with FedAvg.

    Parameters
    ----------
    M : float
        The constant M > ε, above every client's loss (the paper's default for its image tasks is
        5; 10 here leaves room for the losses of a fresh model on 10 classes: on the default
        experiment some clients start above 4, and M = 5 stops on one seed in five).
    epsilon : float
        ε > 0, where the surrogate switches to its continuation.
    huber : bool
        Continue by f/ε (Huber) instead of f/M.
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted update.

    Notes
    -----
    ``info["weights"]``: FedAvg's n_k/Σ_S n.

    References
    ----------
    .. [1] G. Zhang, S. Malekmohammadi, X. Chen, Y. Yu, "Proportional Fairness in Federated
       Learning", TMLR 2023.
    .. [2] The fairagg Specification: [SPEC §6 TERM and PropFair][spec-6],
       [SPEC §4 Fair FL as online learning][spec-4].
    """
    if M is None:  # check_propfair reads None as "no surrogate", which PropFair always has
        raise TypeError("M must be a real number; got NoneType")
    Mv, eps, hub = check_propfair(M, epsilon, huber, ("M", "epsilon", "huber"))

    def weights_of(reports: RoundReports) -> np.ndarray:
        check_losses_below(reports.losses, Mv)
        return fedavg_weights(reports.num_samples)

    return stateless_rule(
        "propfair",
        weights_of,
        backend,
        needs=("losses",),
        hyperparams={"M": Mv, "epsilon": eps, "huber": hub},
        local=LocalSpec(propfair_m=Mv, propfair_epsilon=eps, propfair_huber=hub),
    )
