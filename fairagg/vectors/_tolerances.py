"""How a recomputed output is compared with its stored one: the error-bound settings the files
carry, fairagg's own tolerance against its stored outputs on another machine, and the outputs
whose argmin need not be unique."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._tolerance import DEFAULT_SOLVER_TOL, PERTURBATION, RUNS, SAFETY, UNIT_ROUNDOFF
from ._encoding import Json

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
