"""Flower's ``QFedAvg`` with fairagg's exact q-FedAvg step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._checks import check_real
from ..kernels import resolve_backend
from ..rules import make_rule
from ._protocol import NUM_EXAMPLES, TRAIN_LOSS
from ._strategy import FairaggStrategy


class QFedAvg(FairaggStrategy):
    """Flower's ``QFedAvg``, same arguments, fairagg's exact q-FedAvg (q-FFL, Alg. 1).

    ``QFedAvg(client_learning_rate, q=0.1, train_loss_key="train_loss", **fedavg_kwargs)`` is
    ``FairaggStrategy(make_rule("qfedavg", q=q, backend=...), lr=client_learning_rate,
    train_loss_key=train_loss_key, **fedavg_kwargs)`` (``backend="auto"`` unless a keyword says
    otherwise): L = 1/``client_learning_rate`` as in
    Flower, the loss read from ``train_loss_key``, replies with the clients' models under any
    record name. The defaults are Flower's (q = 0.1; fairagg's ``qfedavg`` rule defaults to
    q = 1). What differs from Flower's class: the step is computed with every F̃_k^q divided by
    the largest first, so large q or losses stay finite where Flower's overflows to NaN, and the
    summation order is fairagg's (the two agree to round-off elsewhere; tested); a reply that
    cannot be aggregated is left out (``on_failure``) instead of ending the run. The loss the
    paper means is F_k(θ^t), the received model's loss before local training.
    """

    def __init__(  # Flower's QFedAvg's parameters, in its order
        self,
        client_learning_rate: float,
        q: float = 0.1,
        train_loss_key: str = TRAIN_LOSS,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        weighted_by_key: str = NUM_EXAMPLES,
        arrayrecord_key: str = "arrays",
        configrecord_key: str = "config",
        train_metrics_aggr_fn: Callable | None = None,
        evaluate_metrics_aggr_fn: Callable | None = None,
        **fairagg_kwargs: Any,
    ) -> None:
        lr = check_real(client_learning_rate, "client_learning_rate", low=0.0, low_open=True)
        q = check_real(q, "q", low=0.0)
        backend = resolve_backend(fairagg_kwargs.pop("backend", "auto"))
        super().__init__(
            make_rule("qfedavg", q=q, backend=backend),
            lr=lr,
            train_loss_key=train_loss_key,
            fraction_train=fraction_train,
            fraction_evaluate=fraction_evaluate,
            min_train_nodes=min_train_nodes,
            min_evaluate_nodes=min_evaluate_nodes,
            min_available_nodes=min_available_nodes,
            weighted_by_key=weighted_by_key,
            arrayrecord_key=arrayrecord_key,
            configrecord_key=configrecord_key,
            train_metrics_aggr_fn=train_metrics_aggr_fn,
            evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn,
            **fairagg_kwargs,
        )
        self.client_learning_rate, self.q = lr, q
