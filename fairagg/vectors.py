"""Golden vectors: language-neutral test cases of every registered rule and formula.

``fairagg vectors --out DIR`` ([`write_vectors`][fairagg.vectors.write_vectors]) writes, for each
rule of [`fairagg.RULES`][fairagg.RULES] and each formula function of
[`FORMULAS`][fairagg.vectors.FORMULAS], a set of cases (``small``, ``medium`` and degenerate ones:
ties, zero updates, a single client, extreme losses, and the rule's variants) as JSON files: the
inputs, every parameter, the outputs fairagg computes in float64, and the tolerance each comparison
deserves. Arrays of more than [`INLINE_MAX`][fairagg.vectors.INLINE_MAX] entries go to ``.npy``
files beside the JSON. ``DIR/schema.json`` is a JSON Schema of a case file and ``DIR/index.json``
lists the cases.

Everything is generated deterministically from ``seed``: the inputs are bitwise reproducible on
any machine (derived inputs, such as a Gram matrix, are correctly rounded sums rather than BLAS
products); the expected outputs are bitwise reproducible on one machine and agree across
machines within their tolerances, a few ulps apart (BLAS may sum in another order, NumPy's SIMD
exp/log round differently by CPU). [`check_vectors`][fairagg.vectors.check_vectors] recomputes every
case with the library and reports the comparisons that fail
([`compare_vectors`][fairagg.vectors.compare_vectors] also each case's distance), which is how the
stored set in the test suite is kept equal to what fairagg computes today, and how another
implementation can be checked against the files.

Case file (``schema_version`` 1)::

    {"schema_version": 1, "kind": "rule" | "formula", "name": ..., "case": ...,
     "description": ..., "function": "fairagg.rules.qffl.qfedavg_step" (formulas),
     "formula": one line of what is computed, "args": [positional argument names],
     "params": {keyword arguments, or the rule's hyper-parameters},
     "inputs": {...}, "expected": {...} or {"error": {"type": ..., "message": ...}},
     "tolerance": {output name: {"rtol": r, "atol": a} or {"exact": true}}}

A tolerance entry may also carry ``"argmin"``, the problem the output minimises when its
minimiser is not unique (a min-norm weighting λ over a singular Gram matrix,
``NON_UNIQUE``): there another minimiser is as right as the stored one, so compare the
objective value and the optimality (KKT) conditions instead of the entries, as
[`fairagg.conformance.check`][fairagg.conformance.check] does.

An array is ``{"dtype": "float64" | "int64" | "bool", "shape": [...], "data": [flat, C order]}``
or, when large, ``{"dtype": ..., "shape": [...], "file": "NAME.npy"}``. A rule case's inputs are
``{"params0": θ⁰, "num_clients": K, "rounds": [report fields of each round]}`` (the
[`RoundReports`][fairagg.types.RoundReports] fields: ``deltas`` or ``gradients``, ``num_samples``,
``losses``, ``accuracies``, ``participations``, ``client_ids``, ``lr``, ``round_index``) and its
expected outputs ``{"rounds": [{"params": θ^{t+1}, "weights": ..., other numeric info}]}``,
the rule's state carried from round to round. A comparison passes when
|got − want| ≤ atol + rtol·|want| entrywise.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from . import RULES, make_reports, make_rule
from ._checks import check_choice, check_int
from ._tolerance import (
    DEFAULT_SOLVER_TOL,
    PERTURBATION,
    RUNS,
    SAFETY,
    UNIT_ROUNDOFF,
    error_bound,
)

__all__ = [
    "FORMULAS",
    "INLINE_MAX",
    "SCHEMA_VERSION",
    "CaseCheck",
    "Formula",
    "case_inputs",
    "check_vectors",
    "compare_vectors",
    "generate",
    "load_case",
    "write_vectors",
]

SCHEMA_VERSION = 1
#: Arrays with more entries than this go to ``.npy`` files.
INLINE_MAX = 64
#: Relative tolerance of fairagg against its own golden outputs on another machine
#: (``fairagg vectors --check``: closed forms and exact QP solves, BLAS and SIMD exp/log that
#: round otherwise; the absolute part is this times the output's scale), where it is wider
#: than the file's error bound. Not the tolerance for another implementation: that is the
#: file's ``tolerance`` entry, each output's error bound (see ``PRECISIONS``).
REL = 1e-12
#: How each output's tolerance is set (``fairagg._tolerance``): an error bound in the
#: precision an implementation computes in, from fairagg's own outputs on inputs perturbed by
#: ``perturbation`` units of round-off (relative), ``runs`` times: ``atol`` is ``safety`` times
#: the largest move of the output, ``rtol`` ``safety`` · ``perturbation`` · u; ``"solver"``
#: adds a solver's accuracy (default ``solver_tol``). The golden files carry the float64 bound
#: as ``rtol``/``atol`` and the float32 one under ``float32``; ``fairagg check``,
#: ``fairagg vectors --compare`` and
#: [`fairagg.conformance.compare_results`][fairagg.conformance.compare_results] use them.
PRECISIONS: dict[str, dict[str, float]] = {
    "float64": {"unit_roundoff": UNIT_ROUNDOFF["float64"]},
    "float32": {"unit_roundoff": UNIT_ROUNDOFF["float32"]},
    "solver": {"unit_roundoff": UNIT_ROUNDOFF["solver"], "solver_tol": DEFAULT_SOLVER_TOL},
}
BOUND: dict[str, float] = {"perturbation": PERTURBATION, "safety": SAFETY, "runs": RUNS}
DEFAULT_SEED = 20261121
#: Losses near 0, where another q-FFL loss offset ε changes F̃_k by orders of magnitude.
NEAR_ZERO_LOSSES = np.array([1e-9, 3e-9, 5e-10, 2e-9])
#: Three updates in R² that sum to 0 (FedFV's ḡ cancels).
CANCELLING = np.array([[0.5, 0.0], [-0.25, 0.5], [-0.25, -0.5]])
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

Json = dict[str, Any]
CaseInputs = tuple[str, dict[str, Any], dict[str, Any]]  # description, inputs, params


# ---------------------------------------------------------------------------------- encoding
def _encode(value: Any, files: dict[str, np.ndarray], stem: str, key: str) -> Any:
    """A JSON value for ``value``; large arrays are added to ``files`` under their file name."""
    if isinstance(value, (np.ndarray, list, tuple)) and not (
        isinstance(value, (list, tuple)) and value and isinstance(value[0], dict)
    ):
        a = np.asarray(value)
        if a.dtype.kind == "f":
            a = a.astype(np.float64)
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{key}: golden arrays must be finite")
        elif a.dtype.kind in "iu":
            a = a.astype(np.int64)
        elif a.dtype.kind != "b":
            raise TypeError(f"{key}: cannot encode an array of dtype {a.dtype}")
        out: Json = {"dtype": str(a.dtype), "shape": list(a.shape)}
        if a.size > INLINE_MAX:
            name = f"{stem}.{key}.npy"
            files[name] = np.ascontiguousarray(a)
            out["file"] = name
        else:
            out["data"] = a.ravel().tolist()
        return out
    if isinstance(value, dict):
        return {k: _encode(v, files, stem, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, files, stem, f"{key}.{i}") for i, v in enumerate(value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            raise ValueError(f"{key}: golden numbers must be finite")
        return float(value)
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{key}: cannot encode {type(value).__name__}")


def _dumps(obj: Any, level: int = 0) -> str:
    """JSON with one line per array (an array's entries on that line) and keys sorted."""
    pad = " " * level
    if isinstance(obj, dict) and "dtype" in obj and "shape" in obj:
        return json.dumps(obj, sort_keys=True, ensure_ascii=False)
    if isinstance(obj, dict) and obj:
        items = [f"{pad} {json.dumps(k)}: {_dumps(obj[k], level + 1)}" for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and obj and all(isinstance(v, (dict, list)) for v in obj):
        items = [pad + " " + _dumps(v, level + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def _decode(obj: Any, folder: Path) -> Any:
    if isinstance(obj, dict) and "dtype" in obj and "shape" in obj:
        if "file" in obj:
            a = np.load(folder / obj["file"], allow_pickle=False)
        else:
            a = np.array(obj["data"], dtype=obj["dtype"]).reshape(obj["shape"])
        if a.dtype != np.dtype(obj["dtype"]) or list(a.shape) != obj["shape"]:
            raise ValueError(f"array {obj.get('file', '')} does not match its dtype and shape")
        return a
    if isinstance(obj, dict):
        return {k: _decode(v, folder) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, folder) for v in obj]
    return obj


def _outputs(result: Any, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """A function's result as named numeric outputs: a NamedTuple's fields, a tuple's items
    (``out0``, ``out1``, ...), or ``out``. Fields in ``exclude`` (iteration counts and other
    facts of the algorithm, not of the formula) and None are left out."""
    if hasattr(result, "_fields"):
        items = {k: getattr(result, k) for k in result._fields}
    elif isinstance(result, tuple):
        items = {f"out{i}": v for i, v in enumerate(result)}
    else:
        items = {"out": result}
    out = {}
    for k, v in items.items():
        if k in exclude or v is None:
            continue
        if hasattr(v, "_fields"):  # a nested record (e.g. a state): its numeric fields
            for kk, vv in _outputs(v).items():
                out[f"{k}.{kk}"] = vv
        elif isinstance(v, (np.ndarray, float, int, bool, np.number, np.bool_)):
            out[k] = v
    return out


def _self_tol(tol: Json, want: Any, rel: float = REL) -> tuple[float, float]:
    """(rtol, atol) of fairagg against its own stored output on another machine: the file's
    bound, or ``rel`` (``REL``, or a formula's own) where that is wider."""
    w = np.asarray(want, dtype=np.float64)
    fin = w[np.isfinite(w)] if w.size else w
    scale = max(1.0, float(np.max(np.abs(fin), initial=0.0)) if fin.size else 1.0)
    return max(float(tol["rtol"]), rel), max(float(tol["atol"]), rel * scale)


def _close(got: Any, want: Any, tol: Json, rel: float = REL) -> bool:
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape:
        return False
    if tol.get("exact"):
        return bool(np.array_equal(g, w))
    g, w = g.astype(np.float64), w.astype(np.float64)
    rtol, atol = _self_tol(tol, w, rel)
    same = (g == w) | (np.isnan(g) & np.isnan(w))
    with np.errstate(invalid="ignore"):
        return bool(np.all(same | (np.abs(g - w) <= atol + rtol * np.abs(w))))


# ---------------------------------------------------------------------------------- formulas
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


# ---------------------------------------------------------------------------------- cases
def _seed_for(seed: int, kind: str, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(f"{kind}:{name}".encode())])


def _compute(kind: str, name: str, inputs: dict[str, Any], params: dict[str, Any]) -> Any:
    if kind == "rule":
        return _run_rule(name, params, inputs)
    f = FORMULAS[name]
    args = [inputs[a] for a in f.args]
    return _outputs(f.resolve()(*args, **params), f.exclude)


#: Outputs that are an argmin of λᵀGλ over a box-simplex, by rule or formula: with a singular G
#: (repeated, parallel or dependent vectors) the minimiser is not unique, and another one is as
#: right as fairagg's. The unique quantities built from it (the min-norm vector, its norm,
#: FedMGDA+'s θ^{t+1}) are compared entry by entry as usual.
NON_UNIQUE: dict[str, dict[str, str]] = {
    "min_norm_weights": {"x": "argmin λᵀGλ over {Σλ = 1, lower ≤ λ ≤ upper}"},
    "pareto_certificate": {"weights": "argmin ‖Σλ_k g_k‖² over the simplex"},
    "fedmgda_weights": {
        "mixture": "argmin ‖Σλ_k ĝ_k‖² over {λ ∈ Δ, |λ − λ0| ≤ ε}",
        "weights": "η λ_k / ‖δ_k‖ with λ any such argmin",
    },
    "fedmgda": {
        "mixture": "argmin ‖Σλ_k ĝ_k‖² over {λ ∈ Δ, |λ − λ0| ≤ ε}",
        "weights": "η λ_k / ‖δ_k‖ with λ any such argmin",
    },
}


def _mark_non_unique(name: str, tol: Json) -> Json:
    for k, text in NON_UNIQUE.get(name, {}).items():
        if k in tol:
            tol[k] = {**tol[k], "argmin": text}
    return tol


def tolerances(kind: str, name: str, inputs: dict, params: dict, want: Json) -> Json:
    """Each output's tolerance entry: its float64 error bound (``rtol``, ``atol``), its
    float32 one (``float32``), and, for an argmin that need not be unique, ``argmin``
    (``fairagg._tolerance``; the same bounds
    [`fairagg.conformance.check`][fairagg.conformance.check] computes)."""
    argmins = set(NON_UNIQUE.get(name, {}))
    full = resolved_params(kind, name, params)  # every parameter, as check() perturbs them

    def compute(i: Json, p: Json) -> Json:
        return _compute(kind, name, i, p)

    b64 = error_bound(compute, inputs, full, want, "float64", argmins=argmins)
    b32 = error_bound(compute, inputs, full, want, "float32", argmins=argmins)
    tol: Json = {}
    for k, t in b64.items():
        tol[k] = t.as_json()
        if not t.exact:
            tol[k]["float32"] = b32[k].as_json()
    return _mark_non_unique(name, tol)


def _expected(kind: str, name: str, inputs: dict, params: dict) -> tuple[Json, Json]:
    """(expected, tolerance) of a case; an error the library raises is the expected result."""
    try:
        out = _compute(kind, name, inputs, params)
    except (ValueError, TypeError) as exc:
        return {"error": {"type": type(exc).__name__, "message": str(exc)}}, {}
    return out, tolerances(kind, name, inputs, params, out)


def resolved_params(kind: str, name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Every parameter fairagg uses for a case, defaults included: a rule's hyper-parameters as
    the built rule reports them, or a formula function's keyword defaults, updated with the
    case's own ``params`` (``backend`` left out: it does not change a result)."""
    if kind == "rule":
        out = dict(make_rule(name, **params).hyperparams)
    else:
        f = FORMULAS[name]
        sig = inspect.signature(f.resolve())
        out = {
            k: p.default
            for k, p in sig.parameters.items()
            if k not in f.args and p.default is not inspect.Parameter.empty
        }
        out.update(params)
    out.pop("backend", None)
    return out


def _json_value(v: Any) -> Any:
    """A parameter as JSON holds it: tuples as lists, NumPy scalars as numbers, an infinite
    default (an absent bound, ``upper=inf``) as the string ``"inf"`` or ``"-inf"``."""
    if isinstance(v, tuple):
        return [_json_value(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and math.isinf(v):
        return str(v)
    return v


def case_inputs(kind: str, name: str, seed: int = DEFAULT_SEED) -> dict[str, CaseInputs]:
    """The cases of one rule (``kind="rule"``) or formula, as {case: (description, inputs,
    params)}: the inputs [`generate`][fairagg.vectors.generate] writes for ``seed``, without the
    expectations."""
    check_choice(kind, "kind", ("rule", "formula"))
    names = RULES if kind == "rule" else FORMULAS
    if not isinstance(name, str) or name not in names:
        raise ValueError(f"name must be one of the {kind}s {', '.join(names)}; got {name!r}")
    rng = _seed_for(check_int(seed, "seed", low=0), kind, name)
    if kind == "rule":
        return _rule_cases(name, rng)
    return FORMULAS[name].cases(rng)


def generate(seed: int = DEFAULT_SEED) -> list[Json]:
    """Every case, as decoded dicts (arrays as NumPy arrays), in a fixed order."""
    seed = check_int(seed, "seed", low=0)
    out = []
    for name in RULES:
        rng = _seed_for(seed, "rule", name)
        for case, (what, inputs, params) in _rule_cases(name, rng).items():
            expected, tol = _expected("rule", name, inputs, params)
            out.append(
                {
                    "kind": "rule",
                    "name": name,
                    "case": case,
                    "description": what,
                    "formula": RULES[name].summary,
                    "params": params,
                    "resolved_params": resolved_params("rule", name, params),
                    "inputs": inputs,
                    "expected": expected,
                    "tolerance": tol,
                }
            )
    for name, f in FORMULAS.items():
        rng = _seed_for(seed, "formula", name)
        for case, (what, inputs, params) in f.cases(rng).items():
            expected, tol = _expected("formula", name, inputs, params)
            out.append(
                {
                    "kind": "formula",
                    "name": name,
                    "case": case,
                    "description": what,
                    "function": f.function,
                    "formula": f.formula,
                    "args": list(f.args),
                    "params": params,
                    "resolved_params": resolved_params("formula", name, params),
                    "inputs": inputs,
                    "expected": expected,
                    "tolerance": tol,
                }
            )
    return out


def _relpath(case: Json) -> Path:
    return Path(f"{case['kind']}s") / case["name"] / case["case"]


def write_vectors(out: Path | str, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write every case under ``out`` (created), with ``schema.json`` and ``index.json``;
    returns the JSON files written. Existing case files of the same names are replaced."""
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a str or a path; got {type(out).__name__}")
    seed = check_int(seed, "seed", low=0)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    written = []
    index = []
    for case in generate(seed):
        rel = _relpath(case)
        folder = root / rel.parent
        folder.mkdir(parents=True, exist_ok=True)
        files: dict[str, np.ndarray] = {}
        body = {"schema_version": SCHEMA_VERSION, "seed": seed}
        for k, v in case.items():
            body[k] = _encode(v, files, rel.name, k) if k in ("inputs", "expected") else v
        body["params"] = _encode(case["params"], files, rel.name, "params")
        body["resolved_params"] = _encode(
            {k: _json_value(v) for k, v in case["resolved_params"].items()},
            files,
            rel.name,
            "resolved_params",
        )
        for fname, arr in files.items():
            np.save(folder / fname, arr, allow_pickle=False)
        path = folder / f"{rel.name}.json"
        path.write_text(_dumps(body) + "\n")
        written.append(path)
        index.append(
            {
                "kind": case["kind"],
                "name": case["name"],
                "case": case["case"],
                "file": str(rel) + ".json",
                "error": "error" in case["expected"],
            }
        )
    (root / "index.json").write_text(
        json.dumps({"schema_version": SCHEMA_VERSION, "seed": seed, "cases": index}, indent=1)
        + "\n"
    )
    (root / "schema.json").write_text(json.dumps(schema(), indent=1, ensure_ascii=False) + "\n")
    return written


def _existing(path: Any, name: str, *, folder: bool) -> Path:
    """``path`` as a Path to an existing file (or folder): a TypeError naming ``name`` for
    something that is not a path, a FileNotFoundError naming it for a path that is missing."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or a path; got {type(path).__name__}")
    p = Path(path)
    if not (p.is_dir() if folder else p.is_file()):
        what = "folder" if folder else "file"
        raise FileNotFoundError(f"{name} must be an existing {what}; got {str(p)!r}")
    return p


def load_case(path: Path | str) -> Json:
    """A case file with its arrays decoded (``.npy`` files read from beside it)."""
    p = _existing(path, "path", folder=False)
    body = json.loads(p.read_text())
    if body.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{p}: schema_version {body.get('schema_version')!r}; this fairagg reads "
            f"{SCHEMA_VERSION}"
        )
    return _decode(body, p.parent)


class CaseCheck(NamedTuple):
    """One case recomputed against its file ([`compare_vectors`][fairagg.vectors.compare_vectors]).

    Attributes
    ----------
    where : str
        ``"<kind> <name>/<case>"``.
    fails : list of str
        One line per failing comparison (empty: the case agrees).
    ulps : float
        The largest difference of a floating-point output, in units in the last place of the
        scale its tolerance measures it by, max(max |want|, 1): |got − want| / spacing(scale).
        0 where every output is bit-identical, a few where a sum was taken in another order or a
        SIMD exp/log rounded differently. inf where an integer or boolean output differs, the
        shapes differ, or the case raised where it should not.
    tolerance_used : float
        The largest |got − want| / (atol + rtol·|want|): ≤ 1 passes.
    """

    where: str
    fails: list[str]
    ulps: float
    tolerance_used: float


def _distance(got: Any, want: Any, tol: Json, rel: float = REL) -> tuple[float, float]:
    """(ulps, fraction of the tolerance) of one output; see
    [`CaseCheck`][fairagg.vectors.CaseCheck]."""
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape:
        return math.inf, math.inf
    if tol.get("exact"):
        same = bool(np.array_equal(g, w))
        return (0.0, 0.0) if same else (math.inf, math.inf)
    g, w = g.astype(np.float64), w.astype(np.float64)
    if g.size == 0:
        return 0.0, 0.0
    diff = np.abs(g - w)
    if not np.all(np.isfinite(diff)):
        same = bool(np.array_equal(g, w, equal_nan=True))
        return (0.0, 0.0) if same else (math.inf, math.inf)
    rtol, atol = _self_tol(tol, w, rel)
    scale = max(1.0, float(np.max(np.abs(w))))
    top = float(np.max(diff))
    ulps = top / float(np.spacing(max(scale, np.finfo(np.float64).tiny)))
    used = float(np.max(diff / (atol + rtol * np.abs(w))))
    return ulps, used


def _compare(
    got: Any, want: Any, tol: Json, where: str, rel: float = REL
) -> tuple[list[str], float, float]:
    """(failing comparisons, largest ulps, largest fraction of the tolerance)."""
    if isinstance(want, dict) and "rounds" in want:
        if len(got["rounds"]) != len(want["rounds"]):
            n, n_want = len(got["rounds"]), len(want["rounds"])
            return [f"{where}: {n} rounds, expected {n_want}"], math.inf, math.inf
        fails: list[str] = []
        ulps, used = 0.0, 0.0
        for t, (g, w) in enumerate(zip(got["rounds"], want["rounds"], strict=True)):
            f, u, x = _compare(g, w, tol, f"{where} round {t}", rel)
            fails, ulps, used = fails + f, max(ulps, u), max(used, x)
        return fails, ulps, used
    fails, ulps, used = [], 0.0, 0.0
    for k, w in want.items():
        if k not in got:
            fails.append(f"{where}: output {k!r} missing")
            ulps = used = math.inf
            continue
        u, x = _distance(got[k], w, tol[k], rel)
        ulps, used = max(ulps, u), max(used, x)
        if not _close(got[k], w, tol[k], rel):
            g = np.asarray(got[k], dtype=np.float64)
            err = np.max(np.abs(g - np.asarray(w, dtype=np.float64))) if g.shape else 0.0
            fails.append(f"{where}: {k} differs (max |Δ| = {err:.3g}, tolerance {tol[k]})")
    return fails, ulps, used


def compare_vectors(root: Path | str) -> list[CaseCheck]:
    """Recompute every case listed in ``root/index.json`` with this fairagg and compare with
    the stored expectations: one [`CaseCheck`][fairagg.vectors.CaseCheck] per case, in the index's
    order, with the failing comparisons and how far the recomputed outputs are from the stored ones
    (in ulps and as a fraction of the tolerance)."""
    base = _existing(root, "root", folder=True)
    if not (base / "index.json").is_file():
        raise FileNotFoundError(f"root {str(base)!r} holds no index.json (see write_vectors)")
    index = json.loads((base / "index.json").read_text())
    checks = []
    for entry in index["cases"]:
        case = load_case(base / entry["file"])
        where = f"{case['kind']} {case['name']}/{case['case']}"
        want = case["expected"]
        resolved = _encode(
            {
                k: _json_value(v)
                for k, v in resolved_params(case["kind"], case["name"], case["params"]).items()
            },
            {},
            "",
            "resolved_params",
        )
        stored = _encode(case.get("resolved_params"), {}, "", "resolved_params")
        if stored != resolved:
            fail = (
                f"{where}: resolved_params {stored} in the file; this fairagg resolves "
                f"{resolved} (a default changed?)"
            )
            checks.append(CaseCheck(where, [fail], math.inf, math.inf))
            continue
        try:
            got = _compute(case["kind"], case["name"], case["inputs"], case["params"])
        except (ValueError, TypeError) as exc:
            if "error" not in want:
                fail = f"{where}: raised {type(exc).__name__}: {exc}"
            elif want["error"]["type"] != type(exc).__name__:
                fail = f"{where}: raised {type(exc).__name__}, expected {want['error']}"
            else:
                checks.append(CaseCheck(where, [], 0.0, 0.0))
                continue
            checks.append(CaseCheck(where, [fail], math.inf, math.inf))
            continue
        if "error" in want:
            fail = f"{where}: expected {want['error']['type']}, computed a result"
            checks.append(CaseCheck(where, [fail], math.inf, math.inf))
            continue
        rel = _rule_rel(case["name"]) if case["kind"] == "rule" else FORMULAS[case["name"]].rel
        fails, ulps, used = _compare(got, want, case["tolerance"], where, rel)
        checks.append(CaseCheck(where, fails, ulps, used))
    return checks


def check_vectors(root: Path | str) -> list[str]:
    """Recompute every case listed in ``root/index.json`` with this fairagg and compare with
    the stored expectations; returns one line per failing comparison (empty: all agree). See
    [`compare_vectors`][fairagg.vectors.compare_vectors] for the distance of each case."""
    return [line for c in compare_vectors(root) for line in c.fails]


_ARRAY = {
    "type": "object",
    "required": ["dtype", "shape"],
    "properties": {
        "dtype": {"enum": ["float64", "int64", "bool"]},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "data": {"type": "array", "description": "the entries, flattened in C order"},
        "file": {"type": "string", "description": "a .npy file beside the JSON file"},
    },
    "oneOf": [{"required": ["data"]}, {"required": ["file"]}],
}
SCHEMA: Json = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "fairagg golden vector case",
    "description": (
        "One case of a rule (several rounds, state carried) or a formula function: inputs, "
        "parameters, the outputs fairagg computes in float64 (or the error it raises), and "
        "the tolerance of each output: |got - want| <= atol + rtol*|want| entrywise with the "
        "output's float64 error bound (rtol, atol; its float32 bound under float32), or exact "
        "equality (see precisions and bound)."
    ),
    "precisions": {
        name: {
            **p,
            "rule": "|got - want| <= atol + rtol*|want| entrywise with the output's tolerance "
            "entry (float32: its float32 entry; solver: the float64 entry plus solver_tol, "
            "relative and absolute times max(1, max|want|)); integers and booleans exactly",
        }
        for name, p in PRECISIONS.items()
    },
    "bound": {
        **BOUND,
        "rule": "each output's error bound: fairagg's outputs on the inputs perturbed by up to "
        "perturbation*u relative (u the unit round-off), runs times; atol = safety * the "
        "largest move of the output, rtol = safety * perturbation * u",
    },
    "type": "object",
    "required": [
        "schema_version",
        "kind",
        "name",
        "case",
        "params",
        "resolved_params",
        "inputs",
        "expected",
        "tolerance",
    ],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "seed": {"type": "integer"},
        "kind": {"enum": ["rule", "formula"]},
        "name": {"type": "string"},
        "case": {"type": "string"},
        "description": {"type": "string"},
        "formula": {"type": "string"},
        "function": {"type": "string", "description": "formulas: the fairagg function"},
        "args": {"type": "array", "items": {"type": "string"}},
        "params": {"type": "object", "description": "the case's own settings"},
        "resolved_params": {
            "type": "object",
            "description": "every parameter the case runs with, defaults included (a rule's "
            "hyper-parameters and variant, a formula's keyword arguments; an infinite default "
            'as the string "inf"); see defaults',
        },
        "inputs": {"type": "object"},
        "expected": {"type": "object"},
        "tolerance": {
            "type": "object",
            "additionalProperties": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["rtol", "atol"],
                        "properties": {
                            "rtol": {"type": "number"},
                            "atol": {"type": "number"},
                            "float32": {
                                "type": "object",
                                "required": ["rtol", "atol"],
                                "description": "the output's float32 error bound",
                            },
                            "argmin": {"type": "string"},
                        },
                    },
                    {"type": "object", "required": ["exact"]},
                ]
            },
        },
    },
    "$defs": {"array": _ARRAY},
}


def schema() -> Json:
    """The JSON schema written as ``schema.json``: ``SCHEMA`` with the default parameters of
    every rule and formula (what a case's ``resolved_params`` holds when it sets nothing)."""
    defaults = {
        "rules": {n: {k: _json_value(v) for k, v in resolved_params("rule", n, {}).items()}
                  for n in RULES},
        "formulas": {
            n: {k: _json_value(v) for k, v in resolved_params("formula", n, {}).items()}
            for n in FORMULAS
        },
    }  # fmt: skip
    return {**SCHEMA, "defaults": defaults}
