"""The server side: [`FairaggStrategy`][fairagg.flower.FairaggStrategy], a Flower strategy that
aggregates with a fairagg rule, and the [`RoundLog`][fairagg.flower.RoundLog] it keeps per round.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterable, Sequence
from logging import INFO, WARNING
from typing import Any, NamedTuple

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError, InconsistentMessageReplies
from flwr.serverapp.strategy import FedAvg

from .._checks import check_choice, check_count, check_int, check_real
from .._round import ServerRound
from .._settings import TrainingSettings
from ..metrics import fairness_summary
from ..rules import RULES
from ..sampling import SAMPLING_SCHEMES, sample_clients
from ..simulation import SAMPLING_STREAM, _rule_on_backend
from ..types import RoundReports, Rule
from ._protocol import (
    _ON_FAILURE,
    ACCURACY,
    CLIENT_ID,
    DELTA_KEY,
    GRADIENT_KEY,
    NUM_EXAMPLES,
    QUERY_ACTION,
    QUERY_MESSAGE_TYPE,
    TRAIN_CONFIG_KEYS,
    TRAIN_LOSS,
)
from ._records import Layout, _flatten, _others, _single_record, _unflatten
from ._replies import (
    _counts,
    _flower_average,
    _int_metric,
    _real_metric,
    _Reply,
    _scalar,
    _Unusable,
)


class RoundLog(NamedTuple):
    """What [`FairaggStrategy`][fairagg.flower.FairaggStrategy] records per aggregated round
    (``strategy.rounds``).

    Attributes
    ----------
    server_round : int
        Flower's round number, t + 1.
    client_ids : ndarray of int64, shape (m,)
        The aggregated clients (dense indices in [0, K)) in the order given to the rule.
    weights : ndarray, shape (m,)
        The rule's ``info["weights"]``.
    losses : ndarray of float64, shape (m,), or None
        The reported losses.
    failed_nodes : tuple of int
        Nodes whose reply carried an error.
    info : dict
        The rule's whole ``info``.
    seconds : float
        Wall time from ``configure_train`` to the end of ``aggregate_train``: sending, the
        clients' work, receiving and the rule's step.
    dropped : tuple of (int, str)
        Nodes whose reply could not be aggregated (non-finite arrays, another layout, an invalid
        loss or weight, ...), with the reason; left out of the round.
    nodes : tuple of int
        The node of each aggregated client, in the order of ``client_ids``.
    """

    server_round: int
    client_ids: np.ndarray
    weights: np.ndarray
    losses: np.ndarray | None
    failed_nodes: tuple[int, ...]
    info: dict[str, Any]
    seconds: float
    dropped: tuple[tuple[int, str], ...] = ()
    nodes: tuple[int, ...] = ()


class FairaggStrategy(FedAvg):
    """A Flower strategy (Message API, a ``FedAvg`` subclass) that aggregates with a fairagg
    rule: θ^{t+1} = ``rule.step(θ^t, reports, state).params`` on the clients' replies.

    A drop-in for Flower's ``FedAvg``: ``FairaggStrategy("term")`` takes the replies of any
    Flower ClientApp that works with ``FedAvg`` (its model's arrays under any record name, a
    MetricRecord with the weighting metric and, for loss-driven rules, the training loss), and
    ``FedAvg``'s arguments. What it adds, and what differs:

    - Clients are the replying *nodes*, each given a dense index in [0, K) the first time it
      replies (new nodes of a round in increasing node id), kept for the whole run, so that
      stateful rules (AFL's λ, AAgFF, FedFa, FedFV's history) follow the same node. A reply
      carrying [`CLIENT_ID`][fairagg.flower.CLIENT_ID] (as
      [`fairagg_client_app`][fairagg.flower.fairagg_client_app]'s do) is that client instead, which
      reproduces ``fairagg.simulate`` exactly. K is ``num_clients``, or the number of connected
      nodes at the first round; it is fixed, since rules keep per-client state: a node that leaves
      keeps its index (and state, should it come back), and a node that joins once all K indices are
      taken has its replies left out, with that reason.
    - The floating-point arrays are the parameters the rule aggregates (float16 computed in
      float32 and returned in float16; float32 stays float32 as in ``fairagg.simulate``); other
      arrays (integer counters such as BatchNorm's ``num_batches_tracked``) are combined as
      ``FedAvg`` combines them (a weighted average, float64). 0-d arrays stay 0-d.
    - The loss a rule reads is the metric ``train_loss_key`` (Flower's ``"train_loss"``); the
      papers define it as F_k(θ^t), the loss of the received model *before* local training,
      which [`fairagg_client_app`][fairagg.flower.fairagg_client_app] sends; a template ClientApp's
      training loss is an average during training: a rule then aggregates with that instead.
    - The weighting metric (``weighted_by_key``) may be any positive number, as in ``FedAvg``.
    - The SGD-type rules (AFL, q-FedSGD: ``LocalSpec.report == "gradients"``) read g_k from a
      ``"gradient"`` ArrayRecord ([`fairagg_client_app`][fairagg.flower.fairagg_client_app] sends
      it); from a model or update reply they take the pseudo-gradient (θ^t − θ_k) / ``lr``, which is
      g_k when the client took one full-batch gradient step of size ``lr``, and an average of its
      steps' gradients otherwise.
    - Replies are validated with Flower's rules first (``InconsistentMessageReplies``), then
      fairagg's: a reply that cannot be aggregated (non-finite arrays, another layout, an
      invalid weight, or an invalid loss or accuracy where the rule reads it, a client index out
      of range) is treated as a failed reply: logged and left out with ``on_failure="drop"``
      (the round's metrics count it, the round log names it), an ``AggregationError`` naming
      the node with ``"raise"``. A metric the rule needs that no reply has (Flower's rules let
      a reply lack it only if every reply does) is an ``AggregationError`` naming the metric.
    - The strategy's own train-config keys start with ``"fairagg-"``; the ``train_config`` an
      app passes to ``start`` (a template's ``"lr"``) goes to the clients unchanged beside them.
    - Give ``num_clients`` and ``clients_per_round`` (or ``num_clients`` with a rule that needs
      every client, which then samples all K) only with
      [`fairagg_client_app`][fairagg.flower.fairagg_client_app] (or a ClientApp answering its
      client-id query): that is fairagg's sampling by client id. Without them, Flower samples the
      nodes (every node for a rule that needs all of them).
    - Metrics: every client metric is aggregated as ``FedAvg`` does (``train_metrics_aggr_fn`` /
      ``evaluate_metrics_aggr_fn``, weighted by ``weighted_by_key`` by default), and fairagg's
      summary is added under ``fairagg-*`` keys.

    The run reproduces ``fairagg.simulate(rule, model, data, rounds=T, clients_per_round=m,
    epochs=..., batch_size=..., lr=..., momentum=..., prox_mu=..., sampling=..., seed=...)``
    when every client runs [`fairagg_client_app`][fairagg.flower.fairagg_client_app] and
    ``clients_per_round`` is given (see the module docstring for that protocol).

    Parameters
    ----------
    rule : Rule or str
        A fairagg rule, or a registry name (default hyper-parameters, on ``backend``).
    num_clients : int, optional
        K. None: the number of connected nodes when the first round is configured (fairagg's own
        sampling, ``clients_per_round``, needs it given).
    clients_per_round : int, optional
        m in [1, K]: sample m client ids per round as ``fairagg.simulate`` does (this needs every
        one of the K clients connected, and learns their nodes with a ``query.fairagg`` message).
        None: Flower's node sampling (``fraction_train``, ``min_train_nodes``). A rule that needs
        full participation samples all K whatever is given (m must be K if given).
    sampling : {"uniform", "proportional"}
        fairagg's sampling scheme (proportional to n_k uses the n_k the clients reported).
    seed : int
        Seeds the sampling and the clients' shuffles.
    epochs, batch_size, lr, momentum, prox_mu
        The clients' local training ([`fairagg.local.train_clients`][fairagg.local.train_clients])
        when they run [`fairagg_client_app`][fairagg.flower.fairagg_client_app]; ``lr`` is also the
        ``RoundReports.lr`` the rules read (q-FFL's L = 1/lr, AFL's step). ``momentum=None`` takes
        the rule's (FedFa's) or 0, as ``fairagg.simulate`` does.
    on_failure : {"drop", "raise"}
        What a reply that carries an error, or cannot be aggregated, does: left out of the round
        (Flower's way), or ``AggregationError``.
    discovery_timeout : float
        Seconds to wait for all K clients to connect and answer the id query.
    train_loss_key : str
        The metric holding a client's loss in a train reply (Flower's QFedAvg's argument and
        default).
    evaluate_accuracy_key : str, optional
        The metric of an evaluate reply whose spread fairagg summarises (``fairagg-worst_10``,
        ...); None: ``"accuracy"``, else ``"eval_acc"`` (Flower's templates), else none.
    backend : {"auto", "numpy", "numba", "cuda"}
        The backend of a rule given by name, as in
        [`fairagg.simulate`][fairagg.simulation.simulate]: ``"auto"`` (the default) is numba on a
        CPU, cuda with a GPU ([`resolve_backend`][fairagg.kernels.resolve_backend]). A built
        ``Rule`` keeps its own.
    **fedavg_kwargs
        Passed to ``FedAvg`` (``fraction_evaluate``, ``min_evaluate_nodes``,
        ``weighted_by_key``, ``arrayrecord_key``, ``train_metrics_aggr_fn``,
        ``evaluate_metrics_aggr_fn``, ...). ``fraction_train`` and ``min_train_nodes`` only with
        ``clients_per_round=None``.

    Attributes
    ----------
    state : NamedTuple
        The rule's state after the last aggregated round.
    params : ndarray or None
        θ^t of the round being run, kept from ``configure_train`` (in the arrays' dtype).
    reported_params : ndarray or None
        The model the rule reports after the last round (``info["model"]`` for AFL, its average
        of iterates; θ^{t+1} otherwise); ``configure_evaluate`` sends it.
    participations : ndarray of int64, shape (K,)
        f_k: the number of rounds in which client k's reply was aggregated (the simulator's count
        of selections, when no reply fails).
    node_clients : dict of int to int
        Node id → client index.
    client_sizes : ndarray of int64, shape (K,)
        n_k as the clients answered the id query (0 until they have).
    rounds : list of RoundLog
    """

    def __init__(
        self,
        rule: Rule | str,
        num_clients: int | None = None,
        *,
        clients_per_round: int | None = None,
        sampling: str = "uniform",
        seed: int = 0,
        epochs: int = 1,
        batch_size: int = 10,
        lr: float = 0.01,
        momentum: float | None = None,
        prox_mu: float = 0.0,
        on_failure: str = "drop",
        discovery_timeout: float = 600.0,
        train_loss_key: str = TRAIN_LOSS,
        evaluate_accuracy_key: str | None = None,
        backend: str = "auto",
        **fedavg_kwargs: Any,
    ) -> None:
        rule = _rule_on_backend(rule, backend)
        self.rule = rule
        spec = RULES.get(rule.name)
        self.needs: tuple[str, ...] = spec.needs if spec is not None else ()
        self.full_participation = bool(spec is not None and spec.full_participation)
        K = None if num_clients is None else check_count(num_clients, "num_clients", low=1)
        if clients_per_round is not None:
            if K is None:
                raise ValueError(
                    "clients_per_round samples client ids in [0, K): give num_clients too (or "
                    "leave clients_per_round None for Flower's node sampling)"
                )
            clients_per_round = check_int(clients_per_round, "clients_per_round", low=1, high=K)
            if self.full_participation and clients_per_round != K:
                raise ValueError(
                    f"rule {rule.name!r} needs all K = {K} clients every round; got "
                    f"clients_per_round = {clients_per_round}"
                )
        elif self.full_participation and K is not None:
            clients_per_round = K
        self.clients_per_round = clients_per_round
        if clients_per_round is not None or self.full_participation:
            both = sorted({"fraction_train", "min_train_nodes"} & set(fedavg_kwargs))
            if both:
                raise ValueError(
                    f"{', '.join(both)} select Flower's node sampling; they cannot be combined "
                    "with fairagg's sampling (clients_per_round, or a rule that needs all K "
                    "clients)"
                )
        self.sampling = check_choice(sampling, "sampling", SAMPLING_SCHEMES)
        self.seed = check_int(seed, "seed", low=0)
        self._training = TrainingSettings(
            rule.local, rule.name, epochs=epochs, batch_size=batch_size, lr=lr,
            momentum=momentum, prox_mu=prox_mu,
        )  # fmt: skip
        self.local = self._training.local
        self.on_failure = check_choice(on_failure, "on_failure", _ON_FAILURE)
        self.discovery_timeout = check_real(discovery_timeout, "discovery_timeout", low=0.0)
        for name, key in (("train_loss_key", train_loss_key),) + (
            (("evaluate_accuracy_key", evaluate_accuracy_key),)
            if evaluate_accuracy_key is not None
            else ()
        ):
            if not isinstance(key, str) or not key:
                raise TypeError(f"{name} must be a non-empty str; got {key!r}")
        self.train_loss_key = train_loss_key
        self.evaluate_accuracy_key = evaluate_accuracy_key
        super().__init__(**fedavg_kwargs)

        self.num_clients: int | None = None
        self._server: ServerRound | None = None  # made once K is known
        self.params: np.ndarray | None = None
        self.reported_params: np.ndarray | None = None
        self._reported_is_model = False
        self._layout: Layout | None = None
        self._others: dict[str, np.ndarray] = {}
        self._round: int | None = None
        self._started = 0.0
        self._selected: np.ndarray | None = None
        self.node_clients: dict[int, int] = {}
        self._client_node: dict[int, int] = {}
        self.client_sizes = np.zeros(0, dtype=np.int64)
        self.rounds: list[RoundLog] = []
        if K is not None:
            self._set_num_clients(K)

    def _set_num_clients(self, K: int) -> None:
        self.num_clients = K
        self.client_sizes = np.zeros(K, dtype=np.int64)
        self._server = ServerRound(self.rule, K, self._training, AggregationError)

    @property
    def state(self) -> Any:
        """The rule's state after the last aggregated round (None before the first)."""
        return None if self._server is None else self._server.state

    @property
    def participations(self) -> np.ndarray:
        """f_k, shape (K,): the rounds in which client k's reply was aggregated."""
        return np.zeros(0, np.int64) if self._server is None else self._server.participations

    # the local-training settings as the arguments gave them, checked once where they entered
    # (a TrainingSettings, which the round and train_config read)
    @property
    def epochs(self) -> int:
        """Local epochs."""
        return self._training.epochs

    @property
    def batch_size(self) -> int:
        """Local batch size."""
        return self._training.batch_size

    @property
    def lr(self) -> float:
        """The clients' step, also every round's ``RoundReports.lr``."""
        return self._training.lr

    @property
    def momentum(self) -> float | None:
        """The client momentum: the one given, else the rule's, else 0."""
        return self._training.momentum

    @property
    def prox_mu(self) -> float:
        """FedProx μ."""
        return self._training.prox_mu

    @property
    def propfair(self) -> tuple[float, float, bool]:
        """PropFair's surrogate (M, ε, huber) of the rule, M = 0.0 for none."""
        return self._training.propfair

    # --- configuration --------------------------------------------------------------------------
    def summary(self) -> None:
        """Log the rule and the local-training settings, then FedAvg's summary."""
        log(INFO, "\t├──> fairagg rule: %s %s", self.rule.name, dict(self.rule.hyperparams))
        log(
            INFO,
            "\t│\t├── K = %s, clients per round: %s (%s sampling), seed %d",
            self.num_clients if self.num_clients is not None else "the nodes of round 1",
            self.clients_per_round or "Flower's node sampling",
            self.sampling,
            self.seed,
        )
        log(
            INFO,
            "\t│\t└── local: %s, epochs %d, batch %d, lr %g, momentum %g, prox_mu %g; loss "
            "metric %r",
            self.local.report,
            self.epochs,
            self.batch_size,
            self.lr,
            self.momentum,
            self.prox_mu,
            self.train_loss_key,
        )
        super().summary()

    def train_config(self, server_round: int) -> dict[str, Any]:
        """The values of [`TRAIN_CONFIG_KEYS`][fairagg.flower.TRAIN_CONFIG_KEYS] for round
        ``server_round`` (t + 1)."""
        spec = self.local
        values = (
            self.rule.name,
            server_round - 1,
            self.seed,
            self.epochs,
            self.batch_size,
            self.lr,
            self.momentum,
            self.prox_mu,
            spec.report,
            spec.gradient_batch_size or 0,  # 0: full batch
            self.propfair[0],  # 0.0: train on the loss
            self.propfair[1],
            self.propfair[2],
            spec.accuracy_source,
        )
        return dict(zip(TRAIN_CONFIG_KEYS, values, strict=True))

    def _config(self, config: ConfigRecord, server_round: int) -> ConfigRecord:
        if not isinstance(config, ConfigRecord):
            raise TypeError(f"config must be a flwr.app.ConfigRecord; got {type(config).__name__}")
        ours = self.train_config(server_round)
        for key, value in ours.items():
            if key in config and config[key] != value:
                raise ValueError(
                    f"train_config[{key!r}] = {config[key]!r} contradicts the strategy's "
                    f"{value!r}; set it through FairaggStrategy"
                )
        merged = ConfigRecord(dict(config))
        for key, value in ours.items():
            merged[key] = value
        merged["server-round"] = server_round
        return merged

    def _discover(self, grid: Grid) -> None:
        """Learn which node holds which client id (and its n_k), until all K are known."""
        K = self.num_clients
        assert K is not None  # configure_train sets K (the connected nodes) before discovery
        deadline = time.monotonic() + self.discovery_timeout
        while True:
            nodes = list(grid.get_node_ids())
            live = set(nodes)
            for node in [n for n in self.node_clients if n not in live]:
                del self.node_clients[node]  # a node that left; its client may come back
            unknown = [n for n in nodes if n not in self.node_clients]
            if unknown:
                query = RecordDict({"config": ConfigRecord({"fairagg": "client-id"})})
                messages = [
                    Message(query, dst_node_id=n, message_type=QUERY_MESSAGE_TYPE) for n in unknown
                ]
                timeout = max(deadline - time.monotonic(), 1.0)
                for msg in grid.send_and_receive(messages, timeout=timeout):
                    self._learn_node(msg)
            if len(set(self.node_clients.values())) == K:
                break
            if time.monotonic() > deadline:
                have = sorted(set(self.node_clients.values()))
                raise AggregationError(
                    f"fairagg's sampling needs all K = {K} clients connected; after "
                    f"{self.discovery_timeout:g} s {len(have)} answered "
                    f"(missing: {sorted(set(range(K)) - set(have))[:20]})"
                )
            time.sleep(1.0)
        self._client_node = {c: n for n, c in self.node_clients.items()}

    def _learn_node(self, msg: Message) -> None:
        node = msg.metadata.src_node_id
        if msg.has_error():
            raise InconsistentMessageReplies(
                f"node {node} did not answer fairagg's client-id query ({QUERY_MESSAGE_TYPE!r}); "
                f"its ClientApp must be fairagg_client_app or register "
                f"@app.query({QUERY_ACTION!r}) returning {CLIENT_ID!r} and {NUM_EXAMPLES!r}: "
                f"{msg.error.reason}"
            )
        try:
            _, metrics = _single_record(msg.content, "MetricRecord", f"the query reply of {node}")
        except ValueError as exc:
            raise InconsistentMessageReplies(str(exc)) from exc
        k = _int_metric(metrics, CLIENT_ID, node, None, "the query reply")
        n = _int_metric(metrics, NUM_EXAMPLES, node, k, "the query reply")
        assert self.num_clients is not None  # only _discover asks, once K is known
        if k >= self.num_clients:
            raise InconsistentMessageReplies(
                f"node {node} holds client id {k}, outside [0, {self.num_clients})"
            )
        if n < 1:
            raise InconsistentMessageReplies(f"node {node} (client {k}) reports n_k = {n} < 1")
        for other, c in list(self.node_clients.items()):
            if c == k and other != node:
                raise InconsistentMessageReplies(
                    f"nodes {other} and {node} both hold client id {k}"
                )
        self.node_clients[node] = k
        self.client_sizes[k] = n

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Keep θ^t = ``arrays``, pick the round's clients and send them θ^t and the config."""
        server_round = check_int(server_round, "server_round", low=1)
        started = time.perf_counter()
        try:
            theta, layout = _flatten(arrays, "arrays", self._layout)
        except ValueError as exc:
            if self._layout is None:
                raise
            raise ValueError(f"arrays must keep the layout of the first round: {exc}") from None
        if not np.all(np.isfinite(theta)):
            raise ValueError("arrays must be finite (θ^t holds NaN or infinity)")
        cfg = self._config(config, server_round)
        if self.clients_per_round is None:
            # Flower's node sampling, which first waits for min_available_nodes
            messages = list(super().configure_train(server_round, arrays, cfg, grid))
            self._selected = None
            if self.num_clients is None:  # K: the nodes connected once Flower has waited
                K = len(list(grid.get_node_ids()))
                self._set_num_clients(K)
                log(INFO, "configure_train: K = %d clients (the connected nodes)", K)
        assert self.num_clients is not None  # given, or the connected nodes just above
        if self._layout is None:
            assert self._server is not None  # made with K, just above or at construction
            self._server.begin(theta)
            self._layout = layout
        self._others = _others(arrays, self._layout)
        self.params, self._round, self._started = theta, server_round, started
        if self.clients_per_round is not None:
            self._discover(grid)
            rng = np.random.default_rng([self.seed, SAMPLING_STREAM, server_round - 1])
            S = sample_clients(
                self.num_clients,
                self.clients_per_round,
                rng,
                scheme=self.sampling,
                num_samples=self.client_sizes,
            )
            record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: cfg})
            messages = [
                Message(
                    record, dst_node_id=self._client_node[int(k)], message_type=MessageType.TRAIN
                )
                for k in S
            ]
            self._selected = S
            log(INFO, "configure_train: sampled clients %s (fairagg)", S.tolist())
        return messages

    # --- aggregation ----------------------------------------------------------------------------
    def _parse(self, msg: Message) -> _Reply:
        """One train reply, after Flower's consistency checks; ``_Unusable`` when it cannot be
        aggregated."""
        node = msg.metadata.src_node_id
        content = msg.content
        metrics = next(iter(content.metric_records.values()))
        key, arrays = next(iter(content.array_records.items()))
        k = None
        if CLIENT_ID in metrics:
            v = metrics[CLIENT_ID]
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise _Unusable(f"its metric {CLIENT_ID!r} must be an int; got {v!r}")
            assert self.num_clients is not None
            if not 0 <= v < self.num_clients:
                raise _Unusable(
                    f"its client id {v} is outside [0, {self.num_clients}) (num_clients)"
                )
            k = int(v)
            known = self.node_clients.get(node)
            if known is not None and known != k:
                raise InconsistentMessageReplies(
                    f"node {node} holds client {known} but its train reply says client {k}"
                )
        w = metrics[self.weighted_by_key]
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) or w <= 0:
            raise _Unusable(
                f"its weighting metric {self.weighted_by_key!r} must be a positive number; got "
                f"{w!r}"
            )
        gradients = self.local.report == "gradients"
        if not gradients and key == GRADIENT_KEY:
            raise InconsistentMessageReplies(
                f"the train reply of node {node} holds its arrays under {key!r} (a gradient); "
                f"rule {self.rule.name!r} aggregates updates or models"
            )
        assert self._layout is not None and self.params is not None
        try:
            vec, _ = _flatten(arrays, f"its {key!r} arrays", self._layout)
        except (TypeError, ValueError) as exc:
            raise _Unusable(f"another layout: {exc}") from None
        if vec.dtype != self.params.dtype:
            vec = vec.astype(np.result_type(vec, self.params))
        if not np.all(np.isfinite(vec)):
            raise _Unusable(f"its {key!r} arrays hold NaN or infinity")
        if key not in (DELTA_KEY, GRADIENT_KEY):
            vec = self.params - vec  # the client sent θ_k: δ_k = θ^t − θ_k
        if gradients and key != GRADIENT_KEY:
            # an SGD-type rule on updates: the pseudo-gradient δ_k / lr, g_k itself when the
            # client took one full-batch step of size lr (the class docstring says so)
            vec = vec / self.lr
        # only what the rule reads is checked: fedavg does not care for a loss of -1 or an
        # accuracy in percent
        loss = acc = None
        if "losses" in self.needs:
            loss = _real_metric(metrics, self.train_loss_key, "loss")
        if "accuracies" in self.needs:
            acc = _real_metric(metrics, ACCURACY, "accuracy")
            if acc is not None and acc > 1:
                raise _Unusable(f"its accuracy {ACCURACY!r} must lie in [0, 1]; got {acc!r}")
        return _Reply(node, k, vec, float(w), loss, acc, msg)

    def _needed(self, replies: Sequence[_Reply], attr: str, metric: str, need: str) -> Any:
        values = [getattr(r, attr) for r in replies]
        if all(v is not None for v in values):
            return np.array(values, dtype=np.float64)
        if need in self.needs:  # replies are consistent: none of them has it
            have = sorted(next(iter(replies[0].msg.content.metric_records.values())).keys())
            hint = " (set train_loss_key)" if need == "losses" else ""
            raise AggregationError(
                f"rule {self.rule.name!r} needs the {need} of the clients, under the metric "
                f"{metric!r} of each train reply; the replies have {have}{hint}"
            )
        return None

    def _assign(
        self, replies: list[_Reply], drop: list[tuple[int, str]]
    ) -> list[tuple[int, _Reply]]:
        """Client indices of the replies: their client-id metric, else their node's index (new
        nodes take the lowest free index, in increasing node id)."""
        assert self.num_clients is not None
        known = dict(self.node_clients)  # committed by aggregate_train once the rule stepped
        out = []
        for r in replies:
            if r.client is None:
                continue
            known.setdefault(r.node, r.client)
            out.append((r.client, r))
        by_node = sorted((r for r in replies if r.client is None), key=lambda r: r.node)
        taken = set(known.values())
        free = (i for i in range(self.num_clients) if i not in taken)
        for r in by_node:
            if r.node not in known:
                k = next(free, None)
                if k is None:
                    drop.append(
                        (
                            r.node,
                            f"it is a new node and all K = {self.num_clients} client indices "
                            "are taken (K is fixed at the first round: num_clients)",
                        )
                    )
                    continue
                known[r.node] = k
                taken.add(k)
            out.append((known[r.node], r))
        return out

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Build the round's RoundReports from the replies and step the rule.

        Replies are checked with Flower's rules first (``InconsistentMessageReplies``), then
        fairagg's (see the class docstring). Returns θ^{t+1} in θ^t's layout, and the
        MetricRecord of ``train_metrics_aggr_fn`` over the aggregated replies, with fairagg's
        ``fairagg-clients`` (m), ``fairagg-failures`` (error replies), ``fairagg-dropped``
        (replies left out), ``fairagg-loss-max``, ``fairagg-accuracy-min``, the fairness summary
        of the reported accuracies (``fairagg-worst_10``, ...) and every finite scalar of the
        rule's ``info`` as ``fairagg-rule-<name>``.
        """
        replies = list(replies)
        valid, failed = self._check_and_log_replies(replies, is_train=True)
        if self.params is None or self._round != server_round:
            raise AggregationError(
                f"aggregate_train(server_round={server_round}) without a matching "
                f"configure_train (θ^t is kept for round {self._round})"
            )
        assigned, dropped = self._usable(server_round, valid, failed)
        failed_nodes = tuple(m.metadata.src_node_id for m in failed)
        if not assigned:  # nothing to aggregate: the model stays, the round is still logged
            return self._no_round(server_round, failed_nodes, dropped)
        ids = np.array([k for k, _ in assigned], dtype=np.int64)
        usable = [r for _, r in assigned]
        weights = np.array([r.weight for r in usable], dtype=np.float64)
        counts_given = np.all(weights == np.round(weights)) and weights.max() < 2.0**53
        n = weights.astype(np.int64) if counts_given else weights  # counts, or real weights
        losses = self._needed(usable, "loss", self.train_loss_key, "losses")
        accs = self._needed(usable, "accuracy", ACCURACY, "accuracies")
        assert self._server is not None and self.params is not None  # K and θ^t: configured
        matrix = np.stack([r.vector for r in usable])
        reports = self._server.reports(matrix, n, losses, accs, ids, server_round - 1)
        agg, reported = self._server.step(self.params, reports)  # AggregationError: diverged
        self._server.commit(reports, agg)
        for k, r in assigned:  # the nodes' indices hold from now on
            self.node_clients[r.node] = k
        self.reported_params = np.asarray(reported)
        self._reported_is_model = "model" in agg.info
        if self._others:
            self._others = self._average_others(valid, usable)
        metrics = self._train_metrics(valid, usable, (len(failed), len(dropped)), reports, agg.info)
        self.rounds.append(
            RoundLog(
                server_round, ids, np.asarray(agg.info["weights"]), losses, failed_nodes,
                agg.info, time.perf_counter() - self._started, tuple(dropped),
                tuple(r.node for r in usable),
            )
        )  # fmt: skip
        self._round = None
        assert self._layout is not None
        return _unflatten(np.asarray(agg.params), self._layout, self._others), metrics

    def _usable(
        self, server_round: int, valid: list[Message], failed: list[Message]
    ) -> tuple[list[tuple[int, _Reply]], list[tuple[int, str]]]:
        """The replies to aggregate as (client index, reply), in the order the rule receives
        them (the draw order of fairagg's sampling, else by client index), and the nodes left
        out with the reason; raises where ``on_failure="raise"``, a client is claimed twice or
        a rule that needs every client misses one."""
        for msg in failed:
            log(WARNING, "\t> left out: node %d: %s", msg.metadata.src_node_id, msg.error.reason)
        dropped: list[tuple[int, str]] = []
        parsed = []
        for msg in valid:
            try:
                parsed.append(self._parse(msg))
            except _Unusable as exc:
                dropped.append((msg.metadata.src_node_id, str(exc)))
        assigned = self._assign(parsed, dropped)
        for node, why in dropped:
            log(WARNING, "\t> left out: node %d: %s", node, why)
        if self.on_failure == "raise" and (failed or dropped):
            reasons = [f"node {m.metadata.src_node_id}: {m.error.reason}" for m in failed]
            reasons += [f"node {n}: {why}" for n, why in dropped]
            raise AggregationError(
                f"{len(reasons)} train replies failed or cannot be aggregated "
                f"(on_failure='raise'): {'; '.join(reasons[:5])}"
            )
        ids = [k for k, _ in assigned]
        if len(set(ids)) != len(ids):
            dup = sorted({k for k in ids if ids.count(k) > 1})
            raise InconsistentMessageReplies(f"several train replies claim client ids {dup}")
        assert self.num_clients is not None
        if self.full_participation and len(ids) != self.num_clients:
            missing = sorted(set(range(self.num_clients)) - set(ids))
            raise AggregationError(
                f"rule {self.rule.name!r} needs all K = {self.num_clients} clients every round; "
                f"round {server_round} has no usable reply from clients {missing[:20]}"
            )
        if self._selected is not None:
            position = {int(k): i for i, k in enumerate(self._selected)}
            assigned.sort(key=lambda kr: position.get(kr[0], len(position) + kr[0]))
        else:
            assigned.sort(key=lambda kr: kr[0])
        return assigned, dropped

    def _no_round(
        self, server_round: int, failed_nodes: tuple[int, ...], dropped: list[tuple[int, str]]
    ) -> tuple[None, MetricRecord | None]:
        """A round without a reply to aggregate: logged; the model and the rule's state stay."""
        log(WARNING, "aggregate_train: no reply to aggregate in round %d", server_round)
        self.rounds.append(
            RoundLog(
                server_round, np.zeros(0, dtype=np.int64), np.zeros(0), None, failed_nodes, {},
                time.perf_counter() - self._started, tuple(dropped), (),
            )
        )  # fmt: skip
        self._round = None
        if not (failed_nodes or dropped):
            return None, None
        return None, MetricRecord(
            {"fairagg-clients": 0, "fairagg-failures": len(failed_nodes),
             "fairagg-dropped": len(dropped)}
        )  # fmt: skip

    def _average_others(self, valid: list[Message], usable: list[_Reply]) -> dict[str, Any]:
        """The arrays that are not parameters, combined as FedAvg combines them: summed in
        arrival order."""
        arrival = {id(m): i for i, m in enumerate(valid)}
        in_order = sorted(usable, key=lambda r: arrival[id(r.msg)])
        return _flower_average(
            [r.msg.content for r in in_order],
            np.array([r.weight for r in in_order]),
            list(self._others),
        )

    def _train_metrics(
        self,
        valid: list[Message],
        usable: list[_Reply],
        left_out: tuple[int, int],
        reports: RoundReports,
        info: dict[str, Any],
    ) -> MetricRecord:
        """``train_metrics_aggr_fn`` over the aggregated replies (in arrival order, as FedAvg)
        with fairagg's ``fairagg-*`` keys added: ``left_out`` counts the failed and the
        dropped replies; the losses and accuracies are the rule's ``reports``."""
        used = {id(r.msg) for r in usable}
        contents = [m.content for m in valid if id(m) in used]  # arrival order, as FedAvg
        metrics = self.train_metrics_aggr_fn(contents, self.weighted_by_key)
        if metrics is None:
            metrics = MetricRecord()
        if CLIENT_ID in metrics:
            del metrics[CLIENT_ID]  # an average of client ids means nothing
        metrics["fairagg-clients"] = len(usable)
        metrics["fairagg-failures"], metrics["fairagg-dropped"] = left_out
        losses, accs = reports.losses, reports.accuracies
        if losses is not None:
            metrics["fairagg-loss-max"] = float(losses.max())
        if accs is not None:
            metrics["fairagg-accuracy-min"] = float(accs.min())
            weights = np.array([r.weight for r in usable], dtype=np.float64)
            for key, value in fairness_summary(accs, _counts(weights)).items():
                if value is not None:
                    metrics[f"fairagg-{key}"] = float(value)
        for name, value in info.items():
            v = _scalar(value)
            if v is not None:
                metrics[f"fairagg-rule-{name}"] = v
        return metrics

    # --- evaluation -----------------------------------------------------------------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """FedAvg's, sending the model the rule reports (AFL's average of iterates) when it is
        not the iterate ``arrays``."""
        if self._reported_is_model and self.reported_params is not None:
            assert self._layout is not None
            arrays = _unflatten(self.reported_params, self._layout, self._others)
        return super().configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """FedAvg's aggregation of the evaluate replies (``evaluate_metrics_aggr_fn``), with
        [`fairagg.metrics.fairness_summary`][fairagg.metrics.fairness_summary] of their accuracies
        added as ``fairagg-<key>`` (``fairagg-worst_10``, ``fairagg-variance``, ...: percent, as
        that function reports them) when the replies hold an accuracy
        (``evaluate_accuracy_key``)."""
        replies = list(replies)
        valid, _ = self._check_and_log_replies(replies, is_train=False)
        if not valid:
            return None
        contents = [m.content for m in valid]
        metrics = self.evaluate_metrics_aggr_fn(contents, self.weighted_by_key)
        records = [next(iter(c.metric_records.values())) for c in contents]
        keys = (
            (self.evaluate_accuracy_key,)
            if self.evaluate_accuracy_key is not None
            else (ACCURACY, "eval_acc")
        )
        key = next((k for k in keys if k in records[0]), None)
        scalars = key is not None and all(
            _scalar(r[key]) is not None and _scalar(r[self.weighted_by_key]) is not None
            for r in records
        )
        if metrics is not None and key is not None and scalars:  # a list or NaN: no summary
            acc = np.array([r[key] for r in records], dtype=np.float64)
            n = np.array([r[self.weighted_by_key] for r in records], dtype=np.float64)
            if np.all((acc >= 0) & (acc <= 1)) and np.all(n > 0):
                for name, value in fairness_summary(acc, _counts(n)).items():
                    if value is not None:
                        metrics[f"fairagg-{name}"] = float(value)
        return metrics
