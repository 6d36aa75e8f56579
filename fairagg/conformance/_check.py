"""``check``: run every case, then diagnose the first difference from all of them."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import make_rule
from .._tolerance import DEFAULT_SOLVER_TOL, check_precision
from .._worker import Worker
from ..vectors import case_inputs
from ._adapter import Adapter
from ._checker import NUDGES, Checker, Outcome, nudged
from ._common import GOLDEN, Case, Json, Outside, UsageError, default_params, kind_of
from ._compare import DIFF_FIELDS, all_finite
from ._diagnosis import Diagnoser, Diagnosis
from ._generate import drawn, generated_case
from ._report import ConformanceError, ConformanceReport, Mismatch

#: The declared differences [`check`][fairagg.conformance.check] accepts (``accept=``): a
#: case that differs only so is counted in ``ConformanceReport.accepted`` and the check goes on.
ACCEPTABLE = {
    "epsilon": "epsilon=VALUE: another loss offset ε in q-FFL's F̃_k = F_k + ε (e.g. "
    "epsilon=1e-8 where fairagg has 1e-10): a case is accepted where fairagg with ε = VALUE "
    "agrees with yours on every round of the case; another ε still differs",
    "nan-on-zero-update": "NaN in your outputs in a round where some client's update is all "
    "zero (0/0 in a normalisation, as FLGo's FedFV divides by ‖δ_k‖): a case is accepted "
    "where the NaN is that update's, i.e. where your code agrees with fairagg once each "
    "all-zero update is made non-zero",
}
#: Targets whose ``epsilon`` is q-FFL's loss offset F̃_k = F_k + ε (SPEC §2).
LOSS_OFFSET = ("qfedavg", "qfedsgd", "qfedavg_step", "qfedsgd_step")
#: Draws per generated example asked for, at most, before giving up on inputs fairagg takes.
_DRAWS_PER_EXAMPLE = 20


def _golden_cases(target: str, names: Iterable[str] | None) -> list[Case]:
    kind = kind_of(target)
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
        Case(GOLDEN, f"golden case {kind}s/{target}/{name}", inputs, params)
        for name, (_, inputs, params) in cases.items()
    ]


def _user_tolerance(rtol: Any, atol: Any) -> tuple[float, float] | None:
    """(rtol, atol) where the user gives either (the other 0), else None."""
    if rtol is None and atol is None:
        return None
    out = []
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is None:
            out.append(0.0)
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 <= value < math.inf
        ):
            raise ValueError(f"{name} must be a finite non-negative number; got {value!r}")
        out.append(float(value))
    return out[0], out[1]


def parse_accept(accept: Any, target: str, fixed: Json) -> dict[str, Any]:
    """``accept`` as {name: value}: ``"nan-on-zero-update"`` and ``"epsilon=VALUE"`` (or a
    mapping ``{"epsilon": VALUE}``)."""
    if isinstance(accept, str) or not isinstance(accept, (Iterable, Mapping)):
        raise TypeError(
            "accept must be an iterable of declared differences, e.g. ['epsilon=1e-8'] or "
            f"['nan-on-zero-update']; got {type(accept).__name__}"
        )
    items = list(accept.items()) if isinstance(accept, Mapping) else []
    if not isinstance(accept, Mapping):
        for entry in accept:
            if not isinstance(entry, str):
                raise TypeError(f"accept: each entry must be a str; got {type(entry).__name__}")
            name, _, value = entry.partition("=")
            items.append((name.strip(), value.strip() if _ else None))
    out: dict[str, Any] = {}
    for name, value in items:
        if name in out:
            raise ValueError(f"accept: {name!r} is declared twice; declare it once")
        if name not in ACCEPTABLE:
            raise ValueError(f"accept: unknown difference {name!r}; known: {', '.join(ACCEPTABLE)}")
        if name == "epsilon":
            if target not in LOSS_OFFSET:
                raise ValueError(
                    f"accept: 'epsilon' is q-FFL's loss offset, which {target!r} does not have "
                    f"(targets with it: {', '.join(LOSS_OFFSET)})"
                )
            if "epsilon" in fixed:
                raise ValueError(
                    "accept: 'epsilon' declares another ε for the cases that differ; it cannot "
                    "go with params['epsilon'], which checks every case at that ε"
                )
            if value is None or value == "":
                raise ValueError(
                    "accept: 'epsilon' needs the value your code uses, epsilon=VALUE (e.g. "
                    "epsilon=1e-8): a check without it reports the ε that fits yours"
                )
            try:
                eps = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"accept: epsilon must be a number; got {value!r}") from None
            if not (0.0 <= eps < math.inf):
                raise ValueError(f"accept: epsilon must be finite and >= 0; got {value!r}")
            out["epsilon"] = eps
        else:
            if value not in (None, ""):
                raise ValueError(f"accept: {name!r} takes no value; got {value!r}")
            out[name] = True
    return out


def _degenerate(src: Json) -> list[str]:
    """Which kinds of degenerate input ``src`` (a formula's inputs or a round) holds."""
    out = []
    for key in ("deltas", "grads", "gradients"):
        U = src.get(key)
        if U is not None:
            U = np.asarray(U, dtype=np.float64)
            if U.ndim == 2 and U.shape[1] and np.any(np.all(U == 0, axis=1)):
                out.append("updates")
                break
    for key in ("accuracies", "losses"):
        a = src.get(key)
        if a is not None and np.any(np.asarray(a, dtype=np.float64) == 0):
            out.append(key)
    return out


def _facts(checker: Checker, o: Outcome) -> tuple[str, ...]:
    """Where no cause was identified and your output is not finite: which degenerate input
    of the case the NaN or infinity comes from, each found by rerunning your code on the
    case with that input made ordinary (``NUDGES``) and seeing your output finite."""
    if o.diff is None or not o.yours:
        return ()
    t = o.diff.round or 0
    if t >= len(o.yours) or all_finite(o.yours[t]):
        return ()
    src = o.case.inputs["rounds"][t] if "rounds" in o.case.inputs else o.case.inputs
    where = f" in round {t}" if o.diff.round is not None else ""
    facts = []
    for what in _degenerate(src):
        try:
            again = checker.run(nudged(o.case, what))
        except (UsageError, Outside):
            continue
        if t < len(again.yours) and all_finite(again.yours[t]):
            facts.append(
                f"your output{where} is finite on the same case with {NUDGES[what]}: the "
                "non-finite value comes from that input"
            )
    return tuple(facts)


def _same(a: Any, b: Any) -> bool:
    """Whether two results of your code are the same (NaN equal to NaN)."""
    try:
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            return False
        if x.dtype.kind in "fc" and y.dtype.kind in "fc":
            return bool(np.array_equal(x, y, equal_nan=True))
        return bool(np.all(x == y))
    except (TypeError, ValueError):
        return a is b or a == b


def _same_again(checker: Checker, o: Outcome) -> None:
    """Your code gives the same outputs on the same case again, or a usage error: a
    diagnosis of outputs that change from call to call would be of nothing."""
    again = checker.run(o.case)
    if len(again.yours) != len(o.yours) or not all(
        set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
        for a, b in zip(again.yours, o.yours, strict=True)
    ):
        raise UsageError(
            ValueError(
                f"your function gave different results on the same input ({o.case.label}): "
                "does it keep state between calls? For a rule, use Adapter(stateful=True) "
                "with a factory (a worker's rule class is built anew for each case)"
            )
        )


def _mismatch(target: str, d: Diagnosis, checker: Checker) -> Mismatch:
    o = d.shown
    assert o.diff is not None
    shared = {f: getattr(o.diff, f) for f in DIFF_FIELDS}
    label = o.case.label + (", shrunk" if o.case.shrunk else "")
    return Mismatch(
        target, o.case.source, label, **shared, diagnosis=d.text(),
        inputs=o.case.inputs, params=o.params or {}, causes=tuple(d.causes),
        facts=() if d.causes else _facts(checker, o), round_base=checker.round_base,
    )  # fmt: skip


def check(
    fn: Callable[..., Any] | Worker,
    target: str,
    *,
    adapter: Adapter | None = None,
    params: Mapping[str, Any] | None = None,
    round_base: int = 0,
    domain: Callable[[Json, Json], Any] | None = None,
    accept: Iterable[str] | Mapping[str, Any] = (),
    golden: bool | Iterable[str] = True,
    hypothesis: bool = True,
    max_examples: int = 100,
    rtol: float | None = None,
    atol: float | None = None,
    precision: str = "float64",
    solver_tol: float | None = None,
    seed: int | None = 0,
    generated: int | None = None,
    derandomize: bool = True,
    raise_on_mismatch: bool = True,
    keep_going: bool = False,
) -> ConformanceReport:
    """Check ``fn`` against fairagg's ``target`` on golden and generated inputs.

    Every case runs in every mode; the verdict, the counts and the diagnosis depend only on
    the cases (``golden``, ``hypothesis``, ``max_examples``, ``seed``), never on
    ``keep_going`` or on whether the check runs here or through ``fairagg check``.

    Parameters
    ----------
    fn : callable or Worker
        Your implementation (see the module docstring for how it is called), or a
        [`Worker`][fairagg.conformance.Worker] running it in another process
        (``fairagg check --cmd``).
    target : str
        A registered rule or formula name ([`targets`][fairagg.conformance.targets]).
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
        ``ConformanceReport.outside``, not compared. Your function can also raise
        [`Skip`][fairagg.conformance.Skip].
    accept : iterable of str, or mapping
        Declared differences ([`ACCEPTABLE`][fairagg.conformance.ACCEPTABLE]):
        ``"epsilon=VALUE"`` (another q-FFL loss offset, the one your code uses) and
        ``"nan-on-zero-update"`` (NaN caused by an all-zero update): a case that differs only so is
        counted in ``ConformanceReport.accepted`` and the check goes on, so one documented upstream
        deviation does not hide the rest.
    golden : bool or iterable of str
        Check the golden cases (all of them, or those named, e.g. ``["small", "ties"]``).
    hypothesis : bool
        Check generated examples (fairagg's own seeded generator; the name is kept from
        earlier versions, which drew them with hypothesis).
    max_examples : int
        Generated examples to compare.
    generated : int, optional
        The command line's ``--generated N``: N generated examples, 0 for none (sets
        ``hypothesis`` and ``max_examples``).
    rtol, atol : float, optional
        A blanket tolerance for every output, |got − want| ≤ atol·max(1, max|want|) +
        rtol·|want|, in place of each output's error bound at ``precision``.
    precision : {"float64", "solver", "float32"}
        What your code computes in: each output is compared within its error bound in that
        precision (``fairagg._tolerance``); ``"solver"`` adds ``solver_tol``.
    solver_tol : float, optional
        The accuracy of your solver's argmins with ``precision="solver"`` (default 1e-6);
        only with that precision.
    seed : int or None
        Seed of the generated examples (example i is the same for a seed whatever else the
        check does); None draws one, printed in the report.
    derandomize : bool
        False: a new seed on every run (as ``seed=None``).
    raise_on_mismatch : bool
        Raise [`ConformanceError`][fairagg.conformance.ConformanceError] on a difference (default);
        else return it in the report.
    keep_going : bool
        Also keep a [`Row`][fairagg.conformance.Row] for every quantity compared (``report.rows``;
        ``str(report)`` is then the table, the summary and the first difference).

    Returns
    -------
    ConformanceReport

    Raises
    ------
    ConformanceError
        Your implementation differs (an ``AssertionError``, so a test fails with the report).
    TypeError, ValueError
        Bad arguments, a call that cannot work (an argument of yours the harness does not
        have, a returned name the target does not have), or a check that compared nothing.
    """
    kind = _check_fn(fn, target)
    hypothesis, max_examples = _check_counts(round_base, generated, hypothesis, max_examples)
    adapter = _check_adapter(domain, adapter, kind)
    fixed = _fixed_params(params, target, kind)
    user_tol = _user_tolerance(rtol, atol)
    solver = _check_precision_args(precision, solver_tol, max_examples)
    seed = _check_modes(golden, hypothesis, keep_going, seed, derandomize)
    accepted_names = parse_accept(accept, target, fixed)
    if isinstance(fn, Worker) and adapter != Adapter():
        raise ValueError("adapter does not apply to a Worker: name things in the worker itself")
    checker = Checker(
        fn, target, adapter, fixed, precision, solver, user_tol, int(round_base), domain,
        accepted_names,
    )  # fmt: skip
    checker.keep_rows = bool(keep_going)
    names = None if isinstance(golden, bool) else list(golden)
    counts = _Counts()
    outcomes: list[Outcome] = []
    try:
        if golden:
            _run_golden(checker, _golden_cases(target, names), outcomes, counts)
        if hypothesis:
            _run_generated(checker, target, fixed, seed, max_examples, outcomes, counts)
        if counts.golden + counts.generated == 0:
            raise _nothing_compared(target, outcomes, counts, hypothesis)
        mismatch = _diagnosed(checker, outcomes, target, fixed, bool(hypothesis), seed, counts)
    except UsageError as exc:
        raise exc.exc from None
    report = _report(
        checker, target, fixed, outcomes, counts, mismatch, accepted_names,
        hypothesis=bool(hypothesis), seed=seed, keep_going=bool(keep_going),
    )  # fmt: skip
    if mismatch is not None and raise_on_mismatch:
        raise ConformanceError(mismatch, report)
    return report


def _check_fn(fn: Any, target: str) -> str:
    """The kind of ``target``, once ``fn`` is known to be callable or a Worker."""
    if not (callable(fn) or isinstance(fn, Worker)):
        raise TypeError(f"fn must be callable or a Worker; got {type(fn).__name__}")
    return kind_of(target)


def _check_counts(
    round_base: Any, generated: Any, hypothesis: bool, max_examples: Any
) -> tuple[bool, Any]:
    """``round_base`` checked; (``hypothesis``, ``max_examples``) as ``generated`` sets them."""
    if isinstance(round_base, bool) or not isinstance(round_base, (int, np.integer)):
        raise TypeError(f"round_base must be an int; got {type(round_base).__name__}")
    if round_base < 0:
        raise ValueError(f"round_base must be >= 0 (your code's number for round 0); got "
                         f"{round_base}")  # fmt: skip
    if generated is not None:
        if isinstance(generated, bool) or not isinstance(generated, (int, np.integer)):
            raise TypeError(f"generated must be an int; got {type(generated).__name__}")
        if generated < 0:
            raise ValueError(f"generated must be >= 0; got {generated}")
        hypothesis, max_examples = bool(generated > 0), max(int(generated), 1)
    return hypothesis, max_examples


def _check_adapter(domain: Any, adapter: Any, kind: str) -> Adapter:
    """``domain`` checked; the adapter (the default one when none is given)."""
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
    return adapter


def _fixed_params(params: Any, target: str, kind: str) -> Json:
    """The parameters fixed for every case, each one the target has, with a value it takes."""
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping of parameter names; got {type(params).__name__}")
    fixed = dict(params or {})
    known = default_params(target, {})
    unknown = sorted(set(fixed) - set(known))
    if unknown:
        raise ValueError(
            f"params: {target!r} has no parameter {', '.join(map(repr, unknown))}; it has "
            f"{', '.join(known) or 'none'}"
        )
    if kind == "rule":
        make_rule(target, **fixed)  # a bad hyper-parameter value is the rule's own clear error
    return fixed


def _check_precision_args(precision: Any, solver_tol: Any, max_examples: Any) -> float:
    """The solver accuracy of ``precision``, once it and ``max_examples`` are checked."""
    if solver_tol is not None and precision != "solver":
        raise ValueError(
            f"solver_tol applies to precision='solver' (an iterative solver's argmin); got "
            f"precision={precision!r}"
        )
    solver = check_precision(precision, DEFAULT_SOLVER_TOL if solver_tol is None else solver_tol)
    if isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1:
        raise ValueError(f"max_examples must be a positive int; got {max_examples!r}")
    return solver


def _check_modes(
    golden: Any, hypothesis: bool, keep_going: Any, seed: Any, derandomize: bool
) -> int:
    """The seed of the generated examples, once the modes of the check are checked."""
    if isinstance(golden, str) or not isinstance(golden, (bool, Iterable)):
        raise TypeError(
            f"golden must be a bool or an iterable of case names; got {type(golden).__name__}"
        )
    if not golden and not hypothesis:
        raise ValueError(
            "nothing to check: no golden case and no generated example (golden=False and "
            "generated=0; on the command line --golden none and --generated 0)"
        )
    if not isinstance(keep_going, (bool, np.bool_)):
        raise TypeError(f"keep_going must be a bool; got {type(keep_going).__name__}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or seed < 0):  # fmt: skip
        raise ValueError(f"seed must be a non-negative int or None; got {seed!r}")
    if seed is None or not derandomize:
        seed = int.from_bytes(os.urandom(4), "little")
    return seed


@dataclass
class _Counts:
    """What the cases of one check came to (``next_index``: the generated examples drawn)."""

    golden: int = 0
    generated: int = 0
    skipped: int = 0
    outside: int = 0
    refused: int = 0
    next_index: int = 0


def _run_golden(
    checker: Checker, cases: list[Case], outcomes: list[Outcome], counts: _Counts
) -> None:
    for case in cases:
        o = checker.run(case)
        outcomes.append(o)
        counts.skipped += o.status == "skipped"
        counts.outside += o.status == "outside"
        counts.refused += o.status == "both refuse"
        counts.golden += o.compared


def _run_generated(
    checker: Checker, target: str, fixed: Json, seed: int, max_examples: int,
    outcomes: list[Outcome], counts: _Counts,
) -> None:  # fmt: skip
    draws = 0
    while counts.generated < max_examples and draws < _DRAWS_PER_EXAMPLE * max_examples:
        o = checker.run(generated_case(target, fixed, seed, draws))
        draws += 1
        if o.status == "rejected":
            continue
        outcomes.append(o)
        counts.outside += o.status == "outside"
        counts.generated += o.compared
    counts.next_index = draws
    if counts.generated == 0 and not any(o.status == "outside" for o in outcomes
                                         if o.case.source != GOLDEN):  # fmt: skip
        raise UsageError(
            ValueError(
                f"fairagg rejected every generated input of {target!r} with params "
                f"{fixed}: are they valid?"
            )
        )


def _nothing_compared(
    target: str, outcomes: list[Outcome], counts: _Counts, hypothesis: bool
) -> UsageError:
    g_out = sum(o.status == "outside" for o in outcomes if o.case.source == GOLDEN)
    n_drawn = counts.next_index if hypothesis else 0
    return UsageError(
        ValueError(
            f"nothing was compared for {target!r}: of the golden cases, {counts.skipped} set "
            f"another value of a fixed parameter and {g_out} are outside your domain "
            "(your code skipped them, or domain= excludes them); of the generated "
            f"examples drawn ({n_drawn}, redrawn while outside your domain or refused by "
            "fairagg), none was compared. A check that compares nothing cannot conform"
        )
    )


def _diagnosed(
    checker: Checker, outcomes: list[Outcome], target: str, fixed: Json, search: bool,
    seed: int, counts: _Counts,
) -> Mismatch | None:  # fmt: skip
    """The first difference, diagnosed from every case; None where no case differs."""
    if not any(o.status == "differs" for o in outcomes):
        return None
    _same_again(checker, next(o for o in outcomes if o.status == "differs"))
    diagnosis = Diagnoser(
        checker, outcomes, search=search, seed=seed, next_index=counts.next_index, fixed=fixed,
    ).run()  # fmt: skip
    return _mismatch(target, diagnosis, checker)


def _report(
    checker: Checker, target: str, fixed: Json, outcomes: list[Outcome], counts: _Counts,
    mismatch: Mismatch | None, accepted_names: dict[str, Any], *, hypothesis: bool, seed: int,
    keep_going: bool,
) -> ConformanceReport:  # fmt: skip
    rows = tuple(r for o in outcomes for r in o.rows) if keep_going else ()
    accepted_as = []
    for name, value in accepted_names.items():
        if any(o.status == "accepted" and o.accepted and name in o.accepted for o in outcomes):
            accepted_as.append(f"epsilon = {value:g}" if name == "epsilon" else name)
    return ConformanceReport(
        target,
        counts.golden,
        counts.generated,
        counts.skipped,
        mismatch,
        counts.outside,
        rows,
        sum(o.status == "differs" for o in outcomes),
        tuple(sorted(checker.not_returned)),
        sum(o.status == "accepted" for o in outcomes),
        drawn(target, fixed) if hypothesis else (),
        seed if hypothesis else None,
        counts.refused,
        tuple(accepted_as),
        keep_going,
    )
