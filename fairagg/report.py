"""Reports from saved runs: tables, plots and a self-contained HTML page, without training.

``write_report`` reads the histories that ``fairagg run`` and ``fairagg compare`` save
(``history.npz``), groups the runs that share a configuration but not a seed, and writes

- ``report.csv``: one row per group: whether its runs completed (``status``, ``runs_stopped``),
  the rounds asked and the fewest rounds a run of the group completed and was evaluated at
  (``rounds_asked``, ``rounds_completed``, ``evaluated_round``), and every metric of
  [`fairagg.metrics.fairness_summary`][fairagg.metrics.fairness_summary] (each run's last
  evaluation) as the mean and the population standard deviation over the group's seeds;
- ``curves.png``: the sample-weighted average, the worst-10 % and the variance of the client
  accuracies and the training loss against the round, the mean over seeds with a band of ± one
  standard deviation;
- ``accuracy_distribution.png``: the per-client test accuracies of each run's last evaluation
  (every client of every seed), by group;
- ``report.md`` (the tables) and ``report.html`` (the tables, the plots embedded and every
  configuration: one file to send).

A run that stopped before its last round (interrupted, diverged: its history's ``status`` is
not ``"completed"``) is reported as such: its rounds completed of the rounds asked and why it
stopped, and tables that say its accuracies are not final.

Accuracies are in percent, the variance in %², as in
[`fairagg.metrics.fairness_summary`][fairagg.metrics.fairness_summary].
"""

from __future__ import annotations

import base64
import contextlib
import csv
import html
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .metrics import fairness_summary
from .simulation import History

__all__ = ["REPORT_FILES", "write_report"]

#: The files ``write_report`` writes.
REPORT_FILES = (
    "report.csv",
    "report.md",
    "report.html",
    "curves.png",
    "accuracy_distribution.png",
)


class _Column(NamedTuple):
    """A column of the results tables: a key of
    [`fairness_summary`][fairagg.metrics.fairness_summary], its name, its unit (a report's
    header adds it to the name), its format, and the factor its values are shown times."""

    key: str
    name: str
    unit: str = ""
    spec: str = ".2f"
    scale: float = 1.0

    @property
    def header(self) -> str:
        """The column's header in a report: its name with its unit."""
        return f"{self.name} ({self.unit})" if self.unit else self.name


#: The results tables' columns: ``fairagg compare``'s table.txt shows them all under their
#: names; a report's tables all but the Gini coefficient (report.csv holds it) under their
#: headers.
_RESULTS = (
    _Column("average", "Average", "%"),
    _Column("worst_10", "Worst 10%", "%"),
    _Column("best_10", "Best 10%", "%"),
    _Column("variance", "Variance", "%²"),
    _Column("angle", "Angle (°)"),
    _Column("kl", "KL(a||u)", spec=".4f"),
    _Column("gini", "Gini×100", scale=100.0),  # a fraction in [0, 1), shown in percent
)
#: The columns of a report's tables.
_REPORT_COLUMNS = _RESULTS[:-1]
#: Configuration entries that do not make two runs different experiments.
_NOT_EXPERIMENT = frozenset({"seed"})


@dataclass
class RunGroup:
    """Runs of one configuration (all but the seed), in seed order (two runs of one seed are
    both kept: the table says how many runs a mean is over, the run list which seeds)."""

    label: str
    config: dict[str, Any]
    histories: list[History] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    @property
    def seeds(self) -> list[Any]:
        return [h.config.get("seed") for h in self.histories]

    @property
    def stopped(self) -> int:
        """How many of the group's runs did not complete their rounds."""
        return sum(h.status != "completed" for h in self.histories)


def run_state(h: History) -> dict[str, Any]:
    """What a saved run did: its ``status`` (``"completed"``, ``"stopped: <reason>"`` or
    ``"running"``, see [`History`][fairagg.simulation.History]), ``rounds_asked`` (the configured
    rounds, None where the history has no configuration), ``rounds_completed`` and
    ``evaluated_round`` (the round of its last evaluation, which its metrics describe; None
    without one)."""
    asked = h.config.get("rounds")
    evals = h._rows["eval_round"]
    return {
        "status": h.status,
        "rounds_asked": None if asked is None else int(asked),
        "rounds_completed": h.num_rounds,
        "evaluated_round": int(evals[-1]) if evals else None,
    }


def describe_run(h: History) -> str:
    """One line of what a saved run did, e.g. ``"37 of 100 rounds, stopped (KeyboardInterrupt)"``
    or ``"100 of 100 rounds, completed"``."""
    s = run_state(h)
    asked = "?" if s["rounds_asked"] is None else s["rounds_asked"]
    text = f"{s['rounds_completed']} of {asked} rounds, "
    status = str(s["status"])
    if status == "completed":
        text += "completed"
    elif status.startswith("stopped:"):
        reason = status.removeprefix("stopped:").strip().rstrip(":").strip()
        text += f"stopped ({reason})" if reason else "stopped"
    else:
        text += f"not finished (status {status!r})"
    if s["evaluated_round"] is not None and s["evaluated_round"] != s["rounds_completed"]:
        text += f", last evaluated at round {s['evaluated_round']}"
    return text


def find_runs(runs: Iterable[str | os.PathLike]) -> list[Path]:
    """The saved histories under ``paths``: a ``history.npz`` (or ``*history.npz``) file, a run
    folder holding one, or a folder searched recursively (a ``compare`` folder), in order."""
    if isinstance(runs, (str, bytes, os.PathLike)) or not isinstance(runs, Iterable):
        raise TypeError(
            f"runs must be a list of run folders or history files; got {type(runs).__name__}"
        )
    found: list[Path] = []
    for raw in runs:
        if not isinstance(raw, (str, os.PathLike)):
            raise TypeError(f"runs must hold paths; got {type(raw).__name__}")
        p = Path(raw)
        if p.is_file():
            if not p.name.endswith("history.npz"):
                raise ValueError(f"runs: {p} is not a saved history (*history.npz)")
            hits = [p]
        elif p.is_dir():
            hits = [p / "history.npz"] if (p / "history.npz").is_file() else []
            hits = hits or sorted(p.rglob("*history.npz"))
            if not hits:
                raise ValueError(f"runs: {p} holds no saved run (history.npz)")
        else:
            raise ValueError(f"runs: no such file or folder: {p}")
        found += [h for h in hits if h not in found]
    if not found:
        raise ValueError("runs: give at least one run folder or history file")
    return found


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` to write, renamed over ``path`` once written: an
    interruption leaves the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _key(config: dict[str, Any]) -> str:
    return json.dumps(
        {k: v for k, v in config.items() if k not in _NOT_EXPERIMENT}, sort_keys=True, default=str
    )


def group_runs(histories: Sequence[History], sources: Sequence[str] | None = None):
    """Group histories by configuration (all but the seed); label each group by its rule, with
    the settings that tell groups of one rule apart. Returns a list of ``RunGroup``."""
    sources = list(sources) if sources is not None else [""] * len(histories)
    groups: dict[str, RunGroup] = {}
    for h, src in zip(histories, sources, strict=True):
        if not isinstance(h, History):
            raise TypeError(f"histories must hold fairagg.History; got {type(h).__name__}")
        if h.num_test_samples is None or not h._rows["test_accuracy"]:
            raise ValueError(f"runs: {src or 'a history'} holds no evaluation")
        key = _key(h.config)
        g = groups.setdefault(key, RunGroup("", {k: v for k, v in h.config.items()
                                                  if k not in _NOT_EXPERIMENT}))  # fmt: skip
        g.histories.append(h)
        g.sources.append(src)
    out = list(groups.values())
    for g in out:
        order = np.argsort([str(s) for s in g.seeds], kind="stable")
        g.histories = [g.histories[i] for i in order]
        g.sources = [g.sources[i] for i in order]
    by_rule: dict[str, list[RunGroup]] = {}
    for g in out:
        by_rule.setdefault(str(g.config.get("rule", "?")), []).append(g)
    for rule, gs in by_rule.items():
        if len(gs) == 1:
            gs[0].label = rule
            continue
        keys = sorted({k for g in gs for k in g.config})
        differ = [
            k for k in keys if len({json.dumps(g.config.get(k), default=str) for g in gs}) > 1
        ]
        for g in gs:
            parts = [f"{k}={_short(g.config.get(k))}" for k in differ]
            g.label = f"{rule} ({', '.join(parts)})"
    return out


def _short(v: Any) -> str:
    if isinstance(v, dict):
        return ",".join(f"{k}={_short(x)}" for k, x in v.items() if x is not None)
    return str(v)


def _curves(h: History) -> dict[str, np.ndarray]:
    """Average (weighted), worst-10 % and variance of the client accuracies per evaluation."""
    rows = [fairness_summary(a, h.num_test_samples) for a in h.test_accuracy]
    keys = ("average", "worst_10", "variance")
    out = {k: np.array([r[k] for r in rows], dtype=float) for k in keys}
    out["train_loss"] = h.mean_train_loss()
    return out


def _stats(values: list[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return float(np.mean(vals)), float(np.std(vals))


def _rows(groups: list[RunGroup]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        summaries = [h.summary() for h in g.histories]
        states = [run_state(h) for h in g.histories]
        row: dict[str, Any] = {
            "group": g.label,
            "runs": len(g.histories),
            "status": "stopped" if g.stopped else "completed",
            "runs_stopped": g.stopped,
            "rounds_asked": g.config.get("rounds"),
            "rounds_completed": min(s["rounds_completed"] for s in states),
            "evaluated_round": min(s["evaluated_round"] for s in states),
        }
        for key in summaries[0]:
            mean, std = _stats([s[key] for s in summaries])
            row[f"{key}_mean"], row[f"{key}_std"] = mean, std
        rows.append(row)
    return rows


def _result_cell(column: _Column, values: Sequence[float | None]) -> str:
    """The cell of ``column`` for a group of runs, from each run's value (None where it has
    none): the value of a single run, else the mean ± the population standard deviation over
    the runs that have one; ``"n/a"`` where none has."""
    vals = [column.scale * v for v in values if v is not None]
    if not vals:
        return "n/a"
    if len(values) == 1:
        return f"{vals[0]:{column.spec}}"
    return f"{np.mean(vals):{column.spec}} ± {np.std(vals):{column.spec}}"


def _rounds_cell(g: RunGroup) -> str:
    """``"100 of 100"``, or the range of rounds the group's runs completed."""
    done = sorted({h.num_rounds for h in g.histories})
    asked = g.config.get("rounds", "?")
    return f"{done[0]} of {asked}" if len(done) == 1 else f"{done[0]}–{done[-1]} of {asked}"


def _status_cell(g: RunGroup) -> str:
    n = len(g.histories)
    if not g.stopped:
        return "completed"
    return "stopped" if n == 1 else f"{g.stopped} of {n} stopped"


def _table_cells(groups: list[RunGroup]) -> list[list[str]]:
    cells = []
    for g in groups:
        summaries = [h.summary() for h in g.histories]
        line = [g.label, str(len(g.histories)), _rounds_cell(g), _status_cell(g)]
        line += [_result_cell(c, [s[c.key] for s in summaries]) for c in _REPORT_COLUMNS]
        cells.append(line)
    return cells


def _plot_curves(groups: list[RunGroup], path: Path) -> None:
    from .plots import _pyplot

    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    axes = axes.ravel()
    titles = {
        "average": ("Average accuracy (weighted by test samples)", "test accuracy (%)"),
        "worst_10": ("Worst 10% of clients", "test accuracy (%)"),
        "variance": ("Variance of client accuracies", "variance (%²)"),
        "train_loss": ("Training loss (weighted by train samples)", "loss"),
    }
    for g in groups:
        curves = [_curves(h) for h in g.histories]
        # runs that stopped early have fewer evaluations: each round is the mean over the runs
        # that reached it
        x = np.unique(np.concatenate([h.eval_round for h in g.histories]))
        at = [np.searchsorted(x, h.eval_round) for h in g.histories]
        n = len(curves)
        parts = [f"{n} seeds"] if n > 1 else []
        parts += [("stopped" if n == 1 else f"{g.stopped} stopped")] if g.stopped else []
        label = f"{g.label} ({', '.join(parts)})" if parts else g.label
        for ax, key in zip(axes, titles, strict=True):
            ys = np.full((n, x.size), np.nan)
            for row, idx, c in zip(ys, at, curves, strict=True):
                row[idx] = c[key]
            reached = np.isfinite(ys)
            mean = np.where(reached, ys, 0.0).sum(axis=0) / reached.sum(axis=0)
            (line,) = ax.plot(x, mean, lw=1.3, label=label)
            if n > 1:
                dev = np.where(reached, ys - mean, 0.0)
                std = np.sqrt((dev**2).sum(axis=0) / reached.sum(axis=0))
                ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    for ax, (title, ylabel) in zip(axes, titles.values(), strict=True):
        ax.set(xlabel="round", ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    with _replacing(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def _plot_distribution(groups: list[RunGroup], path: Path) -> None:
    from .plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    bins = np.linspace(0, 100, 21)
    for g in groups:
        acc = np.concatenate([100.0 * h.test_accuracy[-1] for h in g.histories])
        n = len(g.histories)
        label = f"{g.label} (mean {acc.mean():.1f}%, {n} seed{'s' * (n > 1)}"
        label += f", {g.stopped} stopped)" if g.stopped else ")"
        ax.hist(acc, bins=bins, histtype="step", lw=1.6, density=True, label=label)
    final = "final" if not any(g.stopped for g in groups) else "last evaluated"
    ax.set(xlabel=f"{final} test accuracy of a client (%)", ylabel="share of clients per %",
           title="Distribution of client accuracies (every client of every seed)")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with _replacing(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def _intro(groups: list[RunGroup]) -> tuple[str, str]:
    """What the tables hold: ``(sentence, warning)``, the warning empty where every run
    completed its rounds."""
    stopped = sum(g.stopped for g in groups)
    if not stopped:
        return (
            "Final test accuracies over the clients (after each run's last round); mean ± "
            "standard deviation over seeds.",
            "",
        )
    n = sum(len(g.histories) for g in groups)
    return (
        "Test accuracies over the clients at each run's last evaluation; mean ± standard "
        "deviation over seeds.",
        f"Not final: {stopped} of {n} runs stopped before their last round; their accuracies "
        "are those of the round they reached (Runs, below).",
    )


def _run_lines(g: RunGroup) -> list[str]:
    """One line per run of the group: its seed, what it did and where it is."""
    return [
        f"seed {seed}: {describe_run(h)}" + (f": {src}" if src else "")
        for seed, h, src in zip(g.seeds, g.histories, g.sources, strict=True)
    ]


def _markdown_table(header: list[str], cells: list[list[str]]) -> str:
    lines = [
        "| " + " | ".join(h.replace("|", "\\|") for h in header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    return "\n".join(lines)


def _html(groups: list[RunGroup], header: list[str], cells: list[list[str]], out: Path) -> str:
    def img(name: str) -> str:
        data = base64.b64encode((out / name).read_bytes()).decode("ascii")
        return f'<img alt="{name}" src="data:image/png;base64,{data}" style="max-width:100%">'

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells
    )
    configs = "".join(
        f"<h3>{html.escape(g.label)}</h3><p>seeds {html.escape(', '.join(map(str, g.seeds)))}"
        "</p><ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in _run_lines(g)) + "</ul>"
        f"<pre>{html.escape(json.dumps(g.config, indent=2, default=str))}</pre>"
        for g in groups
    )
    intro, warning = _intro(groups)
    warning = f"<p><strong>{html.escape(warning)}</strong></p>" if warning else ""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>fairagg report</title>"
        "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;"
        "text-align:right}td:first-child{text-align:left}</style></head><body>"
        f"<h1>fairagg report</h1><p>{html.escape(intro)}</p>{warning}"
        f"<table><tr>{head}</tr>{body}</table>"
        f"<h2>Curves</h2>{img('curves.png')}"
        f"<h2>Client accuracies</h2>{img('accuracy_distribution.png')}"
        f"<h2>Configurations</h2>{configs}</body></html>\n"
    )


def write_report(runs: Iterable[str | os.PathLike], out: str | os.PathLike) -> list[Path]:
    """Write the report of the saved runs ``runs`` (folders or history files, see
    ``find_runs``) into the folder ``out`` (created; the report's own files in it are
    replaced, each written to a temporary file renamed over the old). Returns the paths written
    (``REPORT_FILES``).

    A run whose history's ``status`` is not ``"completed"`` is reported with the rounds it
    completed of the rounds asked and why it stopped, and the tables then do not call its
    accuracies final."""
    paths = find_runs(runs)
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a folder path; got {type(out).__name__}")
    out = Path(out)
    for parent in [out, *out.parents]:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"out: {parent} is a file, not a folder")
    histories = []
    for p in paths:
        try:
            histories.append(History.load(p))
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"runs: {p} is not a saved fairagg history ({exc})") from None
    groups = group_runs(histories, [str(p) for p in paths])
    out.mkdir(parents=True, exist_ok=True)
    rows = _rows(groups)
    with _replacing(out / "report.csv") as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    _plot_curves(groups, out / "curves.png")
    _plot_distribution(groups, out / "accuracy_distribution.png")
    header = ["group", "runs", "rounds", "status", *[c.header for c in _REPORT_COLUMNS]]
    cells = _table_cells(groups)
    intro, warning = _intro(groups)
    md = [
        "# fairagg report",
        "",
        intro,
        "",
        *([f"**{warning}**", ""] if warning else []),
        _markdown_table(header, cells),
        "",
        "![curves](curves.png)",
        "",
        "![client accuracies](accuracy_distribution.png)",
        "",
        "## Runs",
        "",
        *[
            line
            for g in groups
            for line in (
                f"- {g.label} (seeds {', '.join(map(str, g.seeds))})",
                *[f"  - {run}" for run in _run_lines(g)],
            )
        ],
        "",
    ]
    with _replacing(out / "report.md") as tmp:
        tmp.write_text("\n".join(md), encoding="utf-8")
    with _replacing(out / "report.html") as tmp:
        tmp.write_text(_html(groups, header, cells, out), encoding="utf-8")
    return [out / f for f in REPORT_FILES]
