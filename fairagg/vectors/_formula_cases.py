"""The case builders of the formula functions: each draws a function's ``small``, ``medium`` and
degenerate inputs from a generator (``cases(rng)`` of a [`Formula`][fairagg.vectors.Formula])."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

#: Losses near 0, where another q-FFL loss offset ε changes F̃_k by orders of magnitude.
NEAR_ZERO_LOSSES = np.array([1e-9, 3e-9, 5e-10, 2e-9])
#: Three updates in R² that sum to 0 (FedFV's ḡ cancels).
CANCELLING = np.array([[0.5, 0.0], [-0.25, 0.5], [-0.25, -0.5]])
CaseInputs = tuple[str, dict[str, Any], dict[str, Any]]  # description, inputs, params


def _losses(rng: np.random.Generator, m: int) -> np.ndarray:
    return rng.uniform(0.1, 3.0, m)


def _extreme(m: int) -> np.ndarray:
    return np.geomspace(1e-6, 1e3, m)


def _weights_cases(rng: np.random.Generator, with_n: bool, **params: Any) -> dict[str, CaseInputs]:
    def inp(losses: np.ndarray, n: np.ndarray) -> dict[str, Any]:
        return {"losses": losses, "num_samples": n} if with_n else {"losses": losses}

    n5 = rng.integers(5, 200, 5)
    return {
        "small": ("five clients", inp(_losses(rng, 5), n5), params),
        "medium": ("80 clients", inp(_losses(rng, 80), rng.integers(1, 500, 80)), params),
        "ties": ("equal losses and sizes", inp(np.full(4, 0.7), np.full(4, 30)), params),
        "single_client": ("one client", inp(np.array([1.3]), np.array([17])), params),
        "extreme_losses": ("losses from 1e-6 to 1e3", inp(_extreme(6), n5[:1].repeat(6)), params),
    }


def _round_arrays(rng: np.random.Generator, m: int, d: int) -> dict[str, np.ndarray]:
    return {
        "params": rng.standard_normal(d),
        "deltas": rng.standard_normal((m, d)) * 0.1,
        "losses": _losses(rng, m),
        "num_samples": rng.integers(5, 200, m),
    }


def _update_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    s, md = _round_arrays(rng, 3, 5), _round_arrays(rng, 20, 30)
    w = rng.dirichlet(np.ones(3))

    def case(r: dict[str, np.ndarray], w: np.ndarray, what: str) -> CaseInputs:
        return what, {"params": r["params"], "deltas": r["deltas"], "weights": w}, {}

    return {
        "small": case(s, w, "three clients, weights on the simplex"),
        "medium": case(md, rng.dirichlet(np.ones(20)), "20 clients, d = 30"),
        "zero_updates": case({**s, "deltas": np.zeros((3, 5))}, w, "every δ_k = 0"),
        "single_client": case({**s, "deltas": s["deltas"][:1]}, np.ones(1), "one client"),
        "unnormalised": case(s, np.array([0.5, 2.0, -0.25]), "weights need not sum to 1"),
    }


def _q_cases(rng: np.random.Generator, gradients: bool) -> dict[str, CaseInputs]:
    key = "grads" if gradients else "deltas"

    def case(r: dict[str, np.ndarray], q: float, what: str, lr: float = 0.1) -> CaseInputs:
        inputs = {"params": r["params"], key: r["deltas"], "losses": r["losses"]}
        return what, inputs, {"q": q, "lr": lr}

    s, md = _round_arrays(rng, 4, 6), _round_arrays(rng, 25, 30)
    return {
        "small": case(s, 1.0, "four clients, q = 1"),
        "medium": case(md, 5.0, "25 clients, q = 5"),
        "q_zero": case(s, 0.0, "q = 0"),
        "ties": case({**s, "losses": np.full(4, 0.8)}, 2.0, "equal losses"),
        "zero_updates": case({**s, "deltas": np.zeros((4, 6))}, 1.0, "every update 0"),
        "single_client": case({k: v[:1] if k != "params" else v for k, v in s.items()}, 1.0, "one"),
        "extreme_losses": case({**s, "losses": _extreme(4)}, 3.0, "losses from 1e-6 to 1e3"),
        # where another loss offset shows (FLGo adds 1e-8 where SPEC §2 has 1e-10)
        "near_zero_losses": case(
            {**s, "losses": NEAR_ZERO_LOSSES, "params": np.zeros(6)}, 1.0, "losses near 1e-9"
        ),
    }


def _fedfv_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    D = rng.standard_normal((6, 8))
    D[3] = -D[1] * 0.5  # an exactly conflicting pair
    out = {
        "small": ("six clients, one antiparallel pair", {"deltas": D, "losses": _losses(rng, 6)}),
        "medium": (
            "20 clients",
            {"deltas": rng.standard_normal((20, 40)), "losses": _losses(rng, 20)},
        ),
        "ties": ("equal losses (ties broken by index)", {"deltas": D, "losses": np.full(6, 1.0)}),
        "zero_updates": ("every δ_k = 0", {"deltas": np.zeros((4, 5)), "losses": _losses(rng, 4)}),
        "single_client": ("one client", {"deltas": D[:1], "losses": np.array([0.5])}),
        # exactly antiparallel and cancelling updates: ḡ is 0 (SPEC §7), not round-off
        # rescaled to full length
        "antiparallel_1d": (
            "two antiparallel updates in one coordinate",
            {"deltas": np.array([[0.3], [-0.6]]), "losses": np.array([0.5, 0.9])},
        ),
        "cancelling": (
            "three updates that sum to 0",
            {"deltas": CANCELLING, "losses": np.array([0.4, 0.7, 1.1])},
        ),
    }
    return {k: (what, inputs, {"alpha": 0.0}) for k, (what, inputs) in out.items()}


def _mgda_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    def case(D: np.ndarray, n: np.ndarray, eps: float, what: str) -> CaseInputs:
        return what, {"deltas": D, "num_samples": n}, {"epsilon": eps}

    D = rng.standard_normal((5, 7))
    n = rng.integers(5, 100, 5)
    Z = D.copy()
    Z[2] = 0.0
    return {
        "small": case(D, n, 0.1, "five clients, ε = 0.1"),
        "medium": case(rng.standard_normal((15, 30)), rng.integers(5, 100, 15), 0.3, "15 clients"),
        "plain_mgda": case(D, n, 1.0, "ε = 1: plain MGDA"),
        "epsilon_zero": case(D, n, 0.0, "ε = 0: FedAvg on normalised updates"),
        "zero_update": case(Z, n, 0.5, "one δ_k = 0: the min-norm point is 0"),
        "single_client": case(D[:1], n[:1], 0.1, "one client"),
        # where ‖δ_k‖ + c shows (FLGo's FedMGDA+ normalises by ‖δ_k‖ + 1e-8)
        "tiny_updates": case(D * 1e-7, n, 0.1, "updates of length about 1e-7"),
    }


def _fedfa_info_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    def case(acc: Any, part: Any, what: str) -> CaseInputs:
        return what, {"accuracies": np.asarray(acc, float), "participations": np.asarray(part)}, {}

    return {
        "small": case(rng.uniform(0.2, 0.9, 5), rng.integers(1, 10, 5), "five clients"),
        "medium": case(rng.uniform(0.0, 1.0, 40), rng.integers(1, 30, 40), "40 clients"),
        "ties": case(np.full(4, 0.5), np.full(4, 3), "equal accuracies and participations"),
        "single_client": case([0.4], [2], "one client"),
        "all_zero_accuracy": case(np.zeros(3), [1, 2, 3], "every accuracy 0"),
        "one_perfect": case([1.0, 0.0, 0.0], [1, 1, 1], "one accuracy 1, the rest 0"),
    }


def _fedfa_step_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    def case(gamma: float, eta: float, variant: str, what: str, apply: bool = True) -> CaseInputs:
        inputs = {k: rng.standard_normal(6) for k in ("params", "average", "momentum")}
        return what, inputs, {"gamma": gamma, "eta_s": eta, "variant": variant, "apply": apply}

    return {
        "small": case(0.5, 1.0, "paper", "γ = 0.5, η_s = 1"),
        "flgo_sign": case(0.5, 0.1, "flgo", "the public code's sign"),
        "no_correction": case(0.9, 1.0, "paper", "a round without correction", apply=False),
        "no_momentum": case(0.0, 0.5, "paper", "γ = 0"),
    }


def _simplex_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    def case(y: Any, what: str, total: float = 1.0) -> CaseInputs:
        return what, {"y": np.asarray(y, float)}, {"total": total}

    return {
        "small": case(rng.standard_normal(5), "five entries"),
        "medium": case(rng.standard_normal(100) * 3, "100 entries"),
        "ties": case([0.3, 0.3, 0.3, -1.0], "tied entries"),
        "inside": case([0.2, 0.5, 0.3], "already on the simplex"),
        "single": case([4.0], "one entry"),
        "total_two": case(rng.standard_normal(6), "Σx = 2", total=2.0),
    }


def _exact_gram(V: np.ndarray) -> np.ndarray:
    """V Vᵀ with every entry the correctly rounded sum of the (IEEE-rounded) products: the same
    bits on every machine, where a BLAS product's last digits depend on its kernel."""
    m = V.shape[0]
    G = np.empty((m, m))
    for i in range(m):
        for j in range(i, m):
            G[i, j] = G[j, i] = math.fsum(V[i] * V[j])
    return G


def _min_norm_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    def case(V: np.ndarray, what: str, lo: float = 0.0, hi: float = np.inf) -> CaseInputs:
        params = {"lower": lo} if hi == np.inf else {"lower": lo, "upper": hi}
        return what, {"gram": _exact_gram(V)}, params

    V = rng.standard_normal((5, 3))
    dup = np.vstack([V[:2], V[:2], -V[:1]])
    return {
        "small": case(V, "five vectors in R³"),
        "medium": case(rng.standard_normal((30, 10)), "30 vectors in R¹⁰"),
        "dependent": case(dup, "repeated and antiparallel vectors"),
        "box": case(V, "box [0.1, 0.3]", 0.1, 0.3),
        "single": case(V[:1], "one vector"),
    }


def _qp_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    def case(K: int, what: str, **params: Any) -> CaseInputs:
        B = rng.standard_normal((K, K))
        return what, {"A": _exact_gram(B) + 0.5 * np.eye(K), "b": rng.standard_normal(K)}, params

    return {
        "small": case(4, "K = 4"),
        "medium": case(12, "K = 12"),
        "box": case(6, "box [0.05, 0.4]", lower=0.05, upper=0.4),
        "single": case(1, "K = 1"),
    }


def _response_cases(rng: np.random.Generator, cdf: str) -> dict[str, CaseInputs]:
    def case(losses: Any, what: str) -> CaseInputs:
        return what, {"losses": np.asarray(losses, float)}, {"cdf": cdf, "scale": 0.25}

    return {
        "small": case(_losses(rng, 5), "five clients"),
        "ties": case(np.full(3, 2.0), "equal losses"),
        "single_client": case([0.4], "one client"),
        "extreme_losses": case(_extreme(6), "losses from 1e-6 to 1e3"),
    }


def _dr_cases(rng: np.random.Generator, variant: str) -> dict[str, CaseInputs]:
    def case(K: int, sel: list[int], what: str) -> CaseInputs:
        r = rng.uniform(0.0, 1.0, len(sel))
        return (
            what,
            {"responses": r, "selected": np.array(sel)},
            {
                "num_clients": K,
                "variant": variant,
            },
        )

    return {
        "small": case(6, [1, 4, 5], "3 of 6"),
        "all_selected": case(4, [0, 1, 2, 3], "every client selected"),
        "single_client": case(5, [2], "1 of 5"),
    }


def _dr_gradient_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    def case(K: int, what: str) -> CaseInputs:
        p = rng.dirichlet(np.ones(K))
        return what, {"p": p, "r_check": rng.uniform(0, 2, K), "r_bar": 0.4}, {}

    return {"small": case(5, "K = 5"), "medium": case(50, "K = 50"), "single": case(1, "K = 1")}


def _simple_cases(rng: np.random.Generator, build: Callable[..., CaseInputs]) -> dict:
    return {k: build(rng, k) for k in ("small", "medium", "ties", "single_client")}


def _size(kind: str) -> int:
    return {"small": 5, "medium": 60, "ties": 4, "single_client": 1}[kind]


def _eg_case(rng: np.random.Generator, kind: str) -> CaseInputs:
    K = _size(kind)
    p = rng.dirichlet(np.ones(K))
    r = np.full(K, 0.3) if kind == "ties" else rng.uniform(-1.0, 1.0, K)
    return (
        f"K = {K}" + (", equal responses" if kind == "ties" else ""),
        {"p": p, "r": r},
        {"eta": 0.7},
    )


def _ftrl_case(rng: np.random.Generator, kind: str) -> CaseInputs:
    K = _size(kind)
    G = np.full(K, 1.5) if kind == "ties" else rng.standard_normal(K) * 3
    return f"K = {K}", {"grad_sum": G}, {"eta": 2.0, "prior": rng.dirichlet(np.ones(K))}


def _decision_case(rng: np.random.Generator, kind: str) -> CaseInputs:
    K = _size(kind)
    G = np.full(K, -0.4) if kind == "ties" else rng.standard_normal(K)
    return f"K = {K}, t = 7", {"grad_sum": G}, {"rounds": 7, "lipschitz": 2.3}


def _fedfa_weights_case(rng: np.random.Generator, kind: str) -> CaseInputs:
    what, inputs, _ = _fedfa_info_cases(rng)[kind]
    return what, inputs, {"alpha": 0.3}


def _afl_case(rng: np.random.Generator, kind: str) -> CaseInputs:
    K, d = _size(kind), 7
    losses = np.full(K, 0.6) if kind == "ties" else _losses(rng, K)
    inputs = {
        "params": rng.standard_normal(d),
        "grads": rng.standard_normal((K, d)),
        "losses": losses,
        "mixture": rng.dirichlet(np.ones(K)),
    }
    return f"K = {K}, d = {d}", inputs, {"lr": 0.1, "lambda_lr": 0.05}


def _afl_clipping_case(rng: np.random.Generator) -> CaseInputs:
    """λ + γ_λ F leaving the simplex's face at the published step 0.01: where the public q-FFL
    code's off-by-one projection differs (SPEC §3)."""
    inputs = {
        "params": rng.standard_normal(7),
        "grads": rng.standard_normal((5, 7)),
        "losses": np.array([1.65, 0.87, 0.43, 2.85, 1.88]),
        "mixture": np.array([0.766, 0.005, 0.004, 0.028, 0.197]),
    }
    return "K = 5, λ near a face, λ step 0.01", inputs, {"lr": 0.1, "lambda_lr": 0.01}


def _term_official_case(rng: np.random.Generator, kind: str) -> CaseInputs:
    K = _size(kind)
    losses = np.full(K, 0.6) if kind == "ties" else _losses(rng, K)
    return f"K = {K}", {"losses": losses, "tilt": 0.5, "normaliser": 1.7}, {}


def _objective_case(rng: np.random.Generator, kind: str) -> CaseInputs:
    K = _size(kind)
    losses = np.full(K, 0.6) if kind == "ties" else _losses(rng, K)
    return f"K = {K}, q = 2", {"losses": losses, "q": 2.0}, {"weights": rng.dirichlet(np.ones(K))}


def _pareto_case(rng: np.random.Generator, kind: str) -> CaseInputs:
    K = _size(kind)
    g = rng.standard_normal((K, 4))
    if kind == "ties":
        g = np.vstack([g[:2], -g[:2]])  # opposite gradients: the certificate is 0
    return f"K = {K} gradients in R⁴", {"grads": g}, {}


def _aaggff_aggregate_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    def case(K: int, sel: list[int], what: str, p: Any = None, zero: bool = False) -> CaseInputs:
        d = 5
        P = rng.dirichlet(np.ones(K)) if p is None else np.asarray(p, float)
        D = np.zeros((len(sel), d)) if zero else rng.standard_normal((len(sel), d)) * 0.1
        inputs = {"params": rng.standard_normal(d), "deltas": D, "p": P, "selected": np.array(sel)}
        return what, inputs, {"server_lr": 1.0}

    return {
        "small": case(6, [4, 1, 5], "3 of 6 clients, in arrival order"),
        "all_selected": case(4, [0, 1, 2, 3], "every client selected: q = p"),
        "single_client": case(5, [2], "1 of 5: q = [1]"),
        "ties": case(5, [0, 3], "uniform p", p=np.full(5, 0.2)),
        "zero_updates": case(6, [0, 2, 3], "every δ_i = 0", zero=True),
    }


def _propfair_scale_cases(rng: np.random.Generator) -> dict[str, CaseInputs]:
    def case(f: float, huber: bool, what: str) -> CaseInputs:
        return what, {"f": f, "m": 5.0, "epsilon": 0.2, "huber": huber}, {}

    return {
        "inside": case(1.3, False, "f well below M: 1/(M − f)"),
        "near_m": case(4.9, False, "M − f < ε: the f/M continuation"),
        "near_m_huber": case(4.9, True, "M − f < ε: the Huber continuation f/ε"),
        "zero_loss": case(0.0, False, "f = 0"),
    }
