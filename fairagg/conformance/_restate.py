"""Independent restatements of fairagg's formulas and rules, term by term, in plain NumPy.

Each restatement computes a formula as it is written, with one switch for each registered
mistake that can occur in it (``_causes`` lists them). With every switch at its default it
equals fairagg's implementation on every golden case (the test suite checks it), so a term it
reports is the formula's term and a switched version is fairagg changed by exactly that
mistake. A rule's restatement runs its rounds from the user's own θ^t where those are given
(each round judged on its own) and carries the rule's state (AFL's λ and average, FedFV's
history) as fairagg does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._common import Json

# ------------------------------------------------------------------------------- formulas


def qffl_terms(
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
    """q-FFL's step (Alg. 1 on updates, Alg. 3 on gradients), literally in float64.

    Switches: ``square=False`` the norm not squared; ``with_eps=False`` no loss offset;
    ``with_L=False`` Δw_k = δ_k instead of L δ_k."""
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


def project_terms(y: Any, total: float = 1.0, *, inclusive: bool = True) -> dict[str, Any]:
    """The sort-based simplex projection. ``inclusive=False`` is the public q-FFL code's
    (fair_flearn, ``flearn/utils/model_utils.py``, ``project``): its ρ test at the i-th largest
    entry u_i is u_i + (total − Σ_{r<i} u_r)/i > 0, leaving u_i out of the sum; ρ is the last i
    that passes and τ = (total − Σ_{r≤ρ} u_r)/ρ. Its result can leave the simplex (its sum is
    then above total); when no i passes it divides by ρ = 0 (ZeroDivisionError)."""
    v = np.asarray(y, float)
    u = np.sort(v)[::-1]
    j = np.arange(1, u.size + 1)
    css = np.cumsum(u)
    test = css if inclusive else np.concatenate([[0.0], css[:-1]])
    passing = np.nonzero(u + (total - test) / j > 0)[0]
    if passing.size == 0:
        raise ZeroDivisionError("no entry passes the ρ test: ρ = 0")
    rho = int(passing[-1]) + 1
    tau = (total - css[rho - 1]) / rho
    return {"tau": tau, "out": np.maximum(v + tau, 0.0)}


def clip_terms(y: Any, total: float = 1.0) -> dict[str, Any]:
    """max(y, 0) rescaled to sum ``total``: a clip, not a projection. Where every entry is
    ≤ 0 there is nothing to rescale, and code that clips does one of several things there
    (0/0, uniform weights, an error): the mistake is not one computation, and says nothing."""
    x = np.maximum(np.asarray(y, float), 0.0)
    s = x.sum()
    if not s > 0:
        raise ValueError("every entry is <= 0: nothing to rescale")
    return {"out": total * x / s}


def afl_terms(
    params: Any,
    grads: Any,
    losses: Any,
    mixture: Any,
    lr: float,
    lambda_lr: float,
    *,
    inclusive: bool = True,
    next_mixture: bool = False,
) -> dict[str, Any]:
    """One AFL round (SPEC §3): θ − γ_w Σ λ_k g_k and λ ← Π_Δ(λ + γ_λ F).

    Switches: ``inclusive=False`` fair_flearn's projection; ``next_mixture=True`` the model
    step weighs the gradients by the new λ^{t+1} instead of λ^t (the AAggFF code's AFL)."""
    lam = np.asarray(mixture, float)
    proj = project_terms(lam + lambda_lr * np.asarray(losses, float), inclusive=inclusive)
    step_lam = proj["out"] if next_mixture else lam
    g = step_lam @ np.asarray(grads, float)
    return {
        "tau": proj["tau"],
        "params": np.asarray(params, float) - lr * g,
        "mixture": proj["out"],
        "weights": lr * step_lam,
    }


def aaggff_terms(
    params: Any,
    deltas: Any,
    p: Any,
    selected: Any,
    server_lr: float = 1.0,
    *,
    renormalise: bool = True,
) -> dict[str, Any]:
    """AAgFF's aggregation (SPEC §5); ``renormalise=False`` q_i = p_i."""
    ps = np.asarray(p, float)[np.asarray(selected)]
    q = ps / ps.sum() if renormalise else ps
    return {"weights": q, "params": np.asarray(params, float) - server_lr * q @ np.asarray(deltas)}


def row_norms(D: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(‖δ_k‖, each row divided by its largest |entry|, the norms of those rows): ‖δ_k‖ at
    any scale (a plain norm underflows to 0 below about 1e-154, and fairagg takes ĝ_k of such
    a row)."""
    top = np.max(np.abs(D), axis=1) if D.shape[1] else np.zeros(D.shape[0])
    R = np.divide(D, top[:, None], out=np.zeros_like(D), where=top[:, None] > 0)
    r = np.linalg.norm(R, axis=1)
    with np.errstate(over="ignore"):
        norms = top * r
    return norms, R, r


def fedmgda_terms(
    deltas: Any,
    num_samples: Any,
    epsilon: float,
    server_lr: float = 1.0,
    *,
    normalise: bool = True,
    box: bool = True,
    norm_offset: float = 0.0,
    clip_after: bool = False,
) -> dict[str, Any]:
    """FedMGDA+'s weights (SPEC §8).

    Switches: ``normalise=False`` MGDA on the raw δ_k; ``box=False`` no ε-box (plain MGDA);
    ``norm_offset=c`` ĝ_k = δ_k / (‖δ_k‖ + c) (FLGo's c = 1e-8); ``clip_after=True`` λ solved
    over the simplex without the box, then clipped into [λ0 − ε, λ0 + ε] and renormalised to
    sum 1 (the box imposed after the solve)."""
    from ..simplex import min_norm_weights

    D = np.asarray(deltas, float)
    n = np.asarray(num_samples, float)
    lam0 = n / n.sum()
    norms, R, r = row_norms(D)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if norm_offset:
            inv = np.divide(1.0, norms + norm_offset, out=np.zeros(D.shape[0]), where=norms > 0)
            unit = D * inv[:, None]
        else:
            inv = np.divide(1.0, norms, out=np.zeros(D.shape[0]), where=norms > 0)
            unit = np.divide(R, r[:, None], out=np.zeros_like(D), where=r[:, None] > 0)
    g = unit if normalise else D.copy()
    eps = epsilon if box else 1.0
    lo, hi = np.maximum(0.0, lam0 - eps), np.minimum(1.0, lam0 + eps)
    G = g @ g.T
    if clip_after:
        lam = min_norm_weights(G).x
        # which minimiser a solver returns decides the clipped λ: where the unboxed argmin is
        # not unique (solved in reverse order, another one comes out), the mistake is not one
        # computation, and says nothing of the case
        other = min_norm_weights(G[::-1, ::-1]).x[::-1]
        if np.max(np.abs(lam - other)) > 1e-9:
            raise ValueError("the unboxed min-norm weighting is not unique here")
        lam = np.clip(lam, lo, hi)
        lam = lam / lam.sum()
    else:
        lam = lam0.copy() if eps == 0 else min_norm_weights(G, lower=lo, upper=hi).x
    v = lam @ g
    top = float(np.max(np.abs(v), initial=0.0))
    min_norm = top * float(np.linalg.norm(v / top)) if top > 0 else 0.0
    return {
        "lambda0": lam0,
        "g_hat": g,
        "mixture": lam,
        "weights": server_lr * lam * (inv if normalise else np.ones_like(inv)),
        "min_norm": min_norm,
        "inv_norms": inv,
    }


def fedfv_terms(
    deltas: Any,
    losses: Any,
    alpha: float = 0.1,
    order: str = "loss",
    seed: int = 0,
    round_index: int = 0,
    variant: str = "paper",
    rescale: bool = True,
    *,
    history: Any = None,
    tau: int = 0,
    against_projected: bool = False,
) -> dict[str, Any]:
    """FedFV's Algs. 2-3 on d-vectors, as written (SPEC §7): the order and kept set, the
    internal projections of each g̃_i onto the conflicting δ_j in order, ḡ, the window's
    external projections (``history``: fairagg's FedFVHistory of earlier rounds) and the
    rescaling. ``against_projected=True`` projects each g̃_i onto the already-projected g̃_j
    (updated in place, in client order) instead of the original δ_j. The order, keep count,
    window and round-off thresholds are fairagg's own
    ([`fairagg.rules.fedfv`][fairagg.rules.fedfv])."""
    from ..rules.fedfv import (
        RHO,
        FedFVHistory,
        _conflict,
        _external_vector,
        _in_range,
        _norms,
        _window,
        fedfv_keep_count,
        fedfv_order,
    )

    D = np.asarray(deltas, dtype=np.float64)
    m, d = D.shape
    if history is None:
        history = FedFVHistory(np.zeros((0, d)), np.zeros(0, np.int64), np.zeros(0, np.int64))
    H = np.asarray(history.updates, dtype=np.float64)
    perm = fedfv_order(m, losses, order, seed, round_index)
    kept = np.zeros(m, dtype=bool)
    kept[perm[m - fedfv_keep_count(m, alpha, variant) :]] = True
    U = np.concatenate([D, H]) if H.shape[0] else D
    sq_all = np.array([float(u @ u) for u in U])
    if not _in_range(sq_all, D, H):
        raise ValueError("updates out of the plain computation's range")
    norms = _norms(sq_all)
    sq = norms[:m] ** 2
    C = np.eye(m)
    G = D.copy()  # g̃_i, updated in place when a client's projections end
    sizes = norms[:m].copy()  # Σ_l |C_il| ‖δ_l‖ of each g̃_i: the scale of its round-off
    for i in range(m):
        if kept[i] or norms[i] == 0.0:
            continue
        g, size = D[i].copy(), norms[i]
        for j in perm:
            if j == i or sq[j] == 0.0:
                continue
            if against_projected:
                target = G[j]
                tn2 = float(target @ target)
                tn = math.sqrt(tn2)
                if tn <= RHO * sizes[j]:  # a g̃_j projected to 0 (up to round-off): no target
                    continue
            else:
                target, tn2, tn = D[j], sq[j], norms[j]
            dot = float(target @ g)
            if tn2 > 0.0 and _conflict(dot, tn * size):
                coef = dot / tn2
                g -= coef * target
                if against_projected:
                    C[i] -= coef * C[j]
                    size += abs(coef) * sizes[j]
                else:
                    C[i, j] -= coef
                    size += abs(coef) * tn
        G[i] = g
        sizes[i] = size
    g_bar = G.sum(axis=0) / m
    c = np.zeros(U.shape[0])
    c[:m] = C.sum(axis=0) / m
    groups = _window(np.asarray(history.rounds), round_index, tau, variant, m)
    g_bar = _external_vector(U, g_bar, c, norms, groups)[0]  # fairagg's own Alg. 3
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
        "weights": c[:m] * scale,
        "history_weights": c[m:] * scale,
        "direction": g_bar * scale,
    }


def fedavg_terms(num_samples: Any, *, uniform: bool = False) -> dict[str, Any]:
    """FedAvg's weights n_k/Σn; ``uniform=True`` 1/m (the weights ignore n_k)."""
    n = np.asarray(num_samples, float)
    return {"out": np.full(n.size, 1.0 / n.size) if uniform else n / n.sum()}


# ----------------------------------------------------------------------- formula registry
@dataclass(frozen=True)
class Terms:
    """How a target's terms are computed (``run(inputs, params, **switches)``, a formula's;
    for a rule ``run(inputs, params, thetas, **switches)`` → ``{"rounds": [...]}``) and what
    each term is, in the order the formula computes them."""

    run: Callable[..., Any]
    texts: Mapping[str, str]


def _qfedavg_run(i: Json, p: Json, **sw: Any) -> dict[str, Any]:
    return qffl_terms(
        i["params"], i["deltas"], i["losses"], p["q"], p["lr"], p["epsilon"], scale_by_L=True, **sw
    )


def _qfedsgd_run(i: Json, p: Json, **sw: Any) -> dict[str, Any]:
    return qffl_terms(
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


def _project_run(i: Json, p: Json, *, clip: bool = False, **sw: Any) -> dict[str, Any]:
    if clip:
        return clip_terms(i["y"], p.get("total", 1.0))
    return project_terms(i["y"], p.get("total", 1.0), **sw)


def _fedfv_run(i: Json, p: Json, **sw: Any) -> dict[str, Any]:
    keys = ("alpha", "order", "seed", "round_index", "variant", "rescale", "tau")
    kw = {k: p[k] for k in keys if k in p}
    return fedfv_terms(i["deltas"], i["losses"], history=p.get("history"), **kw, **sw)


Q_TEXTS = {
    "L": "L = 1/lr",
    "Delta_w": "Δw_k = L δ_k (q-FedAvg) or the gradient g_k (q-FedSGD)",
    "F_tilde": "F̃_k = F_k + ε (SPEC §2, ε = 1e-10)",
    "Delta": "Δ_k = F̃_k^q Δw_k",
    "h": "h_k = q F̃_k^{q−1} ‖Δw_k‖² + L F̃_k^q (q-FFL Alg. 1)",
    "h_sum": "Σ_k h_k",
    "weights": "F̃_k^q / Σ_j h_j, the weight on Δw_k",
    "params": "θ^{t+1} = θ^t − Σ_k Δ_k / Σ_k h_k",
}
FEDFV_TEXTS = {
    "order": "the projection order: ascending losses, ties by arrival (Alg. 1, line 6)",
    "kept": "the ⌈α m⌉-ish highest-loss clients that keep δ_k (Alg. 2, line 1; SPEC §7)",
    "coefficients": "C: g̃_i = Σ_j C_ij δ_j after projecting g̃_i onto each conflicting δ_j",
    "weights": "a_k, the coefficient of δ_k in g",
    "direction": "g = ḡ ‖mean δ‖ / ‖ḡ‖, ḡ the mean of the g̃_i (Alg. 1, line 11)",
}
MGDA_TEXTS = {
    "lambda0": "λ0 = n_k / Σ_j n_j",
    "g_hat": "ĝ_k = δ_k / ‖δ_k‖ (0 for a zero δ_k)",
    "mixture": "λ* = argmin ‖Σ λ_k ĝ_k‖² over {λ ∈ Δ, |λ − λ0| ≤ ε} (SPEC §8)",
    "weights": "a_k = η λ*_k / ‖δ_k‖",
    "min_norm": "‖Σ λ*_k ĝ_k‖",
}

FORMULA_TERMS: dict[str, Terms] = {
    "qfedavg_step": Terms(_qfedavg_run, Q_TEXTS),
    "qfedsgd_step": Terms(_qfedsgd_run, Q_TEXTS),
    "project_simplex": Terms(
        _project_run,
        {
            "tau": "τ = (total − Σ_{i≤ρ} u_i)/ρ, u sorted descending (SPEC §3)",
            "out": "x = max(y + τ, 0)",
        },
    ),
    "afl_step": Terms(
        lambda i, p, **sw: afl_terms(
            i["params"], i["grads"], i["losses"], i["mixture"], p["lr"], p["lambda_lr"], **sw
        ),
        {
            "tau": "τ of the projection of λ + γ_λ F (SPEC §3)",
            "params": "θ − γ_w Σ_k λ_k g_k",
            "mixture": "λ ← Π_Δ(λ + γ_λ F)",
        },
    ),
    "aaggff_aggregate": Terms(
        lambda i, p, **sw: aaggff_terms(
            i["params"], i["deltas"], i["p"], i["selected"], p.get("server_lr", 1.0), **sw
        ),
        {
            "weights": "q_i = p_i / Σ_{j∈S} p_j (SPEC §5)",
            "params": "θ − η_s Σ_{i∈S} q_i δ_i",
        },
    ),
    "fedmgda_weights": Terms(
        lambda i, p, **sw: fedmgda_terms(
            i["deltas"], i["num_samples"], p["epsilon"], p.get("server_lr", 1.0), **sw
        ),
        MGDA_TEXTS,
    ),
    "fedfv_direction": Terms(_fedfv_run, FEDFV_TEXTS),
    "fedavg_weights": Terms(
        lambda i, p, **sw: fedavg_terms(i["num_samples"], **sw),
        {"out": "a_k = n_k / Σ_{j∈S} n_j (FairAvg eq. 4)"},
    ),
}


# ---------------------------------------------------------------------------------- rules
def _fields(r: Json) -> Json:
    return {k: v for k, v in r.items() if v is not None}


def _afl_rule(inputs: Json, hyper: Json, thetas: list | None, **sw: Any) -> Json:
    K = int(inputs["num_clients"])
    lam = np.full(K, 1.0 / K)
    theta = np.asarray(inputs["params0"], dtype=np.float64)
    with_first = bool(sw.pop("theta0_in_average", False))
    total = theta.copy() if with_first else np.zeros_like(theta)
    rounds = []
    for t, r in enumerate(inputs["rounds"]):
        if thetas is not None:
            theta = np.asarray(thetas[t], dtype=np.float64)
        ids = np.asarray(r["client_ids"])
        lr = r["lr"] if hyper.get("lr") is None else hyper["lr"]
        out = afl_terms(theta, r["gradients"], r["losses"], lam[ids], lr, hyper["lambda_lr"], **sw)
        new_lam = lam.copy()
        new_lam[ids] = out["mixture"]
        lam = new_lam
        new = out["params"]
        total = total + new
        model = total / (t + 2 if with_first else t + 1)
        rounds.append({**out, "mixture": lam.copy(), "model": model, "params": new})
        theta = new
    return {"rounds": rounds}


def _fedfv_rule(inputs: Json, hyper: Json, thetas: list | None, **sw: Any) -> Json:
    from ..rules.fedfv import FedFVHistory, _next_history

    theta = np.asarray(inputs["params0"], dtype=np.float64)
    d = theta.size
    tau = int(hyper.get("tau", 1))
    variant = hyper.get("variant", "paper")
    history = FedFVHistory(np.zeros((0, d)), np.zeros(0, np.int64), np.zeros(0, np.int64))
    rounds = []
    for t, r in enumerate(inputs["rounds"]):
        if thetas is not None:
            theta = np.asarray(thetas[t], dtype=np.float64)
        ids = np.asarray(r["client_ids"], dtype=np.int64)
        others = ~np.isin(history.client_ids, ids)
        past = FedFVHistory(*(a[others] for a in history))
        D = np.asarray(r["deltas"], dtype=np.float64)
        keys = ("alpha", "order", "seed", "variant", "rescale")
        out = fedfv_terms(
            D, r.get("losses"), **{k: hyper[k] for k in keys if k in hyper},
            round_index=t, history=past, tau=tau, **sw,
        )  # fmt: skip
        new = theta - out.pop("direction")
        history = _next_history(past, D, ids, t, tau, variant)
        rounds.append({**out, "history_clients": past.client_ids, "params": new})
        theta = new
    return {"rounds": rounds}


def _per_round(round_formula: Callable[[Any, Json, Json], Json]) -> Callable[..., Json]:
    """A stateless rule's restatement: one formula per round, from θ^t."""

    def run(inputs: Json, hyper: Json, thetas: list | None, **sw: Any) -> Json:
        theta = np.asarray(inputs["params0"], dtype=np.float64)
        rounds = []
        for t, r in enumerate(inputs["rounds"]):
            if thetas is not None:
                theta = np.asarray(thetas[t], dtype=np.float64)
            out = round_formula(theta, _fields(r), hyper, **sw)
            rounds.append(out)
            theta = np.asarray(out["params"], dtype=np.float64)
        return {"rounds": rounds}

    return run


def _q_round(gradients: bool) -> Callable[..., Json]:
    def step(theta: Any, r: Json, hyper: Json, **sw: Any) -> Json:
        lr = r["lr"] if hyper.get("lipschitz") is None else 1.0 / hyper["lipschitz"]
        out = qffl_terms(
            theta,
            r["gradients" if gradients else "deltas"],
            r["losses"],
            hyper["q"],
            lr,
            hyper["epsilon"],
            scale_by_L=not gradients,
            static_step=bool(hyper.get("static_step", False)) if gradients else False,
            **sw,
        )
        if not gradients:
            out["weights"] = out["weights"] / lr  # the rule reports the weight on δ_k
        return out

    return step


def _mgda_round(theta: Any, r: Json, hyper: Json, **sw: Any) -> Json:
    out = fedmgda_terms(r["deltas"], r["num_samples"], hyper["epsilon"], hyper["server_lr"], **sw)
    out["params"] = np.asarray(theta, float) - out["weights"] @ np.asarray(r["deltas"], float)
    return out


def _fedavg_round(theta: Any, r: Json, hyper: Json, **sw: Any) -> Json:
    w = fedavg_terms(r["num_samples"], **sw)["out"]
    return {"weights": w, "params": np.asarray(theta, float) - w @ np.asarray(r["deltas"], float)}


def _aaggff_rule(name: str) -> Callable[..., Json]:
    """AAgFF's rounds: the decision p^t as fairagg's rule computes it (it does not depend on
    θ), then the restated aggregation."""

    def run(inputs: Json, hyper: Json, thetas: list | None, **sw: Any) -> Json:
        from ..vectors import _run_rule

        ref = _run_rule(name, hyper, inputs)["rounds"]
        theta = np.asarray(inputs["params0"], dtype=np.float64)
        rounds = []
        for t, (r, w) in enumerate(zip(inputs["rounds"], ref, strict=True)):
            if thetas is not None:
                theta = np.asarray(thetas[t], dtype=np.float64)
            out = aaggff_terms(
                theta, r["deltas"], w["p"], r["client_ids"], hyper.get("server_lr", 1.0), **sw
            )
            rounds.append({**w, **out})
            theta = out["params"]
        return {"rounds": rounds}

    return run


RULE_TERMS: dict[str, Terms] = {
    "qfedavg": Terms(
        _per_round(_q_round(False)),
        {**Q_TEXTS, "weights": "L F̃_k^q / Σ_j h_j, the weight on δ_k"},
    ),
    "qfedsgd": Terms(_per_round(_q_round(True)), Q_TEXTS),
    "afl": Terms(
        _afl_rule,
        {
            "tau": "τ of the projection of λ + γ_λ F (SPEC §3)",
            "mixture": "λ^{t+1} = Π_Δ(λ^t + γ_λ F(θ^t)), over all K clients by id",
            "weights": "γ_w λ^t_k, the weight of g_k in the step",
            "params": "θ^{t+1} = θ^t − γ_w Σ_k λ^t_k g_k",
            "model": "θ̄, the average of the iterates θ^1..θ^{t+1}",
        },
    ),
    "fedmgda": Terms(
        _per_round(_mgda_round), {**MGDA_TEXTS, "params": "θ^{t+1} = θ^t − Σ_k a_k δ_k"}
    ),
    "fedavg": Terms(
        _per_round(_fedavg_round),
        {"weights": "a_k = n_k / Σ_{j∈S} n_j (FairAvg eq. 4)", "params": "θ − Σ_k a_k δ_k"},
    ),
    "propfair": Terms(
        _per_round(_fedavg_round),
        {"weights": "a_k = n_k / Σ_{j∈S} n_j (FedAvg's, SPEC §6)", "params": "θ − Σ_k a_k δ_k"},
    ),
    "fedfv": Terms(
        _fedfv_rule,
        {
            **{k: v for k, v in FEDFV_TEXTS.items() if k != "direction"},
            "params": "θ^{t+1} = θ^t − g, g = ḡ ‖mean δ‖ / ‖ḡ‖ (Alg. 1, line 11)",
        },
    ),
    "aaggff-s": Terms(
        _aaggff_rule("aaggff-s"),
        {"weights": "q_i = p_i / Σ_{j∈S} p_j (SPEC §5)", "params": "θ − η_s Σ_{i∈S} q_i δ_i"},
    ),
    "aaggff-d": Terms(
        _aaggff_rule("aaggff-d"),
        {"weights": "q_i = p_i / Σ_{j∈S} p_j (SPEC §5)", "params": "θ − η_s Σ_{i∈S} q_i δ_i"},
    ),
}


def terms_of(target: str) -> Terms | None:
    """The restatement of ``target`` (a formula's or a rule's), or None."""
    return FORMULA_TERMS.get(target) or RULE_TERMS.get(target)
