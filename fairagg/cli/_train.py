"""One training run streamed into its folder, shared by ``fairagg run`` and ``fairagg compare``:
the experiment (data and model), rounds.csv written as the run goes, the checkpoint, the history,
and the text table both commands print.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..metrics import fairness_summary
from ..types import Rule

#: The checkpoint of a run folder (``{label}checkpoint.npz`` in a comparison's runs/): data only,
#: see [`fairagg.simulation.load_checkpoint`][fairagg.simulation.load_checkpoint].
CHECKPOINT_FILE = "checkpoint.npz"
#: The pickle checkpoint of older versions: refused, never loaded; removed by --overwrite.
LEGACY_CHECKPOINT_FILE = "checkpoint.pkl"


def _make_experiment(args: argparse.Namespace):
    from ..data import load
    from ..models import make_model

    data = load(
        args.data, num_clients=args.clients, seed=args.data_seed, test_fraction=args.test_fraction
    )
    kw: dict[str, Any] = {"l2": args.l2}
    if args.model == "mlp":
        kw.update(n_hidden=args.hidden, activation=args.activation)
    model = make_model(args.model, data.n_features, data.n_classes, **kw)
    return data, model


#: rounds.csv: accuracies in percent (the average weighted by the clients' test samples, the
#: client mean unweighted), the variance in %², the training loss weighted by train samples.
_ROUNDS_HEADER = [
    "round",
    "average_pct",
    "client_mean_pct",
    "worst_10_pct",
    "best_10_pct",
    "variance_pct2",
    "train_loss_weighted",
    "time_local_s",
    "time_aggregate_s",
]


def _rounds_row(t: int, test_accuracy, train_loss, time_local, time_aggregate, h) -> list[Any]:
    """The rounds.csv row of round ``t`` (``test_accuracy`` and ``train_loss`` are None where
    the round was not evaluated)."""
    row: list[Any] = [int(t)]
    if test_accuracy is not None:
        s = fairness_summary(test_accuracy, h.num_test_samples)
        row += [
            f"{s[k]:.4f}" for k in ("average", "client_mean", "worst_10", "best_10", "variance")
        ]
        n = h.num_train_samples
        row.append(f"{train_loss @ n / n.sum():.6f}")
    else:
        row += [""] * 6
    return [*row, f"{float(time_local):.5f}", f"{float(time_aggregate):.6f}"]


def _latest_rounds_row(h) -> list[Any]:
    """The rounds.csv row of the round ``h`` recorded last."""
    t = int(h.latest("round"))
    evaluated = int(h.latest("eval_round")) == t
    return _rounds_row(
        t,
        h.latest("test_accuracy") if evaluated else None,
        h.latest("train_loss") if evaluated else None,
        h.latest("time_local"),
        h.latest("time_aggregate"),
        h,
    )


def _write_rounds_csv(path: Path, h) -> None:
    """Write rounds.csv with one row per round the history ``h`` holds, and nothing else: to a
    temporary file renamed over ``path`` (an interruption leaves the old file or the new)."""
    import io

    from .._checkpoint import write_atomically

    evals = {int(t): j for j, t in enumerate(h.eval_round.tolist())}
    acc, loss = h.test_accuracy, h.train_loss
    text = io.StringIO(newline="")
    w = csv.writer(text)
    w.writerow(_ROUNDS_HEADER)
    for t, tl, ta in zip(h.round, h.time_local, h.time_aggregate, strict=True):
        j = evals.get(int(t))
        ev_acc, ev_loss = (acc[j], loss[j]) if j is not None else (None, None)
        w.writerow(_rounds_row(t, ev_acc, ev_loss, tl, ta, h))
    write_atomically(path, lambda fh: fh.write(text.getvalue().encode("utf-8")))


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until the block ends, then raise it: the files that record a run
    (history.npz, rounds.csv, summary.json) are written whole once their writing has begun. Only
    where Python's own handler is installed, in the main thread; elsewhere the block runs as is."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    caught: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if caught:
            raise KeyboardInterrupt


def _run_one(
    args,
    data,
    model,
    rule: Rule,
    k_per_round: int,
    seed: int,
    out: Path,
    label: str,
    *,
    resume: bool = False,
):
    """One simulation of ``rule`` (as the settings built it when they were checked: a run never
    builds its rule again) that streams its per-round CSV to ``out``, keeps a checkpoint there
    and saves its history; ``resume`` continues it from the checkpoint.

    rounds.csv always holds the rounds the run recorded, once each: a resumed run rebuilds it
    from the checkpoint's history (not from the old rows, which may hold a round the checkpoint
    does not, or miss one it does), appends a row after each round, and rewrites it from the
    history (the rounds completed) when the run ends, however it ends."""
    from ..simulation import History, load_checkpoint, simulate

    history = History()
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / f"{label}rounds.csv"
    ckpt = out / f"{label}{CHECKPOINT_FILE}"
    saved = load_checkpoint(ckpt)["history"] if resume and ckpt.exists() else History()
    _write_rounds_csv(csv_path, saved)
    fh = open(csv_path, "a", newline="")
    try:
        writer = csv.writer(fh)

        def on_round(h: History) -> None:
            writer.writerow(_latest_rounds_row(h))
            fh.flush()

        simulate(
            rule,
            model,
            data,
            rounds=args.rounds,
            clients_per_round=k_per_round,
            epochs=args.epochs,
            batch_size=args.batch,
            lr=args.lr,
            momentum=args.momentum,
            prox_mu=args.prox_mu,
            sampling=args.sampling,
            seed=seed,
            eval_every=args.eval_every,
            history=history,
            callback=on_round,
            progress=not args.quiet and sys.stderr.isatty(),
            checkpoint=ckpt,
            resume=resume,
        )
    finally:
        fh.close()
        if history.num_test_samples is not None:  # simulate began (or resumed) the run
            try:
                with _sigint_deferred():  # a Ctrl-C now is raised once both files are written
                    history.config.update(data=args.data, data_seed=args.data_seed)
                    try:
                        history.save(out / f"{label}history.npz")
                    finally:
                        _write_rounds_csv(csv_path, history)
            except KeyboardInterrupt as exc:  # it carries the run, as simulate's own do
                exc.history = history  # type: ignore[attr-defined]
                raise
    return history


def _check_out_path(out: Path) -> None:
    """--out must be a folder or a path where one can be made: no file on the way, and the
    nearest folder that exists writable (a folder the file system refuses to make is said when
    it is made: ``main`` names --out in that error)."""
    for parent in [out, *out.parents]:
        if parent.exists() and not parent.is_dir():
            what = "is" if parent == out else f"is inside {parent}, which is"
            raise ValueError(f"--out: {out} {what} a file, not a folder")
        if parent.is_dir():
            if not os.access(parent, os.W_OK | os.X_OK):
                where = "" if parent == out else f": {parent} is not writable"
                raise ValueError(f"--out: cannot write to {out}{where}")
            break


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "n/a" if v is None else format(v, spec)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        cells = zip(r, widths, strict=True)
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(cells))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def _quiet(*args: Any, **kwargs: Any) -> None:
    """``print`` under --quiet: nothing."""
