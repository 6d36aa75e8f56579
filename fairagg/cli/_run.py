"""``fairagg run``: one rule trained into its folder, from flags, a saved config.json or the
checkpoint of a run to continue (``--resume``), then its summary, report and plots.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..report import REPORT_FILES
from ..rules import RULES
from ..types import Rule
from ._config import _apply_config, _check_args, _experiment_rule_args, _read_config
from ._train import (
    CHECKPOINT_FILE,
    LEGACY_CHECKPOINT_FILE,
    _check_out_path,
    _fmt,
    _make_experiment,
    _quiet,
    _run_one,
    _sigint_deferred,
    _table,
)

#: The files ``fairagg run`` writes into its folder (and removes first with --overwrite).
RUN_FILES = (
    "config.json",
    "rounds.csv",
    "clients.csv",
    "summary.json",
    "history.npz",
    CHECKPOINT_FILE,
    LEGACY_CHECKPOINT_FILE,
    "acf.png",
    *REPORT_FILES,  # the run's own report, curves.png and accuracy_distribution.png among them
)
#: The unit of each key of [`fairagg.metrics.fairness_summary`][fairagg.metrics.fairness_summary],
#: as printed.
SUMMARY_UNITS = {
    "average": "% (weighted by test samples)",
    "client_mean": "% (unweighted)",
    "worst_10": "%",
    "best_10": "%",
    "worst_20": "%",
    "best_20": "%",
    "min": "%",
    "max": "%",
    "variance": "%² (unweighted)",
    "std": "% (unweighted)",
    "angle": "degrees",
    "kl": "nats",
    "entropy": "nats",
    "gini": "fraction in [0, 1)",
}


def _resumed_rounds(folder: Path) -> int:
    """The rounds the run in ``folder`` (``--resume``) holds: its checkpoint's, or 0 for a run
    stopped before its first checkpoint, which recorded no round."""
    from ..simulation import History, load_checkpoint

    ckpt = folder / CHECKPOINT_FILE
    if ckpt.is_file():
        try:
            return int(load_checkpoint(ckpt)["round"])
        except ValueError as exc:
            raise ValueError(f"--resume: {exc}") from None
    if (folder / LEGACY_CHECKPOINT_FILE).exists():
        raise ValueError(
            f"--resume: {folder} holds {LEGACY_CHECKPOINT_FILE}, an older fairagg's checkpoint: a "
            "pickle, which fairagg never loads (unpickling runs whatever code the file names); "
            f"run it again with --config {folder / 'config.json'} --out {folder} --overwrite"
        )
    recorded = 0
    if (folder / "history.npz").is_file():
        try:
            recorded = History.load(folder / "history.npz").num_rounds
        except ValueError as exc:
            raise ValueError(f"--resume: {exc}") from None
    if (folder / "rounds.csv").is_file():
        with open(folder / "rounds.csv", newline="") as fh:
            recorded = max(recorded, sum(1 for _ in fh) - 1)
    if recorded:
        raise ValueError(
            f"--resume: {folder} has no {CHECKPOINT_FILE} to continue from (its files hold "
            f"{recorded} rounds)"
        )
    return 0  # stopped before its first checkpoint: it starts again from round 1


def _check_resumable(args: argparse.Namespace, data: Any, model: Any, rule: Rule) -> None:
    """Refuse, before anything is written, a checkpoint of ``--resume`` that the run as
    configured (``rule`` as its settings built it) cannot continue (its settings or parameters
    not this run's), with the error [`fairagg.simulate`][fairagg.simulation.simulate] would
    raise on resuming."""
    from ..simulation import _check_resume, load_checkpoint

    ckpt = args.resume / CHECKPOINT_FILE
    if not ckpt.is_file():  # stopped before its first checkpoint: it begins again
        return
    try:
        saved = load_checkpoint(ckpt)
        _check_resume(
            saved, rule, model, data, rounds=args.rounds,
            clients_per_round=args.clients_per_round, epochs=args.epochs, batch_size=args.batch,
            lr=args.lr, momentum=args.momentum, prox_mu=args.prox_mu, sampling=args.sampling,
            seed=args.seed, eval_every=args.eval_every,
        )  # fmt: skip
    except ValueError as exc:
        text = str(exc).removeprefix("resume: ")
        raise ValueError(f"--resume: {ckpt} cannot be continued: {text}") from None


def _check_out(out: Path, *, overwrite: bool, resume: bool) -> None:
    """Refuse an output folder that cannot hold this run, before anything is written."""
    _check_out_path(out)
    if resume:
        return
    held = [f for f in RUN_FILES if (out / f).exists()]
    if held and not overwrite:
        raise ValueError(
            f"--out: {out} already holds a run ({', '.join(held[:3])}); pass --overwrite to "
            f"replace it, or --resume {out} to continue it"
        )


def _write_summary(out: Path, h) -> None:
    """``summary.json``: what the run did (its status, the rounds asked and completed, the round
    of its last evaluation; ``fairagg.report.run_state``), then the
    [`fairagg.metrics.fairness_summary`][fairagg.metrics.fairness_summary] of that evaluation (none
    without one)."""
    from .._checkpoint import write_atomically
    from ..report import run_state

    record = {**run_state(h), **(h.summary() if h._rows["test_accuracy"] else {})}
    text = json.dumps(record, indent=2) + "\n"
    write_atomically(out / "summary.json", lambda fh: fh.write(text.encode("utf-8")))


def _write_stopped_summary(out: Path, exc: BaseException) -> None:
    """``summary.json`` of a run that stopped on ``exc`` (Ctrl-C, divergence), from the history
    it carries; the exception itself is left to propagate."""
    h = getattr(exc, "history", None)
    if h is None or h.num_test_samples is None:  # stopped before the run began
        return
    try:
        _write_summary(out, h)
    except Exception as err:  # noqa: BLE001 - keep the run's own error
        if hasattr(exc, "add_note"):
            exc.add_note(f"fairagg: summary.json could not be written: {err}")


def _write_client_csv(path: Path, data, h) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "client",
                "n_train",
                "n_test",
                "test_accuracy_pct",
                "test_loss",
                "train_accuracy_pct",
                "train_loss",
            ]
        )
        for k in range(data.num_clients):
            w.writerow(
                [
                    k,
                    int(h.num_train_samples[k]),
                    int(h.num_test_samples[k]),
                    f"{100.0 * h.test_accuracy[-1][k]:.4f}",
                    f"{h.test_loss[-1][k]:.6f}",
                    f"{100.0 * h.train_accuracy[-1][k]:.4f}",
                    f"{h.train_loss[-1][k]:.6f}",
                ]
            )


def _collapse(h) -> list[str]:
    """Signs that a run collapsed: its worst clients at 0 %, or its training loss risen."""
    out = []
    s = h.summary()
    if s["worst_10"] is not None and s["worst_10"] <= 0.0:
        out.append("the worst 10 % of clients end at 0 % accuracy")
    loss = h.mean_train_loss()
    if loss.size > 1 and not loss[-1] <= loss[0]:
        out.append(f"the training loss rose from {loss[0]:.4g} to {loss[-1]:.4g}")
    return out


def _read_saved(
    args: argparse.Namespace, explicit: set[str]
) -> tuple[dict[str, str], dict[str, Any], int]:
    """Set ``args`` from the config file ``--resume DIR`` or ``--config FILE`` gives, where one
    does. Returns the label of each setting the file gave (for its errors), the file's entries
    and the rounds the run to continue holds (0 without ``--resume``)."""
    if args.resume is not None:
        others = sorted(explicit - {"resume", "rounds", "quiet"})
        if others:
            flags = ", ".join("--" + k.replace("_", "-") for k in others)
            raise ValueError(
                f"--resume continues the run as its config.json says; only --rounds and "
                f"--quiet may go with it (got {flags})"
            )
        saved = _read_config(args.resume / "config.json", "--resume")
        origins = _apply_config(args, saved, explicit, "--resume")
        if "backend" not in saved:  # written before --backend: those runs ran on numpy
            args.backend = "numpy"
        done = _resumed_rounds(args.resume)
        if args.rounds < done:  # before config.json is rewritten with --rounds
            raise ValueError(
                f"--rounds {args.rounds} is fewer than the {done} rounds {args.resume} holds"
            )
        args.out = args.resume
        return origins, saved, done
    if args.config is not None:
        saved = _read_config(args.config, "--config")
        return _apply_config(args, saved, explicit, "--config"), saved, 0
    return {}, {}, 0


def _run_notes(args: argparse.Namespace, saved: dict[str, Any], explicit: set[str]) -> list[str]:
    """What the run says before it begins (once every check has passed: an error is then the
    only line): a config file's ``out`` not used, every client taken by a rule that needs them
    (``args.clients_per_round`` set), the hyper-parameters the command line sets."""
    notes: list[str] = []
    if args.config is not None and "out" in saved and Path(saved["out"]) != args.out:
        notes.append(
            f"--config: its out ({saved['out']}) is not used; this run goes to --out {args.out}"
        )
    if (
        RULES[args.rule].full_participation
        and "clients_per_round" not in explicit
        and args.clients_per_round != args.clients
    ):
        notes.append(
            f"{args.rule} takes every client in every round: --clients-per-round {args.clients}"
        )
        args.clients_per_round = args.clients
    if args.resume is None:  # a resumed run's config.json holds them already
        _experiment_rule_args(args, [args.rule], say=lambda text, **_: notes.append(text))
    return notes


def _write_config(args: argparse.Namespace, out: Path) -> None:
    """Empty the folder of an old run (``--overwrite``) and write the run's config.json."""
    if args.overwrite:
        for f in RUN_FILES:
            (out / f).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
        if k not in ("overwrite", "resume", "config", "command")
    }
    config["rule"] = args.rule
    config["rule_arg"] = dict(args.rule_arg)
    tmp = out / ".config.json.tmp"
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    tmp.replace(out / "config.json")


def _train(args: argparse.Namespace, data: Any, model: Any, rule: Rule, out: Path) -> Any:
    """The run's history, trained (or continued) into ``out``; a run that stops leaves a
    summary.json that says where it stopped."""
    try:
        return _run_one(
            args, data, model, rule, args.clients_per_round, args.seed, out, "",
            resume=args.resume is not None,
        )  # fmt: skip
    except BaseException as exc:  # summary.json says where the run stopped, never a stale end
        with _sigint_deferred():
            _write_stopped_summary(out, exc)
        raise


def _write_outputs(args: argparse.Namespace, data: Any, h: Any, out: Path) -> int:
    """summary.json, clients.csv, the run's report and acf.png; 130 where a Ctrl-C stopped
    them (the run itself is complete), else 0."""
    from ..plots import plot_acf
    from ..report import write_report

    with _sigint_deferred():
        _write_summary(out, h)
    try:
        _write_client_csv(out / "clients.csv", data, h)
        write_report([out / "history.npz"], out)  # curves.png, accuracy_distribution.png, ...
        plot_acf({args.rule: h}, out / "acf.png")
    except KeyboardInterrupt:
        print(
            f"fairagg: interrupted after the run completed; {out} holds all of it but its "
            f"report: `fairagg report {out} --out {out}/report` writes one",
            file=sys.stderr,
        )
        return 130
    return 0


def _say_summary(say: Any, args: argparse.Namespace, data: Any, h: Any, took: str) -> None:
    """Print the run's final metrics (with their units), its warnings and the files written."""
    rows = [[k, _fmt(v, ".4f"), SUMMARY_UNITS.get(k, "")] for k, v in h.summary().items()]
    say(
        f"\n{args.rule} after {h.num_rounds} rounds ({took}), over "
        f"{data.num_clients} clients' test splits:"
    )
    say(_table(rows, ["metric", "value", "unit"]))
    for line in _collapse(h):
        say(f"warning: {line}")
    say(
        f"\nwrote {args.out}/: config.json rounds.csv {CHECKPOINT_FILE} clients.csv summary.json "
        "history.npz report.html report.md report.csv curves.png accuracy_distribution.png acf.png"
    )


def _cmd_run(args: argparse.Namespace, explicit: set[str] | None = None) -> int:
    """``fairagg run``: check every setting and the folder, then train, then write and say the
    results; nothing is written before every check has passed."""
    explicit = set() if explicit is None else explicit
    origins, saved, done = _read_saved(args, explicit)
    resume = args.resume is not None
    if args.out is None:
        args.out = Path("runs") / f"{args.rule}-s{args.seed}"
    say = _quiet if args.quiet else print  # --quiet: nothing on success
    notes = _run_notes(args, saved, explicit)
    out: Path = args.out
    # every setting, the rule's hyper-parameters among them; the rule is built here, once
    rule = _check_args(args, origins)[0].built_rule
    _check_out(out, overwrite=args.overwrite, resume=resume)
    data, model = _make_experiment(args)
    if resume:  # the checkpoint against this run, before config.json or any file is rewritten
        _check_resumable(args, data, model, rule)
    for text in notes:
        say(text, file=sys.stderr)
    _write_config(args, out)
    say(
        f"{data.name}: {data.num_clients} clients, {int(data.num_train_samples.sum())} train / "
        f"{int(data.num_test_samples.sum())} test samples; model {model!r}",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    h = _train(args, data, model, rule, out)
    elapsed = time.perf_counter() - t0
    status = _write_outputs(args, data, h, out)
    if status:
        return status
    # a resumed run's time is that of its new rounds only: said so, beside the rounds in all
    new = h.num_rounds - done
    took = f"{new} new in {elapsed:.1f} s, from round {done}" if resume else f"{elapsed:.1f} s"
    _say_summary(say, args, data, h, took)
    return 0
