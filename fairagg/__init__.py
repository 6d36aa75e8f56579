"""fairagg: the reference implementation of fair federated-learning aggregation rules.

Every formula is NumPy float64 first (the specification); Numba and CUDA code paths are
optimisations tested equal to it. Docstrings cite the decisions of the docs' Specification
page as "SPEC §N".
"""

from __future__ import annotations

from .rules import RULES, RuleSpec, make_rule
from .rules.fedavg import (
    apply_weighted_update,
    fairavg,
    fairavg_weights,
    fedavg,
    fedavg_weights,
)
from .simulation import History, simulate
from .types import Aggregate, EmptyState, LocalSpec, RoundReports, Rule, make_reports

__all__ = [
    "RULES",
    "Aggregate",
    "EmptyState",
    "History",
    "LocalSpec",
    "RoundReports",
    "Rule",
    "RuleSpec",
    "apply_weighted_update",
    "fairavg",
    "fairavg_weights",
    "fedavg",
    "fedavg_weights",
    "make_reports",
    "make_rule",
    "simulate",
]

__version__ = "0.1.0"

#: Submodules reachable as attributes of the package without importing them first
#: (``import fairagg; fairagg.vectors``), loaded on first use: ``import fairagg`` stays light.
_SUBMODULES = frozenset(
    {
        "conformance",
        "data",
        "kernels",
        "local",
        "metrics",
        "online",
        "oracles",
        "pareto",
        "plots",
        "rules",
        "sampling",
        "simplex",
        "simulation",
        "types",
        "vectors",
    }
)


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
