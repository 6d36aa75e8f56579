"""How close another implementation's output must be to fairagg's: an error bound per output.

One definition serves the conformance harness (``fairagg check``), ``fairagg vectors --compare``
and the golden files' ``tolerance`` entries. A blanket tolerance (1e-9, say) is both too loose
and too tight: too loose where the computation is well conditioned (FLGo's loss offset 1e-8 in
q-FFL moves θ^{t+1} by less than 1e-9 on losses near 1, and passed), too tight where it is not
(an output formed by cancellation, a min-norm point near a degenerate face). So each output
gets the size of the error that a correct implementation computing in the given precision
makes on *this* input:

- **backward stability**: a correct implementation returns fairagg's function of inputs that
  differ from the given ones by a few units of round-off; fairagg's own outputs on the inputs
  perturbed by up to ``PERTURBATION`` · u relative (u the unit round-off: 2^-53 in float64,
  2^-24 in float32), over ``RUNS`` perturbations, show how far that moves each output: the
  *spread*;
- the bound on an entry is ``SAFETY`` · (spread + ``PERTURBATION`` · u · |fairagg's entry|):
  ``atol`` (one number per output, the largest spread over its entries and rounds, and at
  least the precision's smallest normal number, ``FLOOR``: float32 cannot hold 1e-200) and
  ``rtol``, with |got − want| ≤ atol + rtol · |want| entrywise. Integers and booleans are
  compared exactly.

The perturbations are deterministic (the factor of an entry is a hash of its position and the
run), so the bound is the same in every process. A perturbed run that takes another discrete
branch (an integer or boolean output changes, the function raises, or a non-finite value
appears or goes) is not counted: the run is made again with a factor that is a hash of each
entry's value instead, so that equal entries stay equal (a sort of tied losses takes the
branch it takes on the given input). Where every run takes another branch, the spread is taken
as ``PERTURBATION`` · u times the output's largest entry. An output that no perturbation moves
(weights of integer sample counts, a step exactly zero by a stated threshold) has ``atol`` 0:
it is compared to its relative part alone.

``precision="solver"`` is float64's bound plus the solver's own accuracy ``solver_tol``
(relative, and absolute times max(1, max|want|)): an argmin from an iterative or conic solver at
its stopping tolerance.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

Json = dict[str, Any]

#: The precisions an implementation may compute in, and their unit round-off.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "solver": 2.0**-53, "float32": 2.0**-24}
PRECISIONS = tuple(UNIT_ROUNDOFF)
#: Inputs are perturbed by up to PERTURBATION · u relative (a backward error of a few flops).
PERTURBATION = 16
#: The bound is SAFETY times the largest spread seen and the relative part.
SAFETY = 4
#: Perturbed evaluations per case.
RUNS = 4
#: ``precision="solver"``'s default accuracy of an iterative solver's argmin.
DEFAULT_SOLVER_TOL = 1e-6
#: The smallest normal number of each precision: below it a value may be flushed to 0 or lose
#: its digits (float32 cannot hold fairagg's 7e-218 at all), so atol is at least this.
FLOOR = {"float64": 2.0**-1022, "solver": 2.0**-1022, "float32": 2.0**-126}


@dataclass(frozen=True)
class Tolerance:
    """|got − want| ≤ ``atol`` + ``rtol`` · |want| entrywise, or equality when ``exact``."""

    rtol: float = 0.0
    atol: float = 0.0
    exact: bool = False

    def as_json(self) -> Json:
        return {"exact": True} if self.exact else {"rtol": self.rtol, "atol": self.atol}

    def text(self) -> str:
        return "exact" if self.exact else f"rtol {self.rtol:.2g}, atol {self.atol:.2g}"

    def widened(self, solver_tol: float, scale: float) -> Tolerance:
        """This tolerance plus a solver's accuracy (relative, and absolute at ``scale``)."""
        if self.exact:
            return self
        return Tolerance(self.rtol + solver_tol, self.atol + solver_tol * max(1.0, scale))


def _mix(a: np.ndarray, run: int) -> np.ndarray:
    """A value in [-1, 1) for each float64 entry, a hash of its bits and ``run``."""
    bits = np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)
    with np.errstate(over="ignore"):
        h = (bits ^ (bits >> np.uint64(29))) * np.uint64(0x9E3779B97F4A7C15)
        h = h + np.uint64(run) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(31))) * np.uint64(0x94D049BB133111EB)
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-52 - 1.0


def perturbed(value: Any, run: int, rel: float, *, keep_ties: bool = False, _salt: int = 0) -> Any:
    """``value`` with every float entry x replaced by x (1 + rel · h), h ∈ [-1, 1) a hash of
    the entry's position (or, with ``keep_ties``, of its value: equal entries stay equal) and
    ``run``; integers, booleans and strings are left alone."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        if keep_ties:
            h = _mix(value, run)
        else:
            pos = np.arange(value.size, dtype=np.float64) + 1.0 + 4096.0 * _salt
            h = _mix(pos, run)
        return value * (1.0 + rel * h.reshape(value.shape))
    if isinstance(value, float):
        key = np.array([value]) if keep_ties else np.array([1.0 + 4096.0 * _salt])
        return float(value * (1.0 + rel * float(_mix(key, run)[0])))
    if isinstance(value, Mapping):
        return {
            k: perturbed(v, run, rel, keep_ties=keep_ties, _salt=_salt * 31 + i + 1)
            for i, (k, v) in enumerate(value.items())
        }
    if isinstance(value, list):
        return [
            perturbed(v, run, rel, keep_ties=keep_ties, _salt=_salt * 37 + i + 1)
            for i, v in enumerate(value)
        ]
    return value


def flat_outputs(out: Json) -> list[Json]:
    """A formula's outputs as one round, a rule's as its rounds."""
    return list(out["rounds"]) if "rounds" in out else [out]


def _discrete(a: np.ndarray) -> bool:
    return a.dtype.kind in "biu"


def _moved(
    compute: Callable[[Json, Json], Json],
    inputs: Json,
    params: Json,
    arrays: list[dict[str, np.ndarray]],
    run: int,
    rel: float,
    keep_ties: bool,
) -> dict[str, float] | None:
    """How far each output moves on one perturbed run, or None where the run takes another
    discrete branch (an integer or boolean output changes, an error, a new non-finite value)."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            got = flat_outputs(
                compute(
                    perturbed(inputs, run, rel, keep_ties=keep_ties),
                    perturbed(params, run, rel, keep_ties=keep_ties),
                )
            )
    except (ValueError, TypeError, ArithmeticError, np.linalg.LinAlgError):
        return None
    if len(got) != len(arrays):
        return None
    moved: dict[str, float] = {}
    for row, g in zip(arrays, got, strict=True):
        for k, a in row.items():
            try:
                b = np.asarray(g.get(k))
            except (TypeError, ValueError):
                return None
            if b.shape != a.shape or b.dtype.kind not in "biuf":
                return None
            if _discrete(a):
                if not np.array_equal(a, b):
                    return None
                continue
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            fin = np.isfinite(a64)
            odd_a, odd_b = a64[~fin], b64[~fin]
            if not np.array_equal(fin, np.isfinite(b64)) or not np.all(
                (odd_a == odd_b) | (np.isnan(odd_a) & np.isnan(odd_b))
            ):
                return None  # a non-finite entry appeared, went or changed sign
            d = np.abs(a64[fin] - b64[fin])
            moved[k] = max(moved.get(k, 0.0), float(np.max(d, initial=0.0)))
    return moved


def error_bound(
    compute: Callable[[Json, Json], Json],
    inputs: Json,
    params: Json,
    want: Json,
    precision: str = "float64",
    *,
    solver_tol: float = DEFAULT_SOLVER_TOL,
    argmins: frozenset[str] | set[str] = frozenset(),
) -> dict[str, Tolerance]:
    """The tolerance of each output of one case (see the module docstring).

    Parameters
    ----------
    compute : callable
        ``compute(inputs, params)``: fairagg's outputs of the case (a rule's as
        ``{"rounds": [...]}``).
    inputs, params : dict
        The case.
    want : dict
        ``compute(inputs, params)``, fairagg's outputs.
    precision : {"float64", "solver", "float32"}
    solver_tol : float
        ``precision="solver"``'s accuracy.
    argmins : set of str
        Outputs whose minimiser need not be unique (a min-norm weighting over a singular Gram
        matrix): a perturbation may move them to another minimiser, so their spread says
        nothing of round-off; they get the relative part at their scale, and another
        minimiser is recognised by its optimality conditions instead
        ([`fairagg.conformance`][fairagg.conformance]).
    """
    u = UNIT_ROUNDOFF[precision]
    rel = PERTURBATION * u
    arrays = [_numeric_row(r) for r in flat_outputs(want)]
    spread: dict[str, float] = {}
    scale: dict[str, float] = {}
    discrete: dict[str, bool] = {}
    for row in arrays:
        for k, a in row.items():
            discrete[k] = discrete.get(k, False) or _discrete(a)
            fin = a[np.isfinite(a)] if a.dtype.kind == "f" else a
            top = float(np.max(np.abs(fin), initial=0.0)) if fin.size else 0.0
            scale[k] = max(scale.get(k, 0.0), top)
            spread.setdefault(k, 0.0)
    counted = 0
    for run in range(RUNS):
        for keep_ties in (False, True):
            moved = _moved(compute, inputs, params, arrays, run, rel, keep_ties)
            if moved is not None:
                counted += 1
                for k, v in moved.items():
                    spread[k] = max(spread[k], v)
                break
    if not counted:  # every run took another branch: the relative part at the output's scale
        spread = {k: rel * scale[k] for k in spread}
    out: dict[str, Tolerance] = {}
    for k in spread:
        if discrete[k]:
            out[k] = Tolerance(exact=True)
            continue
        shift = SAFETY * rel * max(1.0, scale[k]) if k in argmins else SAFETY * spread[k]
        tol = Tolerance(SAFETY * rel, max(shift, FLOOR[precision]))
        if precision == "solver":
            tol = tol.widened(solver_tol, scale[k])
        out[k] = tol
    if precision == "float32":  # never narrower than float64's, whichever runs were counted
        for k, t in error_bound(compute, inputs, params, want, argmins=argmins).items():
            if not t.exact and k in out:
                out[k] = Tolerance(max(out[k].rtol, t.rtol), max(out[k].atol, t.atol))
    return out


def _numeric_row(r: Json) -> dict[str, np.ndarray]:
    """The numeric outputs of one round (or of a formula) as arrays."""
    out = {}
    for k, v in r.items():
        try:
            a = np.asarray(v)
        except (TypeError, ValueError):
            continue
        if a.dtype.kind in "biuf":
            out[k] = a
    return out


def _numeric(want: Json) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array) of each numeric output of each round of ``want``."""
    for r in flat_outputs(want):
        yield from _numeric_row(r).items()


def output_kinds(want: Json) -> dict[str, bool]:
    """{output name: whether it is compared exactly (integers, booleans)} of fairagg's numeric
    outputs (a rule's over its rounds)."""
    out: dict[str, bool] = {}
    for k, a in _numeric(want):
        out[k] = out.get(k, False) or _discrete(a)
    return out


def relative_part(precision: str, solver_tol: float = DEFAULT_SOLVER_TOL) -> float:
    """The bound's relative part, known before any perturbed run: SAFETY · PERTURBATION · u
    (plus ``solver_tol`` at ``precision="solver"``)."""
    rtol = SAFETY * PERTURBATION * UNIT_ROUNDOFF[precision]
    return rtol + solver_tol if precision == "solver" else rtol


def blanket(want: Json, rtol: float, atol: float) -> dict[str, Tolerance]:
    """The tolerance a user gives (``rtol=``, ``atol=``): |got − want| ≤ atol · max(1,
    max|want|) + rtol · |want|, the same for every output (integers and booleans exactly)."""
    out: dict[str, Tolerance] = {}
    for k, a in _numeric(want):
        if _discrete(a):
            out[k] = Tolerance(exact=True)
            continue
        fin = a[np.isfinite(a)]
        top = float(np.max(np.abs(fin), initial=0.0)) if fin.size else 0.0
        prev = out.get(k)
        out[k] = Tolerance(rtol, max(atol * max(1.0, top), prev.atol if prev is not None else 0.0))
    return out


def check_precision(precision: Any, solver_tol: Any) -> float:
    """``solver_tol`` as a float, after checking ``precision`` and it."""
    if not isinstance(precision, str) or precision not in UNIT_ROUNDOFF:
        raise ValueError(
            f"precision must be one of {', '.join(map(repr, PRECISIONS))}; got {precision!r}"
        )
    if (
        isinstance(solver_tol, bool)
        or not isinstance(solver_tol, (int, float))
        or not 0 < solver_tol < math.inf
    ):
        raise ValueError(f"solver_tol must be a finite positive number; got {solver_tol!r}")
    return float(solver_tol)
