"""The formula functions that have golden vectors: [`Formula`][fairagg.vectors.Formula] and the
table [`FORMULAS`][fairagg.vectors.FORMULAS]."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._formula_cases import (
    CaseInputs,
    _aaggff_aggregate_cases,
    _afl_case,
    _afl_clipping_case,
    _decision_case,
    _dr_cases,
    _dr_gradient_cases,
    _eg_case,
    _fedfa_info_cases,
    _fedfa_step_cases,
    _fedfa_weights_case,
    _fedfv_cases,
    _ftrl_case,
    _mgda_cases,
    _min_norm_cases,
    _objective_case,
    _pareto_case,
    _propfair_scale_cases,
    _q_cases,
    _qp_cases,
    _response_cases,
    _simple_cases,
    _simplex_cases,
    _term_official_case,
    _update_cases,
    _weights_cases,
)
from ._tolerances import REL


@dataclass(frozen=True)
class Formula:
    """A formula function and how to draw its cases.

    Attributes
    ----------
    name : str
        Key in [`FORMULAS`][fairagg.vectors.FORMULAS] (the function's name).
    function : str
        Dotted path of the function.
    formula : str
        One line: what it computes, and where the paper has it.
    args : tuple of str
        The inputs passed positionally, in order; ``params`` are passed by keyword.
    cases : callable
        ``cases(rng)`` → {case name: (description, inputs, params)}.
    rel : float
        Relative tolerance of fairagg's own outputs on another machine (``fairagg vectors
        --check``) where it is wider than an output's error bound: 1e-10 for the iterative
        and exact QP solves, ``REL`` elsewhere.
    exclude : tuple of str
        Outputs not compared (iteration counts, solver diagnostics).
    """

    name: str
    function: str
    formula: str
    args: tuple[str, ...]
    cases: Callable[[np.random.Generator], dict[str, CaseInputs]]
    rel: float = REL
    exclude: tuple[str, ...] = field(default=())

    def resolve(self) -> Callable[..., Any]:
        module, fn = self.function.rsplit(".", 1)
        return getattr(importlib.import_module(module), fn)


def _mod(path: str) -> str:
    return f"fairagg.{path}"


FORMULAS: dict[str, Formula] = {
    f.name: f
    for f in (
        Formula(
            "fedavg_weights",
            _mod("rules.fedavg.fedavg_weights"),
            "a_k = n_k / Σ_j n_j (FairAvg eq. 4)",
            ("num_samples",),
            lambda rng: {
                k: (w, {"num_samples": i["num_samples"]}, {})
                for k, (w, i, _) in _weights_cases(rng, True).items()
            },
        ),
        Formula(
            "fairavg_weights",
            _mod("rules.fedavg.fairavg_weights"),
            "a_k = 1/m (FairAvg eq. 5)",
            ("num_clients",),
            lambda rng: {
                "small": ("m = 5", {"num_clients": 5}, {}),
                "single_client": ("m = 1", {"num_clients": 1}, {}),
            },
        ),
        Formula(
            "apply_weighted_update",
            _mod("rules.fedavg.apply_weighted_update"),
            "θ − Σ_k a_k δ_k (FairAvg eq. 3)",
            ("params", "deltas", "weights"),
            _update_cases,
        ),
        Formula(
            "qfedavg_step",
            _mod("rules.qffl.qfedavg_step"),
            "q-FedAvg: Δ_k = F_k^q L δ_k, h_k = q F_k^{q−1}‖Lδ_k‖² + L F_k^q, "
            "θ − ΣΔ_k/Σh_k (q-FFL Alg. 1, L = 1/lr)",
            ("params", "deltas", "losses"),
            lambda rng: _q_cases(rng, False),
        ),
        Formula(
            "qfedsgd_step",
            _mod("rules.qffl.qfedsgd_step"),
            "q-FedSGD: the q-FedAvg step on gradients g_k (q-FFL Alg. 3)",
            ("params", "grads", "losses"),
            lambda rng: _q_cases(rng, True),
        ),
        Formula(
            "term_weights",
            _mod("rules.term.term_weights"),
            "a_k ∝ n_k exp(t F_k) (TERM, SPEC §6)",
            ("losses", "tilt", "num_samples"),
            lambda rng: {
                k: (w, {"losses": i["losses"], "tilt": 0.5, "num_samples": i["num_samples"]}, {})
                for k, (w, i, _) in _weights_cases(rng, True).items()
            },
        ),
        Formula(
            "term_official_weights",
            _mod("rules.term.term_official_weights"),
            "the public TERM code's weights ω_k/m and running normaliser S (SPEC §6)",
            ("losses", "tilt", "normaliser"),
            lambda rng: _simple_cases(rng, _term_official_case),
        ),
        Formula(
            "qffl_objective",
            _mod("rules.qffl.qffl_objective"),
            "f_q = Σ_k p_k F_k^{q+1}/(q+1) (q-FFL eq. 2)",
            ("losses", "q"),
            lambda rng: _simple_cases(rng, _objective_case),
        ),
        Formula(
            "afl_step",
            _mod("rules.afl.afl_step"),
            "AFL: θ − γ_w Σλ_k g_k and λ ← Π_Δ(λ + γ_λ F) (SPEC §3)",
            ("params", "grads", "losses", "mixture"),
            lambda rng: {**_simple_cases(rng, _afl_case), "clipping": _afl_clipping_case(rng)},
        ),
        Formula(
            "propfair_scale",
            _mod("local.propfair_scale"),
            "the factor PropFair's surrogate −log(1 − f/M) puts on a minibatch gradient (SPEC §6)",
            ("f", "m", "epsilon", "huber"),
            _propfair_scale_cases,
        ),
        Formula(
            "eg_qffl_weights",
            _mod("rules.oco.eg_qffl_weights"),
            "one EG step from w = n/Σn: p ∝ w_k F_k^q (AAgFF poster, EG table)",
            ("losses", "num_samples"),
            lambda rng: _weights_cases(rng, True, q=2.0),
        ),
        Formula(
            "eg_term_weights",
            _mod("rules.oco.eg_term_weights"),
            "one EG step from w = n/Σn: p ∝ w_k exp(λ F_k) (AAgFF poster, EG table)",
            ("losses", "num_samples"),
            lambda rng: _weights_cases(rng, True, tilt=0.5),
        ),
        Formula(
            "eg_propfair_weights",
            _mod("rules.oco.eg_propfair_weights"),
            "one EG step from w = n/Σn: p ∝ w_k / (M − F_k) (AAgFF poster, EG table)",
            ("losses", "num_samples"),
            lambda rng: {
                k: v
                for k, v in _weights_cases(rng, True, M=5000.0).items()
                # M must exceed every loss: the extreme case reaches 1e3
            },
        ),
        Formula(
            "fedfv_direction",
            _mod("rules.fedfv.fedfv_direction"),
            "FedFV's combined update g: internal projections in loss order, rescaled to the "
            "mean update's length (Algs. 1-3, SPEC §7)",
            ("deltas", "losses"),
            _fedfv_cases,
            rel=1e-10,
        ),
        Formula(
            "fedmgda_weights",
            _mod("rules.fedmgda.fedmgda_weights"),
            "FedMGDA+: λ = argmin ‖Σλ_k δ_k/‖δ_k‖‖² over {λ ∈ Δ, |λ − n/Σn| ≤ ε} (SPEC §8)",
            ("deltas", "num_samples"),
            _mgda_cases,
            rel=1e-10,
        ),
        Formula(
            "fedfa_information",
            _mod("rules.fedfa.fedfa_information"),
            "FedFa's shares, information and parts (eqs. 9-14 as SPEC §9 reconstructs them)",
            ("accuracies", "participations"),
            _fedfa_info_cases,
        ),
        Formula(
            "fedfa_weights",
            _mod("rules.fedfa.fedfa_weights"),
            "FedFa's weights p = α part_a + β part_f (eq. 15 as SPEC §9 reconstructs it)",
            ("accuracies", "participations"),
            lambda rng: _simple_cases(rng, _fedfa_weights_case),
        ),
        Formula(
            "fedfa_server_step",
            _mod("rules.fedfa.fedfa_server_step"),
            "FedFa's server momentum: m ← γm + (1−γ)Δ_t, θ̄ − η_s m (SPEC §9)",
            ("params", "average", "momentum"),
            _fedfa_step_cases,
        ),
        Formula(
            "project_simplex",
            _mod("simplex.project_simplex"),
            "Euclidean projection onto {x ≥ 0, Σx = total} (sort, inclusive cumulative sum)",
            ("y",),
            _simplex_cases,
        ),
        Formula(
            "min_norm_weights",
            _mod("simplex.min_norm_weights"),
            "argmin λᵀGλ over the box-simplex (exact active set)",
            ("gram",),
            _min_norm_cases,
            rel=1e-10,
            exclude=("iterations", "kkt_residual", "multiplier", "active_lower", "active_upper"),
        ),
        Formula(
            "solve_simplex_qp",
            _mod("simplex.solve_simplex_qp"),
            "argmin ½xᵀAx + bᵀx over the box-simplex (AAgFF-S's step; exact active set)",
            ("A", "b"),
            _qp_cases,
            rel=1e-10,
            exclude=("iterations", "kkt_residual"),
        ),
        Formula(
            "aaggff_response",
            _mod("online.aaggff_response"),
            "r_k = Φ(F_k / mean_j F_j) · s, Φ the Weibull CDF 1 − exp(−x²) (AAgFF, SPEC §5)",
            ("losses",),
            lambda rng: _response_cases(rng, "weibull"),
        ),
        Formula(
            "dr_response",
            _mod("online.dr_response"),
            "AAgFF-D's doubly-robust responses ř and r̄ (SPEC §5)",
            ("responses", "selected"),
            lambda rng: {**_dr_cases(rng, "paper")},
        ),
        Formula(
            "aaggff_d_decision",
            _mod("online.aaggff_d_decision"),
            "AAgFF-D's decision p ∝ exp(−√(log K) G_t / (L∞ √(t+1))) (SPEC §5)",
            ("grad_sum",),
            lambda rng: _simple_cases(rng, _decision_case),
        ),
        Formula(
            "exponentiated_gradient",
            _mod("online.exponentiated_gradient"),
            "one EG step p_i e^{r_i/η} / Σ_j p_j e^{r_j/η} (SPEC §4)",
            ("p", "r"),
            lambda rng: _simple_cases(rng, _eg_case),
        ),
        Formula(
            "entropic_ftrl",
            _mod("online.entropic_ftrl"),
            "entropic FTRL: prior ⊙ e^{−G/η} / Z",
            ("grad_sum",),
            lambda rng: _simple_cases(rng, _ftrl_case),
        ),
        Formula(
            "pareto_certificate",
            _mod("pareto.pareto_certificate"),
            "Pareto-stationarity certificate: min over the simplex of ‖Σλ_k g_k‖ (FedMGDA+)",
            ("grads",),
            lambda rng: _simple_cases(rng, _pareto_case),
            rel=1e-10,
        ),
        Formula(
            "aaggff_aggregate",
            _mod("rules.aaggff.aaggff_aggregate"),
            "AAgFF's aggregation: q_i = p_i / Σ_{j∈S} p_j, θ − η_s Σ_{i∈S} q_i δ_i (SPEC §5)",
            ("params", "deltas", "p", "selected"),
            _aaggff_aggregate_cases,
        ),
        Formula(
            "dr_gradient",
            _mod("online.dr_gradient"),
            "AAgFF-D's first-order gradient estimate of −log(1 + ⟨p, r⟩) (SPEC §5)",
            ("p", "r_check", "r_bar"),
            _dr_gradient_cases,
        ),
    )
}
