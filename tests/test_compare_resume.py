"""fairagg compare --resume: an interrupted comparison continued to the very outputs of one that
never stopped (the timings aside)."""

from __future__ import annotations

import csv
import importlib
import json

import numpy as np
import pytest

from fairagg import History
from fairagg.cli import main

SMALL = ["--clients", "6", "--rounds", "3", "--epochs", "1", "--model", "logistic", "--quiet",
         "--data", "synthetic:0.5,0.5", "--clients-per-round", "3"]  # fmt: skip
#: qfedavg gets an experiment default (--rule-arg qfedavg.lipschitz=1.0) saved in config.json
COMPARE = ["compare", *SMALL, "--rules", "fedavg,term,qfedavg", "--seeds", "0,1",
           "--rule-arg", "term.tilt=2"]  # fmt: skip
#: Wall-clock columns and fields: the only things a resumed run may change.
TIMING_COLUMNS = ("time_local_s", "time_aggregate_s")
TIMING_FIELDS = ("time_local", "time_aggregate", "time_eval")


def _count_rounds(monkeypatch, interrupt_at: int | None = None) -> list[int]:
    """Count the rounds simulated from now on (each samples its clients once, first), and
    press Ctrl-C at the start of round number ``interrupt_at`` (1-based) of that count."""
    sim = importlib.import_module("fairagg.simulation")
    sample, calls = sim.sample_clients, []

    def counting(*args, **kwargs):
        calls.append(1)
        if len(calls) == interrupt_at:
            raise KeyboardInterrupt
        return sample(*args, **kwargs)

    monkeypatch.setattr(sim, "sample_clients", counting)
    return calls


def _rounds_csv(path):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]


def _assert_same_history(a: History, b: History, name: str) -> None:
    assert a.status == b.status == "completed", name
    assert a.config == b.config, name
    for key in ("round", "selected", "weights", "reported_losses", "eval_round",
                "test_accuracy", "test_loss", "train_accuracy", "train_loss", "final_params",
                "num_train_samples", "num_test_samples"):  # fmt: skip
        x, y = getattr(a, key), getattr(b, key)
        assert x.dtype == y.dtype and x.shape == y.shape, (name, key)
        assert np.array_equal(x, y), (name, key)  # bitwise: no tolerance
    for key in TIMING_FIELDS:
        assert getattr(a, key).shape == getattr(b, key).shape, (name, key)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp") / "whole"
    assert main([*COMPARE, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("killed", [False, True], ids=["ctrl-c", "killed"])
def test_an_interrupted_comparison_resumes_to_the_outputs_of_one_never_stopped(
    uninterrupted, tmp_path, capsys, monkeypatch, killed
):
    out = tmp_path / "cut"
    with monkeypatch.context() as m:
        # fedavg seed 0 completes its 3 rounds; term seed 0 completes round 1 (rounds 4) and is
        # interrupted in round 2 (round 5 of the comparison); the rest never begins
        _count_rounds(m, interrupt_at=5)
        assert main([*COMPARE, "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert f"fairagg compare --resume {out} continues the comparison" in err, err
    runs = out / "runs"
    assert History.load(runs / "fedavg-k3-s0-history.npz").status == "completed"
    assert History.load(runs / "term-k3-s0-history.npz").status.startswith("stopped:")
    assert not (runs / "qfedavg-k3-s0-history.npz").exists()
    assert not (out / "summary.csv").exists()
    if killed:  # kill -9 leaves no history of the run it stopped, only its checkpoint and rows
        (runs / "term-k3-s0-history.npz").unlink()
    finished = [runs / f"fedavg-k3-s0-{f}" for f in ("history.npz", "rounds.csv")]
    kept = [(p.read_bytes(), p.stat().st_mtime_ns) for p in finished]
    config = (out / "config.json").read_bytes()

    with monkeypatch.context() as m:
        calls = _count_rounds(m)
        assert main(["compare", "--resume", str(out)]) == 0  # it says where it stands
    # completed runs are kept, not rerun (0 rounds); term seed 0 goes on from its checkpoint
    # (rounds 2 and 3); the 4 runs never begun run their 3 rounds each
    assert len(calls) == 2 + 4 * 3
    err = capsys.readouterr().err
    assert "1 of 6 runs completed, 1 to continue, 4 to begin" in err, err
    assert [(p.read_bytes(), p.stat().st_mtime_ns) for p in finished] == kept  # untouched
    assert (out / "config.json").read_bytes() == config

    whole = uninterrupted
    for name in ("summary.csv", "table.txt", "report.csv"):
        assert (out / name).read_bytes() == (whole / name).read_bytes(), name
    assert json.loads(config) == {**json.loads((whole / "config.json").read_text()),
                                  "out": str(out)}  # fmt: skip
    files = sorted(p.name for p in (whole / "runs").iterdir())
    assert sorted(p.name for p in runs.iterdir()) == files
    for name in files:
        if name.endswith("-history.npz"):
            _assert_same_history(History.load(runs / name), History.load(whole / "runs" / name),
                                 name)  # fmt: skip
        elif name.endswith("-rounds.csv"):
            assert _rounds_csv(runs / name) == _rounds_csv(whole / "runs" / name), name


def test_resuming_a_finished_comparison_runs_nothing(uninterrupted, tmp_path, capsys, monkeypatch):
    import shutil

    out = tmp_path / "again"
    shutil.copytree(uninterrupted, out)
    summary = (out / "summary.csv").read_bytes()
    with monkeypatch.context() as m:
        calls = _count_rounds(m)
        assert main(["compare", "--resume", str(out)]) == 0
    assert calls == []
    assert (out / "summary.csv").read_bytes() == summary
    assert "6 of 6 runs completed, 0 to continue, 0 to begin" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--lr", "0.1"], "only --quiet may differ, got --lr 0.1 (config.json: 0.01)"),
        (["--seeds", "0,2"], "--seeds 0,2 (config.json: 0,1)"),
        (["--rule-arg", "term.tilt=3"], "--rule-arg term.tilt=3 (config.json: term.tilt=2"),
        (["--out", "{tmp}/elsewhere"], "--out {tmp}/elsewhere (config.json: {out})"),
        (["--overwrite"], "--overwrite and --resume: give one"),
    ],
)
def test_resume_refuses_settings_that_differ_from_the_saved_ones(
    uninterrupted, tmp_path, capsys, extra, message
):
    out = uninterrupted
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    assert main(["compare", "--resume", str(out), *extra]) == 2
    err = capsys.readouterr().err
    message = message.replace("{tmp}", str(tmp_path)).replace("{out}", str(out))
    assert err.count("\n") == 1 and err.startswith("fairagg: error: ") and message in err, err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    assert not (tmp_path / "elsewhere").exists()


def test_resume_accepts_the_saved_settings_given_again(uninterrupted, tmp_path, capsys):
    import shutil

    out = tmp_path / "same"
    shutil.copytree(uninterrupted, out)
    argv = ["--rules", "fedavg,term,qfedavg", "--seeds", "0,1", "--lr", "0.01", "--rounds", "3",
            "--rule-arg", "term.tilt=2", "--out", str(out)]  # fmt: skip
    assert main(["compare", "--resume", str(out), *argv]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "holds no comparison (no config.json)"),
        ("{", "is not a comparison's config.json"),
        ('{"rule": "fedavg"}', "is not a comparison's config.json (no rules)"),
        ('{"rules": ["fedavg"], "rounds": "two"}', "argument --rounds: invalid int value"),
        ('{"rules": ["nope"]}', "argument --rules: unknown rule"),
        ('{"rules": ["fedavg"], "rounds": 0}', "--rounds must be at least 1"),
        ('{"rules": ["fedavg"], "colour": 1}', "unrecognized arguments: --colour=1"),
    ],
)
def test_resume_refuses_a_folder_without_a_valid_comparison(tmp_path, capsys, config, message):
    out = tmp_path / "c"
    out.mkdir()
    if config is not None:
        (out / "config.json").write_text(config)
    assert main(["compare", "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fairagg: error: --resume: ") and (
        message in err), err  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == ([] if config is None else ["config.json"])
