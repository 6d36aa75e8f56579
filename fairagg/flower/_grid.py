"""A Flower Grid that runs a ClientApp on virtual nodes in this process (no Ray, no SuperLink)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from flwr.app import Context, Error, Message, MessageType, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

from .._checks import check_count, check_int
from ._protocol import PARTITION_ID


def _ensure_task_identity() -> None:
    """Give this process the task identity Flower's runtimes set (Flower >= 1.3x builds an
    instruction message's metadata from it), unless one is set already."""
    try:
        from flwr.supercore.task_identity import TaskIdentity
    except ImportError:  # older Flower: messages need no task identity
        return
    for attr, value in (("_run_id", 0), ("_node_id", 1), ("_task_id", 0)):  # 1: the SuperLink
        if getattr(TaskIdentity, attr, 0) is None:
            setattr(TaskIdentity, attr, value)


#: The most virtual nodes an [`InProcessGrid`][fairagg.flower.InProcessGrid] holds (each has a
#: Context in memory).
_MAX_NODES = 2**20


class InProcessGrid(Grid):
    """A Flower Grid that runs a ClientApp on ``num_nodes`` virtual nodes in this process.

    Node i (a random 63-bit node id, seeded) has node config ``{"partition-id": i,
    "num-partitions": num_nodes}`` and a Context that persists across messages, as in Flower's
    simulation engine; messages are handled one after another, and a ClientApp that raises
    yields an error reply (``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``) as Flower's runtimes do.
    For tests and for timing a strategy without Ray's transport; ``failing`` names nodes (by
    partition id) whose ClientApp raises on train messages, to exercise failures; ``run_config`` is
    every node's ``context.run_config`` (what ``flwr run`` reads from an app's
    ``[tool.flwr.app.config]``). Outside a
    Flower runtime it sets the process's Flower task identity (run 0, the SuperLink's node id 1)
    if none is set, which Flower needs to build messages.
    """

    def __init__(
        self,
        client_app: Callable[[Message, Context], Message],
        num_nodes: int,
        *,
        seed: int = 0,
        failing: Iterable[int] = (),
        run_config: dict[str, Any] | None = None,
    ) -> None:
        if not callable(client_app):
            raise TypeError(f"client_app must be a ClientApp; got {type(client_app).__name__}")
        num_nodes = check_count(num_nodes, "num_nodes", low=1, high=_MAX_NODES)
        seed = check_int(seed, "seed", low=0)
        if isinstance(failing, (str, bytes)) or not isinstance(failing, Iterable):
            raise TypeError(
                f"failing must be an iterable of partition ids; got {type(failing).__name__}"
            )
        failing = [check_int(i, "failing", low=0, high=num_nodes - 1) for i in failing]
        if run_config is None:
            run_config = {}
        if not isinstance(run_config, dict) or not all(isinstance(k, str) for k in run_config):
            raise TypeError(
                f"run_config must be a dict with str keys (a Flower run config); got "
                f"{type(run_config).__name__}"
            )
        rng = np.random.default_rng([seed, 7])
        ids: list[int] = []
        while len(ids) < num_nodes:
            v = int(rng.integers(1, 2**63 - 1))
            if v not in ids:
                ids.append(v)
        _ensure_task_identity()
        self.client_app = client_app
        self.partition_of = {nid: i for i, nid in enumerate(ids)}
        self.failing = set(failing)
        self.contexts = {
            nid: Context(
                run_id=0,
                node_id=nid,
                node_config={PARTITION_ID: i, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for nid, i in self.partition_of.items()
        }
        self._run: Any = None
        self._pending: dict[str, Message] = {}
        self.messages_handled = 0

    def set_run(self, run: Any) -> None:
        """Set the run this grid operates in (kept; unused)."""
        self._run = run

    @property
    def run(self) -> Any:
        """The run set with [`set_run`][fairagg.flower.InProcessGrid.set_run] (None by default)."""
        return self._run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """A new instruction message."""
        return Message(
            content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl
        )

    def get_node_ids(self) -> list[int]:
        """The virtual nodes' ids."""
        return list(self.contexts)

    def _handle(self, msg: Message) -> Message:
        node = msg.metadata.dst_node_id
        if node not in self.contexts:
            return Message(
                Error(code=ErrorCode.NODE_UNAVAILABLE, reason=f"no node {node}"), reply_to=msg
            )
        self.messages_handled += 1
        try:
            train = msg.metadata.message_type.split(".")[0] == MessageType.TRAIN
            if train and self.partition_of[node] in self.failing:
                raise RuntimeError(f"node {node} fails on purpose (InProcessGrid.failing)")
            return self.client_app(msg, self.contexts[node])
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            return Message(
                Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg
            )

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Handle each message now; returns ids under which
        [`pull_messages`][fairagg.flower.InProcessGrid.pull_messages] finds the replies."""
        out = []
        for msg in messages:
            key = f"m{len(self._pending)}-{time.perf_counter_ns()}"
            self._pending[key] = self._handle(msg)
            out.append(key)
        return out

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """The replies pushed under ``message_ids`` (each returned once)."""
        return [self._pending.pop(i) for i in message_ids if i in self._pending]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        """Handle the messages in order and return their replies."""
        del timeout
        return [self._handle(m) for m in messages]
