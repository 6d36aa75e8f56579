"""``fairagg compare``: several rules on identical data, client samples and seeds, for each K'
and seed, into one folder (each run's files in its runs/), then the results table and the
report of every run; ``--resume`` continues an interrupted comparison.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from .._settings import ExperimentSettings
from ..report import _RESULTS, REPORT_FILES, _result_cell
from ..types import Rule
from ._config import _check_args, _experiment_rule_args, _json_object
from ._parser import _build_parser, _subparser
from ._train import (
    CHECKPOINT_FILE,
    LEGACY_CHECKPOINT_FILE,
    _check_out_path,
    _make_experiment,
    _quiet,
    _run_one,
    _table,
)

#: What ``fairagg compare`` writes into its folder, besides its runs/ folder.
COMPARE_FILES = ("config.json", "summary.csv", "table.txt", "acf.png", *REPORT_FILES)
#: The suffixes of the files of one run in compare's runs/ folder.
_COMPARE_RUN_SUFFIXES = (
    "-rounds.csv",
    "-history.npz",
    f"-{CHECKPOINT_FILE}",
    f"-{LEGACY_CHECKPOINT_FILE}",
)


def _check_compare_out(out: Path, *, overwrite: bool) -> None:
    _check_out_path(out)
    held = [f for f in COMPARE_FILES if (out / f).exists()]
    if (out / "runs").is_dir() and any((out / "runs").iterdir()):
        held.append("runs/")
    if held and not overwrite:
        raise ValueError(
            f"--out: {out} already holds a comparison ({', '.join(held[:3])}); pass "
            "--overwrite to replace it"
        )


def _remove_compare(out: Path) -> None:
    """Remove a comparison's own files (and nothing else) before it is replaced."""
    for f in COMPARE_FILES:
        (out / f).unlink(missing_ok=True)
    runs = out / "runs"
    if runs.is_dir():
        for path in runs.iterdir():
            if path.is_file() and path.name.endswith(_COMPARE_RUN_SUFFIXES):
                path.unlink()


#: Entries of a comparison's config.json that are not settings of the comparison.
_NOT_COMPARE_SETTINGS = ("command", "out", "overwrite", "resume", "quiet")


def _stored_compare_args(folder: Path) -> tuple[argparse.Namespace, list[ExperimentSettings]]:
    """The settings of the comparison in ``folder``, read from its config.json and checked as
    the command line checks them (each entry is given to the ``compare`` parser as its flag),
    and the validated settings of its runs."""
    path = folder / "config.json"
    if not path.is_file():
        raise ValueError(f"--resume: {folder} holds no comparison (no config.json)")
    config = _json_object(path, "--resume", "a comparison's config.json")
    if not isinstance(config.get("rules"), list):
        raise ValueError(f"--resume: {path} is not a comparison's config.json (no rules)")
    argv = []
    for key, value in config.items():
        if key in _NOT_COMPARE_SETTINGS or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if key == "rule_arg" and isinstance(value, dict):
            argv += [f"{flag}={k}={v}" for k, v in value.items()]
        elif isinstance(value, list):
            argv.append(f"{flag}={','.join(map(str, value))}")
        else:
            argv.append(f"{flag}={value}")
    cmp_: Any = _subparser(_build_parser(), "compare")  # its error() is replaced below

    def refuse(message: str) -> NoReturn:
        raise ValueError(f"--resume: {path} does not hold valid settings: {message}")

    cmp_.error = refuse
    if "backend" not in config:  # written before --backend: those comparisons ran on numpy
        argv.append("--backend=numpy")
    stored = cmp_.parse_args(argv)
    try:
        return stored, _check_args(stored)
    except ValueError as exc:
        refuse(str(exc))


def _resume_compare_args(args: argparse.Namespace, explicit: set[str]) -> list[ExperimentSettings]:
    """Set ``args`` to the settings of the comparison ``args.resume`` continues; a flag given
    beside ``--resume`` must say what its config.json says. Returns the validated settings of its
    runs (checked once, as config.json was read)."""
    folder: Path = args.resume
    if "overwrite" in explicit:
        raise ValueError("--overwrite and --resume: give one (--overwrite removes the runs)")
    stored, checked = _stored_compare_args(folder)
    differ = []
    for key in sorted(explicit - {"resume", "quiet", "overwrite"}):
        flag = "--" + key.replace("_", "-")
        mine, theirs = getattr(args, key), getattr(stored, key, None)
        if key == "out":
            theirs = folder
            same = mine.resolve() == folder.resolve()
        elif key == "rule_arg":
            saved = dict(theirs or ())
            same = all(k in saved and saved[k] == v for k, v in mine)
            mine = " ".join(f"{k}={v}" for k, v in mine)
            theirs = " ".join(f"{k}={v}" for k, v in saved.items())
        else:
            same = mine == theirs
        if not same:
            show = [",".join(map(str, v)) if isinstance(v, list) else v for v in (mine, theirs)]
            differ.append(f"{flag} {show[0]} (config.json: {show[1]})")
    if differ:
        raise ValueError(
            f"--resume continues the comparison as {folder / 'config.json'} says; only --quiet "
            f"may differ, got {'; '.join(differ)}"
        )
    for key, value in vars(stored).items():
        if key not in _NOT_COMPARE_SETTINGS:
            setattr(args, key, value)
    args.out = folder
    return checked


def _continue_one(args, data, model, rule: Rule, k_per_round: int, seed: int, out: Path,
                  label: str):  # fmt: skip
    """A run of a resumed comparison: the saved history of a run that completed its rounds,
    else the run continued from its checkpoint, or begun where it has none."""
    from ..simulation import History

    try:
        h = History.load(out / f"{label}history.npz")
    except (OSError, ValueError):  # none, or one cut short by a kill: the checkpoint decides
        h = None
    want = {"rule": rule.name, "clients_per_round": k_per_round, "seed": seed,
            "rounds": args.rounds}  # fmt: skip
    if (
        h is not None
        and h.status == "completed"
        and h.num_rounds == args.rounds
        and all(h.config.get(k) == v for k, v in want.items())
    ):
        return h
    resume = (out / f"{label}{CHECKPOINT_FILE}").is_file()
    return _run_one(args, data, model, rule, k_per_round, seed, out, label, resume=resume)


def _compare_progress(args: argparse.Namespace, runs: Path) -> str:
    """How far the comparison in ``runs`` got: runs completed, to continue, not begun."""
    from ..simulation import History

    done = begun = 0
    for kpr in args.clients_per_round:
        for seed in args.seeds:
            for rule_name in args.rules:
                label = f"{rule_name}-k{kpr}-s{seed}-"
                try:
                    completed = History.load(runs / f"{label}history.npz").status == "completed"
                except (OSError, ValueError):
                    completed = False
                if completed:
                    done += 1
                elif (runs / f"{label}{CHECKPOINT_FILE}").is_file():
                    begun += 1
    n = len(args.clients_per_round) * len(args.seeds) * len(args.rules)
    return f"{done} of {n} runs completed, {begun} to continue, {n - done - begun} to begin"


def _start(
    args: argparse.Namespace, explicit: set[str] | None
) -> tuple[dict[str, Rule], list[str]]:
    """Check the comparison's settings and folder (``--resume``: read them from its
    config.json). Returns each rule as its settings built it (once: every run of the rule runs
    that one) and the notes to say before the runs (the hyper-parameters the command line
    sets)."""
    resume = getattr(args, "resume", None) is not None
    notes: list[str] = []
    if resume:  # every setting is config.json's, checked as it was read
        checked = _resume_compare_args(args, set() if explicit is None else explicit)
    else:  # (a resumed comparison's config.json has these notes' settings)
        _experiment_rule_args(args, args.rules, say=lambda text, **_: notes.append(text))
        checked = _check_args(args)
    rules: dict[str, Rule] = {}
    for settings in checked:
        rules.setdefault(settings.rule, settings.built_rule)
    if resume:
        _check_out_path(args.out)
    else:
        _check_compare_out(args.out, overwrite=args.overwrite)
    return rules, notes


def _write_config(args: argparse.Namespace, out: Path) -> None:
    """Empty the folder of an old comparison (``--overwrite``) and write its config.json (a
    resumed comparison keeps its own)."""
    if args.overwrite:
        _remove_compare(out)
    out.mkdir(parents=True, exist_ok=True)
    if getattr(args, "resume", None) is None:
        config = {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k != "resume"
        }
        config["rule_arg"] = dict(args.rule_arg)
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def _run_all(
    args: argparse.Namespace, data: Any, model: Any, rules: dict[str, Rule]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every run, for each K', seed and rule: each run's summary (with its rule, K' and seed),
    and the history of each rule's run at the first K' and seed."""
    out: Path = args.out
    records: list[dict[str, Any]] = []
    first: dict[str, Any] = {}
    run = _continue_one if getattr(args, "resume", None) is not None else _run_one
    try:
        for kpr in args.clients_per_round:
            for seed in args.seeds:
                for rule_name in args.rules:
                    label = f"{rule_name}-k{kpr}-s{seed}-"
                    h = run(args, data, model, rules[rule_name], kpr, seed, out / "runs", label)
                    records.append(
                        {"rule": rule_name, "clients_per_round": kpr, "seed": seed, **h.summary()}
                    )
                    if kpr == args.clients_per_round[0] and seed == args.seeds[0]:
                        first[rule_name] = h
    except KeyboardInterrupt:
        print(f"fairagg compare --resume {out} continues the comparison", file=sys.stderr)
        raise
    return records, first


def _results_table(args: argparse.Namespace, records: list[dict[str, Any]]) -> str:
    """The results table: per rule and K', each metric's value, or its mean ± std over the
    seeds (the columns of a report's tables, with the Gini coefficient)."""
    rows = []
    for kpr in args.clients_per_round:
        for rule_name in args.rules:
            sel = [r for r in records if r["rule"] == rule_name and r["clients_per_round"] == kpr]
            rows.append(
                [rule_name, str(kpr), *(_result_cell(c, [r[c.key] for r in sel]) for c in _RESULTS)]
            )
    return _table(rows, ["rule", "K'", *(c.name for c in _RESULTS)])


def _write_results(
    args: argparse.Namespace, data: Any, records: list[dict[str, Any]], first: dict[str, Any]
) -> tuple[str, str]:
    """summary.csv (every run), table.txt, the report of every run and acf.png; returns the
    table's caption and the table."""
    from ..plots import plot_acf
    from ..report import write_report

    out: Path = args.out
    keys = [k for k in records[0] if k not in ("rule", "clients_per_round", "seed")]
    with open(out / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["rule", "clients_per_round", "seed", *keys])
        w.writeheader()
        w.writerows(records)
    table = _results_table(args, records)
    n_seeds = len(args.seeds)
    caption = (
        f"Final test accuracy (%) over {data.num_clients} clients on {data.name}, "
        f"{args.rounds} rounds; mean ± std over {n_seeds} seed(s)"
        if n_seeds > 1
        else f"Final test accuracy (%) over {data.num_clients} clients on {data.name}, "
        f"{args.rounds} rounds, seed {args.seeds[0]}"
    )
    (out / "table.txt").write_text(caption + "\n" + table + "\n")
    # the curves and distributions over every seed, grouped by rule and K' (fairagg report)
    write_report(
        [
            out / "runs" / f"{rule}-k{kpr}-s{seed}-history.npz"
            for kpr in args.clients_per_round
            for seed in args.seeds
            for rule in args.rules
        ],
        out,
    )  # in the order given: groups appear as the rules do
    plot_acf(first, out / "acf.png")
    return caption, table


def _cmd_compare(args: argparse.Namespace, explicit: set[str] | None = None) -> int:
    """``fairagg compare``: check every setting and the folder, run every rule for each K' and
    seed, then write and say the results. ``--quiet`` prints nothing unless it fails."""
    say = _quiet if args.quiet else print  # --quiet: nothing on success
    rules, notes = _start(args, explicit)
    out: Path = args.out
    data, model = _make_experiment(args)
    for text in notes:
        say(text, file=sys.stderr)
    _write_config(args, out)
    say(f"{data.name}: {data.num_clients} clients; model {model!r}", file=sys.stderr)
    if getattr(args, "resume", None) is not None:
        say(f"--resume {out}: {_compare_progress(args, out / 'runs')}", file=sys.stderr)
    records, first = _run_all(args, data, model, rules)
    caption, table = _write_results(args, data, records, first)
    say("\n" + caption)
    say(table)
    say(
        f"\nwrote {out}/: config.json summary.csv table.txt report.html report.md report.csv "
        "curves.png accuracy_distribution.png acf.png runs/"
    )
    return 0
