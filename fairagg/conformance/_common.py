"""What every room of the harness shares: the targets, a case, and the signals between rooms."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import RULES
from ..vectors import FORMULAS, resolved_params

Json = dict[str, Any]

#: The source of a case: fairagg's golden vectors, or the harness's own generator.
GOLDEN, GENERATED = "golden", "generated"


def targets() -> list[str]:
    """Every name [`check`][fairagg.conformance.check] accepts: the registered rules, then the
    formula functions."""
    return list(RULES) + list(FORMULAS)


def kind_of(target: Any) -> str:
    """``"rule"`` or ``"formula"``; a clear error for anything else."""
    if not isinstance(target, str):
        raise TypeError(f"target must be a rule or formula name (str); got {type(target).__name__}")
    if target in RULES:
        return "rule"
    if target in FORMULAS:
        return "formula"
    raise ValueError(
        f"target must be a registered rule ({', '.join(RULES)}) or a formula "
        f"({', '.join(FORMULAS)}); got {target!r}"
    )


def formula_text(target: str) -> str:
    """One line: what ``target`` computes."""
    return RULES[target].summary if target in RULES else FORMULAS[target].formula


def default_params(target: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter fairagg uses for a case: the function's defaults (formulas) or the built
    rule's hyper-parameters (rules), updated with the case's own; ``backend`` left out (the
    golden files' ``resolved_params``)."""
    return resolved_params(kind_of(target), target, dict(params))


@dataclass(frozen=True)
class Case:
    """One input of a check: a golden case or a generated one.

    ``params`` are the case's own parameters (a rule's hyper-parameters); the defaults and the
    parameters the check fixes are added when it runs."""

    source: str  # GOLDEN or GENERATED
    label: str  # "golden case rules/afl/small", "generated example 17 (seed 0)"
    inputs: Json
    params: Json
    shrunk: bool = False


class UsageError(Exception):
    """A mistake in how check() is called (not a difference of formula): re-raised as is."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(str(exc))
        self.exc = exc


class Skip(Exception):  # noqa: N818 - the name users raise
    """Raise from your function for an input outside its domain by design:
    [`check`][fairagg.conformance.check] counts the case as outside your domain
    (``ConformanceReport.outside``) instead of reporting a difference. ``hypothesis.assume(False)``
    inside your function does the same, and so does a worker's ``skip`` reply."""


class Outside(Exception):  # noqa: N818 - a control-flow signal
    """The case is outside the user's domain (Skip, assume, a worker's skip, ``domain``)."""


def is_assume(exc: BaseException) -> bool:
    """Whether ``exc`` is hypothesis's ``assume(False)`` signal (hypothesis not imported here)."""
    return type(exc).__name__ == "UnsatisfiedAssumption" and type(exc).__module__.startswith(
        "hypothesis"
    )


#: What a rule's reported outputs are (its ``info``), for the report's description line.
INFO_TEXTS = {
    "weights": "a_k, the weight of the round's update k in the step (θ^{t+1} = θ^t − Σ a_k δ_k)",
    "h_sum": "Σ_k h_k, the q-FFL step's denominator",
    "normaliser": "S, the running normaliser of TERM's official variant",
    "mixture": "the mixture λ (AFL: λ^{t+1} over all K clients, by client id; FedMGDA+: λ*)",
    "model": "θ̄, the average of the iterates θ^1..θ^{t+1} (AFL's reported model)",
    "min_norm": "‖Σ λ*_k ĝ_k‖, FedMGDA+'s min-norm value",
    "coefficients": "C: g̃_i = Σ_j C_ij δ_j after FedFV's internal projections",
    "order": "FedFV's projection order (first target first)",
    "kept": "the clients that keep their original update (FedFV)",
    "history_weights": "the coefficient of each stored old update in g (FedFV)",
    "history_clients": "the clients whose latest update is stored after the round (FedFV)",
    "conflicts_found": "pairs i < j of the round's updates that conflict (FedFV)",
    "projections": "internal projections made (FedFV)",
    "external_conflicts": "old updates of the window found conflicting with ḡ (FedFV Alg. 3)",
    "external_projections": "external projections made (FedFV Alg. 3)",
    "conflicts_remaining": "the round's clients whose δ_k still conflicts with g (FedFV)",
    "accuracy_part": "FedFa's accuracy information weights",
    "frequency_part": "FedFa's participation (frequency) weights",
    "server_correction": "FedFa's server momentum term",
    "p": "the decision p^t over all K clients (AAgFF)",
    "response": "r^t, the clients' responses the decision is scored on (AAgFF)",
    "decision_loss": "the decision's loss −log(1 + ⟨p, r⟩) (AAgFF)",
    "decision_loss_observed": "the decision's loss on the observed clients (AAgFF-D)",
}
