"""Aggregation rules, one module per method, and the registry ``RULES`` that the CLI, the docs
(one page per rule) and the common rule tests all read."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..types import Rule

# The rules' modules are the package's attributes (``fairagg.rules.afl`` is the module that holds
# ``afl_step``); the factories are reached through their modules or ``RULES``, never bound here
# under a module's name.
from . import aaggff, afl, fedavg, fedfa, fedfv, fedmgda, oco, propfair, qffl, term

__all__ = ["RULES", "RuleSpec", "make_rule"]


@dataclass(frozen=True)
class RuleSpec:
    """A registry entry.

    Attributes
    ----------
    name : str
        Registry key, also ``Rule.name``.
    factory : callable
        Builds the [`Rule`][fairagg.types.Rule] from keyword hyper-parameters.
    paper : str
        Short name of the source paper (see the docs' rules pages).
    equations : str
        Where the formulas are, e.g. ``"eqs. 3-4"``.
    summary : str
        One line: what the rule does.
    needs : tuple of str
        Report fields the rule reads besides ``deltas`` and ``num_samples`` (``"gradients"``:
        the clients report ∇F_k(θ^t) instead of ``deltas``).
    full_participation : bool
        The rule needs every one of the K clients in every round (cross-silo rules).
    """

    name: str
    factory: Callable[..., Rule]
    paper: str
    equations: str
    summary: str
    needs: tuple[str, ...] = ()
    full_participation: bool = False


RULES: dict[str, RuleSpec] = {
    spec.name: spec
    for spec in (
        RuleSpec(
            "fedavg",
            fedavg.fedavg,
            "McMahan et al. 2017, as FairAvg",
            "eqs. 3-4",
            "average of client models weighted by n_k",
        ),
        RuleSpec(
            "fairavg",
            fedavg.fairavg,
            "FairAvg (Michieli & Ozay 2021)",
            "eqs. 3, 5",
            "uniform average of client models, 1/m each",
        ),
        RuleSpec(
            "qfedavg",
            qffl.qfedavg,
            "q-FFL (Li et al. 2020)",
            "eq. 2, Alg. 1",
            "q-FedAvg: θ − Σ F̃_k^q Δw_k / Σ h_k with the Lemma 12 step",
            ("losses",),
        ),
        RuleSpec(
            "qfedsgd",
            qffl.qfedsgd,
            "q-FFL (Li et al. 2020)",
            "eq. 2, Alg. 3",
            "q-FedSGD: the q-FedAvg step on full-batch client gradients",
            ("losses", "gradients"),
        ),
        RuleSpec(
            "afl",
            afl.afl,
            "AFL (Mohri et al. 2019)",
            "descent-ascent, SPEC §3",
            "minimax: gradient step on Σ λ_k F_k, projected ascent on λ; averaged model",
            ("losses", "gradients"),
            full_participation=True,
        ),
        RuleSpec(
            "term",
            term.term,
            "TERM (Li et al. 2021)",
            "tilted objective, SPEC §6",
            "weights ∝ p_k exp(t F_k); official variant with a running normaliser",
            ("losses",),
        ),
        RuleSpec(
            "propfair",
            propfair.propfair,
            "PropFair (Zhang et al. 2023)",
            "surrogate −log(1 − f/M), SPEC §6",
            "clients train on the PropFair surrogate; FedAvg aggregation",
            ("losses",),
        ),
        RuleSpec(
            "fedfv",
            fedfv.fedfv,
            "FedFV (Wang et al. 2021)",
            "Algs. 1-3, SPEC §7",
            "projects out conflicts between updates in loss order, protects recent history, "
            "rescales to the mean update's length",
            ("losses",),
        ),
        RuleSpec(
            "fedmgda",
            fedmgda.fedmgda,
            "FedMGDA+ (Hu et al. 2020)",
            "min-norm QP in an ε-box, SPEC §8",
            "min-norm combination of normalised updates, λ within ε of FedAvg's weights",
        ),
        RuleSpec(
            "fedfa",
            fedfa.fedfa,
            "FedFa (Huang et al. 2020)",
            "eqs. 1-15 reconstructed, SPEC §9",
            "weights from the information in low accuracy and frequent participation; server and "
            "client momentum",
            ("accuracies", "participations"),
        ),
        RuleSpec(
            "qffl-eg",
            oco.qffl_eg,
            "AAgFF poster (OCO view of q-FFL)",
            "EG table, q-FedAvg row",
            "EG step from w: weights ∝ n_k F_k^q",
            ("losses",),
        ),
        RuleSpec(
            "term-eg",
            oco.term_eg,
            "AAgFF poster (OCO view of TERM)",
            "EG table, TERM row",
            "EG step from w: weights ∝ n_k exp(λ F_k)",
            ("losses",),
        ),
        RuleSpec(
            "propfair-eg",
            oco.propfair_eg,
            "AAgFF poster (OCO view of PropFair)",
            "EG table, PropFair row",
            "EG step from w: weights ∝ n_k / (M − F_k)",
            ("losses",),
        ),
        RuleSpec(
            "aaggff-s",
            aaggff.aaggff_s,
            "AAgFF poster (Hahn et al. 2024)",
            "AAgFF-S FTRL, Theorem 1",
            "cross-silo: exact quadratic-FTRL mixing weights from CDF-bounded losses",
            ("losses",),
            full_participation=True,
        ),
        RuleSpec(
            "aaggff-d",
            aaggff.aaggff_d,
            "AAgFF poster (Hahn et al. 2024)",
            "AAgFF-D FTRL, DR estimator, Thm 2, Cor. 3",
            "cross-device: entropic FTRL on a doubly-robust gradient estimate",
            ("losses",),
        ),
    )
}


def check_rule_name(value: Any, argname: str) -> str:
    """``value`` if it names a registered rule, else a ``TypeError``/``ValueError`` naming the
    caller's argument ``argname`` (``name`` here, ``rule`` in the simulator and the Flower
    strategy)."""
    if not isinstance(value, str):
        raise TypeError(f"{argname} must be a registry name (str); got {type(value).__name__}")
    if value not in RULES:
        raise ValueError(f"{argname} must be one of {', '.join(sorted(RULES))}; got {value!r}")
    return value


def make_rule(name: str, **hyperparams: Any) -> Rule:
    """Build the registered rule ``name`` with keyword hyper-parameters."""
    check_rule_name(name, "name")
    factory = RULES[name].factory
    params = inspect.signature(factory).parameters
    unknown = sorted(set(hyperparams) - set(params))
    if unknown:
        raise ValueError(
            f"rule {name!r} has no hyper-parameter {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join(params) or 'none'}"
        )
    return factory(**hyperparams)
