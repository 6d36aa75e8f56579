"""The command line: outputs, tables, and one-line errors with exit status 2."""

from __future__ import annotations

import csv
import json

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


def test_rules_lists_the_registry(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    for name, spec in RULES.items():
        assert name in out and spec.equations in out


def test_run_writes_every_output(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(["run", "--rule", "fairavg", "--clients-per-round", "3", "--out", str(out), *SMALL])
        == 0
    )
    for name in (
        "config.json",
        "rounds.csv",
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
    acc = [float(r["test_accuracy"]) for r in clients]
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
        *SMALL,
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
