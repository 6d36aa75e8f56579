"""One server round, as [`simulate`][fairagg.simulation.simulate] and
[`FairaggStrategy`][fairagg.flower.FairaggStrategy] both run it (the Layout guide, "The
spine: one round"): the selected clients' results become a
[`RoundReports`][fairagg.types.RoundReports],
the rule steps, its parameters are checked finite, and only then are the rule's state and the
clients' participation counts committed.

The callers keep what is theirs: ``simulate`` samples, trains and records a
[`History`][fairagg.simulation.History]; the strategy parses, validates and drops Flower replies
and logs its metrics. Each passes the error type its users know for a rule that diverges
(``FloatingPointError`` in ``simulate``, Flower's ``AggregationError`` in the strategy); the
message is the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._settings import TrainingSettings
from .types import Aggregate, RoundReports, Rule

__all__ = ["ServerRound"]


class ServerRound:
    """The rule's side of a federation of K clients: the rule's state and the participation
    counts f_k, advanced one round at a time by ``reports``,
    ``step`` and ``commit``.

    Parameters
    ----------
    rule : Rule
        The rule, built and checked by the caller.
    num_clients : int
        K >= 1, checked by the caller.
    training : TrainingSettings
        What the clients compute; ``training.lr`` is every round's ``RoundReports.lr``, read as
        it was checked when the settings were made.
    error : type of Exception
        What ``step`` raises when the rule's parameters are not
        finite.

    Attributes
    ----------
    state : NamedTuple
        The rule's state after the last committed round (``begin`` sets the initial one).
    participations : ndarray of int64, shape (K,)
        f_k: the rounds whose reports of client k the rule aggregated, committed ones only.
    """

    def __init__(
        self,
        rule: Rule,
        num_clients: int,
        training: TrainingSettings,
        error: type[Exception] = FloatingPointError,
    ) -> None:
        self.rule, self.num_clients, self.training, self.error = rule, num_clients, training, error
        self.state: Any = None
        self.participations = np.zeros(num_clients, dtype=np.int64)

    def begin(self, theta: np.ndarray) -> None:
        """The first round's state: ``rule.init(θ⁰, K)``, no participation yet."""
        self.state = self.rule.init(theta, self.num_clients)
        self.participations = np.zeros(self.num_clients, dtype=np.int64)

    def restore(self, state: Any, participations: np.ndarray) -> None:
        """Continue from a checkpoint's state and counts (checked by its reader)."""
        self.state, self.participations = state, participations.copy()

    def reports(
        self,
        matrix: np.ndarray,
        num_samples: np.ndarray,
        losses: np.ndarray | None,
        accuracies: np.ndarray | None,
        client_ids: np.ndarray,
        round_index: int,
    ) -> RoundReports:
        """The round's reports from the m aggregated clients' results, in the order the rule
        receives them: ``matrix`` (m, d) holds δ_k, or g_k when the clients report gradients;
        each client's participation counts this round (committed by ``commit``). Every value
        was checked where it entered (the clients' results, the callers' arguments): nothing
        is checked again."""
        g = self.training.gradients
        return RoundReports(
            None if g else matrix, num_samples, losses, accuracies,
            self.participations[client_ids] + 1, client_ids, round_index, self.num_clients,
            matrix if g else None, self.training.lr,
        )  # fmt: skip

    def step(self, params: np.ndarray, reports: RoundReports) -> tuple[Aggregate, np.ndarray]:
        """The rule's step from θ^t, and the model it reports (``info["model"]`` where it has
        one: AFL's average of iterates; θ^{t+1} otherwise). Nothing is committed: a caller
        that stops here leaves the state at round t. Raises ``error`` when either is not
        finite."""
        agg = self.rule.step(params, reports, self.state)
        reported = agg.info.get("model", agg.params)
        if not (np.all(np.isfinite(agg.params)) and np.all(np.isfinite(reported))):
            raise self.error(
                f"rule {self.rule.name!r} produced non-finite parameters in round "
                f"{reports.round_index + 1}"
            )
        return agg, reported

    def commit(self, reports: RoundReports, agg: Aggregate) -> None:
        """The round happened: the rule's new state, and the participations of its reports."""
        self.state = agg.state
        assert reports.client_ids is not None and reports.participations is not None
        self.participations[reports.client_ids] = reports.participations
