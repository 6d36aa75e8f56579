"""Naming the cause of a difference, only where it is verified.

The candidates (``_causes``) are fairagg changed by exactly one thing. A candidate is
*verified* when it reproduces the user's outputs, within each output's error bound, on every
case that differs and still agrees with the user's outputs on every case where they agreed
with fairagg. Continuous values (ε, q, α, a λ step, L, the c of ‖δ‖ + c) are fitted on the
differing cases first, then verified the same way; a fitted value that is not a round number
is only trusted where the differing cases could have refused it (the user's step is not a
multiple of fairagg's on all of them: any wrong factor fits one number there).

Several verified candidates are *ambiguous*: where generated examples are allowed, the harness
draws more of them, runs the user's code on those where the candidates predict different
outputs, and keeps the candidates that still reproduce them. The case shown is one where the
named cause, and no other candidate, reproduces the user's outputs, minimised while that stays
so; where candidates remain that no input told apart, it is one where they coincide, and the
report lists them all. No verified candidate: the report says "cause not identified" and shows
the data.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._tolerance import error_bound, output_kinds, relative_part
from ..vectors import NON_UNIQUE
from ._causes import (
    FITS,
    LITERAL,
    MISTAKE_FITS,
    Cause,
    Fit,
    Mistake,
    fitted_cause,
    mistake_cause,
    mistakes_for,
    precision_cause,
    round_base_cause,
    settings,
    shortest,
)
from ._checker import Checker, Outcome
from ._common import Case, Json, Outside, UsageError
from ._compare import Bounds, another_optimum, close, close_bounded, error
from ._generate import generated_case
from ._shrink import shrink

#: Generated examples drawn, at most, to tell ambiguous causes apart.
SEARCH_BUDGET = 300
#: The margin on a cause's own error bound: a changed formula (a projection onto an
#: already-projected, tiny vector, say) can take another round-off branch than the user's.
CAUSE_MARGIN = 4.0
#: Rules whose step depends on the round's number (fairagg counts its own steps): AAgFF-D's
#: decision step √(t+1), FedFa's server-correction schedule, FedFV's window and random order.
#: Code that takes the number from round_index, counted from another base, differs there.
ROUND_DEPENDENT = frozenset({"aaggff-d", "fedfa", "fedfv"})
#: Beyond this relative distance no error bound reaches: a cause's own bound is not computed.
FAR = 1e-6
#: Differing cases a continuous value is fitted on.
FIT_CASES = 4
#: Differing cases scanned for one that the named cause alone explains.
SHOW_SCAN = 40


@dataclass
class Diagnosis:
    """What the evidence says about the difference.

    ``causes``: the verified causes (one: named; several: ambiguous; none: not identified).
    ``shown``: the case to show (minimised). ``separated``: the labels of the cases that told
    candidates apart. ``tried``: how many candidates were tried."""

    causes: list[Cause]
    shown: Outcome
    separated: list[str] = field(default_factory=list)
    eliminated: list[Cause] = field(default_factory=list)
    tried: int = 0
    differing: int = 0
    agreeing: int = 0
    undetermined: int = 0
    refused: int = 0
    searched: bool = False
    terms: frozenset[str] | None = None  # the target's outputs and terms

    def text(self) -> str:
        refusals = ""
        if self.refused:
            refusals = (
                f"\n  Also: fairagg refuses {self.refused} golden input"
                f"{'s' if self.refused != 1 else ''} (they expect an error: reports that "
                "break the rule's conditions) that your code computes a result for."
            )
        if not self.differing:
            return (
                f"fairagg refuses {self.refused} golden input{'s' if self.refused != 1 else ''}"
                " that your code computes a result for (each golden case that expects an error "
                "must be refused by your code too: raise, or Skip an input outside its domain)"
            )
        return self._causes_text() + refusals

    def _describe(self, c: Cause) -> str:
        """The cause in words, headed by the term it changes where the target has that term
        (FedAvg's weights are ``out`` of ``fedavg_weights``: there, the differing quantity)."""
        if c.term and self.terms is not None and c.term not in self.terms:
            quantity = self.shown.diff.quantity if self.shown.diff is not None else ""
            c = dataclasses.replace(c, term=quantity)
        return c.describe()

    def _causes_text(self) -> str:
        n = f"all {self.differing} differing case{'s' if self.differing != 1 else ''}"
        agree = (
            f" and agrees where yours agreed ({self.agreeing} case"
            f"{'s' if self.agreeing != 1 else ''})"
        )
        if len(self.causes) == 1:
            c = self.causes[0]
            told = ""
            if self.eliminated:
                others = "; ".join(e.name for e in self.eliminated)
                told = f" It is told apart from {others} by {', '.join(self.separated[:3])}."
            if self.undetermined:
                u = self.undetermined
                n = (
                    f"{self.differing - u} of the {self.differing} differing cases (it refuses "
                    f"the other {u} inputs itself, and so says nothing of them)"
                )
            if c.kind == "round base":
                how = (
                    f"your code, called with round_index = t + {c.round_base}, agrees with fairagg"
                )
                verified = f"{how} on {n} and where yours agreed"
            elif c.kind == "precision":
                verified = f"your outputs are within that bound of fairagg's on {n}"
            else:
                verified = f"fairagg changed by exactly this reproduces your outputs on {n}{agree}"
            return f"{self._describe(c)}.\n  Verified: {verified}.{told}"
        if self.causes:
            how = (
                "no input was found that tells them apart"
                if self.searched
                else "no other input was tried (generated examples are off)"
            )
            lines = [
                f"ambiguous: each of these reproduces your outputs on {n}{agree}, and {how} "
                "(the case below is one where they coincide):"
            ]
            lines += [f"    - {self._describe(c)}" for c in self.causes]
            return "\n".join(lines)
        return (
            f"cause not identified: none of the {self.tried} candidates (registered mistakes, "
            "fairagg's other settings, fitted values, round bases, precisions) reproduces "
            f"your outputs on {n}{agree}"
        )


class Diagnoser:
    """Finds the verified causes of the differences in ``outcomes``."""

    def __init__(
        self,
        checker: Checker,
        outcomes: list[Outcome],
        *,
        search: bool,
        seed: int,
        next_index: int,
        fixed: Json,
    ) -> None:
        self.checker = checker
        self.outcomes = [o for o in outcomes if o.status in ("agrees", "differs")]
        self.search, self.seed, self.next_index, self.fixed = search, seed, next_index, fixed
        self._rebased: dict[tuple[str, int], bool] = {}
        self.undetermined: dict[str, int] = {}  # per verified cause: differing cases it refuses
        self.target = checker.target

    # references ----------------------------------------------------------------------------
    def _trimmed(self, o: Outcome) -> tuple[Json, list[Any] | None]:
        """The case's inputs up to the rounds you returned, and θ^t of each (yours)."""
        if self.checker.kind != "rule":
            return o.case.inputs, None
        n = max(1, len(o.yours))
        inputs = {**o.case.inputs, "rounds": list(o.case.inputs["rounds"][:n])}
        thetas = [o.case.inputs["params0"]] + [y.get("params") for y in o.yours[: n - 1]]
        return inputs, thetas

    def _restated(self, o: Outcome, params: Json, **switches: Any) -> Json:
        terms = self.checker.terms
        assert terms is not None
        inputs, thetas = self._trimmed(o)
        if self.checker.kind == "rule":
            return terms.run(inputs, params, thetas, **switches)
        return terms.run(inputs, params, **switches)

    def reference(self, cause: Cause, o: Outcome) -> Json | None:
        """``cause``'s outputs on ``o``'s case (a rule's from your θ^t), or None where it
        cannot run: a mistake written as a restatement switch is the restatement's outputs
        with the switch on (compared within the wider of the case's error bound and the
        restatement's own, ``_cause_tols``); a setting or a fitted value is fairagg's with
        that parameter, and the restatement's terms beside them."""
        chk = self.checker
        inputs, thetas = self._trimmed(o)
        params = {k: v for k, v in {**(o.params or {}), **cause.params}.items()
                  if not k.startswith("_")}  # fmt: skip
        terms = chk.terms
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                if cause.kind == "precision":
                    return o.want
                if cause.kind == "literal":
                    return None if terms is None else self._restated(o, params)
                if cause.kind == "mistake" and cause.transform is None:
                    return None if terms is None else self._restated(o, params, **cause.switches)
                if cause.transform is not None:
                    inputs, params = cause.transform(inputs, params)
                ref = chk.compute_from(inputs, params, thetas)
                if terms is not None:  # the restated terms of the same computation
                    try:
                        extra = (
                            terms.run(inputs, params, thetas)
                            if chk.kind == "rule"
                            else terms.run(inputs, params)
                        )
                    except Exception:  # noqa: BLE001 - no terms here
                        return ref
                    if chk.kind == "rule":
                        for r, e in zip(ref["rounds"], extra["rounds"], strict=False):
                            r.update({k: v for k, v in e.items() if k not in r})
                    else:
                        ref = {**ref, **{k: v for k, v in extra.items() if k not in ref}}
                return ref
        except Exception:  # noqa: BLE001 - a cause that cannot run on this case explains nothing
            return None

    def _tols(self, cause: Cause, o: Outcome) -> Any:
        """``o``'s error bounds, or a precision cause's own (computed when needed, kept)."""
        if cause.kind != "precision":
            return o.tols
        key = ("precision bound", cause.name)
        if key not in o.cache:
            argmins = set(NON_UNIQUE.get(self.target, {}))
            solver = float(cause.params.get("_solver_tol", 1e-6))
            precision = cause.precision or "float64"
            o.cache[key] = Bounds(
                output_kinds(o.want or {}),
                relative_part(precision, solver),
                lambda: error_bound(
                    lambda i, p: self.checker.compute(i, p), o.case.inputs, o.params or {},
                    o.want or {}, precision, solver_tol=solver, argmins=argmins,
                ),
            )  # fmt: skip
        return o.cache[key]

    def _cause_tols(self, cause: Cause, o: Outcome) -> dict[str, Any]:
        """The error bound of ``cause``'s own computation on ``o``'s case (a changed formula
        can be worse conditioned than fairagg's), each output's the wider of it and fairagg's:
        {} where it cannot be computed."""
        key = ("own bound", cause.name)
        if key not in o.cache:
            o.cache[key] = self._own_bound(cause, o)
        return o.cache[key]

    def _own_bound(self, cause: Cause, o: Outcome) -> dict[str, Any]:
        if cause.kind in ("precision", "round base"):
            return {}
        chk = self.checker
        inputs, _ = self._trimmed(o)
        params = {k: v for k, v in {**(o.params or {}), **cause.params}.items()
                  if not k.startswith("_")}  # fmt: skip

        def run(i: Json, p: Json) -> Json:
            pseudo = dataclasses.replace(
                o, case=dataclasses.replace(o.case, inputs=i), params=p,
                yours=[{"params": None}] * max(1, len(o.yours)),
            )  # fmt: skip
            if chk.kind == "rule":  # from the cause's own θ^t: no user θ on perturbed inputs
                pseudo.yours = []
                return self._own(cause, i, p)
            ref = self.reference(cause, pseudo)
            if ref is None:
                raise ValueError("the cause cannot run")
            return ref

        try:
            ref = run(inputs, params)
            own = error_bound(run, inputs, params, ref, chk.precision, solver_tol=chk.solver_tol)
        except Exception:  # noqa: BLE001 - no wider bound
            return {}
        out = {}
        for k, t in own.items():
            base = o.tols.get(k)
            if base is None or t.exact:
                out[k] = t
            else:  # CAUSE_MARGIN more: the changed formula's round-off branches are its own
                out[k] = type(t)(max(t.rtol, base.rtol), max(CAUSE_MARGIN * t.atol, base.atol))
        return out

    def _own(self, cause: Cause, inputs: Json, params: Json) -> Json:
        """A rule's outputs under ``cause`` from its own θ^t (for its error bound)."""
        chk = self.checker
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if cause.kind in ("mistake", "literal") and cause.transform is None:
                assert chk.terms is not None
                return chk.terms.run(inputs, params, None, **cause.switches)
            if cause.transform is not None:
                inputs, params = cause.transform(inputs, params)
            out = chk.compute(inputs, params)
            if chk.terms is not None:  # the restated terms beside fairagg's outputs
                try:
                    extra = chk.terms.run(inputs, params, None)["rounds"]
                except Exception:  # noqa: BLE001 - no terms here
                    return out
                for r, e in zip(out["rounds"], extra, strict=False):
                    r.update({k: v for k, v in e.items() if k not in r})
            return out

    def _rebase(self, o: Outcome, base: int) -> bool:
        key = (o.case.label, base)
        if key not in self._rebased:
            chk = self.checker
            old = chk.round_base
            chk.round_base = base
            try:
                again = chk.run(o.case)
            except (Outside, UsageError):
                again = None
            finally:
                chk.round_base = old
            self._rebased[key] = again is not None and again.status == "agrees"
        return self._rebased[key]

    def explains(self, cause: Cause, o: Outcome) -> bool | None:
        """Whether ``cause`` reproduces your outputs on ``o`` (every round you returned, every
        quantity it computes; the quantity that differs must be among them); None where the
        cause's own computation refuses the input (fair_flearn's projection divides by ρ = 0):
        it says nothing there, neither way."""
        if cause.kind == "round base":
            return self._rebase(o, int(cause.round_base or 0))
        if o.diff is not None and o.diff.quantity == "refusal":
            return False
        refs = self._predictions(cause, o)
        if all(ref is None for ref in refs):
            return None  # the cause cannot compute this case: your code may raise, or not
        if (o.diff is not None and o.diff.quantity == "exception") or not o.yours:
            return False  # your code raised where the cause computes a result
        return any(ref is not None and self._reproduces(cause, o, ref) for ref in refs)

    def _predictions(self, cause: Cause, o: Outcome) -> list[Json | None]:
        """What ``cause`` predicts on ``o``: one computation, or, for a mistake that is both
        fairagg on other parameters and a restatement switch (ε missing: fairagg with ε = 0,
        or the formula computed literally without it, 0 · 0^(−1) included), either."""
        if cause.kind == "mistake" and cause.transform is not None and cause.switches:
            return [
                self.reference(dataclasses.replace(cause, switches={}), o),
                self.reference(dataclasses.replace(cause, transform=None), o),
            ]
        return [self.reference(cause, o)]

    def _reproduces(self, cause: Cause, o: Outcome, ref: Json) -> bool:
        rounds = ref["rounds"] if self.checker.kind == "rule" else [ref]
        skip = set(NON_UNIQUE.get(self.target, {}))  # another minimiser may be as right
        if o.diff is not None and o.diff.quantity not in skip:
            t = o.diff.round or 0
            if t >= len(rounds) or o.diff.quantity not in rounds[t]:
                return False
        tols = self._tols(cause, o)
        n = len(o.yours)
        if len(rounds) < n:
            return False
        params = {k: v for k, v in {**(o.params or {}), **cause.params}.items()
                  if not k.startswith("_")}  # fmt: skip
        switches = cause.switches if cause.kind == "mistake" else {}
        widened: dict[str, Any] | None = None
        for t in range(n):
            got, w = o.yours[t], rounds[t]
            keys = [k for k in got if k in w]  # the terms you returned too, not only outputs
            if not any(k in tols for k in keys):
                return False
            other = None
            for k in keys:
                if k in tols and close_bounded(got[k], w[k], tols, k) is None:
                    continue
                if widened is None and (k not in tols or not _far(got[k], w[k])):
                    widened = self._cause_tols(cause, o)  # the cause's own bound (its terms')
                if widened and k in widened and close(got[k], w[k], widened[k]) is None:
                    continue
                if k not in skip or k not in tols:
                    return False
                if other is None:  # your λ may be another minimiser of the cause's problem
                    src = o.case.inputs if self.checker.kind == "formula" else o.case.inputs[
                        "rounds"][t]  # fmt: skip
                    other = another_optimum(self.target, src, params, w, tols, switches)
                if other is None or not other(k, got):
                    return False
        return True

    def _error(self, cause: Cause, o: Outcome) -> float:
        """How far ``cause`` is from your outputs on ``o``: the largest entry's difference in
        units of its tolerance (≤ 1: reproduced)."""
        return min((self._error_of(ref, o) for ref in self._predictions(cause, o)),
                   default=math.inf)  # fmt: skip

    def _error_of(self, ref: Json | None, o: Outcome) -> float:
        if ref is None or not o.yours:
            return math.inf
        rounds = ref["rounds"] if self.checker.kind == "rule" else [ref]
        if len(rounds) < len(o.yours):
            return math.inf
        worst = 0.0
        skip = set(NON_UNIQUE.get(self.target, {}))
        for got, w in zip(o.yours, rounds, strict=False):
            keys = [k for k in got if k in w and k in o.tols and k not in skip]
            if not keys:
                return math.inf
            for k in keys:
                worst = max(worst, error(got[k], w[k], o.tols[k]))
        return worst

    # fits -----------------------------------------------------------------------------------
    def _fit_value(
        self, lo: float, hi: float, log: bool, exclude: Any, make: Callable[[float], Cause],
        cases: list[Outcome],
    ) -> float | None:  # fmt: skip
        def err(v: float, upto: int | None = None) -> float:
            c = make(v)
            worst = 0.0
            for o in cases[:upto]:  # stops at the first case it cannot reproduce at all
                worst = max(worst, self._error(c, o))
                if not math.isfinite(worst):
                    break
            return worst if cases else math.inf

        if log:
            lo_e, hi_e = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
            grid = [c * 10.0**k for k in range(lo_e, hi_e + 1) for c in (1.0, 2.0, 5.0)]
            grid = [g for g in grid if lo <= g <= hi]
        else:
            grid = list(np.linspace(lo, hi, 41))
        grid = [g for g in grid if not (exclude is not None and g == exclude)]
        if not grid:
            return None
        # the grid on the first two cases, then the most promising values on all of them
        first = sorted((err(g, 2), g) for g in grid)
        shortlist = [g for e, g in first[:3] if math.isfinite(e)]
        errors = [(err(g), g) for g in shortlist] or [(math.inf, grid[0])]
        best_err, best = min(errors)
        if not math.isfinite(best_err):
            return None
        if best_err > 1.0:
            from scipy.optimize import minimize_scalar

            if log:
                x0 = math.log10(best)
                res = minimize_scalar(
                    lambda x: min(err(10.0**x), 1e300),
                    bounds=(x0 - 0.5, x0 + 0.5), method="bounded", options={"xatol": 1e-12},
                )  # fmt: skip
                best = float(10.0**res.x)
            else:
                step = (hi - lo) / 40
                res = minimize_scalar(
                    lambda x: min(err(x), 1e300),
                    bounds=(max(lo, best - step), min(hi, best + step)), method="bounded",
                    options={"xatol": 1e-12 * max(1.0, abs(best))},
                )  # fmt: skip
                best = float(res.x)
            if not err(best) <= 1.0:
                # the minimiser stops near the value, not at it: the value written with fewer
                # digits (3 where the code has 3.0) often reproduces yours where it does not
                rounded = [float(f"{best:.{k}g}") for k in range(1, 16)]
                best = next((v for v in rounded if lo <= v <= hi and err(v) <= 1.0), math.nan)
                if math.isnan(best):
                    return None
        best = shortest(best, lambda v: err(v) <= 1.0)
        if exclude is not None and best == exclude:
            return None
        return best

    def _round_number(self, v: float) -> bool:
        return v == 0.0 or float(f"{v:.1g}") == v

    def _identifiable(self, cause: Cause | None, cases: list[Outcome]) -> bool:
        """Whether some differing round is not explained by a mere factor on fairagg's step
        (where it is, any wrong factor fits one number)."""
        for o in cases:
            want = o.want
            assert want is not None  # an explainable differing case: fairagg computed its outputs
            rounds = want["rounds"] if self.checker.kind == "rule" else [want]
            thetas = self._trimmed(o)[1]
            for t, (got, w) in enumerate(zip(o.yours, rounds, strict=False)):
                key = (
                    "params"
                    if "params" in got and "params" in w
                    else next(
                        (k for k in got if k in w and k in o.tols and not o.tols[k].exact), None
                    )
                )
                if key is None:
                    continue
                try:
                    base = (
                        np.asarray(
                            thetas[t] if thetas is not None else o.case.inputs["params"],
                            dtype=np.float64,
                        )  # fmt: skip
                        if key == "params"
                        else 0.0
                    )
                    a = np.asarray(w[key], dtype=np.float64) - base
                    b = np.asarray(got[key], dtype=np.float64) - base
                except (TypeError, ValueError, KeyError):
                    continue
                if a.shape != b.shape or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
                    continue
                aa = float(np.sum(a * a))
                if not aa > 0:
                    continue
                s = float(np.sum(a * b)) / aa
                if close(got[key], base + s * a, o.tols[key]) is not None:
                    return True
        return False

    def _fitted(self, differing: list[Outcome]) -> list[Cause]:
        out = []
        cases = differing[:FIT_CASES]
        current = self.checker.params_of(cases[0].case) or {} if cases else {}
        for f in FITS.get(self.target, ()):
            have = current.get(f.param)

            def make(v: float, f: Fit = f, have: Any = have) -> Cause:
                return fitted_cause(f, v, have)

            v = self._fit_value(f.lo, f.hi, f.log, have, make, cases)
            if v is None:
                continue
            if f.log and f.lo > 0 and _err0(self, make, differing) <= 1.0:
                continue  # indistinguishable from 0 on every case: a registered mistake, if any
            cause = make(v)
            if not self._round_number(v) and not self._identifiable(cause, cases):
                continue
            out.append(cause)
        for m in mistakes_for(self.target):
            if m.fit is None or m.fit not in MISTAKE_FITS:
                continue
            lo, hi, log = MISTAKE_FITS[m.fit]

            def fit(v: float, m: Mistake = m) -> Cause:
                return mistake_cause(m, v)

            v = self._fit_value(lo, hi, log, None, fit, cases)
            if v is not None:
                out.append(mistake_cause(m, v))
        return out

    # the search --------------------------------------------------------------------------------
    def fixed_candidates(self, current: Json | None) -> list[Cause]:
        """The candidates that need no fit: the registered mistakes and fairagg's other
        settings from ``current``, the case's parameters."""
        out: list[Cause] = []
        for m in mistakes_for(self.target):
            if m.fit is None:
                out.append(mistake_cause(m))
        return out + settings(self.target, current or {})

    def candidates(self, differing: list[Outcome]) -> list[Cause]:
        chk = self.checker
        out = self.fixed_candidates(chk.params_of(differing[0].case))
        out += self._fitted(differing)
        if chk.kind == "rule" and (
            self.target in ROUND_DEPENDENT
            or any(o.diff is not None and o.diff.quantity == "exception" for o in differing)
        ):  # another numbering matters only where rounds are counted, or your code refused one
            for base in (chk.round_base + 1, chk.round_base - 1):
                if base >= 0:
                    out.append(round_base_cause(base))
        if chk.user_tol is None:
            if chk.precision == "float64":
                out.append(precision_cause("float32"))
            if self.target in NON_UNIQUE or self.target in ("solve_simplex_qp", "aaggff-s"):
                out += [precision_cause("solver", s) for s in (1e-6, 1e-5, 1e-4, 1e-3)
                        if chk.precision != "solver" or s > chk.solver_tol]  # fmt: skip
        if chk.terms is not None:
            out.append(LITERAL)
        # one of each name
        seen: set[str] = set()
        unique: list[Cause] = []
        for c in out:
            if c.name not in seen:
                seen.add(c.name)
                unique.append(c)
        return unique

    def _verified(self, causes: Iterable[Cause], outcomes: list[Outcome]) -> list[Cause]:
        """The causes that reproduce every differing case they can compute (at least one) and
        agree wherever you agreed and they can compute."""
        differing = [o for o in outcomes if _explainable(o)]
        agreeing = [o for o in outcomes if o.status == "agrees"]
        out = []
        for c in causes:
            said = []
            for o in differing:
                e = self.explains(c, o)
                if e is False:
                    break
                said.append(e)
            else:
                if any(said) and all(self.explains(c, o) is not False for o in agreeing):
                    out.append(c)
                    self.undetermined[c.name] = sum(e is None for e in said)
        # float32 or a solver's accuracy is round-off that shows nearly everywhere: named
        # only where most compared cases differ (a small real difference in float64 code
        # differs on a few, and agrees to the last digits on the rest)
        if len(differing) * 2 <= len(differing) + len(agreeing):
            out = [c for c in out if c.kind != "precision"]
        # ... and of its size: float32's round-off reaches a few units of 2^-24 somewhere, a
        # solver's a good fraction of its accuracy; a systematic 1e-10 (a stabiliser + 1e-8
        # in a denominator) is neither
        if any(c.kind == "precision" for c in out):
            seen = max((_relative_deviation(o) for o in differing), default=0.0)
            out = [c for c in out if c.kind != "precision" or seen >= _least_deviation(c)]
            # ... and round-off is not one common factor: where every differing output is fairagg's
            # (or its step) times a number, that is a systematic change (a stabiliser scaling the
            # weights), not round-off
            if not self._identifiable(None, differing[:20]):
                out = [c for c in out if c.kind != "precision"]
        # a solver precision: the smallest one that explains, and none where another cause does
        prec = [c for c in out if c.kind == "precision" and c.precision == "solver"]
        if prec:
            keep = prec[0]
            out = [c for c in out if c.kind != "precision" or c.precision != "solver" or c is keep]
        return out

    def _predictions_differ(self, a: Cause, b: Cause, o: Outcome) -> bool:
        ra, rb = self.reference(a, o), self.reference(b, o)
        if ra is None or rb is None:
            return ra is not rb
        ta, tb = self._tols(a, o), self._tols(b, o)
        rounds_a = ra["rounds"] if self.checker.kind == "rule" else [ra]
        rounds_b = rb["rounds"] if self.checker.kind == "rule" else [rb]
        for x, y in zip(rounds_a, rounds_b, strict=False):
            for k in x:  # apart: outside both causes' bounds
                if k in y and k in ta and k in tb and close_bounded(x[k], y[k], ta, k) is not None:
                    if close_bounded(x[k], y[k], tb, k) is not None:
                        return True
        return False

    def _separate(self, verified: list[Cause]) -> tuple[list[Cause], list[str], list[Cause]]:
        """Draw more generated examples, run your code where the verified causes predict
        different outputs, and keep those that still reproduce yours."""
        separated: list[str] = []
        eliminated: list[Cause] = []
        chk = self.checker
        probe = [c for c in verified if c.kind != "round base"]
        points = [c for c in probe if c.kind != "precision"]  # a precision is a band, not a point
        if len(probe) < 2 or not points or not self.search:
            return verified, separated, eliminated
        for case in self._probes():
            if len(verified) < 2:
                break
            params = chk.params_of(case)
            if params is None:
                continue
            try:
                want = chk.compute(case.inputs, params)
            except (ValueError, TypeError, ArithmeticError, RuntimeWarning):
                continue
            tols = chk.tolerances(case.inputs, params, want)
            pseudo = Outcome(case, "agrees", params, want, tols, [])
            # your θ^t are needed for a rule's references: run your code first only where
            # two causes' predictions from fairagg's own θ^t differ
            thetas_from_fairagg = (
                [{"params": r["params"]} for r in want["rounds"]] if chk.kind == "rule" else []
            )
            pseudo.yours = thetas_from_fairagg
            live = [c for c in verified if c.kind != "round base"]
            split = any(
                self._predictions_differ(a, b, pseudo)
                for j, a in enumerate(live)
                for b in live[j + 1 :]
            )
            if not split:
                continue
            try:
                o = chk.run(case)
            except Outside:
                continue
            if o.status not in ("agrees", "differs"):
                continue
            self.outcomes.append(o)
            keep = [c for c in verified if self.explains(c, o) is not False]
            if len(keep) < len(verified):
                separated.append(case.label)
                eliminated += [c for c in verified if c not in keep]
            verified = keep
        return verified, separated, eliminated

    def _probes(self) -> Iterator[Case]:
        """The search's cases: generated examples after the check's own, each also with θ
        a thousand times larger (where an error relative to θ, float32's, outgrows an
        absolute one, a solver's)."""
        for i in range(self.next_index, self.next_index + SEARCH_BUDGET):
            case = generated_case(self.target, self.fixed, self.seed, i)
            yield case
            key = "params0" if self.checker.kind == "rule" else "params"
            theta = case.inputs.get(key)
            if isinstance(theta, np.ndarray) and theta.dtype.kind == "f":
                inputs = {**case.inputs, key: theta * 1000.0}
                yield dataclasses.replace(case, label=f"{case.label}, θ × 1000", inputs=inputs)

    def _explained_by_exactly(self, o: Outcome, causes: list[Cause], names: frozenset[str]) -> bool:
        """Whether the causes that reproduce ``o`` are exactly ``names`` (those first: the
        answer is usually settled by the first cause tried)."""
        ordered = sorted(causes, key=lambda c: c.name not in names)
        return all((self.explains(c, o) is True) == (c.name in names) for c in ordered)

    def explaining(self, o: Outcome, causes: list[Cause]) -> frozenset[str]:
        return frozenset(c.name for c in causes if self.explains(c, o) is True)

    def run(self) -> Diagnosis:
        differing = [o for o in self.outcomes if o.status == "differs"]
        refused = len(differing) - sum(_explainable(o) for o in differing)
        usable = [o for o in differing if _explainable(o)]
        if not usable:  # only golden inputs that fairagg refuses and your code computes
            return Diagnosis([], differing[0], refused=refused)
        candidates = self.candidates(usable)
        verified = self._verified(candidates, self.outcomes)
        if any(c.kind == "round base" for c in verified):  # your own code, rerun: decisive
            verified = [c for c in verified if c.kind == "round base"][:1]
        verified, separated, eliminated = self._separate(verified)
        if len(verified) > 1:  # every search example agreed on them: check the new cases too
            verified = self._verified(verified, self.outcomes)
        n_diff = sum(_explainable(o) for o in self.outcomes)
        n_agree = sum(o.status == "agrees" for o in self.outcomes)
        shown = self._shown(verified, candidates)
        undetermined = self.undetermined.get(verified[0].name, 0) if len(verified) == 1 else 0
        terms = frozenset(self.checker.texts)
        return Diagnosis(verified, shown, separated, eliminated, len(candidates), n_diff, n_agree,
                         undetermined, refused, self.search, terms)  # fmt: skip

    def _shown(self, verified: list[Cause], candidates: list[Cause]) -> Outcome:
        """The case to show, minimised: one the verified causes (and no other candidate)
        explain, where there is one."""
        differing = [o for o in self.outcomes if _explainable(o)]
        chk = self.checker
        target_set = frozenset(c.name for c in verified)
        pick = differing[0]
        if verified:
            for o in differing[:SHOW_SCAN]:
                if self._explained_by_exactly(o, candidates, target_set):
                    pick = o
                    break
        want_set = self.explaining(pick, candidates) if verified else frozenset()
        quantity = pick.diff.quantity if pick.diff is not None else None

        def keeps(case: Case) -> bool:
            try:
                o = chk.run(case)
            except (Outside, UsageError):
                return False
            if o.status != "differs" or o.diff is None:
                return False
            if quantity in ("exception", "refusal") and o.diff.quantity != quantity:
                return False
            if verified:
                return self._explained_by_exactly(o, candidates, want_set)
            return True

        small = shrink(pick.case, chk.kind, keeps)
        if small is pick.case:
            return pick
        again = chk.run(small)
        return again if again.status == "differs" else pick


def _far(got: Any, want: Any) -> bool:
    """Whether ``got`` is further from ``want`` than any round-off could take it: beyond
    FAR · max(1, max|want|) (a formula would need a condition number near 1e9 to move that far
    from round-off), or not comparable. Saves computing a cause's own bound for nothing."""
    try:
        g = np.asarray(got, dtype=np.float64)
        w = np.asarray(want, dtype=np.float64)
    except (TypeError, ValueError):
        return True
    if g.shape != w.shape:
        return True
    with np.errstate(all="ignore"):
        fin = np.isfinite(w)
        if not np.array_equal(fin, np.isfinite(g)):
            return True
        scale = max(1.0, float(np.max(np.abs(w[fin]), initial=0.0)))
        return bool(np.max(np.abs(g[fin] - w[fin]), initial=0.0) > FAR * scale)


def _relative_deviation(o: Outcome) -> float:
    """The largest |yours − fairagg's| / |fairagg's| over the entries of ``o`` (fairagg's
    nonzero, finite entries; the rounds up to the first difference)."""
    want = o.want or {}
    rounds = want["rounds"] if "rounds" in want else [want]
    last = o.diff.round if o.diff is not None and o.diff.round is not None else len(rounds) - 1
    worst = 0.0
    for got, w in zip(o.yours[: last + 1], rounds, strict=False):
        for k in got:
            if k not in w:
                continue
            try:
                g = np.asarray(got[k], dtype=np.float64)
                x = np.asarray(w[k], dtype=np.float64)
            except (TypeError, ValueError):
                continue
            if g.shape != x.shape:
                continue
            with np.errstate(all="ignore"):
                ok = np.isfinite(x) & np.isfinite(g) & (x != 0)
                if ok.any():
                    worst = max(worst, float(np.max(np.abs(g[ok] - x[ok]) / np.abs(x[ok]))))
    return worst


def _least_deviation(c: Cause) -> float:
    """The smallest largest deviation a precision explains: float32's round-off shows at a
    few units of 2^-24 (2^-28 ≈ 3.7e-9 at least), a solver's at a thousandth of its
    accuracy."""
    if c.precision == "float32":
        return 2.0**-28
    return float(c.params.get("_solver_tol", 1e-6)) / 1000.0


def _explainable(o: Outcome) -> bool:
    """A differing case a cause may explain: not a golden input fairagg refuses."""
    return o.status == "differs" and not (o.diff is not None and o.diff.quantity == "refusal")


def _err0(d: Diagnoser, make: Callable[[float], Cause], cases: list[Outcome]) -> float:
    """How far the parameter at 0 is from your outputs (inf where 0 is not a valid value)."""
    c = make(0.0)
    return max((d._error(c, o) for o in cases), default=math.inf)


def replace_case(o: Outcome, case: Case) -> Outcome:
    return dataclasses.replace(o, case=case)
