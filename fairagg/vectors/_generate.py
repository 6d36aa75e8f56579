"""A case from its seed: the inputs, every parameter resolved, the outputs fairagg computes and
each output's tolerance; and every case of every rule and formula in a fixed order."""

from __future__ import annotations

import inspect
import zlib
from typing import Any

import numpy as np

from .. import RULES, make_rule
from .._checks import check_choice, check_int
from .._tolerance import error_bound
from ._encoding import Json, _outputs
from ._formula_cases import CaseInputs
from ._formulas import FORMULAS
from ._rules import _rule_cases, _run_rule
from ._tolerances import NON_UNIQUE, _mark_non_unique

DEFAULT_SEED = 20261121


def _seed_for(seed: int, kind: str, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(f"{kind}:{name}".encode())])


def _compute(kind: str, name: str, inputs: dict[str, Any], params: dict[str, Any]) -> Any:
    if kind == "rule":
        return _run_rule(name, params, inputs)
    f = FORMULAS[name]
    args = [inputs[a] for a in f.args]
    return _outputs(f.resolve()(*args, **params), f.exclude)


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
