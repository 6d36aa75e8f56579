"""Running one case: fairagg's outputs and their error bounds, the user's outputs (every round
of a rule, from the user's own θ^t), the first difference, and the declared differences."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._tolerance import Tolerance, blanket, error_bound, output_kinds, relative_part
from .._worker import Worker, WorkerError, WorkerRaised, WorkerSkipped, WorkerUsageError
from ..vectors import NON_UNIQUE, RULE_EXCLUDE, _compute
from ._adapter import Adapter, fresh, invoke, named
from ._common import (
    GOLDEN,
    INFO_TEXTS,
    Case,
    Json,
    Outside,
    Skip,
    UsageError,
    default_params,
    formula_text,
    is_assume,
    kind_of,
)
from ._compare import (
    Bounds,
    Diff,
    all_finite,
    another_optimum,
    close_bounded,
    differences,
    first_diff,
)
from ._restate import Terms, terms_of


@dataclass(frozen=True)
class Row:
    """One line of a keep-going report: a quantity of a case (and round), compared.

    ``verdict`` is ``"agrees"``, ``"differs"``, ``"another minimiser"`` (an argmin that is not
    unique, and yours is one), ``"raised"`` (your code raised), ``"both refuse"`` (fairagg
    refuses the golden input, and so does your code), ``"not returned"`` (fairagg has this
    output and yours did not return it: it was not checked), ``"outside your domain"``,
    ``"accepted: ..."`` (a declared difference) or ``"not compared (after a difference, from
    your θ)"`` (your code ran the round from its own θ, which fairagg's does not start from).
    ``max_abs`` and ``max_rel`` are the largest
    differences over the entries (None where not computed)."""

    case: str
    round: int | None
    quantity: str
    max_abs: float | None
    max_rel: float | None
    tolerance: str
    verdict: str


@dataclass
class Outcome:
    """What one case gave.

    ``status``: ``"skipped"`` (a golden case that sets a parameter the check fixes to another
    value), ``"rejected"`` (fairagg rejects a generated input: not a case), ``"outside"``
    (outside your domain), ``"agrees"``, ``"both refuse"``, ``"differs"`` or ``"accepted"``
    (it differs only as a declared difference does)."""

    case: Case
    status: str
    params: Json | None = None
    want: Json | None = None
    tols: Mapping[str, Tolerance] = field(default_factory=dict)
    yours: list[Json] = field(default_factory=list)
    diff: Diff | None = None
    rows: list[Row] = field(default_factory=list)
    accepted: str | None = None
    refusal: str | None = None
    cache: dict = field(default_factory=dict, repr=False, compare=False)  # the diagnosis's

    @property
    def compared(self) -> bool:
        return self.status in ("agrees", "both refuse", "differs", "accepted")


#: The verdict of a round after a difference: your code ran it (for the diagnosis), from your
#: own θ, which fairagg's does not start from.
AFTER = "not compared (after a difference, from your θ)"


def _worker_call(thunk: Callable[[], Any]) -> Any:
    """Marks a call of the worker in ``Checker.user`` (the thunk makes the request)."""
    return thunk()


def raised_text(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, WorkerRaised) else f"{type(exc).__name__}: {exc}"


class Checker:
    """One target and one user function: runs cases and compares them with fairagg."""

    def __init__(
        self,
        fn: Callable[..., Any] | Worker,
        target: str,
        adapter: Adapter,
        fixed: Json,
        precision: str = "float64",
        solver_tol: float = 1e-6,
        user_tol: tuple[float, float] | None = None,
        round_base: int = 0,
        domain: Callable[[Json, Json], Any] | None = None,
        accept: dict[str, Any] | None = None,
    ) -> None:
        self.fn, self.target, self.adapter, self.fixed = fn, target, adapter, fixed
        self.precision, self.solver_tol, self.user_tol = precision, solver_tol, user_tol
        self.round_base, self.domain = round_base, domain
        self.accept = dict(accept or {})
        self.worker = fn if isinstance(fn, Worker) else None
        self.not_returned: set[str] = set()  # fairagg's outputs your code never returned
        self.calls = 0  # cases your code was run on
        self.keep_rows = False  # a Row for every comparison (a keep-going report)
        self._sessions = 0
        self.kind = kind_of(target)
        self.terms: Terms | None = terms_of(target)
        self.texts = {k: formula_text(target) for k in ("params", "out")}
        if self.kind == "rule":
            self.texts.update({k: v for k, v in INFO_TEXTS.items() if k != "params"})
        if self.terms is not None:
            self.texts.update(self.terms.texts)
        self.texts["exception"] = "your code raised instead of returning a result"
        self.texts["refusal"] = "fairagg refuses this input (the golden case expects an error)"

    # fairagg's side -----------------------------------------------------------------------
    def params_of(self, case: Case, extra: Json | None = None) -> Json | None:
        """Every parameter of the case, or None if the case conflicts with the fixed ones."""
        own = dict(case.params)
        for k, v in {**self.fixed, **(extra or {})}.items():
            if k in own and own[k] != v and (extra is None or k not in extra):
                return None
            own[k] = v
        return default_params(self.target, own)

    def compute(self, inputs: Json, params: Json) -> Json:
        """fairagg's outputs of a case; raises what fairagg raises (an overflow warning is a
        refusal too)."""
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # an overflow rejects the case
            return _compute(self.kind, self.target, inputs, params)

    def compute_from(self, inputs: Json, params: Json, thetas: Sequence[Any] | None) -> Json:
        """fairagg's outputs with each round started from ``thetas[t]`` (a rule's θ^t: the
        user's own), the state carried from round to round as the rule carries it."""
        if self.kind != "rule" or thetas is None:
            return self.compute(inputs, params)
        from .. import make_reports, make_rule

        rule = make_rule(self.target, **params)
        state = rule.init(
            np.asarray(inputs["params0"], dtype=np.float64), int(inputs["num_clients"])
        )
        rounds = []
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            for t, r in enumerate(inputs["rounds"]):
                theta = np.asarray(thetas[t], dtype=np.float64)
                reports = make_reports(
                    r.get("deltas"), r["num_samples"], losses=r["losses"],
                    accuracies=r["accuracies"], participations=r["participations"],
                    client_ids=r["client_ids"], round_index=r["round_index"],
                    num_clients=int(inputs["num_clients"]), gradients=r.get("gradients"),
                    lr=r["lr"],
                )  # fmt: skip
                agg = rule.step(theta, reports, state)
                state = agg.state
                out: dict[str, Any] = {"params": agg.params}
                for k, v in agg.info.items():
                    if k not in RULE_EXCLUDE and isinstance(v, (np.ndarray, float, int, np.number)):
                        out[k] = v
                rounds.append(out)
        return {"rounds": rounds}

    def tolerances(self, inputs: Json, params: Json, want: Json) -> Bounds:
        """Each output's tolerance: the error bound at the check's precision (computed when a
        comparison needs more than its relative part), or the user's blanket
        ``rtol``/``atol``."""
        if self.user_tol is not None:
            tols = blanket(want, *self.user_tol)
            return Bounds({k: t.exact for k, t in tols.items()}, 0.0, lambda: tols)
        argmins = set(NON_UNIQUE.get(self.target, {}))
        return Bounds(
            output_kinds(want),
            relative_part(self.precision, self.solver_tol),
            lambda: error_bound(
                lambda i, p: self.compute(i, p), inputs, params, want, self.precision,
                solver_tol=self.solver_tol, argmins=argmins,
            ),
        )  # fmt: skip

    def term_tolerances(
        self, run: Callable[[Json, Json], Json], inputs: Json, params: Json, want: Json
    ) -> Bounds:
        if self.user_tol is not None:
            tols = blanket(want, *self.user_tol)
            return Bounds({k: t.exact for k, t in tols.items()}, 0.0, lambda: tols)
        return Bounds(
            output_kinds(want),
            relative_part(self.precision, self.solver_tol),
            lambda: error_bound(run, inputs, params, want, self.precision,
                                solver_tol=self.solver_tol),
        )  # fmt: skip

    # the user's side ----------------------------------------------------------------------
    def user(self, fn: Callable[..., Any], kwargs: Any) -> Any:
        """Your function's result; a skip (``Skip``, ``assume``, a worker's) is Outside, a
        refusal of the request as written a UsageError, and what your code raises a
        WorkerRaised or its own exception."""
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                return (
                    fn(kwargs)
                    if fn is _worker_call
                    else invoke(fn, kwargs, self.adapter, self.target)
                )
        except (Skip, WorkerSkipped):
            raise Outside from None
        except (WorkerUsageError, WorkerError) as exc:
            raise UsageError(exc) from None
        except Exception as exc:
            if is_assume(exc):
                raise Outside from None
            raise

    def _call_formula(self, kwargs: Json) -> Any:
        if self.worker is not None:
            worker, target = self.worker, self.target
            return self.user(_worker_call, lambda: worker.call(target, kwargs))
        assert not isinstance(self.fn, Worker)  # self.worker is None: fn is your function
        return self.user(self.fn, kwargs)

    def _start_rule(self, init: Json) -> tuple[Callable[[Json], Any], Callable[[], None]]:
        """(the per-round call, the end of the case) for one case of a rule."""
        if self.worker is not None:
            worker, target = self.worker, self.target
            self._sessions += 1
            sid = self._sessions
            self.user(_worker_call, lambda: worker.start(target, sid, init))
            return (
                lambda kw: self.user(_worker_call, lambda: worker.round(target, sid, kw)),
                lambda: self.user(_worker_call, lambda: worker.end(target, sid)),
            )
        assert not isinstance(self.fn, Worker)  # self.worker is None: fn is your function
        step = self.fn
        if self.adapter.stateful:
            step = self.user(self.fn, init)
            if not callable(step):
                raise UsageError(
                    TypeError(
                        "with Adapter(stateful=True) your function must return the per-round "
                        f"function; it returned {type(step).__name__}"
                    )
                )
        return (lambda kw: self.user(step, kw)), (lambda: None)

    def known(self, outputs: Sequence[str]) -> list[str]:
        return list(dict.fromkeys([*outputs, *(self.terms.texts if self.terms else ())]))

    def order(self, outputs: Sequence[str]) -> list[str]:
        """Terms in the order the formula computes them, then the remaining outputs."""
        terms = list(self.terms.texts) if self.terms else []
        return [*terms, *[k for k in outputs if k not in terms]]

    def yours(
        self, case: Case, params: Json, outputs: Sequence[str], round_base: int | None = None
    ) -> tuple[list[Json], str | None, int | None]:
        """Your named outputs of the case (a rule's every round, each from your own θ^t), what
        your code raised (None if nothing) and in which round. Raises Outside."""
        self.calls += 1
        base = self.round_base if round_base is None else round_base
        if self.kind == "formula":
            try:
                result = self._call_formula({**case.inputs, **params})
            except (UsageError, Outside):
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of the user's code is a finding
                return [], raised_text(exc), None
            return (
                [named(result, outputs, self.known(outputs), self.adapter, self.target)],
                None,
                None,
            )
        K = int(case.inputs["num_clients"])
        theta = np.asarray(case.inputs["params0"], dtype=np.float64)
        got: list[Json] = []
        try:
            step, end = self._start_rule({"params": theta, "num_clients": K, **params})
        except (UsageError, Outside):
            raise
        except Exception as exc:  # noqa: BLE001
            return [], raised_text(exc), 0
        try:
            for t, r in enumerate(case.inputs["rounds"]):
                fields = {k: v for k, v in r.items() if v is not None}
                if "round_index" in fields:  # the outside code's numbering (round_base)
                    fields["round_index"] = int(fields["round_index"]) + base
                # a hyper-parameter named like a report field (AFL's lr) replaces it when set
                hyper = {k: v for k, v in params.items() if not (k in fields and v is None)}
                try:
                    result = step({"params": theta, **fields, "num_clients": K, **hyper})
                except (UsageError, Outside):
                    raise
                except Exception as exc:  # noqa: BLE001
                    return got, raised_text(exc), t
                out = named(result, outputs, self.known(outputs), self.adapter, self.target)
                if "params" not in out:
                    raise UsageError(ValueError("a rule's function must return params, θ^{t+1}"))
                got.append(out)
                try:
                    theta = np.asarray(out["params"], dtype=np.float64)
                except (TypeError, ValueError):
                    return got, None, None  # your θ cannot start the next round
                if theta.shape != np.shape(case.inputs["params0"]):
                    return got, None, None
        finally:
            end()
        return got, None, None

    # one case -----------------------------------------------------------------------------
    def outputs_of(self, want: Json) -> list[str]:
        return list(want["rounds"][0]) if self.kind == "rule" and want["rounds"] else list(want)

    def run(self, case: Case, *, extra: Json | None = None) -> Outcome:
        """Compare your function with fairagg on ``case`` (``extra`` parameters override the
        check's, for a cause's rerun)."""
        params = self.params_of(case, extra)
        if params is None:
            return Outcome(case, "skipped")
        try:
            want = self.compute(case.inputs, params)
        except (ValueError, TypeError, ArithmeticError, RuntimeWarning) as exc:
            if case.source != GOLDEN:
                return Outcome(case, "rejected", params)
            return self._refused(case, params, f"{type(exc).__name__}: {exc}")
        if self.domain is not None:
            try:
                inside = self.domain(fresh(case.inputs), dict(params))
            except Exception as exc:  # noqa: BLE001 - the user's predicate failed
                raise UsageError(TypeError(f"domain raised {type(exc).__name__}: {exc}")) from None
            if not inside:
                return self._outside(case, params)
        tols = self.tolerances(case.inputs, params, want)
        outputs = self.outputs_of(want)
        try:
            yours, raised, at = self.yours(case, params, outputs)
        except Outside:
            return self._outside(case, params)
        outcome = Outcome(case, "agrees", params, want, tols, yours)
        self._compare(outcome, raised, at)
        if outcome.diff is not None:
            outcome.status = "differs"
            reason = self._accepted(outcome)
            if reason is not None:
                outcome.status, outcome.accepted = "accepted", reason
                outcome.rows.append(
                    Row(
                        case.label,
                        outcome.diff.round,
                        "(case)",
                        None,
                        None,
                        "",
                        f"accepted: {reason}",
                    )
                )
        return outcome

    def _outside(self, case: Case, params: Json) -> Outcome:
        row = Row(case.label, None, "(case)", None, None, "", "outside your domain")
        return Outcome(case, "outside", params, rows=[row])

    def _refused(self, case: Case, params: Json, refusal: str) -> Outcome:
        """A golden case fairagg refuses: your code must refuse it too (raise)."""
        outputs = ["params"] if self.kind == "rule" else ["out"]
        try:
            yours, raised, at = self.yours(case, params, outputs)
        except Outside:
            return self._outside(case, params)
        except UsageError:
            raise
        outcome = Outcome(case, "both refuse", params, yours=yours, refusal=refusal)
        if raised is not None:
            outcome.rows.append(Row(case.label, at, "refusal", None, None, "", "both refuse"))
            return outcome
        outcome.status = "differs"
        rnd = 0 if self.kind == "rule" else None
        outcome.diff = Diff(
            "refusal", self.texts["refusal"], rnd, "a result", "an error",
            f"fairagg refuses this input ({refusal}); yours returned a result",
            yours,
        )  # fmt: skip
        outcome.rows.append(Row(case.label, rnd, "refusal", None, None, "", "differs"))
        return outcome

    def _compare(self, o: Outcome, raised: str | None, at: int | None) -> None:
        """Fill ``o.diff`` and ``o.rows``: every round up to the first difference."""
        case, want = o.case, o.want
        assert want is not None
        want_rounds = want["rounds"] if self.kind == "rule" else [want]
        n = len(want_rounds)
        term_rounds = None
        if self.terms is not None and any(
            set(y) - set(w) for y, w in zip(o.yours, want_rounds, strict=False)
        ):
            term_rounds = self._terms(case, o)
        for t in range(n):
            rnd = t if self.kind == "rule" else None
            if t >= len(o.yours):
                what = raised if raised is not None else "your code stopped"
                o.rows.append(Row(case.label, rnd, "exception", None, None, "", "raised"))
                o.diff = Diff("exception", self.texts["exception"], rnd, what, "a result",
                              f"your function raised {what}", o.yours)  # fmt: skip
                self._after(o, t, n)
                return
            got, w = o.yours[t], want_rounds[t]
            full = dict(w)
            tols: Mapping[str, Tolerance] = o.tols
            if term_rounds is not None:
                extra, extra_tols = term_rounds[t]
                full.update({k: v for k, v in extra.items() if k not in full})
                tols = o.tols.union(extra_tols) if isinstance(o.tols, Bounds) else {
                    **extra_tols, **o.tols}  # fmt: skip
            other = None
            if self.target in NON_UNIQUE:
                src = case.inputs if self.kind == "formula" else case.inputs["rounds"][t]
                other = another_optimum(self.target, src, o.params or {}, w, tols)
            self.not_returned.update(k for k in w if k not in got and k not in RULE_EXCLUDE)
            order = self.order(list(w))
            if self.keep_rows:  # the table of a keep-going report (the bounds it prints)
                self._rows_for(o, rnd, got, full, order, tols, other)
            diff = first_diff(got, full, order, self.texts, rnd, tols, other)
            if diff is not None:
                diff.yours = o.yours
                o.diff = diff
                self._after(o, t, n)
                return

    def _terms(self, case: Case, o: Outcome) -> list[tuple[Json, Mapping[str, Tolerance]]] | None:
        """The restated terms of each round (from your θ^t) and their tolerances."""
        assert self.terms is not None
        params = o.params or {}
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                if self.kind == "formula":
                    run = self.terms.run
                    got = run(case.inputs, params)
                    return [(got, self.term_tolerances(run, case.inputs, params, got))]
                thetas = self._thetas(case, o.yours)

                def run_rule(i: Json, p: Json) -> Json:
                    return self.terms.run(i, p, thetas)  # type: ignore[union-attr]

                got = run_rule(case.inputs, params)
                tols = self.term_tolerances(run_rule, case.inputs, params, got)
                return [(r, tols) for r in got["rounds"]]
        except Exception:  # noqa: BLE001 - a restatement that cannot run here: no terms
            return None

    @staticmethod
    def _thetas(case: Case, yours: list[Json]) -> list[Any]:
        """θ^t of each round as your code saw it: θ⁰, then your own outputs."""
        out = [case.inputs["params0"]]
        for got in yours[: len(case.inputs["rounds"]) - 1]:
            out.append(got.get("params"))
        return out

    def _rows_for(self, o: Outcome, rnd, got, full, order, tols, other) -> None:
        """Rows of one comparison: every quantity fairagg has, in the formula's order."""
        for k in [*order, *[k for k in full if k not in order]]:
            if k not in full or k.startswith("_"):
                continue
            tol = tols[k] if k in tols else None
            text = tol.text() if tol is not None else ""
            if k not in got:
                if k not in RULE_EXCLUDE and k in (
                    o.want["rounds"][0]
                    if self.kind == "rule" and o.want and o.want["rounds"]
                    else o.want or {}
                ):
                    o.rows.append(Row(o.case.label, rnd, k, None, None, text, "not returned"))
                continue
            ok = tol is not None and close_bounded(got[k], full[k], tols, k) is None
            verdict = "agrees" if ok else "differs"
            if not ok and other is not None and other(k, got):
                verdict = "another minimiser"
            a, r = differences(got[k], full[k])
            o.rows.append(Row(o.case.label, rnd, k, a, r, text, verdict))

    @staticmethod
    def _after(o: Outcome, t: int, rounds: int) -> None:
        """The rounds after a difference start from your θ, not fairagg's: not compared."""
        for u in range(t + 1, rounds):
            o.rows.append(Row(o.case.label, u, "(round)", None, None, "", AFTER))

    # declared differences -----------------------------------------------------------------
    def agrees_with(self, o: Outcome, ref: Json, rounds: int | None = None) -> bool:
        """Whether your outputs of ``o`` agree with ``ref`` (a formula's outputs or a rule's
        rounds) on every round you returned (the first ``rounds``), within ``o``'s bounds."""
        want_rounds = ref["rounds"] if self.kind == "rule" else [ref]
        n = len(o.yours) if rounds is None else rounds
        if n == 0 or len(want_rounds) < n:
            return False
        for t in range(n):
            got, w = o.yours[t], want_rounds[t]
            keys = [k for k in got if k in w and k in o.tols]
            if not keys:
                return False
            for k in keys:
                if close_bounded(got[k], w[k], o.tols, k) is not None:
                    return False
        return True

    def _accepted(self, o: Outcome) -> str | None:
        """Why the difference of ``o`` is one ``accept`` declares, or None."""
        if not o.yours or o.diff is None or o.diff.quantity in ("exception", "refusal"):
            return None
        if "epsilon" in self.accept and "epsilon" not in o.case.params:
            eps = self.accept["epsilon"]
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    ref = self.compute_from(
                        o.case.inputs, {**(o.params or {}), "epsilon": eps},
                        self._thetas(o.case, o.yours) if self.kind == "rule" else None,
                    )  # fmt: skip
            except (ValueError, TypeError, ArithmeticError, RuntimeWarning):
                ref = None
            if ref is not None and self.agrees_with(o, ref):
                return f"another loss offset, epsilon = {eps:g} (epsilon={eps:g})"
        if "nan-on-zero-update" in self.accept and self._nan_from_zero_update(o):
            return "NaN caused by an all-zero update (nan-on-zero-update)"
        return None

    def _nan_from_zero_update(self, o: Outcome) -> bool:
        """Your output is NaN in the first differing round, which has an all-zero update, and
        the NaN is that update's: on the same case with every all-zero update made non-zero
        (1e-3 in its first coordinate), your code agrees with fairagg."""
        assert o.diff is not None
        t = o.diff.round or 0
        got = o.yours[t] if t < len(o.yours) else {}
        if all_finite(got):
            return False
        src = o.case.inputs["rounds"][t] if self.kind == "rule" else o.case.inputs
        if not _zero_rows(src):
            return False
        again = self.run(nudged(o.case, "updates"))
        return again.status == "agrees"


def _zero_rows(src: Json) -> bool:
    for key in ("deltas", "grads", "gradients"):
        U = src.get(key)
        if U is not None:
            U = np.asarray(U, dtype=np.float64)
            if U.ndim == 2 and U.shape[1] and np.any(np.all(U == 0, axis=1)):
                return True
    return False


#: What ``nudged`` changes, in the report's words.
NUDGES = {
    "updates": "every all-zero update made non-zero (1e-3 in its first coordinate)",
    "accuracies": "every accuracy that is 0 made 0.5",
    "losses": "every loss that is 0 made 0.1",
}


def nudged(case: Case, what: str) -> Case:
    """``case`` with one kind of degenerate input made ordinary (``NUDGES``), in every
    round."""

    def fix(src: Json) -> Json:
        src = dict(src)
        if what == "updates":
            for key in ("deltas", "grads", "gradients"):
                U = src.get(key)
                if U is None:
                    continue
                U = np.array(U, dtype=np.float64)
                if U.ndim == 2 and U.shape[1]:
                    U[np.all(U == 0, axis=1), 0] = 1e-3
                    src[key] = U
        else:
            key = what
            a = src.get(key)
            if a is not None:
                a = np.array(a, dtype=np.float64)
                a[a == 0] = 0.5 if what == "accuracies" else 0.1
                src[key] = a
        return src

    inputs = case.inputs
    if "rounds" in inputs:
        inputs = {**inputs, "rounds": [fix(r) for r in inputs["rounds"]]}
    else:
        inputs = fix(inputs)
    return dataclasses.replace(case, inputs=inputs)
