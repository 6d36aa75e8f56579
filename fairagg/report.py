"""Reports from saved runs: tables, plots and a self-contained HTML page, without training.

:func:`write_report` reads the histories that ``fairagg run`` and ``fairagg compare`` save
(``history.npz``), groups the runs that share a configuration but not a seed, and writes

- ``report.csv``: one row per group, every metric of
  :func:`fairagg.metrics.fairness_summary` (final evaluation) as the mean and the population
  standard deviation over the group's seeds;
- ``curves.png``: the sample-weighted average, the worst-10 % and the variance of the client
  accuracies and the training loss against the round, the mean over seeds with a band of ± one
  standard deviation;
- ``accuracy_distribution.png``: the final per-client test accuracies of each group (every
  client of every seed);
- ``report.md`` (the tables) and ``report.html`` (the tables, the plots embedded and every
  configuration: one file to send).

Accuracies are in percent, the variance in %², as in :func:`fairagg.metrics.fairness_summary`.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .metrics import fairness_summary
from .simulate import History

__all__ = ["REPORT_FILES", "write_report"]

#: The files :func:`write_report` writes.
REPORT_FILES = (
    "report.csv",
    "report.md",
    "report.html",
    "curves.png",
    "accuracy_distribution.png",
)
#: The metrics of the report's tables (keys of ``fairness_summary``) with their headers.
_TABLE = (
    ("average", "Average (%)"),
    ("worst_10", "Worst 10% (%)"),
    ("best_10", "Best 10% (%)"),
    ("variance", "Variance (%²)"),
    ("angle", "Angle (°)"),
    ("kl", "KL(a||u)"),
)
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


def _key(config: dict[str, Any]) -> str:
    return json.dumps(
        {k: v for k, v in config.items() if k not in _NOT_EXPERIMENT}, sort_keys=True, default=str
    )


def group_runs(histories: Sequence[History], sources: Sequence[str] | None = None):
    """Group histories by configuration (all but the seed); label each group by its rule, with
    the settings that tell groups of one rule apart. Returns a list of :class:`RunGroup`."""
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
        row: dict[str, Any] = {"group": g.label, "runs": len(g.histories)}
        for key in summaries[0]:
            mean, std = _stats([s[key] for s in summaries])
            row[f"{key}_mean"], row[f"{key}_std"] = mean, std
        rows.append(row)
    return rows


def _fmt(mean: float | None, std: float | None, n: int, spec: str = ".2f") -> str:
    if mean is None:
        return "n/a"
    return f"{mean:{spec}}" if n == 1 else f"{mean:{spec}} ± {std:{spec}}"


def _table_cells(groups: list[RunGroup], rows: list[dict[str, Any]]) -> list[list[str]]:
    cells = []
    for g, r in zip(groups, rows, strict=True):
        line = [g.label, str(r["runs"])]
        for key, _ in _TABLE:
            line.append(_fmt(r[f"{key}_mean"], r[f"{key}_std"], r["runs"],
                             ".4f" if key == "kl" else ".2f"))  # fmt: skip
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
        x = g.histories[0].eval_round
        for ax, key in zip(axes, titles, strict=True):
            ys = np.array([c[key] for c in curves if c[key].shape == x.shape])
            mean = ys.mean(axis=0)
            (line,) = ax.plot(x, mean, lw=1.3, label=f"{g.label} ({len(ys)} seeds)"
                              if len(ys) > 1 else g.label)  # fmt: skip
            if len(ys) > 1:
                std = ys.std(axis=0)
                ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    for ax, (title, ylabel) in zip(axes, titles.values(), strict=True):
        ax.set(xlabel="round", ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _plot_distribution(groups: list[RunGroup], path: Path) -> None:
    from .plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    bins = np.linspace(0, 100, 21)
    for g in groups:
        acc = np.concatenate([100.0 * h.test_accuracy[-1] for h in g.histories])
        n = len(g.histories)
        ax.hist(acc, bins=bins, histtype="step", lw=1.6, density=True,
                label=f"{g.label} (mean {acc.mean():.1f}%, {n} seed{'s' * (n > 1)})")  # fmt: skip
    ax.set(xlabel="final test accuracy of a client (%)", ylabel="share of clients per %",
           title="Distribution of client accuracies (every client of every seed)")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


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
        f": {html.escape(', '.join(g.sources))}</p><pre>"
        f"{html.escape(json.dumps(g.config, indent=2, default=str))}</pre>"
        for g in groups
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>fairagg report</title>"
        "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;"
        "text-align:right}td:first-child{text-align:left}</style></head><body>"
        "<h1>fairagg report</h1>"
        "<p>Final test accuracies over the clients; mean ± standard deviation over seeds.</p>"
        f"<table><tr>{head}</tr>{body}</table>"
        f"<h2>Curves</h2>{img('curves.png')}"
        f"<h2>Client accuracies</h2>{img('accuracy_distribution.png')}"
        f"<h2>Configurations</h2>{configs}</body></html>\n"
    )


def write_report(runs: Iterable[str | os.PathLike], out: str | os.PathLike) -> list[Path]:
    """Write the report of the saved runs ``runs`` (folders or history files, see
    :func:`find_runs`) into the folder ``out`` (created; the report's own files in it are
    replaced). Returns the paths written (:data:`REPORT_FILES`)."""
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
    with open(out / "report.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    _plot_curves(groups, out / "curves.png")
    _plot_distribution(groups, out / "accuracy_distribution.png")
    header = ["group", "runs", *[h for _, h in _TABLE]]
    cells = _table_cells(groups, rows)
    md = [
        "# fairagg report",
        "",
        "Final test accuracies over the clients; mean ± standard deviation over seeds.",
        "",
        _markdown_table(header, cells),
        "",
        "![curves](curves.png)",
        "",
        "![client accuracies](accuracy_distribution.png)",
        "",
        "## Runs",
        "",
        *[
            f"- {g.label} (seeds {', '.join(map(str, g.seeds))}): {', '.join(g.sources)}"
            for g in groups
        ],
        "",
    ]
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")
    (out / "report.html").write_text(_html(groups, header, cells, out), encoding="utf-8")
    return [out / f for f in REPORT_FILES]
