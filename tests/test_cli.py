"""The command line: outputs, tables, and one-line errors with exit status 2."""

from __future__ import annotations

import csv
import importlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fairagg import RULES, History
from fairagg.cli import main
from fairagg.metrics import fairness_summary

SMALL = [
    "--clients",
    "6",
    "--rounds",
    "3",
    "--epochs",
    "1",
    "--model",
    "logistic",
    "--quiet",
    "--data",
    "synthetic:0.5,0.5",
]
#: SMALL without --quiet, for the tests that read what a run prints.
LOUD = [a for a in SMALL if a != "--quiet"]


def test_rules_lists_the_registry(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    for name, spec in RULES.items():
        assert name in out and spec.equations in out
    assert max(len(line) for line in out.splitlines()) <= 100


@pytest.mark.parametrize("rule", list(RULES))
def test_rules_describes_every_hyper_parameter_of_a_rule(rule, capsys):
    import inspect

    assert main(["rules", rule]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    for name, p in inspect.signature(RULES[rule].factory).parameters.items():
        default = "required" if p.default is inspect.Parameter.empty else repr(p.default)
        line = next(x for x in out.splitlines() if x.startswith(f"  {name} = "))
        assert line.startswith(f"  {name} = {default}"), line
        # its meaning follows, from the factory's docstring
        below = out.splitlines()[out.splitlines().index(line) + 1]
        assert below.startswith("      ") and below.strip(), (name, below)


def test_rules_names_the_variants(capsys):
    assert main(["rules", "fedfv"]) == 0
    out = capsys.readouterr().out
    assert "variant = 'paper'" in out and '{"paper", "flgo"}' in out
    assert "alpha = 0.1" in out and "α ∈ [0, 1]" in out


def test_run_writes_every_output(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(["run", "--rule", "fairavg", "--clients-per-round", "3", "--out", str(out), *LOUD])
        == 0
    )
    for name in (
        "config.json",
        "rounds.csv",
        "checkpoint.npz",
        "clients.csv",
        "summary.json",
        "history.npz",
        "curves.png",
        "accuracy_distribution.png",
        "acf.png",
    ):
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "summary.json").read_text())
    with open(out / "clients.csv") as fh:
        clients = list(csv.DictReader(fh))
    assert len(clients) == 6
    acc = [float(r["test_accuracy_pct"]) / 100 for r in clients]
    n = [int(r["n_test"]) for r in clients]
    assert summary["average"] == pytest.approx(fairness_summary(acc, n)["average"], abs=1e-4)
    with open(out / "rounds.csv") as fh:
        assert len(list(csv.reader(fh))) == 1 + 3
    assert json.loads((out / "config.json").read_text())["rule"] == "fairavg"
    assert "worst_10" in capsys.readouterr().out


def test_compare_runs_every_rule_seed_and_kprime(tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = [
        "compare",
        "--rules",
        "fedavg,fairavg",
        "--seeds",
        "0,1",
        "--clients-per-round",
        "2,3",
        "--out",
        str(out),
        *LOUD,
    ]
    assert main(argv) == 0
    with open(out / "summary.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 2 * 2
    assert {(r["rule"], r["clients_per_round"], r["seed"]) for r in rows} == {
        (r, k, s) for r in ("fedavg", "fairavg") for k in ("2", "3") for s in ("0", "1")
    }
    table = (out / "table.txt").read_text()
    assert "±" in table and "Worst 10%" in table
    assert (out / "curves.png").exists() and (out / "runs").is_dir()
    assert "fairavg" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "--rule", "nope"], "invalid choice"),
        (["run", "--rounds", "x"], "invalid int"),
        (["compare", "--rules", "fedavg,nope"], "unknown rule"),
        (["compare", "--seeds", "a"], "comma-separated integers"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_arguments_one_line_exit_2(argv, needle, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fairagg: error:") and needle in err


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--lr", "0"], "--lr"),
        (["--clients-per-round", "7"], "--clients-per-round"),
        (["--momentum", "1"], "--momentum"),
        (["--data", "mnist"], "bad data spec"),
        (["--rule-arg", "nope=1"], "nope"),
    ],
)
def test_bad_values_one_line_exit_2(extra, needle, tmp_path, capsys):
    argv = ["run", "--out", str(tmp_path / "x"), "--clients-per-round", "3", *SMALL, *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("fairagg: error:") and needle in err[-1]


def test_run_fedfa_takes_its_client_momentum_from_the_rule(tmp_path, capsys):
    out = tmp_path / "fedfa"
    argv = ["run", "--rule", "fedfa", "--clients-per-round", "3", "--out", str(out), *SMALL]
    assert main([*argv, "--rule-arg", "alpha=1", "--rule-arg", "client_momentum=0.5"]) == 0
    assert json.loads((out / "config.json").read_text())["momentum"] is None  # as given
    config = History.load(out / "history.npz").config  # as run
    assert config["momentum"] == 0.5 and config["rule_hyperparams"]["alpha"] == 1.0
    capsys.readouterr()
    # A --momentum that contradicts the rule's own is one clear line, exit status 2.
    assert main([*argv, "--momentum", "0.2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("fairagg: error:") and "contradicts rule 'fedfa'" in err[-1]


# ------------------------------------------------- safe folders, resume, saved configurations
SMALL3 = [*SMALL, "--clients-per-round", "3"]


def _same_run(a, b) -> None:
    """Bitwise equal parameters and metrics (timings differ), and the same rounds.csv rows
    but for its timing columns."""
    ha, hb = History.load(a / "history.npz"), History.load(b / "history.npz")
    for k in ("round", "selected", "weights", "eval_round", "test_accuracy", "train_loss"):
        assert np.array_equal(getattr(ha, k), getattr(hb, k)), k
    assert np.array_equal(ha.final_params, hb.final_params)

    def rows(p):
        with open(p / "rounds.csv") as fh:
            return [r[:7] for r in csv.reader(fh)]

    assert rows(a) == rows(b)


def _rows_with_times(folder):
    with open(folder / "rounds.csv") as fh:
        return list(csv.reader(fh))


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_run_killed_with_sigkill_resumes_bitwise(tmp_path, capsys):
    # slow enough rounds (the MLP, 10 epochs) that the run is killed with rounds to go
    argv = ["--clients", "8", "--clients-per-round", "3", "--epochs", "10", "--quiet",
            "--data", "synthetic:0.5,0.5", "--rule", "qfedavg"]  # fmt: skip
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fairagg", "run", *argv, "--rounds", "400", "--out", str(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if (killed / "rounds.csv").exists():
                with open(killed / "rounds.csv") as fh:
                    if sum(1 for _ in fh) > 6:
                        break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL  # killed, not finished
    from fairagg.simulation import load_checkpoint

    saved = load_checkpoint(killed / "checkpoint.npz")["round"]
    assert 0 <= saved < 400
    before = _rows_with_times(killed)[: saved + 1]
    assert main(["run", "--resume", str(killed), "--rounds", "12", "--quiet"]) == 0 or saved > 12
    if saved > 12:  # a checkpoint past 12 rounds: resume to more rounds than it holds instead
        assert main(["run", "--resume", str(killed), "--rounds", str(saved + 3)]) == 0
    rounds = History.load(killed / "history.npz").num_rounds
    whole = tmp_path / "whole"
    assert main(["run", *argv, "--rounds", str(rounds), "--out", str(whole)]) == 0
    _same_run(killed, whole)
    # continued, not recomputed: the rounds up to the checkpoint keep their own timings
    assert _rows_with_times(killed)[: saved + 1] == before
    assert json.loads((killed / "config.json").read_text())["rounds"] == rounds
    capsys.readouterr()


def test_quiet_prints_nothing_on_success(tmp_path, capsys):
    # without --quiet, qfedavg prints a note on an experiment default, afl one on taking every
    # client every round, both the data, the summary table and the files written
    for rule, argv in (("qfedavg", SMALL3), ("afl", SMALL)):
        assert main(["run", *argv, "--rule", rule, "--out", str(tmp_path / rule)]) == 0
        assert capsys.readouterr() == ("", ""), rule
    assert main(["run", "--resume", str(tmp_path / "qfedavg"), "--rounds", "4", "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")


def test_compare_quiet_prints_nothing_on_success(tmp_path, capsys):
    # --quiet makes run's promise: without it, compare says qfedavg's experiment default, the
    # data, where a resumed comparison stands, the results table and the files written
    out = tmp_path / "cmp"
    argv = ["compare", "--rules", "fedavg,qfedavg", *SMALL3, "--out", str(out)]
    assert main(argv) == 0
    assert capsys.readouterr() == ("", "")
    assert main(["compare", "--resume", str(out), "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")
    assert main(argv) == 2  # a failure is still said
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.startswith("fairagg: error: --out: "), printed


def _rules_built(monkeypatch) -> list[str]:
    """The name of every rule built from now on: ``make_rule`` counted wherever fairagg's
    modules hold it (it is the only caller of a rule's factory)."""
    import fairagg.rules

    real, built = fairagg.rules.make_rule, []

    def counted(name, **hyperparams):
        built.append(name)
        return real(name, **hyperparams)

    for module in list(sys.modules.values()):
        if module is not None and module.__name__.startswith("fairagg"):
            if getattr(module, "make_rule", None) is real:
                monkeypatch.setattr(module, "make_rule", counted)
    return built


def test_a_run_builds_its_rule_once(tmp_path, monkeypatch):
    # the settings build the rule to check its hyper-parameters; the run trains with that one
    built = _rules_built(monkeypatch)
    assert main(["run", *SMALL3, "--rule", "term", "--out", str(tmp_path / "run")]) == 0
    assert built == ["term"]
    built.clear()
    assert main(["run", "--resume", str(tmp_path / "run"), "--rounds", "4", "--quiet"]) == 0
    assert built == ["term"]  # the checkpoint is checked against that rule too
    built.clear()
    # compare checks one set of settings per rule and K' and one per further seed; its four
    # runs build none
    argv = ["compare", "--rules", "fedavg,term", "--seeds", "0,1", *SMALL3]
    assert main([*argv, "--out", str(tmp_path / "cmp")]) == 0
    assert sorted(built) == ["fedavg", "fedavg", "term"]
    built.clear()
    # a resumed comparison checks config.json's settings once, as it reads them
    assert main(["compare", "--resume", str(tmp_path / "cmp"), "--quiet"]) == 0
    assert sorted(built) == ["fedavg", "fedavg", "term"]


def test_a_resumed_run_says_its_time_is_that_of_its_new_rounds(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", *SMALL3, "--out", str(run)]) == 0  # 3 rounds
    assert main(["run", "--resume", str(run), "--rounds", "5"]) == 0
    out = capsys.readouterr().out
    assert "fedavg after 5 rounds (2 new in " in out and " s, from round 3)" in out, out


def test_a_run_interrupted_and_resumed_to_more_rounds_is_bitwise(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", *SMALL3, "--out", str(a)]) == 0  # 3 rounds
    before = _rows_with_times(a)
    assert main(["run", "--resume", str(a), "--rounds", "5", "--quiet"]) == 0
    assert _rows_with_times(a)[:4] == before  # continued: the first rounds are not rerun
    assert main(["run", *SMALL3, "--rounds", "5", "--out", str(b)]) == 0
    _same_run(a, b)
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--rule-arg", "foo=1"], "rule 'fedavg' has no hyper-parameter 'foo'"),
        ([], "already holds a run (config.json"),
        (["--rounds", "0"], "--rounds"),
        (["--clients-per-round", "99"], "--clients-per-round"),
        (["--lr", "0.1", "--resume", "{run}"], "only --rounds and --quiet may go with it"),
        (["--resume", "{run}/config.json"], "--resume: no such file: {run}/config.json/config"),
        (["--resume", "{run}", "--rounds", "2"], "--rounds 2 is fewer than the 3 rounds"),
        (["--config", "{run}/nothing.json"], "--config: no such file"),
        (["--config", "{run}/rounds.csv"], "is not a fairagg config.json"),
        (["--out", "{run}/config.json"], "is a file, not a folder"),
        (["--out", "{run}/config.json/deeper"], "which is a file, not a folder"),
    ],
)
def test_bad_arguments_are_one_line_and_change_nothing(tmp_path, capsys, argv, needle):
    run = tmp_path / "run"
    assert main(["run", *SMALL3, "--out", str(run)]) == 0
    before = _snapshot(run)
    capsys.readouterr()
    argv = [a.replace("{run}", str(run)) for a in argv]
    if "--resume" in argv:  # the run's own settings, from its config.json
        rc = main(["run", *argv])
    else:
        out = [] if "--out" in argv else ["--out", str(run)]
        rc = main(["run", *SMALL3, *out, *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("fairagg: error: "), err
    assert needle.replace("{run}", str(run)) in err, err
    assert _snapshot(run) == before  # nothing written, nothing removed


def test_overwrite_removes_the_old_run_first(tmp_path, capsys, monkeypatch):
    simulate_module = importlib.import_module("fairagg.simulation")
    run = tmp_path / "run"
    assert main(["run", *SMALL3, "--out", str(run)]) == 0
    (run / "notes.txt").write_text("mine")
    # the new run fails after round 1: nothing of the old run may remain beside it
    real = simulate_module.simulate

    def failing(*args, callback, **kw):
        def stop(h):
            callback(h)
            raise FloatingPointError("diverged (planted)")

        return real(*args, callback=stop, **kw)

    monkeypatch.setattr(simulate_module, "simulate", failing)
    rc = main(["run", *SMALL3, "--out", str(run), "--overwrite", "--lr", "0.02"])
    assert rc == 1
    left = {p.name for p in run.iterdir()}
    assert "clients.csv" not in left, left
    summary = json.loads((run / "summary.json").read_text())  # the new run's: where it stopped
    assert summary["status"].startswith("stopped: FloatingPointError: diverged (planted)")
    assert (summary["rounds_asked"], summary["rounds_completed"]) == (3, 1)
    assert (run / "notes.txt").read_text() == "mine"  # not a file of a run: kept
    assert json.loads((run / "config.json").read_text())["lr"] == 0.02
    with open(run / "rounds.csv") as fh:
        assert [r[0] for r in csv.reader(fh)] == ["round", "1"]  # the new run's round only
    capsys.readouterr()


def test_config_reruns_a_saved_run_bitwise_and_flags_override_it(tmp_path, capsys):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert main(["run", *SMALL3, "--rule", "term", "--rule-arg", "tilt=0.5", "--out", str(a)]) == 0
    assert main(["run", "--config", str(a / "config.json"), "--out", str(b)]) == 0
    _same_run(a, b)
    assert main(["run", "--config", str(a / "config.json"), "--out", str(c), "--seed", "4"]) == 0
    config = json.loads((c / "config.json").read_text())
    assert config["seed"] == 4 and config["rule"] == "term" and config["rule_arg"] == {"tilt": 0.5}
    capsys.readouterr()


def test_the_default_folder_is_per_rule_and_seed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", *SMALL3, "--rule", "fedavg"]) == 0
    assert main(["run", *SMALL3, "--rule", "fairavg", "--seed", "2"]) == 0
    assert (tmp_path / "runs" / "fedavg-s0" / "config.json").exists()
    assert (tmp_path / "runs" / "fairavg-s2" / "config.json").exists()
    capsys.readouterr()


def test_a_full_participation_rule_runs_with_every_client_by_itself(tmp_path, capsys):
    assert main(["run", *LOUD, "--rule", "afl", "--out", str(tmp_path / "afl")]) == 0
    assert "afl takes every client in every round: --clients-per-round 6" in capsys.readouterr().err
    assert History.load(tmp_path / "afl" / "history.npz").selected.shape == (3, 6)
    # given explicitly, a smaller K' is still refused
    rc = main(["run", *SMALL, "--rule", "afl", "--clients-per-round", "3",
               "--out", str(tmp_path / "afl3")])  # fmt: skip
    assert rc == 2 and "needs every client every round" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--rules", "fedavg,term,fedavg", "--rules lists fedavg more than once"),
        ("--seeds", "0,1,0", "--seeds lists 0 more than once"),
        ("--clients-per-round", "2,2", "--clients-per-round lists 2 more than once"),
    ],
)
def test_compare_refuses_duplicates(tmp_path, capsys, flag, value, message):
    rc = main(
        ["compare", *SMALL, "--clients-per-round", "3", flag, value, "--out", str(tmp_path / "c")]
    )
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "c").exists()


def test_outputs_say_their_units(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", *LOUD, "--clients-per-round", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "average      " in text and "% (weighted by test samples)" in text
    assert "% (unweighted)" in text and "%² (unweighted)" in text
    with open(out / "rounds.csv") as fh:
        header = next(csv.reader(fh))
    assert header[:7] == ["round", "average_pct", "client_mean_pct", "worst_10_pct",
                          "best_10_pct", "variance_pct2", "train_loss_weighted"]  # fmt: skip
    with open(out / "clients.csv") as fh:
        rows = list(csv.DictReader(fh))
    h = History.load(out / "history.npz")
    assert float(rows[0]["test_accuracy_pct"]) == pytest.approx(
        100 * h.test_accuracy[-1][0], abs=1e-4
    )


def test_a_collapsed_run_is_said_to_be_one():
    from fairagg.cli._run import _collapse

    h = History({}, [10, 10, 10, 10, 10, 10, 10, 10, 10, 10], [5] * 10)
    acc = np.linspace(0.0, 0.9, 10)
    h.record_eval(0, acc, np.ones(10), acc, np.full(10, 2.0), 0.0)
    h.record_eval(1, acc, np.ones(10), acc, np.full(10, 3.0), 0.0)
    assert _collapse(h) == [
        "the worst 10 % of clients end at 0 % accuracy",
        "the training loss rose from 2 to 3",
    ]
    h.record_eval(2, acc + 0.05, np.ones(10), acc, np.full(10, 1.0), 0.0)
    assert _collapse(h) == []


def test_experiment_defaults_are_said_recorded_and_yield_to_the_users(tmp_path, capsys):
    out = tmp_path / "q"
    assert main(["run", *LOUD, "--clients-per-round", "3", "--rule", "qfedavg",
                 "--out", str(out)]) == 0  # fmt: skip
    assert "qfedavg: lipschitz = 1.0 in this experiment" in capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["rule_arg"] == {"qfedavg.lipschitz": 1.0}
    assert History.load(out / "history.npz").config["rule_hyperparams"]["lipschitz"] == 1.0
    out2 = tmp_path / "q2"
    assert main(["run", *SMALL, "--clients-per-round", "3", "--rule", "qfedavg",
                 "--rule-arg", "lipschitz=5", "--out", str(out2)]) == 0  # fmt: skip
    assert "lipschitz = 1.0" not in capsys.readouterr().err
    assert History.load(out2 / "history.npz").config["rule_hyperparams"]["lipschitz"] == 5.0


def test_compare_refuses_a_folder_holding_a_comparison_and_overwrite_replaces_it(tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["compare", *SMALL, "--clients-per-round", "3", "--out", str(out)]
    assert main([*argv, "--seeds", "0,1"]) == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.rglob("*")}
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds a comparison" in err
    assert {p.name: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    (out / "mine.txt").write_text("kept")
    assert main([*argv, "--overwrite"]) == 0  # seed 0 only: seed 1's files must be gone
    names = {p.name for p in (out / "runs").iterdir()}
    assert not any("-s1-" in n for n in names), names
    assert (out / "mine.txt").read_text() == "kept"
    capsys.readouterr()


@pytest.mark.parametrize("command", [["vectors"], ["compare", *SMALL, "--clients-per-round", "3"]])
def test_out_on_a_file_is_one_line(tmp_path, capsys, command):
    (tmp_path / "f").write_text("x")
    for out, what in ((tmp_path / "f", "is a file"), (tmp_path / "f" / "x", "which is a file")):
        assert main([*command, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and what in err, err
