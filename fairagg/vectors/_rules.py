"""The rule cases: several rounds of reports for every registered rule (the common shapes, the
degenerate ones, each rule's variants and the inputs where a known outside difference shows), and
the rule run over them with its state carried from round to round."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import RULES, make_reports, make_rule
from ._formula_cases import CANCELLING, NEAR_ZERO_LOSSES, _extreme, _losses
from ._tolerances import REL

#: Losses of K = 4 clients over 7 rounds under which AFL's λ, at the published step 0.01,
#: reaches a face of the simplex where the public q-FFL code's projection differs (round 6).
AFL_CLIPPING_LOSSES = np.array(
    [
        [0.5, 2.2, 24.5, 14.3],
        [0.2, 0.8, 1.0, 0.6],
        [0.3, 4.7, 0.7, 0.2],
        [0.6, 15.1, 1.0, 0.1],
        [12.5, 18.6, 4.4, 9.7],
        [0.1, 0.7, 0.1, 9.9],
        [0.9, 0.5, 22.8, 19.1],
    ]
)


# ---------------------------------------------------------------------------------- rules
#: Rule cases beyond the common ones: a rule's variants, by hyper-parameters.
RULE_VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    # AFL's default λ step (0.01) leaves λ + γ_λ F inside the simplex's positive orthant, where
    # every projection keeps all K entries: a larger step makes it clip, the branch where the
    # public q-FFL code's off-by-one projection differs (SPEC §3).
    "afl": {"large_lambda_step": {"lambda_lr": 1.0}},
    "qfedavg": {"q_zero": {"q": 0.0}, "q_five": {"q": 5.0}},
    "qfedsgd": {"q_five": {"q": 5.0}},
    "term": {"official": {"variant": "official", "tilt": 0.5}, "negative_tilt": {"tilt": -1.0}},
    "fedfv": {"window": {"alpha": 0.0, "tau": 2}, "flgo": {"variant": "flgo", "tau": 2}},
    "fedmgda": {"plain_mgda": {"epsilon": 1.0}, "epsilon_zero": {"epsilon": 0.0}},
    "fedfa": {"flgo": {"variant": "flgo"}, "frequency_only": {"alpha": 0.0}},
    "aaggff-s": {"official": {"variant": "official", "cdf": "normal"}},
    "aaggff-d": {
        "official": {"variant": "official", "cdf": "normal"},
        "official_fraction": {"variant": "official", "inclusion_probability": 0.3},
    },
    "propfair-eg": {"small_m": {"M": 4.0}},
}
#: Hyper-parameters that switch a rule onto other code paths: each variant setting one has
#: the degenerate cases as well (``<variant>_<shape>``).
VARIANT_KEYS = frozenset({"variant", "tau", "inclusion_probability"})
#: The degenerate case shapes.
DEGENERATE = ("ties", "zero_updates", "single_client", "extreme_losses")
#: Rule outputs not compared: facts of an algorithm's path, not of its formula.
RULE_EXCLUDE = ("qp_iterations",)


def _rule_rounds(
    rng: np.random.Generator,
    spec: Any,
    K: int,
    m: int,
    d: int,
    rounds: int,
    kind: str,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """θ⁰ and each round's report fields for a rule case of the given kind."""
    gradients = make_rule(spec.name).local.report == "gradients"
    m = K if spec.full_participation else m
    theta = rng.standard_normal(d)
    counts = np.zeros(K, dtype=np.int64)
    out = []
    for t in range(rounds):
        ids = np.sort(rng.choice(K, size=m, replace=False))
        counts[ids] += 1
        U = rng.standard_normal((m, d)) * 0.1
        losses = _losses(rng, m)
        n = rng.integers(5, 200, m)
        acc = rng.uniform(0.1, 0.95, m)
        if kind == "ties":
            losses, n, acc = np.full(m, 0.9), np.full(m, 40), np.full(m, 0.5)
        elif kind == "zero_updates":
            U = np.zeros((m, d))
        elif kind == "extreme_losses":
            losses = rng.permutation(_extreme(m))
        r: dict[str, Any] = {
            "num_samples": n,
            "losses": losses,
            "accuracies": acc,
            "participations": counts[ids].copy(),
            "client_ids": ids,
            "lr": 0.05,
            "round_index": t,
        }
        r["gradients" if gradients else "deltas"] = U
        out.append(r)
    return theta, out


def _rule_cases(name: str, rng: np.random.Generator) -> dict[str, tuple[str, dict, dict]]:
    spec = RULES[name]
    shapes = {
        "small": ("three rounds, 3 of 5 clients (all 5 for cross-silo rules), d = 6", 5, 3, 6),
        "medium": (
            "three rounds, 8 of 12 clients (all 12 for cross-silo rules), d = 40",
            12,
            8,
            40,
        ),
        "ties": ("equal losses, sizes and accuracies", 4, 3, 5),
        "zero_updates": ("every update 0", 4, 3, 5),
        "single_client": ("one client, K = 1", 1, 1, 5),
        "extreme_losses": ("losses from 1e-6 to 1e3", 6, 6, 5),
    }
    cases: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {}
    for kind, (what, K, m, d) in shapes.items():
        theta, rounds = _rule_rounds(rng, spec, K, m, d, 3, kind)
        cases[kind] = (what, {"params0": theta, "num_clients": K, "rounds": rounds}, {})
    for kind, hyper in RULE_VARIANTS.get(name, {}).items():
        theta, rounds = _rule_rounds(rng, spec, 5, 3, 6, 3, "small")
        what = "three rounds with " + ", ".join(f"{k} = {v}" for k, v in hyper.items())
        cases[kind] = (what, {"params0": theta, "num_clients": 5, "rounds": rounds}, hyper)
    # a variant's own branches on the degenerate shapes too (drawn after the cases above, which
    # therefore keep their inputs)
    for kind, hyper in RULE_VARIANTS.get(name, {}).items():
        if not set(hyper) & VARIANT_KEYS:
            continue
        for shape in DEGENERATE:
            what, K, m, d = shapes[shape]
            theta, rounds = _rule_rounds(rng, spec, K, m, d, 3, shape)
            label = ", ".join(f"{k} = {v}" for k, v in hyper.items())
            inputs = {"params0": theta, "num_clients": K, "rounds": rounds}
            cases[f"{kind}_{shape}"] = (f"{what}, with {label}", inputs, hyper)
    # inputs where a known outside difference shows at the default tolerance (drawn last, so
    # the cases above keep their inputs)
    for kind, (what, K, m, d, T, shape_of) in _RULE_SPECIAL.get(name, {}).items():
        theta, rounds = _rule_rounds(rng, spec, K, m, d, T, "small")
        for t, r in enumerate(rounds):
            shape_of(r, t, rng)
        if kind == "near_zero_losses":  # a step of 1e-9 shows against θ = 0, not against θ ~ 1
            theta = np.zeros_like(theta)
        cases[kind] = (what, {"params0": theta, "num_clients": K, "rounds": rounds}, {})
    return cases


def _near_zero_losses(r: dict[str, Any], t: int, rng: np.random.Generator) -> None:
    r["losses"] = NEAR_ZERO_LOSSES[: r["losses"].size] * (1 + t)


def _afl_clipping(r: dict[str, Any], t: int, rng: np.random.Generator) -> None:
    r["losses"] = AFL_CLIPPING_LOSSES[t].copy()


def _antiparallel(r: dict[str, Any], t: int, rng: np.random.Generator) -> None:
    key = "deltas" if "deltas" in r else "gradients"
    r[key] = np.array([[0.3], [-0.6]]) * (1 + 0.5 * t)


def _cancelling(r: dict[str, Any], t: int, rng: np.random.Generator) -> None:
    r["deltas"] = CANCELLING * (1 + 0.5 * t)


def _tiny(r: dict[str, Any], t: int, rng: np.random.Generator) -> None:
    r["deltas"] = r["deltas"] * 1e-6


def _unequal_sizes(r: dict[str, Any], t: int, rng: np.random.Generator) -> None:
    r["num_samples"] = np.array([5, 400, 40])[: r["num_samples"].size]


#: Rule cases built to show a known outside difference at the default tolerance: (what, K,
#: m, d, rounds, how each round is set).
_RULE_SPECIAL: dict[str, dict[str, tuple]] = {
    "qfedavg": {"near_zero_losses": ("losses near 1e-9 (another ε shows)", 6, 4, 5, 3,
                                     _near_zero_losses)},
    "qfedsgd": {"near_zero_losses": ("losses near 1e-9 (another ε shows)", 6, 4, 5, 3,
                                     _near_zero_losses)},
    "afl": {"clipping_at_default_step": (
        "seven rounds at the published λ step 0.01, λ reaching a face of the simplex", 4, 4,
        6, 7, _afl_clipping)},
    "fedfv": {
        "antiparallel": ("two antiparallel updates in one coordinate, every round", 2, 2, 1, 3,
                         _antiparallel),
        "cancelling": ("three updates that sum to 0, every round", 3, 3, 2, 3, _cancelling),
    },
    "fedmgda": {"tiny_updates": ("updates of length about 1e-6 (‖δ‖ + c shows)", 5, 3, 6, 3,
                                 _tiny)},
    "fedavg": {"partial_unequal_sizes": ("3 of 8 clients with 5, 400 and 40 samples", 8, 3, 5,
                                         3, _unequal_sizes)},
    "propfair": {"partial_unequal_sizes": ("3 of 8 clients with 5, 400 and 40 samples", 8, 3,
                                           5, 3, _unequal_sizes)},
    "term": {"partial_unequal_sizes": ("3 of 8 clients with 5, 400 and 40 samples", 8, 3, 5,
                                       3, _unequal_sizes)},
}  # fmt: skip


def _run_rule(name: str, hyper: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    rule = make_rule(name, **hyper)
    theta = np.asarray(inputs["params0"], dtype=np.float64)
    K = int(inputs["num_clients"])
    state = rule.init(theta, K)
    rounds = []
    for r in inputs["rounds"]:
        reports = make_reports(
            r.get("deltas"),
            r["num_samples"],
            losses=r["losses"],
            accuracies=r["accuracies"],
            participations=r["participations"],
            client_ids=r["client_ids"],
            round_index=r["round_index"],
            num_clients=K,
            gradients=r.get("gradients"),
            lr=r["lr"],
        )
        agg = rule.step(theta, reports, state)
        theta, state = agg.params, agg.state
        out: dict[str, Any] = {"params": theta}
        for k, v in agg.info.items():
            if k not in RULE_EXCLUDE and isinstance(v, (np.ndarray, float, int, np.number)):
                out[k] = v
        rounds.append(out)
    return {"rounds": rounds}


def _rule_rel(name: str) -> float:
    return 1e-10 if name in ("fedfv", "fedmgda", "aaggff-s") else REL
