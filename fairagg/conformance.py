"""Conformance harness: check your own implementation of a rule or formula against fairagg.

:func:`check` calls your function on fairagg's golden inputs (:mod:`fairagg.vectors`: small,
medium and degenerate cases, and the rules' variants) and on hypothesis-generated ones, compares
what it returns with what fairagg computes, and reports the first case that differs, minimised,
with the quantity that differs and, where it can tell, why::

    from fairagg.conformance import check

    def my_qfedavg(params, deltas, losses, q, lr):   # your code, any argument order
        ...
        return new_params

    check(my_qfedavg, "qfedavg_step")   # raises ConformanceError with the minimised case

**Targets.** Any registered rule (:data:`fairagg.RULES`: ``"fedavg"``, ``"qfedavg"``, ...) or
formula function (:data:`fairagg.vectors.FORMULAS`: ``"qfedavg_step"``, ``"project_simplex"``,
...); :func:`targets` lists them and :func:`describe` says what a target passes and expects.

**Calling convention.** Your function is called with keyword arguments named as fairagg names
its inputs (a formula's arguments, e.g. ``params``, ``deltas``, ``losses``, and every parameter
fairagg uses, defaults included, e.g. ``q``, ``lr``, ``epsilon``), restricted to the names your
function's signature takes (all of them if it takes ``**kwargs``). A rule's function is called
once per round with ``params`` (θ^t, your own previous output), the round's report fields
(``deltas`` or ``gradients``, ``num_samples``, ``losses``, ``accuracies``, ``participations``,
``client_ids``, ``lr``, ``round_index``), ``num_clients`` and the rule's hyper-parameters; it
returns θ^{t+1}. A rule that keeps state across rounds is checked with
``Adapter(stateful=True)``: your function is then a factory, called once per case with
``params`` (θ⁰), ``num_clients`` and the hyper-parameters, returning the per-round function.
:class:`Adapter` renames arguments, fixes extra ones, names the items of a returned tuple, or
takes over the call entirely.

**Outputs and terms.** Return an array (the target's main output: θ^{t+1} for a rule, a
formula's first output) or a dict. A dict may also hold intermediate terms of the formula (for
q-FedAvg ``Delta_w``, ``F_tilde``, ``Delta``, ``h``, ...; :func:`describe` lists them): they are
compared first, in the order the formula computes them, so the report names the first term that
differs. When only the output differs, the harness tries the mistakes it knows for that target
(a norm not squared, ε left out, weights not renormalised over the selected clients, the
off-by-one simplex projection, ...) and names the one your output matches; for q-FFL it also
fits one number to your results (another loss offset ε, or one loss shared by every client)
where the case can tell such a fit from a wrong factor. ``accept=`` declares documented
deviations (:data:`ACCEPTABLE`): cases that differ only so are counted, not reported.

**Tolerance.** A quantity agrees when |got − want| ≤ atol·max(1, max|want|) + rtol·|want|
entrywise (integers and booleans exactly), with rtol and atol those of your code's precision
(:data:`fairagg.vectors.PRECISIONS`, the one definition the golden files' schema gives too):
``precision="float64"`` (default) 1e-9 both, room for another summation order or a QP solver's
last digits while any difference of formula shows far above it; ``"solver"`` 1e-6, an argmin
from an iterative or conic solver at its default accuracy; ``"float32"`` 1e-5. ``rtol`` and
``atol`` override them.

**Minimisation.** A failing hypothesis example is shrunk by hypothesis (fewer clients, fewer
coordinates, simpler numbers); a failing golden case is shrunk greedily (clients, coordinates
and rounds dropped while the difference remains). Examples are derandomized by default, so a
run is reproducible.

The pytest fixture ``fairagg_conformance`` (:mod:`fairagg.pytest_plugin`, enabled by
``pytest_plugins = ["fairagg.pytest_plugin"]`` in a conftest) does the same and fails the test
with the report. hypothesis is needed for the generated inputs (``pip install
'fairagg[conformance]'``); ``hypothesis=False`` checks the golden inputs alone.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import RULES, make_rule
from ._worker import Worker, WorkerError, WorkerRaised, WorkerSkipped, WorkerUsageError
from .vectors import (
    FORMULAS,
    NON_UNIQUE,
    PRECISIONS,
    RULE_EXCLUDE,
    _compute,
    case_inputs,
    resolved_params,
)

__all__ = [
    "ACCEPTABLE",
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "Adapter",
    "ConformanceError",
    "ConformanceReport",
    "Mismatch",
    "Row",
    "Skip",
    "Worker",
    "WorkerError",
    "check",
    "compare_results",
    "describe",
    "targets",
]

DEFAULT_RTOL = PRECISIONS["float64"]["rtol"]
DEFAULT_ATOL = PRECISIONS["float64"]["atol"]
#: Upper bound on the evaluations spent shrinking a failing golden case.
SHRINK_BUDGET = 400
#: The declared differences :func:`check` accepts (``accept=``): a case that differs only so
#: is counted in ``ConformanceReport.accepted`` and the check goes on.
ACCEPTABLE = {
    "epsilon": "another loss offset ε in q-FFL's F̃_k = F_k + ε (e.g. 1e-8 where fairagg has "
    "1e-10): accepted where fairagg, with one ε fitted to your results, agrees with yours on "
    "every round of the case",
    "nan-on-zero-update": "NaN in your outputs in a round where some client's update is all "
    "zero (0/0 in a normalisation, as FLGo's FedFV divides by ‖δ_k‖): the case is accepted "
    "from that round on, which starts from your NaN and is not compared",
}

Json = dict[str, Any]


# ------------------------------------------------------------------------------------ targets
def targets() -> list[str]:
    """Every name :func:`check` accepts: the registered rules, then the formula functions."""
    return list(RULES) + list(FORMULAS)


def _kind(target: Any) -> str:
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


def _formula_text(target: str) -> str:
    return RULES[target].summary if target in RULES else FORMULAS[target].formula


def _default_params(target: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter fairagg uses for a case: the function's defaults (formulas) or the built
    rule's hyper-parameters (rules), updated with the case's own; ``backend`` left out (the
    golden files' ``resolved_params``)."""
    return resolved_params(_kind(target), target, dict(params))


# ----------------------------------------------------------- independent restatements (terms)
# Each term function restates a formula in plain NumPy, term by term, with switches for the
# mistakes the harness recognises. With every switch at its default it must equal fairagg's
# implementation (the test suite checks it); the switched versions are the known mistakes.


def _qffl_terms(
    params: Any,
    updates: Any,
    losses: Any,
    q: float,
    lr: float,
    epsilon: float,
    *,
    scale_by_L: bool,
    static_step: bool = False,
    square: bool = True,
    with_eps: bool = True,
    with_L: bool = True,
) -> dict[str, Any]:
    theta, U, F = np.asarray(params, float), np.asarray(updates, float), np.asarray(losses, float)
    L = 1.0 / lr
    Dw = L * U if (scale_by_L and with_L) else U.copy()
    Ft = F + epsilon if with_eps else F.copy()
    with np.errstate(all="ignore"):
        Fq = np.ones_like(Ft) if q == 0 else Ft**q
        Delta = Fq[:, None] * Dw
        norm = np.einsum("ij,ij->i", Dw, Dw)
        if not square:
            norm = np.sqrt(norm)
        if static_step:
            h = np.full(F.size, L)
        elif q == 0 and with_eps:
            h = L * Fq
        else:  # literally, as code without ε computes it (0 · 0^(−1) is NaN)
            h = q * Ft ** (q - 1) * norm + L * Fq
        hs = h.sum()
        return {
            "L": L,
            "Delta_w": Dw,
            "F_tilde": Ft,
            "Delta": Delta,
            "h": h,
            "h_sum": hs,
            "weights": Fq / hs,
            "params": theta - Delta.sum(axis=0) / hs,
        }


def _project_terms(y: Any, total: float = 1.0, *, inclusive: bool = True) -> dict[str, Any]:
    """The sort-based projection; ``inclusive=False`` is the public q-FFL code's (fair_flearn,
    ``flearn/utils/model_utils.py``, ``project``): its ρ test sums u_i over i < j instead of
    i ≤ j, while τ still sums the first ρ entries."""
    v = np.asarray(y, float)
    u = np.sort(v)[::-1]
    j = np.arange(1, u.size + 1)
    css = np.cumsum(u)
    test = css if inclusive else np.concatenate([[0.0], css[:-1]])
    rho = int(np.nonzero(u + (total - test) / j > 0)[0][-1]) + 1
    tau = (total - css[rho - 1]) / rho
    return {"tau": tau, "out": np.maximum(v + tau, 0.0)}


def _clip_terms(y: Any, total: float = 1.0) -> dict[str, Any]:
    x = np.maximum(np.asarray(y, float), 0.0)
    with np.errstate(all="ignore"):
        return {"out": total * x / x.sum()}


def _afl_terms(
    params: Any,
    grads: Any,
    losses: Any,
    mixture: Any,
    lr: float,
    lambda_lr: float,
    *,
    inclusive: bool = True,
) -> dict[str, Any]:
    lam = np.asarray(mixture, float)
    g = lam @ np.asarray(grads, float)
    proj = _project_terms(lam + lambda_lr * np.asarray(losses, float), inclusive=inclusive)
    return {
        "tau": proj["tau"],
        "params": np.asarray(params, float) - lr * g,
        "mixture": proj["out"],
    }


def _aaggff_terms(
    params: Any,
    deltas: Any,
    p: Any,
    selected: Any,
    server_lr: float = 1.0,
    *,
    renormalise: bool = True,
) -> dict[str, Any]:
    ps = np.asarray(p, float)[np.asarray(selected)]
    q = ps / ps.sum() if renormalise else ps
    return {"weights": q, "params": np.asarray(params, float) - server_lr * q @ np.asarray(deltas)}


def _fedmgda_terms(
    deltas: Any,
    num_samples: Any,
    epsilon: float,
    server_lr: float = 1.0,
    *,
    normalise: bool = True,
    box: bool = True,
) -> dict[str, Any]:
    from .simplex import min_norm_weights

    D = np.asarray(deltas, float)
    n = np.asarray(num_samples, float)
    lam0 = n / n.sum()
    # ‖δ_k‖ at any scale: each row divided by its largest |entry| before squaring (a plain
    # norm underflows to 0 below about 1e-154, and fairagg takes ĝ_k of such a row)
    top = np.max(np.abs(D), axis=1)
    R = np.divide(D, top[:, None], out=np.zeros_like(D), where=top[:, None] > 0)
    r = np.linalg.norm(R, axis=1)
    with np.errstate(over="ignore"):
        norms = top * r
        inv = np.divide(1.0, norms, out=np.zeros(D.shape[0]), where=norms > 0)
    unit = np.divide(R, r[:, None], out=np.zeros_like(D), where=r[:, None] > 0)
    g = unit if normalise else D.copy()
    eps = epsilon if box else 1.0
    lo, hi = np.maximum(0.0, lam0 - eps), np.minimum(1.0, lam0 + eps)
    G = g @ g.T
    lam = lam0.copy() if eps == 0 else min_norm_weights(G, lower=lo, upper=hi).x
    return {
        "lambda0": lam0,
        "g_hat": g,
        "mixture": lam,
        "weights": server_lr * lam * (inv if normalise else np.ones_like(inv)),
        "min_norm": _norm(lam @ g),
        "inv_norms": inv,
    }


def _norm(v: np.ndarray) -> float:
    """‖v‖ without underflow or overflow of the squares."""
    top = float(np.max(np.abs(v), initial=0.0))
    return top * float(np.linalg.norm(v / top)) if top > 0 else 0.0


def _fedfv_terms(
    deltas: Any,
    losses: Any,
    alpha: float = 0.1,
    order: str = "loss",
    seed: int = 0,
    round_index: int = 0,
    variant: str = "paper",
    rescale: bool = True,
    *,
    reverse: bool = False,
    against_projected: bool = False,
) -> dict[str, Any]:
    """FedFV's Alg. 2 (no history) on d-vectors, as written: the order and kept set, the
    internal projections of each g̃_i onto the conflicting δ_j in order, ḡ and its rescaling.
    ``reverse`` sorts the losses the other way (order and kept set); ``against_projected``
    projects onto the already-projected g̃_j (updated in place) instead of the original δ_j."""
    from .rules.fedfv import RHO, _norms, fedfv_keep_count, fedfv_order

    D = np.asarray(deltas, dtype=np.float64)
    m = D.shape[0]
    perm = fedfv_order(m, losses, order, seed, round_index)
    if reverse:
        perm = perm[::-1].copy()
    kept = np.zeros(m, dtype=bool)
    kept[perm[m - fedfv_keep_count(m, alpha, variant) :]] = True
    norms = _norms(np.einsum("ij,ij->i", D, D))
    C = np.eye(m)
    G = D.copy()
    for i in range(m):
        if kept[i] or norms[i] == 0.0:
            continue
        g, size = D[i].copy(), norms[i]
        for j in perm:
            if j == i or norms[j] == 0.0:
                continue
            target = G[j] if against_projected else D[j]
            tn2 = float(target @ target)
            dot = float(target @ g)
            if tn2 > 0.0 and dot < -RHO * math.sqrt(tn2) * size:
                coef = dot / tn2
                g = g - coef * target
                C[i] -= coef * (C[j] if against_projected else np.eye(m)[j])
                size += abs(coef) * math.sqrt(tn2)
        G[i] = g
    g_bar = G.sum(axis=0) / m
    c = C.sum(axis=0) / m
    size = float(np.abs(c) @ norms)
    g_norm = float(np.linalg.norm(g_bar))
    if g_norm <= RHO * size:
        scale = 0.0
    elif not rescale:
        scale = 1.0
    else:
        scale = float(np.linalg.norm(D.sum(axis=0) / m)) / g_norm
    return {
        "order": perm,
        "kept": kept,
        "coefficients": C,
        "weights": c * scale,
        "direction": g_bar * scale,
    }


def _fedavg_terms(num_samples: Any, *, uniform: bool = False) -> dict[str, Any]:
    n = np.asarray(num_samples, float)
    return {"out": np.full(n.size, 1.0 / n.size) if uniform else n / n.sum()}


@dataclass(frozen=True)
class _Mutant:
    term: str
    message: str
    switches: Mapping[str, Any]


@dataclass(frozen=True)
class _Terms:
    """How a formula's terms are computed (``run(inputs, params, **switches)``), what each term
    is, and the known mistakes as switch settings."""

    run: Callable[..., dict[str, Any]]
    texts: Mapping[str, str]
    mutants: tuple[_Mutant, ...] = ()


_FEDFV_TEXTS = {
    "order": "the projection order: ascending losses, ties by arrival (Alg. 1, line 6)",
    "kept": "the ⌈α m⌉-ish highest-loss clients that keep δ_k (Alg. 2, line 1; SPEC §7)",
    "coefficients": "C: g̃_i = Σ_j C_ij δ_j after projecting g̃_i onto each conflicting δ_j",
    "weights": "a_k, the coefficient of δ_k in g",
    "direction": "g = ḡ ‖mean δ‖ / ‖ḡ‖, ḡ the mean of the g̃_i (Alg. 1, line 11)",
}
_FEDFV_MUTANTS = (
    _Mutant(
        "order",
        "the projection order is reversed (descending losses, so the kept set is the "
        "lowest-loss clients) where FedFV projects in ascending loss order",
        {"reverse": True},
    ),
    _Mutant(
        "coefficients",
        "projecting onto already-projected updates g̃_j where Alg. 2 projects each g̃_i onto "
        "the original δ_j",
        {"against_projected": True},
    ),
)


_Q_TEXTS = {
    "L": "L = 1/lr",
    "Delta_w": "Δw_k = L δ_k (q-FedAvg) or the gradient g_k (q-FedSGD)",
    "F_tilde": "F̃_k = F_k + ε (SPEC §2, ε = 1e-10)",
    "Delta": "Δ_k = F̃_k^q Δw_k",
    "h": "h_k = q F̃_k^{q−1} ‖Δw_k‖² + L F̃_k^q (q-FFL Alg. 1)",
    "h_sum": "Σ_k h_k",
    "weights": "F̃_k^q / Σ_j h_j, the weight on Δw_k",
    "params": "θ^{t+1} = θ^t − Σ_k Δ_k / Σ_k h_k",
}
_Q_MUTANTS = (
    _Mutant("h", "your norm is not squared (‖Δw_k‖ where h_k has ‖Δw_k‖²)", {"square": False}),
    _Mutant("F_tilde", "ε is missing (F̃_k = F_k where SPEC §2 has F_k + ε)", {"with_eps": False}),
)


def _qfedavg_run(i: Json, p: Json, **sw: Any) -> dict[str, Any]:
    return _qffl_terms(
        i["params"], i["deltas"], i["losses"], p["q"], p["lr"], p["epsilon"], scale_by_L=True, **sw
    )


def _qfedsgd_run(i: Json, p: Json, **sw: Any) -> dict[str, Any]:
    return _qffl_terms(
        i["params"],
        i["grads"],
        i["losses"],
        p["q"],
        p["lr"],
        p["epsilon"],
        scale_by_L=False,
        static_step=bool(p.get("static_step", False)),
        **sw,
    )


#: The restatement with no mistake switched on: the formula computed literally in float64.
_LITERAL = _Mutant("", "", {})

_OFF_BY_ONE = _Mutant(
    "tau",
    "off-by-one simplex projection, the public q-FFL code's (fair_flearn): its ρ test sums "
    "Σ_{i<j} u_i where the sort-based projection has Σ_{i≤j} u_i, so ρ can be too large and "
    "the result leaves the simplex (SPEC §3)",
    {"inclusive": False},
)

TERMS: dict[str, _Terms] = {
    "qfedavg_step": _Terms(
        _qfedavg_run,
        _Q_TEXTS,
        (
            *_Q_MUTANTS,
            _Mutant(
                "Delta_w", "L = 1/lr is missing (Δw_k = δ_k where it is L δ_k)", {"with_L": False}
            ),
        ),
    ),
    "qfedsgd_step": _Terms(_qfedsgd_run, _Q_TEXTS, _Q_MUTANTS),
    "project_simplex": _Terms(
        lambda i, p, **sw: (_clip_terms if sw.pop("clip", False) else _project_terms)(
            i["y"], p.get("total", 1.0), **sw
        ),
        {
            "tau": "τ = (total − Σ_{i≤ρ} u_i)/ρ, u sorted descending (SPEC §3)",
            "out": "x = max(y + τ, 0)",
        },
        (
            _OFF_BY_ONE,
            _Mutant(
                "out", "clipped and rescaled (max(y, 0)/Σ) instead of projected", {"clip": True}
            ),
        ),
    ),
    "afl_step": _Terms(
        lambda i, p, **sw: _afl_terms(
            i["params"], i["grads"], i["losses"], i["mixture"], p["lr"], p["lambda_lr"], **sw
        ),
        {
            "tau": "τ of the projection of λ + γ_λ F (SPEC §3)",
            "params": "θ − γ_w Σ_k λ_k g_k",
            "mixture": "λ ← Π_Δ(λ + γ_λ F)",
        },
        (_OFF_BY_ONE,),
    ),
    "aaggff_aggregate": _Terms(
        lambda i, p, **sw: _aaggff_terms(
            i["params"], i["deltas"], i["p"], i["selected"], p.get("server_lr", 1.0), **sw
        ),
        {
            "weights": "q_i = p_i / Σ_{j∈S} p_j (SPEC §5)",
            "params": "θ − η_s Σ_{i∈S} q_i δ_i",
        },
        (
            _Mutant(
                "weights",
                "weights not renormalised over the selected clients (q_i = p_i where SPEC §5 "
                "has p_i / Σ_{j∈S} p_j)",
                {"renormalise": False},
            ),
        ),
    ),
    "fedmgda_weights": _Terms(
        lambda i, p, **sw: _fedmgda_terms(
            i["deltas"], i["num_samples"], p["epsilon"], p.get("server_lr", 1.0), **sw
        ),
        {
            "lambda0": "λ0 = n_k / Σ_j n_j",
            "g_hat": "ĝ_k = δ_k / ‖δ_k‖ (0 for a zero δ_k)",
            "mixture": "λ* = argmin ‖Σ λ_k ĝ_k‖² over {λ ∈ Δ, |λ − λ0| ≤ ε} (SPEC §8)",
            "weights": "a_k = η λ*_k / ‖δ_k‖",
            "min_norm": "‖Σ λ*_k ĝ_k‖",
        },
        (
            _Mutant(
                "mixture",
                "ε is missing: the box |λ − n/Σn| ≤ ε is not applied (plain MGDA)",
                {"box": False},
            ),
            _Mutant(
                "g_hat",
                "the updates are not normalised (ĝ_k = δ_k where FedMGDA+ has δ_k/‖δ_k‖)",
                {"normalise": False},
            ),
        ),
    ),
    "fedfv_direction": _Terms(
        lambda i, p, **sw: _fedfv_terms(
            i["deltas"],
            i["losses"],
            **{
                k: p[k]
                for k in ("alpha", "order", "seed", "round_index", "variant", "rescale")
                if k in p
            },
            **sw,
        ),
        _FEDFV_TEXTS,
        _FEDFV_MUTANTS,
    ),
    "fedavg_weights": _Terms(
        lambda i, p, **sw: _fedavg_terms(i["num_samples"], **sw),
        {"out": "a_k = n_k / Σ_{j∈S} n_j (FairAvg eq. 4)"},
        (_Mutant("out", "the weights ignore n_k (1/m each, FairAvg's)", {"uniform": True}),),
    ),
}


def _round_formula(
    rule: str, theta: Any, r: Json, hyper: Json, state: Any = None
) -> tuple[str, Json, Json] | None:
    """A rule's round as a call of its formula (target, inputs, params), for terms and known
    mistakes at the rule level; None when the rule has none. ``state`` is what a stateful rule
    carries into the round (AFL: λ over all K clients)."""
    if rule == "afl":
        ids = np.asarray(r["client_ids"])
        lr = r["lr"] if hyper.get("lr") is None else hyper["lr"]
        inputs = {
            "params": theta,
            "grads": r["gradients"],
            "losses": r["losses"],
            "mixture": np.asarray(state, dtype=np.float64)[ids],
        }
        return "afl_step", inputs, {"lr": lr, "lambda_lr": hyper["lambda_lr"]}
    if rule in ("qfedavg", "qfedsgd"):
        lr = r["lr"] if hyper.get("lipschitz") is None else 1.0 / hyper["lipschitz"]
        key = "deltas" if rule == "qfedavg" else "gradients"
        inputs = {"params": theta, "deltas" if rule == "qfedavg" else "grads": r[key]}
        inputs["losses"] = r["losses"]
        params = {"q": hyper["q"], "lr": lr, "epsilon": hyper["epsilon"]}
        if rule == "qfedsgd":
            params["static_step"] = hyper.get("static_step", False)
        return ("qfedavg_step" if rule == "qfedavg" else "qfedsgd_step"), inputs, params
    if rule == "fedmgda":
        inputs = {"deltas": r["deltas"], "num_samples": r["num_samples"]}
        return "fedmgda_weights", inputs, {k: hyper[k] for k in ("epsilon", "server_lr")}
    if rule == "fedavg":
        return "fedavg_weights", {"num_samples": r["num_samples"]}, {}
    if rule == "fedfv" and hyper.get("tau", 0) == 0:  # Alg. 2 alone: no history window
        keys = ("alpha", "order", "seed", "variant", "rescale")
        params = {k: hyper[k] for k in keys if k in hyper}
        params["round_index"] = r["round_index"]
        return "fedfv_direction", {"deltas": r["deltas"], "losses": r["losses"]}, params
    return None


def _initial_state(rule: str, K: int) -> Any:
    """What a stateful rule with terms starts from (AFL: λ⁰ = 1/K)."""
    return np.full(K, 1.0 / K) if rule == "afl" else None


def _round_terms(
    rule: str, theta: Any, r: Json, hyper: Json, state: Any = None, **sw: Any
) -> dict[str, Any] | None:
    """A rule's terms for one round, named as the rule reports them (a stateful rule's state
    after the round under ``"_state"``)."""
    spec = _round_formula(rule, theta, r, hyper, state)
    if spec is None:
        return None
    name, inputs, params = spec
    out = dict(TERMS[name].run(inputs, params, **sw))
    th = np.asarray(theta, float)
    if rule == "afl":
        full = np.array(state, dtype=np.float64)
        full[np.asarray(r["client_ids"])] = out["mixture"]
        out["mixture"] = full
        out["weights"] = params["lr"] * inputs["mixture"]
        out["_state"] = full
        return out
    if rule == "qfedavg":
        out["weights"] = out["weights"] / params["lr"]  # the rule reports the weight on δ_k
    elif rule == "fedmgda":
        out["params"] = th - out["weights"] @ np.asarray(r["deltas"], float)
    elif rule == "fedavg":
        out = {"weights": out["out"], "params": th - out["out"] @ np.asarray(r["deltas"], float)}
    elif rule == "fedfv":
        out["params"] = th - out.pop("direction")
    return out


def _rule_terms_spec(rule: str) -> _Terms | None:
    name = {
        "qfedavg": "qfedavg_step",
        "qfedsgd": "qfedsgd_step",
        "fedmgda": "fedmgda_weights",
        "fedavg": "fedavg_weights",
        "afl": "afl_step",
        "fedfv": "fedfv_direction",
    }.get(rule)
    if name is None:
        return None
    t = TERMS[name]
    if rule == "fedavg":
        texts = {"weights": t.texts["out"], "params": "θ − Σ_k a_k δ_k"}
        mutants = tuple(_Mutant("weights", m.message, m.switches) for m in t.mutants)
        return _Terms(t.run, texts, mutants)
    if rule == "fedfv":  # θ^{t+1} = θ^t − g (terms with τ = 0, no history window)
        texts = {k: v for k, v in t.texts.items() if k != "direction"}
        return _Terms(t.run, {**texts, "params": "θ^{t+1} = θ^t − g"}, t.mutants)
    if rule == "qfedavg":  # the rule reports the weight on δ_k, not on Δw_k = L δ_k
        return _Terms(t.run, {**t.texts, "weights": "L F̃_k^q / Σ_j h_j, the weight on δ_k"},
                      t.mutants)  # fmt: skip
    return t


def describe(target: str) -> str:
    """What :func:`check` passes to a function checked against ``target`` and what it compares."""
    kind = _kind(target)
    lines = [f"{target} ({kind}): {_formula_text(target)}"]
    if kind == "formula":
        f = FORMULAS[target]
        params = _default_params(target, next(iter(f.cases(np.random.default_rng(0)).values()))[2])
        lines.append("inputs: " + ", ".join(f.args))
        lines.append("parameters: " + (", ".join(params) or "none"))
        terms = TERMS.get(target)
    else:
        spec = RULES[target]
        key = "gradients" if make_rule(target).local.report == "gradients" else "deltas"
        lines.append(
            f"each round: params (θ^t), {key}, num_samples, losses, accuracies, participations, "
            "client_ids, lr, round_index, num_clients"
            + (" (every client every round)" if spec.full_participation else "")
        )
        lines.append("hyper-parameters: " + (", ".join(_default_params(target, {})) or "none"))
        lines.append("returns θ^{t+1}; a dict may add the rule's info (e.g. weights)")
        terms = _rule_terms_spec(target)
    if terms is not None:
        lines.append("terms a returned dict may hold:")
        lines += [f"  {k}: {v}" for k, v in terms.texts.items()]
        lines.append("recognised mistakes:")
        lines += [f"  {m.term}: {m.message}" for m in terms.mutants]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ adapter
@dataclass(frozen=True)
class Adapter:
    """How fairagg's inputs reach your function, and how its result comes back.

    Attributes
    ----------
    rename : mapping
        fairagg's name → your argument name (``{"deltas": "updates"}``); the same names are
        read back from a returned dict.
    fixed : mapping
        Extra keyword arguments passed as they are on every call.
    outputs : str or sequence of str, optional
        fairagg's names for your result: one name for an array (default: the target's main
        output), a sequence for a tuple's items.
    call : callable, optional
        ``call(fn, inputs)`` makes the call itself from the dict of fairagg's inputs (every one
        of them, with fairagg's names) and returns the result.
    stateful : bool
        Rules only: your function is a factory called once per case (with ``params`` θ⁰,
        ``num_clients`` and the hyper-parameters) that returns the per-round function.
    """

    rename: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    outputs: str | Sequence[str] | None = None
    call: Callable[[Callable[..., Any], dict[str, Any]], Any] | None = None
    stateful: bool = False

    def __post_init__(self) -> None:
        for name in ("rename", "fixed"):
            if not isinstance(getattr(self, name), Mapping):
                raise TypeError(f"Adapter.{name} must be a mapping")
        if self.outputs is not None and not isinstance(self.outputs, str):
            if not isinstance(self.outputs, Sequence) or not all(
                isinstance(o, str) for o in self.outputs
            ):
                raise TypeError("Adapter.outputs must be a name or a sequence of names")
        if self.call is not None and not callable(self.call):
            raise TypeError("Adapter.call must be callable")
        if not isinstance(self.stateful, bool):
            raise TypeError("Adapter.stateful must be a bool")


def _fresh(value: Any) -> Any:
    """A copy the user's function may modify without touching fairagg's inputs."""
    return copy.deepcopy(value)


def _invoke(fn: Callable[..., Any], kwargs: dict[str, Any], adapter: Adapter, target: str) -> Any:
    kwargs = {k: _fresh(v) for k, v in kwargs.items()}
    if adapter.call is not None:
        return adapter.call(fn, kwargs)
    named = {adapter.rename.get(k, k): v for k, v in kwargs.items()}
    named.update(adapter.fixed)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: pass everything
        return fn(**named)
    ps = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ps.values()):
        return fn(**named)
    missing = [
        k
        for k, p in ps.items()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and k not in named
    ]
    if missing:
        raise _UsageError(
            TypeError(
                f"your function's argument{'s' if len(missing) > 1 else ''} "
                f"{', '.join(map(repr, missing))} {'are' if len(missing) > 1 else 'is'} not "
                f"among what the harness passes for {target!r}: {', '.join(sorted(named))}. "
                "Map names with Adapter(rename={fairagg_name: your_name}) or give a default"
            )
        )
    return fn(**{k: v for k, v in named.items() if k in ps})


class _UsageError(Exception):
    """A mistake in how check() is called (not a difference of formula): re-raised as is."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(str(exc))
        self.exc = exc


class Skip(Exception):  # noqa: N818 - the name users raise
    """Raise from your function for an input outside its domain by design: :func:`check`
    counts the case as skipped (``ConformanceReport.outside``) instead of reporting a
    difference. ``hypothesis.assume(False)`` inside your function does the same, and so does a
    worker's ``skip`` reply."""


class _Outside(Exception):  # noqa: N818 - a control-flow signal
    """The case is outside the user's domain (Skip, assume, a worker's skip, ``domain``)."""


def _is_assume(exc: BaseException) -> bool:
    return type(exc).__name__ == "UnsatisfiedAssumption" and type(exc).__module__.startswith(
        "hypothesis"
    )


def _named(
    result: Any, outputs: Sequence[str], known: Sequence[str], adapter: Adapter, target: str
) -> Json:
    """Your result as {fairagg name: value}: an array is the first of fairagg's ``outputs``, a
    tuple as long as ``outputs`` is read in their order."""
    primary = outputs[0]
    back = {v: k for k, v in adapter.rename.items()}
    if result is None:
        raise _UsageError(TypeError(f"your function returned None for {target!r}"))
    if isinstance(adapter.outputs, str):
        out = {adapter.outputs: result}
    elif adapter.outputs is not None:
        items = tuple(result) if isinstance(result, (tuple, list)) else None
        if items is None or len(items) != len(adapter.outputs):
            raise _UsageError(
                ValueError(
                    f"Adapter.outputs names {len(adapter.outputs)} items; your function "
                    f"returned {type(result).__name__}"
                    + (f" of {len(items)}" if items is not None else "")
                )
            )
        out = dict(zip(adapter.outputs, items, strict=True))
    elif isinstance(result, Mapping):
        out = {back.get(k, k): v for k, v in result.items()}
    elif hasattr(result, "_fields"):
        out = {back.get(k, k): getattr(result, k) for k in result._fields}
    elif isinstance(result, tuple) and len(result) == len(outputs):
        out = dict(zip(outputs, result, strict=True))
    elif isinstance(result, tuple):
        raise _UsageError(
            TypeError(
                f"your function returned a tuple of {len(result)} for {target!r}; name its items "
                f"with Adapter(outputs=(...)) from: {', '.join(known)}"
            )
        )
    else:
        out = {primary: result}
    # outputs fairagg has but does not compare (iteration counts, solver diagnostics)
    ignored = set(FORMULAS[target].exclude if target in FORMULAS else RULE_EXCLUDE)
    unknown = sorted(set(out) - set(known) - ignored)
    if unknown and (
        isinstance(result, Mapping) or hasattr(result, "_fields") or adapter.outputs is not None
    ):
        raise _UsageError(
            ValueError(
                f"your function returned {', '.join(map(repr, unknown))}, which {target!r} does "
                f"not have; it has: {', '.join(known)}"
            )
        )
    out = {k: v for k, v in out.items() if k in known}
    if not out:  # nothing would be compared: a check that cannot fail
        raise _UsageError(
            ValueError(f"your function returned nothing that {target!r} has: {', '.join(known)}")
        )
    return out


# --------------------------------------------------------------------------------- comparison
@dataclass(frozen=True)
class Mismatch:
    """The first difference found, on the minimised case.

    Attributes
    ----------
    target : str
    source : str
        ``"golden"`` or ``"hypothesis"``.
    case : str
        Which case: ``"golden case rules/qfedavg/extreme_losses"`` (with ``", shrunk"`` when
        clients, coordinates or rounds were dropped) or ``"a generated case (hypothesis,
        minimised)"``.
    quantity : str
        The first quantity that differs (a term, or an output such as ``params``), or
        ``"exception"`` when your function raised.
    formula : str
        What that quantity is.
    round : int or None
        The round of a rule case (0-based).
    got, want : object
        Your value and fairagg's.
    detail : str
        How they differ (largest difference and tolerance, shape, or the exception).
    diagnosis : str or None
        The recognised mistake your output matches, e.g. ``"h differs: your norm is not
        squared ..."``.
    inputs, params : dict
        The case: fairagg's inputs and every parameter.
    """

    target: str
    source: str
    case: str
    quantity: str
    formula: str
    round: int | None
    got: Any
    want: Any
    detail: str
    diagnosis: str | None
    inputs: Json
    params: Json

    def __str__(self) -> str:
        with np.printoptions(precision=17, floatmode="unique", threshold=60, linewidth=100):
            where = f" in round {self.round}" if self.round is not None else ""
            head = self.diagnosis or f"{self.quantity} differs"
            lines = [
                f"{self.target}: your implementation differs from fairagg on {self.case}{where}.",
                f"  {head}",
                f"  first differing quantity: {self.quantity}: {self.formula}",
                f"  {self.detail}",
                f"  yours:   {_show(self.got)}",
                f"  fairagg: {_show(self.want)}",
                "  case:",
            ]
            lines += [f"    {k} = {_show(v)}" for k, v in self.inputs.items() if k != "rounds"]
            for t, r in enumerate(self.inputs.get("rounds", [])):
                lines.append(f"    round {t}:")
                lines += [f"      {k} = {_show(v)}" for k, v in r.items()]
            if self.params:
                lines.append(
                    "  parameters: " + ", ".join(f"{k} = {v!r}" for k, v in self.params.items())
                )
        return "\n".join(lines)


def _show(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return np.array2string(v, separator=", ").replace("\n", "\n" + " " * 12)
    return repr(v)


class ConformanceError(AssertionError):
    """Raised by :func:`check` when your implementation differs; ``mismatch`` says where."""

    def __init__(self, mismatch: Mismatch) -> None:
        super().__init__(str(mismatch))
        self.mismatch = mismatch


@dataclass(frozen=True)
class ConformanceReport:
    """What :func:`check` ran: golden cases and generated examples compared, golden cases
    skipped (fairagg rejects their inputs, or they conflict with ``params``), cases outside
    your domain (``domain``, or your function skipped them), cases that differ only as
    declared (``accepted``, counted among those compared), the hyper-parameter ranges the
    generated examples drew (``drawn``), and the mismatch, if any. ``bool(report)`` is True
    when everything agreed."""

    target: str
    golden: int
    generated: int
    skipped: int
    mismatch: Mismatch | None
    outside: int = 0
    rows: tuple[Row, ...] = ()
    failed: int = 0
    not_returned: tuple[str, ...] = ()
    accepted: int = 0
    drawn: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.mismatch is None

    def __str__(self) -> str:
        if self.rows:
            return self._table()
        if self.mismatch is not None:
            return str(self.mismatch)
        return self._summary()

    def _summary(self) -> str:
        text = (
            f"{self.target}: conforms on {self.golden} golden cases and {self.generated} "
            f"generated examples ({self.skipped} golden cases skipped"
        )
        if self.outside:
            text += f"; {self.outside} cases outside your domain"
        if self.accepted:
            text += f"; {self.accepted} accepted as declared differences"
        text += ")"
        if self.generated and self.drawn:
            text += "; drawn: " + ", ".join(self.drawn)
        if self.not_returned:
            text += "; not checked, as your code did not return them: " + ", ".join(
                self.not_returned
            )
        return text

    def _table(self) -> str:
        """Every golden comparison, the generated ones summed up per round and quantity, a
        summary, and the first difference in detail."""
        golden = [r for r in self.rows if not r.case.startswith(_GENERATED_ROW)]
        generated: dict[tuple, list[Row]] = {}
        for r in self.rows:
            if r.case.startswith(_GENERATED_ROW):
                generated.setdefault((r.round, r.quantity), []).append(r)
        n_gen = len({r.case for r in self.rows if r.case.startswith(_GENERATED_ROW)})
        gen_label = f"generated ({n_gen} examples)"
        w = max([len(r.case) for r in golden] + [len(gen_label), 4])
        lines = [
            f"{'case':<{w}} {'round':>5}  {'quantity':<22} {'max abs':>9} {'max rel':>9}  "
            f"{'tolerance':<22} verdict"
        ]

        def num(x: float | None) -> str:
            return "" if x is None else f"{x:9.2e}"

        for r in golden:
            rnd = "" if r.round is None else str(r.round)
            lines.append(
                f"{r.case:<{w}} {rnd:>5}  {r.quantity:<22} {num(r.max_abs):>9} "
                f"{num(r.max_rel):>9}  {r.tolerance:<22} {r.verdict}"
            )
        for (rnd, k), rs in generated.items():
            a = [r.max_abs for r in rs if r.max_abs is not None]
            rel = [r.max_rel for r in rs if r.max_rel is not None]
            verdicts: dict[str, int] = {}
            for r in rs:
                verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
            verdict = ", ".join(f"{v} in {c}" for v, c in verdicts.items())
            lines.append(
                f"{gen_label:<{w}} {'' if rnd is None else rnd:>5}  {k:<22} "
                f"{num(max(a) if a else None):>9} {num(max(rel) if rel else None):>9}  "
                f"{rs[0].tolerance:<22} {verdict}"
            )
        not_returned = list(self.not_returned)
        lines.append("")
        verdict = "conforms" if not self.failed else f"differs on {self.failed} cases"
        lines.append(
            f"{self.target}: {verdict}; {self.golden} golden cases and {self.generated} generated "
            f"examples compared, {self.skipped} golden cases skipped, {self.outside} outside "
            f"your domain, {self.accepted} accepted as declared differences"
        )
        if self.generated and self.drawn:
            lines.append("generated examples drew: " + ", ".join(self.drawn))
        if not_returned:
            lines.append("not checked (your code did not return them): " + ", ".join(not_returned))
        if self.mismatch is not None:
            lines += ["", "the first difference:", str(self.mismatch)]
        return "\n".join(lines)


def _index(a: np.ndarray, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of the largest entry of ``a``, as plain ints."""
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(a)), shape)) if shape else ()


def _close(got: Any, want: Any, rtol: float, atol: float) -> str | None:
    """None when ``got`` agrees with ``want``; else how it differs. Equal entries agree (an
    infinity fairagg reports, and NaN where the other value is NaN too); otherwise an entry must
    be finite and within tolerance."""
    try:
        g = np.asarray(got)
        w = np.asarray(want)
    except Exception as exc:  # noqa: BLE001 - the user's object may fail to convert in any way
        return f"yours cannot be read as an array ({exc})"
    if g.dtype.kind not in "biuf":
        return f"yours is not numeric ({type(got).__name__})"
    if g.shape != w.shape:
        return f"shape {g.shape} where fairagg's is {w.shape}"
    if w.dtype.kind in "biu":
        return None if np.array_equal(g, w) else "the integers differ"
    g, w = g.astype(np.float64), w.astype(np.float64)
    if g.size == 0:
        return None
    finite_w = w[np.isfinite(w)]
    scale = max(1.0, float(np.max(np.abs(finite_w)))) if finite_w.size else 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(g - w)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        ok = same | (np.isfinite(g) & np.isfinite(w) & (err <= atol * scale + rtol * np.abs(w)))
    if np.all(ok):
        return None
    bad = ~ok
    idx = _index(bad, g.shape)
    if not (np.isfinite(g[idx]) and np.isfinite(w[idx])):
        return f"yours is {g[idx]} at index {idx} where fairagg's is {w[idx]}"
    e = np.where(bad, err, 0.0)
    idx = _index(e, g.shape)
    return (
        f"largest difference {float(e[idx]):.3g} at index {idx} (tolerance rtol = {rtol:g}, "
        f"atol = {atol:g} × {scale:.3g})"
    )


@dataclass(frozen=True)
class Row:
    """One line of a keep-going report: a quantity of a case (and round), compared.

    ``verdict`` is ``"agrees"``, ``"differs"``, ``"another minimiser"`` (an argmin that is not
    unique, and yours is one), ``"raised"`` (your code raised), ``"not returned"`` (fairagg
    has this output and yours did not return it: it was not checked), ``"outside your domain"``
    or ``"not compared"`` (a round after a difference: it starts from your θ). ``max_abs`` and
    ``max_rel`` are the largest differences over the entries (None where not computed)."""

    case: str
    round: int | None
    quantity: str
    max_abs: float | None
    max_rel: float | None
    tolerance: str
    verdict: str


def _differences(got: Any, want: Any) -> tuple[float | None, float | None]:
    """(largest |got − want|, largest |got − want| / |want|) over the entries, or Nones."""
    try:
        g = np.asarray(got, dtype=np.float64)
        w = np.asarray(want, dtype=np.float64)
    except (TypeError, ValueError):
        return None, None
    if g.shape != w.shape or g.size == 0:
        return None, None
    with np.errstate(all="ignore"):
        err = np.abs(g - w)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        err = np.where(same, 0.0, err)
        rel = np.where(same, 0.0, err / np.abs(w))
    err = np.where(np.isnan(err), np.inf, err)
    rel = np.where(np.isnan(rel), np.inf, rel)
    return float(np.max(err)), float(np.max(rel))


def _tolerance_text(want: Any, rtol: float, atol: float) -> str:
    w = np.asarray(want)
    if w.dtype.kind in "biu":
        return "exact"
    return f"rtol {rtol:g}, atol {atol:g}"


@dataclass
class _Diff:
    quantity: str
    formula: str
    round: int | None
    got: Any
    want: Any
    detail: str
    yours: list[Json] = field(default_factory=list)  # your named outputs of each round so far


_DIFF_FIELDS = ("quantity", "formula", "round", "got", "want", "detail")


def _first_diff(
    got: Json,
    want: Json,
    order: Sequence[str],
    texts: Mapping[str, str],
    rnd: int | None,
    tol,
    another_optimum: Callable[[str, Json], bool] | None = None,
) -> _Diff | None:
    for k in order:
        if k in got and k in want:
            why = _close(got[k], want[k], *tol)
            if why is not None and another_optimum is not None and another_optimum(k, got):
                continue  # a different minimiser of a problem whose argmin is not unique
            if why is not None:
                return _Diff(k, texts.get(k, ""), rnd, got[k], want[k], why)
    return None


# ------------------------------------------------------------------------ non-unique argmins
# Outputs whose argmin is not unique (vectors.NON_UNIQUE) pass when they are feasible, have
# fairagg's objective value and meet the KKT conditions (_min_norm_optimal). The unique
# quantities built from them (the min-norm vector, its norm, FedMGDA+'s θ^{t+1}) are still
# compared entry by entry.


def _min_norm_optimal(G: np.ndarray, lower: Any, upper: Any, lam: Any, value: float, tol) -> bool:
    """Whether ``lam`` minimises λᵀGλ over {Σλ = 1, lower ≤ λ ≤ upper} as fairagg's point does
    (objective ``value``): feasible, the same objective and the KKT conditions
    max_{λ_i > lower_i} (Gλ)_i ≤ min_{λ_i < upper_i} (Gλ)_i (a multiplier of Σλ = 1 exists),
    each to the comparison's tolerance scaled by m·max(1, max G_ii), the size of the error an
    entrywise tolerance on λ allows there. Feasibility and either condition alone prove
    optimality for this convex problem; both are checked. Anything not finite fails (a NaN
    compares False with every tolerance, so each test is written to pass only when true)."""
    rtol, atol = tol
    try:
        x = np.asarray(lam, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    m = G.shape[0]
    if x.shape != (m,) or not (np.all(np.isfinite(x)) and np.all(np.isfinite(G))):
        return False
    lo = np.broadcast_to(np.asarray(lower, dtype=np.float64), (m,))
    hi = np.broadcast_to(np.asarray(upper, dtype=np.float64), (m,))
    eps = atol + rtol
    if abs(float(x.sum()) - 1.0) > m * eps or np.any(x < lo - eps) or np.any(x > hi + eps):
        return False
    slack = m * eps * max(1.0, float(np.max(np.abs(np.diag(G)))))
    g = G @ x
    if not abs(float(x @ g) - value) <= slack:
        return False
    down, up = x > lo + eps, x < hi - eps
    return not (down.any() and up.any() and not float(g[down].max() - g[up].min()) <= slack)


def _fedmgda_problem(deltas: Any, num_samples: Any, epsilon: float, server_lr: float):
    """(G, lower, upper, 1/‖δ_k‖ or 0) of FedMGDA+'s QP, from the restated terms."""
    t = _fedmgda_terms(deltas, num_samples, epsilon, server_lr)
    G = t["g_hat"] @ t["g_hat"].T
    lam0 = t["lambda0"]
    return G, np.maximum(0.0, lam0 - epsilon), np.minimum(1.0, lam0 + epsilon), t["inv_norms"]


def _another_optimum(
    target: str, inputs: Json, params: Json, want: Json, tol
) -> Callable[[str, Json], bool] | None:
    """For a target of :data:`NON_UNIQUE`: a test of whether your output ``k`` is another
    minimiser of the case's problem (see :func:`_min_norm_optimal`). The problem is built only
    when an output differs from fairagg's."""
    if target not in NON_UNIQUE:
        return None
    key = {"min_norm_weights": "x", "pareto_certificate": "weights"}.get(target, "mixture")

    @functools.cache
    def problem() -> tuple[np.ndarray, Any, Any, np.ndarray | None, float]:
        scale_back = None
        if target == "min_norm_weights":
            G = np.asarray(inputs["gram"], dtype=np.float64)
            G = (G + G.T) / 2
            lo, hi = params.get("lower", 0.0), params.get("upper", np.inf)
        elif target == "pareto_certificate":
            grads = np.asarray(inputs["grads"], dtype=np.float64)
            G, lo, hi = grads @ grads.T, 0.0, np.inf
        else:  # FedMGDA+, the formula or a round of the rule (ĝ_k are unit vectors)
            eta = float(params.get("server_lr", 1.0))
            G, lo, hi, inv = _fedmgda_problem(
                inputs["deltas"], inputs["num_samples"], params["epsilon"], eta
            )
            scale_back = eta * inv
        lam_want = np.asarray(want[key], dtype=np.float64)
        return G, lo, hi, scale_back, float(lam_want @ G @ lam_want)

    def check(k: str, got: Json) -> bool:
        if k != key and not (k == "weights" and key == "mixture" and key in got):
            return False
        G, lo, hi, scale_back, value = problem()
        if not _min_norm_optimal(G, lo, hi, got[key], value, tol):
            return False
        if k == key:
            return True
        # FedMGDA+'s weights are η λ_k/‖δ_k‖ of *your* λ, itself a minimiser
        mine = scale_back * np.asarray(got[key], dtype=np.float64)
        return _close(got[k], mine, *tol) is None

    return check


def _all_finite(got: Json) -> bool:
    """Every numeric output in ``got`` is finite (non-numeric values are not judged here)."""
    for v in got.values():
        try:
            a = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            continue
        if not np.all(np.isfinite(a)):
            return False
    return True


def _agrees(got: Json, other: Json, tol) -> bool:
    common = [k for k in got if k in other]
    return bool(common) and all(_close(got[k], other[k], *tol) is None for k in common)


# ---------------------------------------------------------------------------------- evaluation
def _WORKER_CALL(thunk: Callable[[], Any]) -> Any:  # noqa: N802 - a marker used as a function
    """Marks a call of the worker in _Checker._user (the thunk makes the request)."""
    return thunk()


@dataclass(frozen=True)
class _Case:
    source: str
    label: str
    inputs: Json
    params: Json  # the case's own parameters (hyper for rules); defaults are added at run time


#: What a rule's reported outputs are (its ``info``), for the report's description line.
_INFO_TEXTS = {
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


class _Checker:
    """One target and one user function: runs a case and finds the first difference."""

    def __init__(
        self,
        fn: Callable[..., Any] | Worker,
        target: str,
        adapter: Adapter,
        fixed: Json,
        tol: tuple,
        round_base: int = 0,
        domain: Callable[[Json, Json], Any] | None = None,
        accept: frozenset[str] = frozenset(),
    ) -> None:
        self.fn, self.target, self.adapter, self.fixed, self.tol = fn, target, adapter, fixed, tol
        self.round_base, self.domain, self.accept = round_base, domain, accept
        self.fits = False  # the fitted diagnoses (ε, a shared loss): for the final mismatch
        self.worker = fn if isinstance(fn, Worker) else None
        self.rows: list[Row] | None = None  # a list while keeping going: every comparison
        self.not_returned: set[str] = set()  # fairagg's outputs your code never returned
        self._sessions = 0
        self.kind = _kind(target)
        self.terms = TERMS.get(target) if self.kind == "formula" else _rule_terms_spec(target)
        self.texts = {k: _formula_text(target) for k in ("params", "out")}
        if self.kind == "rule":
            self.texts.update({k: v for k, v in _INFO_TEXTS.items() if k != "params"})
        if self.terms is not None:
            self.texts.update(self.terms.texts)

    def params_of(self, case: _Case) -> Json | None:
        """Every parameter of the case, or None if the case conflicts with the fixed ones."""
        own = dict(case.params)
        for k, v in self.fixed.items():
            if k in own and own[k] != v:
                return None
            own[k] = v
        return _default_params(self.target, own)

    def reference(self, case: _Case) -> Json | None:
        """fairagg's outputs, or None when fairagg rejects the case."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)  # an overflow rejects the case
                return _compute(self.kind, self.target, case.inputs, {**case.params, **self.fixed})
        except (ValueError, TypeError, ArithmeticError, RuntimeWarning):
            return None

    def _row(self, case: _Case, rnd: int | None, k: str, got: Any, want: Any, verdict: str):
        if self.rows is None:
            return
        a, r = _differences(got, want) if verdict in ("agrees", "differs") else (None, None)
        tol = _tolerance_text(want, *self.tol) if want is not None else ""
        self.rows.append(Row(case.label, rnd, k, a, r, tol, verdict))

    def _rows_for(self, case, rnd, got, full, order, other) -> None:
        """Rows of one comparison: every quantity fairagg has, in the formula's order."""
        if self.rows is None:
            return
        for k in [*order, *[k for k in full if k not in order]]:
            if k not in full or k.startswith("_"):
                continue
            if k not in got:
                if k in RULE_EXCLUDE:
                    continue
                self._row(case, rnd, k, None, full[k], "not returned")
                continue
            ok = _close(got[k], full[k], *self.tol) is None
            verdict = "agrees" if ok else "differs"
            if not ok and other is not None and other(k, got):
                verdict = "another minimiser"
            self._row(case, rnd, k, got[k], full[k], verdict)

    def run(self, case: _Case) -> tuple[str, Mismatch | None]:
        """(status, the mismatch or None). Status: ``"rejected"`` (fairagg rejects the case or
        it conflicts with the fixed parameters), ``"outside"`` (outside your domain: ``domain``
        says so, or your function skipped it), ``"accepted"`` (it differs only as ``accept``
        declares), ``"checked"``."""
        start = len(self.rows) if self.rows is not None else 0
        params = self.params_of(case)
        want = None if params is None else self.reference(case)
        if params is None or want is None:
            return "rejected", None
        if self.domain is not None:
            try:
                inside = self.domain(_fresh(case.inputs), dict(params))
            except Exception as exc:  # noqa: BLE001 - the user's predicate failed
                raise _UsageError(TypeError(f"domain raised {type(exc).__name__}: {exc}")) from None
            if not inside:
                self._row(case, None, "(case)", None, None, "outside your domain")
                return "outside", None
        try:
            if self.kind == "formula":
                diff = self._compare_formula(case, params, want)
            else:
                diff = self._compare_rule(case, params, want)
        except _Outside:
            self._row(case, None, "(case)", None, None, "outside your domain")
            return "outside", None
        if diff is None:
            return "checked", None
        reason = self._accepted(case, params, diff, start)
        if reason is not None:
            self._row(case, diff.round, "(case)", None, None, f"accepted: {reason}")
            return "accepted", None
        shared = {f: getattr(diff, f) for f in _DIFF_FIELDS}
        diagnosis = self._diagnose(case, params, diff)
        return "checked", Mismatch(
            self.target, case.source, case.label, **shared, diagnosis=diagnosis,
            inputs=case.inputs, params=params,
        )  # fmt: skip

    # calls --------------------------------------------------------------------------------
    def _user(self, fn: Callable[..., Any], kwargs: Json) -> Any:
        """Your function's result; a skip (``Skip``, ``assume``, a worker's) is _Outside, a
        refusal of the request as written a _UsageError, and what your code raises a
        WorkerRaised or its own exception."""
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                return (
                    fn(kwargs)
                    if fn is _WORKER_CALL
                    else _invoke(fn, kwargs, self.adapter, self.target)
                )
        except (Skip, WorkerSkipped):
            raise _Outside from None
        except (WorkerUsageError, WorkerError) as exc:
            raise _UsageError(exc) from None
        except Exception as exc:
            if _is_assume(exc):
                raise _Outside from None
            raise

    def _call_formula(self, kwargs: Json) -> Any:
        if self.worker is not None:
            worker, target = self.worker, self.target
            return self._user(_WORKER_CALL, lambda: worker.call(target, kwargs))
        return self._user(self.fn, kwargs)

    def _start_rule(self, init: Json) -> tuple[Callable[[Json], Any], Callable[[], None]]:
        """(the per-round call, the end of the case) for one case of a rule."""
        if self.worker is not None:
            worker, target = self.worker, self.target
            self._sessions += 1
            sid = self._sessions
            self._user(_WORKER_CALL, lambda: worker.start(target, sid, init))
            return (
                lambda kw: self._user(_WORKER_CALL, lambda: worker.round(target, sid, kw)),
                lambda: self._user(_WORKER_CALL, lambda: worker.end(target, sid)),
            )
        step = self.fn
        if self.adapter.stateful:
            step = self._user(self.fn, init)
            if not callable(step):
                raise _UsageError(
                    TypeError(
                        "with Adapter(stateful=True) your function must return the per-round "
                        f"function; it returned {type(step).__name__}"
                    )
                )
        return (lambda kw: self._user(step, kw)), (lambda: None)

    def _known(self, outputs: Sequence[str]) -> list[str]:
        return list(dict.fromkeys([*outputs, *(self.terms.texts if self.terms else ())]))

    def _order(self, outputs: Sequence[str]) -> list[str]:
        """Terms in the order the formula computes them, then the remaining outputs."""
        terms = list(self.terms.texts) if self.terms else []
        return [*terms, *[k for k in outputs if k not in terms]]

    @staticmethod
    def _raised(exc: BaseException, rnd: int | None) -> _Diff:
        what = str(exc) if isinstance(exc, WorkerRaised) else f"{type(exc).__name__}: {exc}"
        return _Diff("exception", "", rnd, what, "a result", f"your function raised {what}")

    def _compare_formula(self, case: _Case, params: Json, want: Json) -> _Diff | None:
        outputs = list(want)
        try:
            result = self._call_formula({**case.inputs, **params})
        except (_UsageError, _Outside):
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the user's code is a finding
            self._row(case, None, "exception", None, None, "raised")
            return self._raised(exc, None)
        got = _named(result, outputs, self._known(outputs), self.adapter, self.target)
        full = dict(want)
        if self.terms is not None and set(got) - set(want):
            with np.errstate(all="ignore"):
                extra = self.terms.run(case.inputs, params)
            full.update({k: v for k, v in extra.items() if k not in full})
        other = _another_optimum(self.target, case.inputs, params, want, self.tol)
        self.not_returned.update(k for k in want if k not in got)
        self._rows_for(case, None, got, full, self._order(outputs), other)
        diff = _first_diff(got, full, self._order(outputs), self.texts, None, self.tol, other)
        if diff is not None:
            diff.yours = [got]
        return diff

    def _compare_rule(self, case: _Case, params: Json, want: Json) -> _Diff | None:
        K = int(case.inputs["num_clients"])
        theta = np.asarray(case.inputs["params0"], dtype=np.float64)
        yours: list[Json] = []
        try:
            step, end = self._start_rule({"params": theta, "num_clients": K, **params})
        except (_UsageError, _Outside):
            raise
        except Exception as exc:  # noqa: BLE001
            self._row(case, 0, "exception", None, None, "raised")
            return self._raised(exc, 0)
        try:
            return self._rounds(case, params, want, step, theta, K, yours)
        finally:
            end()

    def _rounds(self, case, params, want, step, theta, K, yours) -> _Diff | None:
        for t, (r, w) in enumerate(zip(case.inputs["rounds"], want["rounds"], strict=True)):
            fields = {k: v for k, v in r.items() if v is not None}
            if "round_index" in fields:  # the outside code's numbering (round_base)
                fields["round_index"] = int(fields["round_index"]) + self.round_base
            # a hyper-parameter named like a report field (AFL's lr) replaces it when set
            hyper = {k: v for k, v in params.items() if not (k in fields and v is None)}
            try:
                result = step({"params": theta, **fields, "num_clients": K, **hyper})
            except (_UsageError, _Outside):
                raise
            except Exception as exc:  # noqa: BLE001
                self._row(case, t, "exception", None, None, "raised")
                self._after(case, t, len(want["rounds"]))
                return self._raised(exc, t)
            outputs = list(w)
            got = _named(result, outputs, self._known(outputs), self.adapter, self.target)
            if "params" not in got:
                raise _UsageError(ValueError("a rule's function must return params, θ^{t+1}"))
            yours.append(got)
            full = dict(w)
            if self.terms is not None and set(got) - set(w):
                before = want["rounds"][t - 1].get("mixture") if t else None
                if before is None:
                    before = _initial_state(self.target, K)
                with np.errstate(all="ignore"):
                    extra = _round_terms(self.target, theta, r, params, before) or {}
                full.update({k: v for k, v in extra.items() if k not in full})
            other = None
            if self.target == "fedmgda":
                other = _another_optimum(self.target, r, params, w, self.tol)
            self.not_returned.update(k for k in w if k not in got and k not in RULE_EXCLUDE)
            self._rows_for(case, t, got, full, self._order(outputs), other)
            diff = _first_diff(got, full, self._order(outputs), self.texts, t, self.tol, other)
            if diff is not None:
                diff.yours = yours
                self._after(case, t, len(want["rounds"]))
                return diff
            theta = np.asarray(got["params"], dtype=np.float64)
        return None

    def _after(self, case: _Case, t: int, rounds: int) -> None:
        """The rounds after a difference start from your θ, not fairagg's: not compared."""
        for u in range(t + 1, rounds):
            self._row(case, u, "(round)", None, None, "not compared")

    # declared differences -----------------------------------------------------------------
    def _accepted(self, case: _Case, params: Json, diff: _Diff, start: int) -> str | None:
        """Why the difference is one ``accept`` declares, or None."""
        if not diff.yours:
            return None
        if "nan-on-zero-update" in self.accept:
            got = diff.yours[-1]
            nan = False
            for v in got.values():
                try:
                    nan = nan or bool(np.any(np.isnan(np.asarray(v, dtype=np.float64))))
                except (TypeError, ValueError):
                    continue
            if nan and _has_zero_update(case, diff.round):
                return "NaN in a round with an all-zero update (nan-on-zero-update)"
        if "epsilon" in self.accept and "epsilon" not in case.params:
            rounds = _q_rounds(self.target, case, params, diff.yours)
            eps = _fit_epsilon(
                rounds,
                float(params["epsilon"]),
                self.tol,
                continuous=_identifiable(rounds, self.tol),
            )
            if eps is None:
                return None
            fixed, accept = self.fixed, self.accept
            self.fixed, self.accept = {**fixed, "epsilon": eps}, frozenset()
            if self.rows is not None:
                del self.rows[start:]
            try:
                status, again = self.run(case)
            finally:
                self.fixed, self.accept = fixed, accept
            if status == "checked" and again is None:
                return f"another loss offset, epsilon = {eps:.3g} (epsilon)"
            if self.rows is not None:  # the rows of the first comparison, again
                del self.rows[start:]
                self.accept = frozenset()
                try:
                    self.run(case)
                finally:
                    self.accept = accept
        return None

    # diagnosis ----------------------------------------------------------------------------
    def _diagnose(self, case: _Case, params: Json, diff: _Diff) -> str | None:
        """The known mistake whose results agree with yours on every round so far. First, if
        yours equals the formula computed literally in float64 (the restatement with no
        mistake), the difference is float64's range, not a mistake: a NaN there would match
        any mistake that makes the same NaN. A non-finite output no restatement explains is
        said as such."""
        if not diff.yours:
            return None
        finite = all(_all_finite(got) for got in diff.yours)
        literal = (
            f"{diff.quantity}: yours is the formula computed literally in float64, which "
            "over- or underflows on this case (a power or square out of range, then divided "
            "by); fairagg computes it in a scaled or log form (SPEC §2), and so must a "
            "reference"
        )
        if self.terms is not None and self._mistake_agrees(case, params, diff, _LITERAL):
            return literal
        for m in self.terms.mutants if self.terms is not None else ():
            if self._mistake_agrees(case, params, diff, m):
                return f"{m.term} differs: {m.message}"
        fitted = self._fitted(case, params, diff) if self.fits and finite else None
        if fitted is not None:
            return fitted
        if not finite:
            return (
                f"{diff.quantity} is not finite in yours where fairagg's is: an overflow, a "
                "square or power that underflowed to 0 and was divided by, or 0/0 on a zero "
                "update"
            )
        return None

    def _fitted(self, case: _Case, params: Json, diff: _Diff) -> str | None:
        """A difference explained by one fitted number: another ε, or one loss for all."""
        if self.target not in _LOSS_OFFSET:
            return None
        rounds = _q_rounds(self.target, case, params, diff.yours)
        identifiable = _identifiable(rounds, self.tol)
        eps = _fit_epsilon(rounds, float(params["epsilon"]), self.tol, continuous=identifiable)
        if eps is not None:
            return (
                f"F_tilde differs: your loss offset is ε = {eps:.3g} where this case has "
                f"epsilon = {float(params['epsilon']):g} (F̃_k = F_k + ε, SPEC §2): fairagg with "
                f"epsilon = {eps:.3g} agrees with yours on every round compared. Check with "
                f"params={{'epsilon': {eps:.3g}}} (--param epsilon={eps:.3g}) if your code "
                "fixes it, or declare it with accept=['epsilon'] (--accept epsilon)"
            )
        shared = _fit_shared_loss(rounds, self.tol) if identifiable else None
        if shared is not None:
            return (
                "F_tilde differs: your step uses one loss for every client (F̃ = "
                f"{shared[-1]:.6g} fits yours{_in_round(diff.round)}), where q-FFL weighs "
                "each client k by its own F̃_k = F_k + ε (Alg. 1); Flower's QFedAvg does "
                "so with the global model's loss, evaluated once on the server"
            )
        return None

    def _mistake_agrees(self, case: _Case, params: Json, diff: _Diff, m: _Mutant) -> bool:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                if self.kind == "formula":
                    return _agrees(
                        diff.yours[0], self.terms.run(case.inputs, params, **m.switches), self.tol
                    )
                return self._rule_mutant_agrees(case, params, diff.yours, m)
        except Exception:  # noqa: BLE001 - a mistake that cannot run on this case
            return False

    def _rule_mutant_agrees(self, case: _Case, params: Json, yours: list[Json], m: _Mutant) -> bool:
        theta = np.asarray(case.inputs["params0"], dtype=np.float64)
        state = _initial_state(self.target, int(case.inputs["num_clients"]))
        for r, got in zip(case.inputs["rounds"], yours, strict=False):
            mut = _round_terms(self.target, theta, r, params, state, **m.switches)
            if mut is None or not _agrees(got, mut, self.tol):
                return False
            theta, state = mut["params"], mut.get("_state")
        return True


# ------------------------------------------------------------------------ fitted diagnoses
#: Targets whose ``epsilon`` is q-FFL's loss offset F̃_k = F_k + ε (SPEC §2).
_LOSS_OFFSET = ("qfedavg", "qfedsgd", "qfedavg_step", "qfedsgd_step")
#: The ε values tried first, the offsets public q-FFL codes use among them.
_EPS_GRID = (0.0, *(c * 10.0**k for k in range(-16, 0) for c in (1.0, 2.0, 5.0)))


def _q_rounds(target: str, case: _Case, params: Json, yours: list[Json]) -> list[tuple]:
    """Each compared round of a q-FFL case as (formula, inputs, params, your outputs); a rule's
    round starts from your θ of the round before, so each round is judged on its own."""
    if target in FORMULAS:
        return [(target, case.inputs, params, yours[0])]
    out = []
    theta = np.asarray(case.inputs["params0"], dtype=np.float64)
    for r, got in zip(case.inputs["rounds"], yours, strict=False):
        spec = _round_formula(target, theta, r, params)
        if spec is None or "params" not in got:
            return []
        out.append((*spec, got))
        try:
            theta = np.asarray(got["params"], dtype=np.float64)
        except (TypeError, ValueError):
            return []
    return out


def _in_round(rnd: int | None) -> str:
    return "" if rnd is None else f" in round {rnd}"


def _has_zero_update(case: _Case, rnd: int | None) -> bool:
    """Whether the case (a rule's round ``rnd``) has a client whose update is all zero."""
    src = case.inputs if rnd is None else case.inputs["rounds"][rnd]
    for key in ("deltas", "grads", "gradients"):
        if key in src:
            U = np.asarray(src[key], dtype=np.float64)
            if U.ndim == 2 and U.shape[1] and np.any(np.all(U == 0, axis=1)):
                return True
    return False


def _params_error(got: Any, want: Any, tol: tuple) -> float:
    """max |got − want| / (atol·max(1, max|want|) + rtol·|want|): at most 1 where they agree
    (:func:`_close`), inf where either is not finite or the shapes differ."""
    rtol, atol = tol
    try:
        g = np.asarray(got, dtype=np.float64)
        w = np.asarray(want, dtype=np.float64)
    except (TypeError, ValueError):
        return math.inf
    if g.shape != w.shape or not (np.all(np.isfinite(g)) and np.all(np.isfinite(w))):
        return math.inf
    if g.size == 0:
        return 0.0
    scale = max(1.0, float(np.max(np.abs(w))))
    return float(np.max(np.abs(g - w) / (atol * scale + rtol * np.abs(w))))


def _identifiable(rounds: list[tuple], tol: tuple) -> bool:
    """Whether a one-number fit can tell anything: not when each round's step of yours is a
    multiple of fairagg's (one client, one coordinate, parallel updates), as a wrong factor
    anywhere in the step then fits as well as another ε or one shared loss."""
    for name, inputs, p, got in rounds:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                ref = _compute("formula", name, inputs, p)
            theta = np.asarray(inputs["params"], dtype=np.float64)
            a = theta - np.asarray(ref["params"], dtype=np.float64)
            b = theta - np.asarray(got["params"], dtype=np.float64)
        except (ValueError, TypeError, ArithmeticError):
            return False
        aa = float(a @ a) if a.shape == b.shape else 0.0
        if not (aa > 0 and math.isfinite(aa)):
            continue
        s = float(a @ b) / aa
        if _params_error(got["params"], theta - s * a, tol) > 1.0:
            return True
    return False


def _epsilon_error(rounds: list[tuple], eps: float, tol: tuple) -> float:
    """The largest :func:`_params_error` of θ^{t+1} over the rounds with ε = ``eps``."""
    worst = 0.0
    for name, inputs, p, got in rounds:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                ref = _compute("formula", name, inputs, {**p, "epsilon": eps})
        except (ValueError, TypeError, ArithmeticError):
            return math.inf
        worst = max(worst, _params_error(got["params"], ref["params"], tol))
    return worst


def _fit_epsilon(
    rounds: list[tuple], current: float, tol: tuple, *, continuous: bool = True
) -> float | None:
    """An ε ≠ ``current`` with which fairagg's θ^{t+1} agrees with yours on every round, or
    None when no ε explains yours. With ``continuous``, the minimiser of the difference over
    log10 ε near the best value of :data:`_EPS_GRID` (ε = 0 if that fits best); without it,
    the value of the grid that fits best, if it agrees. A round value such as 1e-8 is evidence
    even on a case where a one-number fit could explain any difference of size
    (:func:`_identifiable`), as a wrong factor elsewhere would not land on one; a fitted,
    unround value is evidence only on an identifiable case."""
    if not rounds:
        return None
    errors = [(_epsilon_error(rounds, eps, tol), eps) for eps in _EPS_GRID if eps != current]
    best_err, best = min(errors)
    if not math.isfinite(best_err):
        return None
    if not continuous or best == 0.0:
        return best if best_err <= 1.0 else None
    from scipy.optimize import minimize_scalar

    x0 = math.log10(best)
    res = minimize_scalar(
        lambda x: min(_epsilon_error(rounds, 10.0**x, tol), 1e300),
        bounds=(x0 - 0.5, x0 + 0.5),
        method="bounded",
        options={"xatol": 1e-9},
    )
    eps = float(10.0**res.x)
    if eps != current and _epsilon_error(rounds, eps, tol) <= 1.0:
        return eps
    return None


def _fit_shared_loss(rounds: list[tuple], tol: tuple) -> list[float] | None:
    """The one loss F̃ per round with which θ^{t+1} = θ^t − Σ_k Δw_k / (q/F̃ Σ_k ‖Δw_k‖² + m L)
    (q-FFL with F̃_k = F̃ for every client: F̃^q cancels) agrees with yours on every round;
    None when no positive F̃ does, or when the clients' own losses already agree (equal
    losses)."""
    shared = []
    for _name, inputs, p, got in rounds:
        q, L = float(p["q"]), 1.0 / float(p["lr"])
        U = np.asarray(inputs.get("deltas", inputs.get("grads")), dtype=np.float64)
        Dw = L * U if "deltas" in inputs else U
        theta = np.asarray(inputs["params"], dtype=np.float64)
        try:
            mine = np.asarray(got["params"], dtype=np.float64)
        except (TypeError, ValueError):
            return None
        if q <= 0 or mine.shape != theta.shape or p.get("static_step"):
            return None
        with np.errstate(all="ignore"):
            S = Dw.sum(axis=0)
            step = theta - mine
            ss = float(S @ S)
            if not (ss > 0 and math.isfinite(ss)):
                return None
            c = float(step @ S) / ss  # θ − θ' = c S
            denom = 1.0 / c - Dw.shape[0] * L if c > 0 else -1.0
            F = q * float(np.einsum("ij,ij->", Dw, Dw)) / denom if denom > 0 else -1.0
        if not (F > 0 and math.isfinite(F)):
            return None
        if _params_error(mine, theta - c * S, tol) > 1.0:
            return None
        losses = np.asarray(inputs["losses"], dtype=np.float64) + float(p["epsilon"])
        if np.all(np.abs(losses - F) <= tol[1] * max(1.0, F) + tol[0] * F):
            return None  # every client's own loss is F̃: no difference to explain
        shared.append(F)
    return shared or None


# ----------------------------------------------------------------------------------- shrinking
_M_AXIS = {
    "losses", "num_samples", "weights", "mixture", "p", "prior", "accuracies", "participations",
    "y", "b", "r", "r_check", "grad_sum", "selected", "responses",
}  # fmt: skip
_MM_AXIS = {"gram", "A"}
_MD_AXIS = {"deltas", "grads", "gradients"}
_D_AXIS = {"params", "average", "momentum", "params0"}


def _drop(a: Any, i: int, axes: tuple[int, ...]) -> Any:
    for ax in axes:
        a = np.delete(a, i, axis=ax)
    return a


def _formula_smaller(case: _Case) -> Iterable[_Case]:
    """Each case with one client (m axis) or one coordinate (d axis) fewer."""
    inp, par = case.inputs, case.params
    cuts = _M_AXIS | _MD_AXIS | _MM_AXIS
    if "p" in inp and "selected" in inp:  # p is over all K clients; the m axis is S
        cuts = cuts - {"p"}
    sizes = {np.asarray(v).shape[0] for k, v in {**inp, **par}.items() if k in cuts}
    if len(sizes) == 1 and (m := sizes.pop()) > 1:

        def cut(d: Json, i: int) -> Json:
            return {
                k: _drop(v, i, (0, 1) if k in _MM_AXIS else (0,))
                if k in cuts and isinstance(v, np.ndarray)
                else v
                for k, v in d.items()
            }

        for i in range(m):
            yield _Case(case.source, case.label, cut(inp, i), cut(par, i))
    dsizes = {np.asarray(v).shape[-1] for k, v in inp.items() if k in _MD_AXIS | _D_AXIS}
    if len(dsizes) == 1 and (d := dsizes.pop()) > 1:
        for j in range(d):
            yield _Case(
                case.source,
                case.label,
                {
                    k: _drop(v, j, (v.ndim - 1,)) if k in _MD_AXIS | _D_AXIS else v
                    for k, v in inp.items()
                },
                par,
            )


def _rule_smaller(case: _Case) -> Iterable[_Case]:
    """Each case with one round, one client or one coordinate fewer."""
    inp = case.inputs
    rounds = inp["rounds"]
    K = int(inp["num_clients"])
    for t in range(len(rounds) - 1, -1, -1):
        if len(rounds) > 1:
            yield _Case(
                case.source,
                case.label,
                {**inp, "rounds": rounds[:t] + rounds[t + 1 :]},
                case.params,
            )
    if K > 1:
        for k in range(K):
            new = []
            for r in rounds:
                ids = np.asarray(r["client_ids"])
                keep = ids != k
                if not keep.any():
                    break
                nr = {
                    f: (np.asarray(v)[keep] if isinstance(v, np.ndarray) and v.ndim >= 1 else v)
                    for f, v in r.items()
                }
                nr["client_ids"] = np.where(ids[keep] > k, ids[keep] - 1, ids[keep])
                new.append(nr)
            else:
                yield _Case(
                    case.source,
                    case.label,
                    {**inp, "num_clients": K - 1, "rounds": new},
                    case.params,
                )
    d = np.asarray(inp["params0"]).size
    if d > 1:
        for j in range(d):
            new = [
                {
                    f: (np.delete(v, j, axis=1) if f in _MD_AXIS and v is not None else v)
                    for f, v in r.items()
                }
                for r in rounds
            ]
            yield _Case(
                case.source,
                case.label,
                {**inp, "params0": np.delete(inp["params0"], j), "rounds": new},
                case.params,
            )


def _shrink(checker: _Checker, case: _Case, found: Mismatch) -> Mismatch:
    """Greedily drop rounds, clients and coordinates while your function still differs."""
    smaller = _rule_smaller if checker.kind == "rule" else _formula_smaller
    budget = SHRINK_BUDGET
    progress = True
    shrunk = False
    while progress and budget > 0:
        progress = False
        for cand in smaller(case):
            budget -= 1
            if budget < 0:
                break
            status, mm = checker.run(cand)
            if status == "checked" and mm is not None:
                case, found, progress, shrunk = cand, mm, True, True
                break
    if not shrunk:
        return found
    return dataclasses.replace(found, case=f"{found.case}, shrunk")


# ---------------------------------------------------------------------------- generated inputs
#: The ranges generated examples draw a formula's scalar inputs and parameters from (ints
#: where the bounds are ints). q reaches 20, where F̃^q spans many binades; AFL's λ step 2,
#: where the projection clips.
_SCALARS: dict[str, tuple[float, float]] = {
    "q": (0.0, 20.0),
    "lr": (0.01, 1.0),
    "tilt": (-2.0, 2.0),
    "normaliser": (0.1, 5.0),
    "lambda_lr": (0.001, 2.0),
    "alpha": (0.0, 1.0),
    "eta": (0.1, 5.0),
    "rounds": (1, 50),
    "lipschitz": (0.1, 5.0),
    "r_bar": (0.0, 1.0),
    "total": (0.1, 5.0),
    "gamma": (0.0, 0.99),
    "eta_s": (0.0, 2.0),
    "server_lr": (0.0, 2.0),
    "scale": (0.01, 2.0),
    "num_clients": (1, 50),
}
#: The ranges generated rule cases draw each rule's hyper-parameters from (the others keep
#: their defaults, or the values ``params`` fixes). FedFV's τ up to 3 looks back over every
#: earlier round of a generated case (at most 3 rounds).
_RULE_HYPER: dict[str, dict[str, tuple[float, float]]] = {
    "qfedavg": {"q": (0.0, 20.0)},
    "qfedsgd": {"q": (0.0, 20.0)},
    "term": {"tilt": (-2.0, 2.0)},
    "term-eg": {"tilt": (-2.0, 2.0)},
    "qffl-eg": {"q": (0.0, 5.0)},
    "fedmgda": {"epsilon": (0.0, 1.2)},
    "fedfv": {"alpha": (0.0, 1.0), "tau": (0, 3)},
    "afl": {"lambda_lr": (0.001, 2.0)},
}


def _drawing(st: Any, floats: Any, lo: float, hi: float) -> Any:
    if isinstance(lo, int) and isinstance(hi, int):
        return st.integers(lo, hi)
    return floats(lo, hi)


@functools.cache
def _template(target: str) -> tuple[Json, Json]:
    """(inputs, params) of a formula's first golden case: what generated examples vary."""
    return next(iter(FORMULAS[target].cases(np.random.default_rng(0)).values()))[1:]


def _scalar_ranges(target: str) -> dict[str, tuple[float, float]]:
    ranges = dict(_SCALARS)
    if target == "fedmgda_weights":
        ranges["epsilon"] = (0.0, 1.2)
    return ranges


def _drawn(target: str, fixed: Json) -> tuple[str, ...]:
    """The hyper-parameters and scalar inputs generated examples draw, with their ranges."""
    if _kind(target) == "rule":
        ranges = {k: v for k, v in _RULE_HYPER.get(target, {}).items() if k not in fixed}
    else:
        inputs, params = _template(target)
        all_ranges = _scalar_ranges(target)
        ranges = {
            k: all_ranges[k]
            for k, v in {**inputs, **params}.items()
            if k in all_ranges
            and k not in fixed
            and not isinstance(v, (bool, np.bool_, str, np.ndarray))
        }
        if target == "dr_response":
            ranges.pop("num_clients", None)  # K, the clients of the drawn case
    return tuple(f"{k} in [{lo:g}, {hi:g}]" for k, (lo, hi) in ranges.items())


def _strategy(target: str, fixed: Json) -> Any:
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    def floats(lo: float, hi: float) -> Any:
        return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)

    def arr(shape: tuple[int, ...], lo: float, hi: float) -> Any:
        return hnp.arrays(np.float64, shape, elements=floats(lo, hi))

    def ints(shape: tuple[int, ...], lo: int, hi: int) -> Any:
        return hnp.arrays(np.int64, shape, elements=st.integers(lo, hi))

    def simplex(n: int) -> Any:
        return arr((n,), 0.01, 1.0).map(lambda a: a / a.sum())

    if _kind(target) == "rule":
        return _rule_strategy(target, fixed, st, arr, ints, floats)

    template_inputs, template_params = _template(target)
    scalars = {k: _drawing(st, floats, lo, hi) for k, (lo, hi) in _scalar_ranges(target).items()}

    @st.composite
    def build(draw: Any) -> _Case:
        m = draw(st.integers(1, 5))
        d = draw(st.integers(1, 4))
        K = m + draw(st.integers(0, 3))
        arrays = {
            "params": lambda: arr((d,), -4, 4),
            "average": lambda: arr((d,), -4, 4),
            "momentum": lambda: arr((d,), -4, 4),
            "deltas": lambda: arr((m, d), -4, 4),
            "grads": lambda: arr((m, d), -4, 4),
            "losses": lambda: arr((m,), 0.0, 20.0),
            "num_samples": lambda: ints((m,), 1, 500),
            "weights": lambda: arr((m,), -2, 2),
            "mixture": lambda: simplex(m),
            "p": lambda: simplex(K if "selected" in template_inputs else m),
            "prior": lambda: simplex(m),
            "accuracies": lambda: arr((m,), 0.0, 1.0),
            "participations": lambda: ints((m,), 1, 20),
            "y": lambda: arr((m,), -5, 5),
            "b": lambda: arr((m,), -3, 3),
            "r": lambda: arr((m,), -2, 2),
            "r_check": lambda: arr((m,), -2, 2),
            "grad_sum": lambda: arr((m,), -5, 5),
            "responses": lambda: arr((m,), 0.0, 1.0),
            "gram": lambda: arr((m, d), -3, 3).map(lambda v: v @ v.T),
            "A": lambda: arr((m, m), -2, 2).map(lambda v: v @ v.T + 0.5 * np.eye(m)),
            "selected": lambda: st.permutations(range(K)).map(lambda s: np.array(s[:m])),
        }

        def value(name: str, template: Any) -> Any:
            if name in fixed:
                return fixed[name]
            if name in arrays and isinstance(template, np.ndarray):
                return draw(arrays[name]())
            if name in scalars and not isinstance(template, (bool, np.bool_, str)):
                return draw(scalars[name])
            if isinstance(template, (bool, np.bool_)):
                return draw(st.booleans())
            return template

        inputs = {k: value(k, v) for k, v in template_inputs.items()}
        params = {k: value(k, v) for k, v in template_params.items()}
        if target == "dr_response":
            params["num_clients"] = K
        if target == "propfair_scale":
            inputs["m"] = draw(floats(0.5, 20.0))
            inputs["f"] = inputs["m"] * draw(floats(0.0, 0.999))
            inputs["epsilon"] = draw(floats(0.01, 1.0))
        if target == "eg_propfair_weights":
            params["M"] = float(np.max(inputs["losses"])) + draw(floats(0.1, 10.0))
        return _Case("hypothesis", _GENERATED, inputs, params)

    return build()


def _rule_strategy(target: str, fixed: Json, st: Any, arr: Any, ints: Any, floats: Any) -> Any:
    spec = RULES[target]
    gradients = make_rule(target).local.report == "gradients"
    hyper_domains = {
        k: _drawing(st, floats, lo, hi) for k, (lo, hi) in _RULE_HYPER.get(target, {}).items()
    }

    @st.composite
    def build(draw: Any) -> _Case:
        K = draw(st.integers(1, 5))
        m = K if spec.full_participation else draw(st.integers(1, K))
        d = draw(st.integers(1, 4))
        T = draw(st.integers(1, 3))
        lr = draw(floats(0.01, 1.0))
        counts = np.zeros(K, dtype=np.int64)
        rounds = []
        for t in range(T):
            ids = np.sort(np.array(draw(st.permutations(range(K)))[:m], dtype=np.int64))
            counts[ids] += 1
            r = {
                "num_samples": draw(ints((m,), 1, 500)),
                "losses": draw(arr((m,), 0.0, 9.0)),  # below PropFair's default M = 10
                "accuracies": draw(arr((m,), 0.0, 1.0)),
                "participations": counts[ids].copy(),
                "client_ids": ids,
                "lr": lr,
                "round_index": t,
            }
            r["gradients" if gradients else "deltas"] = draw(arr((m, d), -2.0, 2.0))
            rounds.append(r)
        hyper = {k: draw(s) for k, s in hyper_domains.items() if k not in fixed}
        inputs = {"params0": draw(arr((d,), -4.0, 4.0)), "num_clients": K, "rounds": rounds}
        return _Case("hypothesis", _GENERATED, inputs, hyper)

    return build()


_GENERATED = "a generated case (hypothesis, minimised)"
_GENERATED_ROW = "generated"


class _Found(Exception):  # noqa: N818 - a control-flow signal for hypothesis, not an error
    def __init__(self, mismatch: Mismatch) -> None:
        super().__init__(mismatch.quantity)
        self.mismatch = mismatch


# -------------------------------------------------------------------------------------- check
def _golden_cases(target: str, names: Iterable[str] | None) -> list[_Case]:
    kind = _kind(target)
    cases = case_inputs(kind, target)
    if names is not None:
        wanted = list(names)
        unknown = sorted(set(wanted) - set(cases))
        if unknown:
            raise ValueError(
                f"golden: {target!r} has no case {', '.join(map(repr, unknown))}; it has "
                f"{', '.join(cases)}"
            )
        cases = {k: cases[k] for k in wanted}
    return [
        _Case("golden", f"golden case {kind}s/{target}/{name}", inputs, params)
        for name, (_, inputs, params) in cases.items()
    ]


def _tolerances(precision: Any, rtol: Any, atol: Any) -> tuple[float, float]:
    """(rtol, atol): the precision's (:data:`PRECISIONS`), each overridden where given."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(
            f"precision must be one of {', '.join(map(repr, PRECISIONS))}; got {precision!r}"
        )
    rtol = PRECISIONS[precision]["rtol"] if rtol is None else rtol
    atol = PRECISIONS[precision]["atol"] if atol is None else atol
    # a tolerance of infinity would pass every comparison: finite, >= 0
    for name, value in (("rtol", rtol), ("atol", atol)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 <= value < math.inf
        ):
            raise ValueError(f"{name} must be a finite non-negative number; got {value!r}")
    return float(rtol), float(atol)


def check(
    fn: Callable[..., Any] | Worker,
    target: str,
    *,
    adapter: Adapter | None = None,
    params: Mapping[str, Any] | None = None,
    round_base: int = 0,
    domain: Callable[[Json, Json], Any] | None = None,
    accept: Iterable[str] = (),
    golden: bool | Iterable[str] = True,
    hypothesis: bool = True,
    max_examples: int = 100,
    rtol: float | None = None,
    atol: float | None = None,
    precision: str = "float64",
    derandomize: bool = True,
    raise_on_mismatch: bool = True,
    keep_going: bool = False,
) -> ConformanceReport:
    """Check ``fn`` against fairagg's ``target`` on golden and generated inputs.

    Parameters
    ----------
    fn : callable or Worker
        Your implementation (see the module docstring for how it is called), or a
        :class:`Worker` running it in another process (``fairagg check --cmd``).
    target : str
        A registered rule or formula name (:func:`targets`).
    adapter : Adapter, optional
        Argument names, fixed arguments, output names, a custom call, or a stateful rule.
    params : mapping, optional
        Parameters fixed for every case (e.g. ``{"q": 2.0}``, or a rule's ``{"variant":
        "official"}``): generated examples and golden cases run with them, except the golden
        cases that set another value themselves, which are skipped.
    round_base : int
        Your code's number for fairagg's round 0: a rule's ``round_index`` reaches your function
        as ``t + round_base`` (1 for code that counts rounds from 1, as FLGo does).
    domain : callable, optional
        ``domain(inputs, params)``: False for a case outside your implementation's domain by
        design (e.g. ``lambda i, p: (i["losses"] > 0).all()``); such cases are counted in
        ``ConformanceReport.outside``, not compared. Your function can also raise :class:`Skip`.
    accept : iterable of str
        Declared differences, names from :data:`ACCEPTABLE` (``"epsilon"``: another q-FFL loss
        offset; ``"nan-on-zero-update"``: NaN where an update is all zero): a case that
        differs only so is counted in ``ConformanceReport.accepted`` and the check goes on,
        so one documented upstream deviation does not hide the rest.
    golden : bool or iterable of str
        Check the golden cases (all of them, or those named, e.g. ``["small", "ties"]``).
    hypothesis : bool
        Check generated examples (needs hypothesis).
    max_examples : int
        Generated examples to run.
    rtol, atol : float, optional
        Tolerance of a comparison (see the module docstring); default: ``precision``'s.
    precision : {"float64", "solver", "float32"}
        What your code computes in, which sets rtol and atol
        (:data:`fairagg.vectors.PRECISIONS`).
    derandomize : bool
        Generate the same examples on every run.
    raise_on_mismatch : bool
        Raise :class:`ConformanceError` on a difference (default); else return it in the report.
    keep_going : bool
        Run every golden case and generated example instead of stopping at the first
        difference: the report then holds a :class:`Row` for every quantity compared
        (``report.rows``; ``str(report)`` is the table, a summary and the first difference,
        minimised) and ``report.failed``, the number of cases that differ.

    Returns
    -------
    ConformanceReport

    Raises
    ------
    ConformanceError
        Your implementation differs (an ``AssertionError``, so a test fails with the report).
    TypeError, ValueError
        Bad arguments, or a call that cannot work (an argument of yours the harness does not
        have, a returned name the target does not have).
    """
    if not (callable(fn) or isinstance(fn, Worker)):
        raise TypeError(f"fn must be callable or a Worker; got {type(fn).__name__}")
    kind = _kind(target)
    if isinstance(round_base, bool) or not isinstance(round_base, (int, np.integer)):
        raise TypeError(f"round_base must be an int; got {type(round_base).__name__}")
    if domain is not None and not callable(domain):
        raise TypeError(f"domain must be callable; got {type(domain).__name__}")
    if adapter is None:
        adapter = Adapter()
    elif not isinstance(adapter, Adapter):
        raise TypeError(
            f"adapter must be a fairagg.conformance.Adapter; got {type(adapter).__name__}"
        )
    if adapter.stateful and kind != "rule":
        raise ValueError("Adapter(stateful=True) applies to rules only")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping of parameter names; got {type(params).__name__}")
    fixed = dict(params or {})
    known = _default_params(target, {})
    unknown = sorted(set(fixed) - set(known))
    if unknown:
        raise ValueError(
            f"params: {target!r} has no parameter {', '.join(map(repr, unknown))}; it has "
            f"{', '.join(known) or 'none'}"
        )
    if kind == "rule":
        make_rule(target, **fixed)  # a bad hyper-parameter value is the rule's own clear error
    rtol, atol = _tolerances(precision, rtol, atol)
    if isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1:
        raise ValueError(f"max_examples must be a positive int; got {max_examples!r}")
    if isinstance(golden, str) or not isinstance(golden, (bool, Iterable)):
        raise TypeError(
            f"golden must be a bool or an iterable of case names; got {type(golden).__name__}"
        )
    if not golden and not hypothesis:
        raise ValueError("nothing to check: golden and hypothesis are both off")
    if not isinstance(keep_going, (bool, np.bool_)):
        raise TypeError(f"keep_going must be a bool; got {type(keep_going).__name__}")
    if isinstance(accept, str) or not isinstance(accept, Iterable):
        raise TypeError(
            "accept must be an iterable of names of declared differences, e.g. ['epsilon']; "
            f"got {type(accept).__name__}"
        )
    accepted_names = frozenset(accept)
    for name in sorted(accepted_names, key=str):
        if name not in ACCEPTABLE:
            raise ValueError(f"accept: unknown difference {name!r}; known: {', '.join(ACCEPTABLE)}")
    if "epsilon" in accepted_names and target not in _LOSS_OFFSET:
        raise ValueError(
            f"accept: 'epsilon' is q-FFL's loss offset, which {target!r} does not have "
            f"(targets with it: {', '.join(_LOSS_OFFSET)})"
        )
    if "epsilon" in accepted_names and "epsilon" in fixed:
        raise ValueError("accept: 'epsilon' fits ε per case; it cannot go with params['epsilon']")
    if isinstance(fn, Worker) and adapter != Adapter():
        raise ValueError("adapter does not apply to a Worker: name things in the worker itself")
    checker = _Checker(
        fn,
        target,
        adapter,
        fixed,
        (float(rtol), float(atol)),
        int(round_base),
        domain,
        accepted_names,
    )
    names = None if isinstance(golden, bool) else list(golden)
    n_golden = n_generated = skipped = outside = failed = accepted = 0
    mismatch: Mismatch | None = None
    rows: list[Row] = []
    try:
        if golden:
            for case in _golden_cases(target, names):
                checker.rows = rows if keep_going else None
                status, found = checker.run(case)
                checker.rows = None
                if status == "rejected":
                    skipped += 1
                    continue
                if status == "outside":
                    outside += 1
                    continue
                n_golden += 1
                accepted += status == "accepted"
                if found is not None:
                    failed += 1
                    if mismatch is None:
                        mismatch = _settle(checker, case, found)
                    if not keep_going:
                        break
        if hypothesis and (mismatch is None or keep_going):
            if keep_going:
                n_generated, n_out, n_failed, n_acc = _run_hypothesis_rows(
                    checker, target, fixed, max_examples, derandomize, rows
                )
                failed += n_failed
                if n_failed and mismatch is None:  # the same examples again, to minimise one
                    mismatch = _run_hypothesis(checker, target, fixed, max_examples, derandomize)[2]
            else:
                n_generated, n_out, mismatch, n_acc = _run_hypothesis(
                    checker, target, fixed, max_examples, derandomize
                )
                failed += mismatch is not None
            outside += n_out
            accepted += n_acc
        if mismatch is not None and mismatch.diagnosis is None and mismatch.source != "golden":
            generated = _Case(mismatch.source, mismatch.case, mismatch.inputs, mismatch.params)
            mismatch = _fitted_mismatch(checker, generated) or mismatch
    except _UsageError as exc:
        raise exc.exc from None
    report = ConformanceReport(
        target,
        n_golden,
        n_generated,
        skipped,
        mismatch,
        outside,
        tuple(rows),
        failed,
        tuple(sorted(checker.not_returned)),
        accepted,
        _drawn(target, fixed) if hypothesis else (),
    )
    if mismatch is not None and raise_on_mismatch:
        raise ConformanceError(mismatch)
    return report


def _run_hypothesis_rows(
    checker: _Checker,
    target: str,
    fixed: Json,
    max_examples: int,
    derandomize: bool,
    rows: list[Row],
) -> tuple[int, int, int]:
    """Every generated example compared and recorded in ``rows`` (no stop, no shrinking):
    (examples compared, outside your domain, that differ, accepted as declared)."""
    import hypothesis
    from hypothesis import HealthCheck, Phase, settings

    count, outside, failed, accepted = [0], [0], [0], [0]

    @settings(
        max_examples=max_examples,
        database=None,
        derandomize=derandomize,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(_strategy(target, fixed))
    def run(case: _Case) -> None:
        labelled = dataclasses.replace(case, label=f"{_GENERATED_ROW} {count[0] + 1}")
        checker.rows = rows
        try:
            status, found = checker.run(labelled)
        finally:
            checker.rows = None
        if status == "outside":
            outside[0] += 1
        hypothesis.assume(status in ("checked", "accepted"))
        count[0] += 1
        accepted[0] += status == "accepted"
        failed[0] += found is not None

    try:
        run()
    except hypothesis.errors.Unsatisfiable as exc:
        if not outside[0]:
            raise _UsageError(
                ValueError(
                    f"fairagg rejected every generated input of {target!r} with params "
                    f"{fixed}: are they valid?"
                )
            ) from exc
    return count[0], outside[0], failed[0], accepted[0]


def _run_hypothesis(
    checker: _Checker, target: str, fixed: Json, max_examples: int, derandomize: bool
) -> tuple[int, int, Mismatch | None, int]:
    try:
        import hypothesis
        from hypothesis import HealthCheck, settings
    except ImportError as exc:  # pragma: no cover - the test extra installs hypothesis
        raise ImportError(
            "generated inputs need hypothesis: pip install 'fairagg[conformance]', or pass "
            "hypothesis=False to check the golden inputs alone"
        ) from exc
    count, outside, accepted = [0], [0], [0]

    @settings(
        max_examples=max_examples,
        database=None,
        derandomize=derandomize,
        deadline=None,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(_strategy(target, fixed))
    def run(case: _Case) -> None:
        status, found = checker.run(case)
        if status == "outside":
            outside[0] += 1
        hypothesis.assume(status in ("checked", "accepted"))
        count[0] += 1
        accepted[0] += status == "accepted"
        if found is not None:
            raise _Found(found)

    try:
        run()
    except _Found as exc:
        return count[0], outside[0], exc.mismatch, accepted[0]
    except hypothesis.errors.Unsatisfiable as exc:
        if outside[0]:
            return count[0], outside[0], None, accepted[0]
        raise _UsageError(
            ValueError(
                f"fairagg rejected every generated input of {target!r} with params {fixed}: "
                "are they valid?"
            )
        ) from exc
    except hypothesis.errors.Flaky as exc:
        raise _UsageError(
            ValueError(
                "your function gave different results on the same input: does it keep state "
                "between calls? For a rule, use Adapter(stateful=True) with a factory"
            )
        ) from exc
    return count[0], outside[0], None, accepted[0]


def _fitted_mismatch(checker: _Checker, case: _Case) -> Mismatch | None:
    """The case's mismatch with a fitted diagnosis (another ε, one shared loss), or None.
    Fits cost dozens of evaluations of fairagg, too many for every candidate shrunk, and they
    need the case before shrinking: on one client or one coordinate a one-number fit explains
    any difference of size, so :func:`_identifiable` refuses it there."""
    if checker.target not in _LOSS_OFFSET:
        return None
    rows, accept = checker.rows, checker.accept
    checker.rows, checker.fits, checker.accept = None, True, frozenset()
    try:
        _, again = checker.run(case)
    except (_UsageError, _Outside):
        again = None
    finally:
        checker.rows, checker.fits, checker.accept = rows, False, accept
    return again if again is not None and again.diagnosis is not None else None


def _settle(checker: _Checker, case: _Case, found: Mismatch) -> Mismatch:
    """A golden case's mismatch: with a fitted diagnosis on the whole case, where one fits,
    else minimised (:func:`_shrink`)."""
    if found.diagnosis is None:
        fitted = _fitted_mismatch(checker, case)
        if fitted is not None:
            return fitted
    return _shrink(checker, case, found)


# ------------------------------------------------------------------ results written per case
def _result_value(v: Any, where: str) -> Any:
    """An output from a results file: a golden-style encoded array, a nested list of numbers,
    or a number (non-finite numbers as "nan", "inf", "-inf" or the bare JSON tokens)."""
    from ._worker import decode

    try:
        return decode(v) if isinstance(v, dict) else np.asarray(decode(v), dtype=np.float64)
    except (TypeError, ValueError, WorkerError) as exc:
        raise ValueError(f"results: {where} cannot be read as numbers ({exc})") from None


def compare_results(
    results: Any, golden: Any, *, precision: str = "float64", rtol: float | None = None,
    atol: float | None = None,
) -> ConformanceReport:  # fmt: skip
    """Compare outputs you computed per golden case with the golden files' expectations.

    Parameters
    ----------
    results : str or path
        A JSON file: ``{"rules/afl/small": {"rounds": [{"params": [...], "mixture": [...]},
        ...]}, "formulas/project_simplex/small": {"out": [...]}, ...}``, one entry per case you
        ran (keys as the golden files' paths without ``.json``), each output named as the
        golden file names it; arrays as nested lists or encoded as the golden files encode them.
    golden : str or path
        A folder of golden vectors (``fairagg vectors --out``, or the repository's
        ``tests/golden``).
    precision, rtol, atol
        The tolerance, as for :func:`check`.

    Returns
    -------
    ConformanceReport
        ``rows`` holds every comparison (``str(report)`` is the table and a summary; there is
        no minimised difference: the cases are yours); ``failed`` counts the cases that differ,
        ``skipped`` the golden cases your file does not have, ``not_returned`` the outputs it
        never gave. Cases of your file that the golden folder lacks are an error.
    """
    import json
    from pathlib import Path

    from .vectors import load_case

    if not isinstance(results, (str, Path)) or not isinstance(golden, (str, Path)):
        raise TypeError("results and golden must be paths (str or pathlib.Path)")
    tol = _tolerances(precision, rtol, atol)
    res_path, root = Path(results), Path(golden)
    if not res_path.is_file():
        raise FileNotFoundError(f"results: no file {str(res_path)!r}")
    if not (root / "index.json").is_file():
        raise FileNotFoundError(f"golden: {str(root)!r} holds no index.json (fairagg vectors)")
    try:
        mine = json.loads(res_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"results: {res_path} is not JSON ({exc})") from None
    if not isinstance(mine, dict):
        raise ValueError("results: the file must hold a JSON object keyed by case")
    index = {
        e["file"][: -len(".json")]: e
        for e in json.loads((root / "index.json").read_text())["cases"]
    }
    unknown = sorted(set(mine) - set(index))
    if unknown:
        raise ValueError(
            f"results: no golden case {', '.join(map(repr, unknown[:5]))}"
            f"{' ...' if len(unknown) > 5 else ''} in {root} (keys are like 'rules/afl/small')"
        )
    rows: list[Row] = []
    failed = 0
    not_returned: set[str] = set()
    for key, entry in index.items():
        if key not in mine:
            continue
        case = load_case(root / entry["file"])
        label = f"golden case {key}"
        want = case["expected"]
        if "error" in want:
            rows.append(Row(label, None, "error", None, None, "", "fairagg raises here"))
            continue
        got_all = mine[key]
        if not isinstance(got_all, dict):
            raise ValueError(f"results: {key} must be a JSON object of named outputs")
        if case["kind"] == "rule":
            rounds_got = got_all.get("rounds")
            if not isinstance(rounds_got, list):
                raise ValueError(f'results: {key} must hold "rounds", a list of rounds')
            pairs = list(enumerate(zip(want["rounds"], rounds_got, strict=False)))
            n_want = len(want["rounds"])
        else:
            pairs = [(None, (want, got_all))]
            n_want = 1
        differs = False
        for t, (w, g) in pairs:
            if differs:
                rows.append(Row(label, t, "(round)", None, None, "", "not compared"))
                continue
            for k, wv in w.items():
                if k not in g:
                    not_returned.add(k)
                    rows.append(Row(label, t, k, None, None, _tolerance_text(wv, *tol),
                                    "not returned"))  # fmt: skip
                    continue
                gv = _result_value(g[k], f"{key} {k}")
                why = _close(gv, wv, *tol)
                a, r = _differences(gv, wv)
                verdict = "agrees" if why is None else "differs"
                if why is not None and a is None:  # no entrywise difference: say why
                    verdict = f"differs: {why}"
                rows.append(Row(label, t, k, a, r, _tolerance_text(wv, *tol), verdict))
                differs |= why is not None
        if case["kind"] == "rule" and len(pairs) < n_want and not differs:
            for t in range(len(pairs), n_want):
                rows.append(Row(label, t, "(round)", None, None, "", "not returned"))
        failed += differs
    n = sum(1 for k in index if k in mine)
    return ConformanceReport(
        "golden files", n, 0, len(index) - n, None, 0, tuple(rows), failed,
        tuple(sorted(not_returned)),
    )  # fmt: skip
