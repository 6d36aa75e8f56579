"""The causes the harness can name, and how each one is computed.

A cause is fairagg changed by exactly one thing: a registered mistake
([`MISTAKES`][fairagg.conformance.MISTAKES], each written as code: a switch of the
restatement in ``_restate``, or fairagg itself on transformed inputs), another value of one of
fairagg's own settings (a ``variant``, ``order``, ``weighting``, a CDF, a window, a boolean switch),
a fitted continuous value (``FITS``: another ε, q, α, λ step or L), another round base, another
precision, or the formula computed literally in float64. ``_diagnosis`` names a cause only when it
reproduces the user's outputs on every case that differs and still agrees where the user agreed.

To teach the harness a new mistake, add one [`Mistake`][fairagg.conformance.Mistake] to
[`MISTAKES`][fairagg.conformance.MISTAKES] (with the targets where it can occur: the rule
and its formula functions); if it is not fairagg on other inputs or parameters, give the
restatements of those targets a switch for it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import RULES, make_rule
from ..online import RESPONSE_CDFS
from ..vectors import FORMULAS
from ._common import Json, default_params

Transform = Callable[[Json, Json], tuple[Json, Json]]


@dataclass(frozen=True)
class Mistake:
    """A registered mistake.

    Attributes
    ----------
    name : str
        Its short name (``"norm-not-squared"``).
    term : str
        The first term of the formula it changes (``"h"``), named in the report.
    text : str
        What it is, in the report's words.
    targets : tuple of str
        Every rule and formula where it can occur.
    switches : mapping
        The restatement switches that make it (``_restate``), or
    transform : callable, optional
        ``transform(inputs, params) -> (inputs, params)``: it is fairagg itself on other
        inputs or parameters (a tilt of the other sign, ε = 0, ...). A mistake with both a
        transform and switches is either computation, whichever your code matches on a case
        (ε missing: fairagg with ε = 0, or the formula computed literally, where 0 · 0^(−1) is
        NaN).
    fit : str, optional
        The name of a number the mistake carries, fitted to the user's outputs (the ``c`` of
        ‖δ‖ + c), passed to the restatement as the switch of that name.
    """

    name: str
    term: str
    text: str
    targets: tuple[str, ...]
    switches: Mapping[str, Any] = field(default_factory=dict)
    transform: Transform | None = None
    fit: str | None = None


def _flip_tilt(inputs: Json, params: Json) -> tuple[Json, Json]:
    if "tilt" in params and params["tilt"] is not None:
        return inputs, {**params, "tilt": -float(params["tilt"])}
    return {**inputs, "tilt": -float(inputs["tilt"])}, params


def _equal_samples(inputs: Json, params: Json) -> tuple[Json, Json]:
    """Every client with the same n_k: FedAvg's weights become 1/m."""
    if "rounds" in inputs:
        rounds = [{**r, "num_samples": np.ones_like(np.asarray(r["num_samples"]))}
                  for r in inputs["rounds"]]  # fmt: skip
        return {**inputs, "rounds": rounds}, params
    return {**inputs, "num_samples": np.ones_like(np.asarray(inputs["num_samples"]))}, params


def _shared_losses(inputs: Json, params: Json, *, weighted: bool) -> tuple[Json, Json]:
    """Every client's loss replaced by the round's mean (n_k-weighted or plain)."""

    def one(src: Json) -> Json:
        F = np.asarray(src["losses"], dtype=np.float64)
        if weighted and "num_samples" in src:
            n = np.asarray(src["num_samples"], dtype=np.float64)
            value = float(n @ F / n.sum())
        else:
            value = float(F.mean())
        return {**src, "losses": np.full(F.shape, value)}

    if "rounds" in inputs:
        return {**inputs, "rounds": [one(r) for r in inputs["rounds"]]}, params
    return one(inputs), params


def _no_epsilon(inputs: Json, params: Json) -> tuple[Json, Json]:
    return inputs, {**params, "epsilon": 0.0}


_Q = ("qfedavg_step", "qfedsgd_step", "qfedavg", "qfedsgd")

#: Every mistake the harness names, with the targets where it can occur.
MISTAKES: tuple[Mistake, ...] = (
    Mistake(
        "norm-not-squared",
        "h",
        "your norm is not squared (‖Δw_k‖ where h_k has ‖Δw_k‖², q-FFL Alg. 1)",
        _Q,
        {"square": False},
    ),
    Mistake(
        "epsilon-missing",
        "F_tilde",
        "ε is missing (F̃_k = F_k where SPEC §2 has F_k + ε)",
        _Q,
        {"with_eps": False},
        transform=_no_epsilon,
    ),
    Mistake(
        "lipschitz-missing",
        "Delta_w",
        "L = 1/lr is missing (Δw_k = δ_k where it is L δ_k)",
        ("qfedavg_step", "qfedavg"),
        {"with_L": False},
    ),
    Mistake(
        "shared-loss",
        "F_tilde",
        "your step uses one loss for every client, the mean of the round's losses, where q-FFL "
        "weighs each client k by its own F̃_k = F_k + ε (Alg. 1; Flower's QFedAvg uses one "
        "loss too, the server's, of the global model)",
        _Q,
        transform=lambda i, p: _shared_losses(i, p, weighted=False),
    ),
    Mistake(
        "shared-weighted-loss",
        "F_tilde",
        "your step uses one loss for every client, the n_k-weighted mean of the round's losses, "
        "where q-FFL weighs each client k by its own F̃_k = F_k + ε (Alg. 1)",
        ("qfedavg", "qfedsgd"),  # the formulas have no n_k
        transform=lambda i, p: _shared_losses(i, p, weighted=True),
    ),
    Mistake(
        "off-by-one-projection",
        "tau",
        "the public q-FFL code's simplex projection (fair_flearn's project): its ρ test sums "
        "Σ_{i<j} u_i where the sort-based projection has Σ_{i≤j} u_i, so ρ can be too large "
        "and the result leaves the simplex (SPEC §3)",
        ("project_simplex", "afl_step", "afl"),
        {"inclusive": False},
    ),
    Mistake(
        "clipped-not-projected",
        "out",
        "clipped and rescaled (max(y, 0)/Σ) instead of projected onto the simplex",
        ("project_simplex",),
        {"clip": True},
    ),
    Mistake(
        "next-mixture",
        "params",
        "the model step weighs the gradients by the new mixture λ^{t+1}, where AFL steps with "
        "λ^t (SPEC §3; the AAggFF code's AFL does this)",
        ("afl_step", "afl"),
        {"next_mixture": True},
    ),
    Mistake(
        "theta0-in-average",
        "model",
        "the averaged model includes θ⁰: yours averages θ^0..θ^{t+1}, where AFL reports the "
        "average of the iterates θ^1..θ^{t+1} (SPEC §3)",
        ("afl",),
        {"theta0_in_average": True},
    ),
    Mistake(
        "weights-not-renormalised",
        "weights",
        "weights not renormalised over the selected clients (q_i = p_i where SPEC §5 has "
        "p_i / Σ_{j∈S} p_j)",
        ("aaggff_aggregate", "aaggff-s", "aaggff-d"),
        {"renormalise": False},
    ),
    Mistake(
        "box-missing",
        "mixture",
        "the ε-box is missing: λ minimises over the whole simplex (plain MGDA) where FedMGDA+ "
        "keeps |λ − n/Σn| ≤ ε (SPEC §8)",
        ("fedmgda_weights", "fedmgda"),
        {"box": False},
    ),
    Mistake(
        "not-normalised",
        "g_hat",
        "the updates are not normalised (ĝ_k = δ_k where FedMGDA+ has δ_k/‖δ_k‖)",
        ("fedmgda_weights", "fedmgda"),
        {"normalise": False},
    ),
    Mistake(
        "norm-plus-c",
        "g_hat",
        "the updates are normalised by ‖δ_k‖ + c (FLGo's FedMGDA+ adds 1e-8), where FedMGDA+ "
        "has δ_k/‖δ_k‖",
        ("fedmgda_weights", "fedmgda"),
        fit="norm_offset",
    ),
    Mistake(
        "renormalised-after-clipping",
        "mixture",
        "λ is solved over the simplex without the ε-box, then clipped into [λ0 − ε, λ0 + ε] "
        "and renormalised to sum 1, where FedMGDA+ minimises over the box-simplex itself "
        "(SPEC §8)",
        ("fedmgda_weights", "fedmgda"),
        {"clip_after": True},
    ),
    Mistake(
        "already-projected",
        "coefficients",
        "projecting onto already-projected updates g̃_j, where Alg. 2 projects each g̃_i onto "
        "the original δ_j (SPEC §7)",
        ("fedfv_direction", "fedfv"),
        {"against_projected": True},
    ),
    Mistake(
        "tilt-sign",
        "weights",
        "the tilt has the other sign (exp(−t F_k) where TERM has exp(t F_k), SPEC §6)",
        ("term_weights", "term", "eg_term_weights", "term-eg"),
        transform=_flip_tilt,
    ),
    Mistake(
        "uniform-weights",
        "weights",
        "the weights ignore n_k (1/m each over the selected clients, where FedAvg's are "
        "n_k / Σ_{j∈S} n_j, FairAvg eq. 4)",
        ("fedavg_weights", "fedavg", "propfair"),
        transform=_equal_samples,
    ),
)


# --------------------------------------------------------------------- settings and fits
#: fairagg's own settings, by parameter: the values a setting cause tries.
SETTINGS: dict[str, tuple[Any, ...]] = {
    "variant": ("paper", "official", "flgo"),
    "order": ("loss", "reverse", "random"),
    "weighting": ("samples", "uniform"),
    "cdf": tuple(RESPONSE_CDFS),
    "accuracy_source": ("global", "local"),
    "tau": (0, 1, 2, 3),
    "static_step": (False, True),
    "rescale": (True, False),
    "huber": (False, True),
    "apply": (True, False),
}


@dataclass(frozen=True)
class Fit:
    """A continuous parameter fitted to the user's outputs: on a log scale (``log``, for a
    positive value spanning binades) or a linear one, within [lo, hi]; ``what`` it is and
    ``term``, the first term of the formula it changes."""

    param: str
    lo: float
    hi: float
    log: bool
    what: str
    term: str = ""


_EPS = Fit("epsilon", 1e-20, 1.0, True, "loss offset (F̃_k = F_k + ε, SPEC §2)", "F_tilde")
_Q_FIT = Fit("q", 0.0, 50.0, False, "fairness exponent (F̃_k^q)", "Delta")
_LR = Fit("lr", 1e-6, 1e6, True, "learning rate (L = 1/lr)", "Delta_w")
_L = Fit("lipschitz", 1e-6, 1e6, True, "Lipschitz constant L (L = 1/lr by default)", "Delta_w")
_LAMBDA = Fit("lambda_lr", 1e-8, 1e3, True, "mixture step γ_λ (λ ← Π_Δ(λ + γ_λ F))", "mixture")
_ALPHA_FV = Fit("alpha", 0.0, 1.0, False, "kept fraction α (Alg. 2, line 1)", "kept")
_ALPHA_FA = Fit("alpha", 0.0, 1.0, False, "accuracy share α (p = α part_a + β part_f)")
_BOX = Fit("epsilon", 0.0, 1.0, False, "box half-width (|λ − n/Σn| ≤ ε, SPEC §8)", "mixture")
#: The continuous values fitted per target.
FITS: dict[str, tuple[Fit, ...]] = {
    "qfedavg": (_EPS, _Q_FIT, _L),
    "qfedsgd": (_EPS, _Q_FIT, _L),
    "qfedavg_step": (_EPS, _Q_FIT, _LR),
    "qfedsgd_step": (_EPS, _Q_FIT, _LR),
    "afl": (_LAMBDA, Fit("lr", 1e-6, 1e6, True, "model step γ_w")),
    "afl_step": (_LAMBDA, Fit("lr", 1e-6, 1e6, True, "model step γ_w")),
    "fedfv": (_ALPHA_FV,),
    "fedfv_direction": (_ALPHA_FV,),
    "fedfa": (_ALPHA_FA,),
    "fedfa_weights": (_ALPHA_FA,),
    "aaggff-s": (
        Fit("alpha", 1e-6, 1e6, True, "regulariser α (A = αI + β Σ g gᵀ)"),
        Fit("beta", 1e-6, 1e6, True, "curvature weight β (A = αI + β Σ g gᵀ)"),
        Fit("lipschitz", 1e-6, 1e6, True, "L∞ (α = 4K L∞, β = 1/(4 L∞))"),
    ),
    "aaggff-d": (
        Fit("inclusion_probability", 1e-3, 1.0, True, "inclusion probability C"),
        Fit("lipschitz", 1e-6, 1e6, True, "L∞ (the decision's step)"),
    ),
    "fedmgda": (_BOX,),
    "fedmgda_weights": (_BOX,),
    "qffl-eg": (_Q_FIT,),
    "eg_qffl_weights": (_Q_FIT,),
}
#: Fits of a mistake's own number: (lo, hi, log).
MISTAKE_FITS: dict[str, tuple[float, float, bool]] = {"norm_offset": (1e-20, 1.0, True)}


# ---------------------------------------------------------------------------------- causes
@dataclass(frozen=True)
class Cause:
    """fairagg changed by exactly one thing (see the module docstring).

    ``kind``: ``"mistake"``, ``"setting"``, ``"fitted"``, ``"round base"``, ``"precision"``
    or ``"literal"``. ``params`` are parameters that override the check's (settings and
    fits), ``switches`` the restatement's, ``value`` a mistake's fitted number. ``flag`` and
    ``python`` say how to check with the cause taken into account, where that is possible.
    """

    kind: str
    name: str
    text: str
    term: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    switches: Mapping[str, Any] = field(default_factory=dict)
    transform: Transform | None = field(default=None, compare=False)
    precision: str | None = None
    round_base: int | None = None
    flag: str = ""
    python: str = ""

    def describe(self) -> str:
        head = f"{self.term} differs: " if self.term else ""
        how = ""
        if self.python or self.flag:
            both = " (".join(x for x in (self.python, self.flag) if x)
            how = f". Check with {both}{')' if self.python and self.flag else ''}"
        return f"{head}{self.text}{how}"


def shortest(value: float, ok: Callable[[float], bool]) -> float:
    """The value with the fewest significant digits that ``ok`` accepts (``value`` itself if
    none shorter does)."""
    if value == 0.0 or not math.isfinite(value):
        return value
    for digits in range(1, 18):
        v = float(f"{value:.{digits}g}")
        if ok(v):
            return v
    return value


def value_text(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.17g}" if float(f"{v:.6g}") != v else f"{v:.6g}"
    return str(v)


def flag_for(params: Mapping[str, Any]) -> tuple[str, str]:
    """(the command line's flags, Python's ``params=``) for checking with ``params``."""
    flags = " ".join(f"--param {k}={value_text(v)}" for k, v in params.items())
    py = "params={" + ", ".join(f"{k!r}: {value_text(v) if isinstance(v, float) else repr(v)}"
                                for k, v in params.items()) + "}"  # fmt: skip
    return flags, py


def setting_cause(param: str, value: Any, current: Any) -> Cause:
    flags, py = flag_for({param: value})
    return Cause(
        "setting",
        f"{param}={value_text(value)}",
        f"fairagg with {param} = {value!r} (not {current!r}) computes your outputs",
        params={param: value},
        flag=flags,
        python=py,
    )


def fitted_cause(fit: Fit, value: float, current: Any) -> Cause:
    param = fit.param
    flags, py = flag_for({param: value})
    text = f"your {fit.what} is {param} = {value_text(value)}"
    if current is not None:
        text += f" where this check has {param} = {value_text(current)}"
    text += f": fairagg with {param} = {value_text(value)} computes your outputs"
    return Cause("fitted", f"{param}={value_text(value)}", text, term=fit.term,
                 params={param: value}, flag=flags, python=py)  # fmt: skip


def mistake_cause(m: Mistake, value: float | None = None) -> Cause:
    switches = dict(m.switches)
    text = m.text
    name = m.name
    if m.fit is not None and value is not None:
        switches[m.fit] = value
        if m.fit == "norm_offset":
            text = f"{text}: c = {value_text(value)} fits yours"
            name = f"{m.name} c={value_text(value)}"
    return Cause("mistake", name, text, term=m.term, switches=switches, transform=m.transform)


def round_base_cause(base: int) -> Cause:
    return Cause(
        "round base",
        f"round base {base}",
        f"your code numbers rounds from {base}: called with round_index = t + {base} it agrees "
        "with fairagg",
        round_base=base,
        flag=f"--round-base {base}",
        python=f"round_base={base}",
    )


def precision_cause(precision: str, solver_tol: float | None = None) -> Cause:
    if precision == "float32":
        text = (
            "your outputs agree with fairagg's within float32's error bound on every case: "
            "your code computes (or casts a term) in single precision"
        )
        return Cause("precision", "float32", text, precision="float32",
                     flag="--precision float32", python="precision='float32'")  # fmt: skip
    text = (
        f"your outputs agree with fairagg's within a solver accuracy of {solver_tol:g} on "
        "every case: an iterative or conic solver stopped at its tolerance"
    )
    return Cause(
        "precision", f"solver {solver_tol:g}", text, precision="solver",
        params={"_solver_tol": solver_tol},
        flag=f"--precision solver --solver-tol {solver_tol:g}",
        python=f"precision='solver', solver_tol={solver_tol:g}",
    )  # fmt: skip


LITERAL = Cause(
    "literal",
    "literal float64",
    "yours is the formula computed literally in float64, which over- or underflows on this "
    "case (a power or square out of range, then divided by); fairagg computes it in a scaled "
    "or log form (SPEC §2), and so must a reference",
)


def _accepts(target: str, params: Json) -> bool:
    """Whether fairagg takes these parameters for ``target``."""
    try:
        if target in RULES:
            make_rule(target, **params)
        else:
            default_params(target, params)
        return True
    except (TypeError, ValueError):
        return False


def settings(target: str, current: Json) -> list[Cause]:
    """Every other value of fairagg's own settings that ``target`` accepts."""
    out = []
    for param, values in SETTINGS.items():
        if param not in current:
            continue
        have = current[param]
        for v in values:
            if (
                v == have
                or type(v) is not type(have)
                and not (isinstance(v, int) and isinstance(have, int))
            ):
                continue
            if target in RULES and not _accepts(target, {**_rule_hyper(current), param: v}):
                continue
            if (
                target in FORMULAS
                and param in ("variant", "order", "cdf")
                and not _formula_takes(target, param, v, current)
            ):
                continue
            out.append(setting_cause(param, v, have))
    return out


def _rule_hyper(current: Json) -> Json:
    return {k: v for k, v in current.items() if k != "backend"}


def _formula_takes(target: str, param: str, value: Any, current: Json) -> bool:
    """Whether the formula takes ``param = value`` (tried on its first golden case)."""
    from ..vectors import _compute, case_inputs

    _, inputs, params = next(iter(case_inputs("formula", target).values()))
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            _compute("formula", target, inputs, {**params, param: value})
        return True
    except (TypeError, ValueError):
        return False


def mistakes_for(target: str) -> list[Mistake]:
    return [m for m in MISTAKES if target in m.targets]
