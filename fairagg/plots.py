"""PNG plots of simulation histories (matplotlib, Agg backend: no display needed).

Each function takes one or more labelled [`History`][fairagg.simulation.History] objects and writes
one PNG; overlaying several histories is how ``fairagg compare`` shows rules side by side.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ._checks import check_int
from .metrics import acf
from .simulation import History

__all__ = ["plot_acf", "plot_accuracy_distribution", "plot_curves"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _check_plot_args(histories: Any, path: Any) -> None:
    """``histories`` a non-empty mapping of str labels to histories with at least one
    evaluation, ``path`` a str or path-like (a TypeError or ValueError naming the argument)."""
    if not isinstance(histories, Mapping):
        raise TypeError(
            f"histories must be a mapping of labels to fairagg.History; got "
            f"{type(histories).__name__}"
        )
    if not histories:
        raise ValueError("histories must hold at least one history; got none")
    for label, h in histories.items():
        if not isinstance(label, str):
            raise TypeError(f"histories' labels must be str; got {type(label).__name__}")
        if not isinstance(h, History):
            raise TypeError(
                f"histories[{label!r}] must be a fairagg.History; got {type(h).__name__}"
            )
        if h.num_test_samples is None or not h._rows["test_accuracy"]:
            raise ValueError(f"histories[{label!r}] holds no evaluation to plot")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a path; got {type(path).__name__}")


def plot_curves(histories: Mapping[str, History], path: str | Path) -> Path:
    """Mean test accuracy (sample-weighted, %) and mean training loss against the round."""
    _check_plot_args(histories, path)
    plt = _pyplot()
    fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(11, 4))
    for label, h in histories.items():
        ax_acc.plot(h.eval_round, h.mean_test_accuracy(), label=label, lw=1.2)
        ax_loss.plot(h.eval_round, h.mean_train_loss(), label=label, lw=1.2)
    ax_acc.set(xlabel="round", ylabel="test accuracy (%)", title="Accuracy of the global model")
    ax_loss.set(xlabel="round", ylabel="training loss", title="Training loss (mean over samples)")
    for ax in (ax_acc, ax_loss):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return Path(path)


def plot_accuracy_distribution(histories: Mapping[str, History], path: str | Path) -> Path:
    """Histogram of the final per-client test accuracies (%), one outline per history."""
    _check_plot_args(histories, path)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    bins = np.linspace(0, 100, 21)
    for label, h in histories.items():
        acc = 100.0 * h.test_accuracy[-1]
        ax.hist(acc, bins=bins, histtype="step", lw=1.6, label=f"{label} (mean {acc.mean():.1f}%)")
    ax.set(
        xlabel="final test accuracy of a client (%)",
        ylabel="number of clients",
        title="Distribution of client accuracies",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return Path(path)


def plot_acf(histories: Mapping[str, History], path: str | Path, max_lag: int = 40) -> Path:
    """Correlogram (FairAvg, eqs. 6-7) of each history's per-round mean test accuracy.

    A history whose series is constant (ACF undefined), or too short for one lag (a single
    evaluation after the initial model, as in a run of one round), is listed in the legend as such
    and not drawn.
    """
    _check_plot_args(histories, path)
    max_lag = check_int(max_lag, "max_lag", low=1)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, h in histories.items():
        series = h.mean_test_accuracy()[1:]  # the rounds, not the initial model
        lags = min(max_lag, series.size - 1)
        if lags < 1:
            n = series.size
            ax.plot([], [], label=f"{label} ({n} evaluation{'s' * (n != 1)} after round 0: too "
                    "few for an ACF)")  # fmt: skip
            continue
        try:
            r = acf(series, lags)
        except ValueError:
            ax.plot([], [], label=f"{label} (constant series: ACF undefined)")
            continue
        ax.plot(np.arange(lags + 1), r, marker="o", ms=2.5, lw=1.0, label=label)
    ax.axhline(0.0, color="black", lw=0.6)
    ax.set(xlabel="lag (rounds)", ylabel="ACF", title="Correlogram of the accuracy series")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return Path(path)
