"""What a check reports: the first difference on the case shown, its verified cause, and the
counts of every case run (with every comparison's row in a keep-going report)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._causes import Cause
from ._checker import Row
from ._common import GENERATED, Json


def _show(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return np.array2string(v, separator=", ").replace("\n", "\n" + " " * 12)
    return repr(v)


@dataclass(frozen=True)
class Mismatch:
    """The first difference, on the case shown.

    Attributes
    ----------
    target : str
    source : str
        ``"golden"`` or ``"generated"``.
    case : str
        Which case: ``"golden case rules/qfedavg/extreme_losses"`` or ``"generated example 17
        (seed 0)"``, with ``", shrunk"`` when clients, coordinates or rounds were dropped or
        numbers simplified.
    quantity : str
        The first quantity that differs (a term, or an output such as ``params``),
        ``"exception"`` when your function raised, or ``"refusal"`` when fairagg refuses a
        golden input that your code computed.
    formula : str
        What that quantity is.
    round : int or None
        The round of a rule case (0-based).
    got, want : object
        Your value and fairagg's.
    detail : str
        How they differ (largest difference and tolerance, shape, or the exception).
    diagnosis : str or None
        The verified cause (see [`causes`][fairagg.conformance.Mismatch.causes]): e.g. ``"h
        differs: your norm is not squared ..."``; ``"ambiguous: ..."`` listing every cause that fits
        when no input told them apart; or ``"cause not identified: ..."``.
    inputs, params : dict
        The case: fairagg's inputs and every parameter.
    causes : tuple of Cause
        The verified causes: one when named, several when ambiguous, none when not
        identified. Each reproduces your outputs on every differing case and agrees where
        yours agreed.
    facts : tuple of str
        Checked facts of the case shown where no cause was identified (an all-zero update,
        every accuracy 0, ...): what the data shows, not a cause.
    """

    target: str
    source: str
    case: str
    quantity: str
    formula: str
    round: int | None
    got: Any
    want: Any
    detail: str
    diagnosis: str | None
    inputs: Json
    params: Json
    causes: tuple[Cause, ...] = ()
    facts: tuple[str, ...] = ()
    round_base: int = 0

    def __str__(self) -> str:
        with np.printoptions(precision=17, floatmode="unique", threshold=60, linewidth=100):
            where = f" in round {self.round}" if self.round is not None else ""
            head = self.diagnosis or f"{self.quantity} differs"
            lines = [
                f"{self.target}: your implementation differs from fairagg on {self.case}{where}.",
                f"  {head}",
            ]
            lines += [f"  fact: {f}" for f in self.facts]
            if self.quantity == "exception":
                lines.append(f"  first differing quantity: exception: {self.detail}")
            else:
                lines.append(f"  first differing quantity: {self.quantity}: {self.formula}")
                lines.append(f"  {self.detail}")
                lines.append(f"  yours:   {_show(self.got)}")
                lines.append(f"  fairagg: {_show(self.want)}")
            lines.append("  case:")
            if self.round_base and "rounds" in self.inputs:
                lines.append(f"    (your code received each round_index + {self.round_base})")
            lines += [f"    {k} = {_show(v)}" for k, v in self.inputs.items() if k != "rounds"]
            for t, r in enumerate(self.inputs.get("rounds", [])):
                lines.append(f"    round {t}:")
                lines += [f"      {k} = {_show(v)}" for k, v in r.items()]
            if self.params:
                lines.append(
                    "  parameters: " + ", ".join(f"{k} = {v!r}" for k, v in self.params.items())
                )
        return "\n".join(lines)


class ConformanceError(AssertionError):
    """Raised by [`check`][fairagg.conformance.check] when your implementation differs; ``mismatch``
    says where and ``report`` what else was run."""

    def __init__(self, mismatch: Mismatch, report: ConformanceReport | None = None) -> None:
        super().__init__(str(report) if report is not None else str(mismatch))
        self.mismatch = mismatch
        self.report = report


@dataclass(frozen=True)
class ConformanceReport:
    """What [`check`][fairagg.conformance.check] ran, and the first difference if there is one.

    ``golden`` and ``generated``: the golden cases and generated examples compared (a golden
    case that fairagg refuses counts, compared as "both refuse", in ``refused``);
    ``skipped``: golden cases that set a parameter the check fixes to another value;
    ``outside``: cases outside your domain (``domain``, or your function skipped them);
    ``accepted``: cases that differ only as declared (counted among those compared, the
    declared values in ``accepted_as``); ``failed``: cases that differ; ``drawn``: the
    ranges of the generated examples; ``seed``: their seed; ``rows``: every comparison of a
    keep-going check. ``bool(report)`` is True when everything agreed. The counts are the same
    with and without ``keep_going``: every case runs in every mode."""

    target: str
    golden: int
    generated: int
    skipped: int
    mismatch: Mismatch | None
    outside: int = 0
    rows: tuple[Row, ...] = ()
    failed: int = 0
    not_returned: tuple[str, ...] = ()
    accepted: int = 0
    drawn: tuple[str, ...] = ()
    seed: int | None = None
    refused: int = 0
    accepted_as: tuple[str, ...] = ()
    keep_going: bool = False

    def __bool__(self) -> bool:
        return self.mismatch is None and not self.failed

    @property
    def conforms(self) -> bool:
        """Whether everything agreed (``bool(report)``)."""
        return bool(self)

    def __str__(self) -> str:
        parts = []
        if self.keep_going and self.rows:
            parts.append(self._table())
            parts.append("")
        elif self.mismatch is not None:
            parts.append(str(self.mismatch))
            parts.append("")
        parts.append(self.summary())
        if self.keep_going and self.mismatch is not None:
            parts += ["", "the first difference:", str(self.mismatch)]
        return "\n".join(parts)

    def summary(self) -> str:
        """One paragraph: the verdict and the counts."""
        verdict = "conforms on" if self else f"differs on {self.failed} of"
        n = self.golden + self.generated
        seed = f" (seed {self.seed})" if self.generated and self.seed is not None else ""
        text = (
            f"{self.target}: {verdict} {n} cases compared: {self.golden} golden cases"
            f"{f' ({self.refused} refused by both)' if self.refused else ''} and "
            f"{self.generated} generated examples{seed}"
        )
        notes = [f"{self.skipped} golden cases skipped (they set another value of a fixed "
                 "parameter)"] if self.skipped else []  # fmt: skip
        if self.outside:
            notes.append(f"{self.outside} cases outside your domain")
        if self.accepted:
            what = f" ({'; '.join(self.accepted_as)})" if self.accepted_as else ""
            notes.append(f"{self.accepted} accepted as declared differences{what}")
        if notes:
            text += "; " + "; ".join(notes)
        if self.generated and self.drawn:
            text += "\ngenerated examples drew: " + ", ".join(self.drawn)
        if self.not_returned:
            text += "\nnot checked, as your code did not return them: " + ", ".join(
                self.not_returned
            )
        return text

    def _table(self) -> str:
        """Every golden comparison, and the generated ones summed up per round and quantity."""
        golden = [r for r in self.rows if not r.case.startswith(GENERATED)]
        generated: dict[tuple, list[Row]] = {}
        for r in self.rows:
            if r.case.startswith(GENERATED):
                generated.setdefault((r.round, r.quantity), []).append(r)
        # rounds in order, each round's quantities in the order they were first compared
        first_seen = {key: i for i, key in enumerate(generated)}
        generated = dict(sorted(generated.items(), key=lambda kv: (
            -1 if kv[0][0] is None else kv[0][0], first_seen[kv[0]])))  # fmt: skip
        n_gen = len({r.case for r in self.rows if r.case.startswith(GENERATED)})
        gen_label = f"generated ({n_gen} examples)"
        w = max([len(r.case) for r in golden] + [len(gen_label), 4])
        lines = [
            f"{'case':<{w}} {'round':>5}  {'quantity':<22} {'max abs':>9} {'max rel':>9}  "
            f"{'tolerance':<24} verdict"
        ]

        def num(x: float | None) -> str:
            return "" if x is None else f"{x:9.2e}"

        for r in golden:
            rnd = "" if r.round is None else str(r.round)
            lines.append(
                f"{r.case:<{w}} {rnd:>5}  {r.quantity:<22} {num(r.max_abs):>9} "
                f"{num(r.max_rel):>9}  {r.tolerance:<24} {r.verdict}"
            )
        for (rnd, k), rs in generated.items():
            a = [r.max_abs for r in rs if r.max_abs is not None]
            rel = [r.max_rel for r in rs if r.max_rel is not None]
            verdicts: dict[str, int] = {}
            for r in rs:
                verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
            verdict = ", ".join(f"{v} in {c}" for v, c in verdicts.items())
            lines.append(
                f"{gen_label:<{w}} {'' if rnd is None else rnd:>5}  {k:<22} "
                f"{num(max(a) if a else None):>9} {num(max(rel) if rel else None):>9}  "
                f"{'per example':<24} {verdict}"
            )
        return "\n".join(lines)
