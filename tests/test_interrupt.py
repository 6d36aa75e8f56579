"""Ctrl-C at every point of a run (issue 37, item 1): a KeyboardInterrupt raised before and
after every call of every step of a round, one run per call, not at random times. Each run
leaves rounds.csv, history.npz and the checkpoint agreeing (rows 1..n once each), and
``fairagg run --resume`` then ends bitwise where a run that never stopped ends."""

from __future__ import annotations

import csv
import importlib
import json

import numpy as np
import pytest

from fairagg import History
from fairagg.cli import main

SIM = importlib.import_module("fairagg.simulation")
CLI = importlib.import_module("fairagg.cli._train")  # one run streamed into its folder

ROUNDS = 3
ARGV = ["--clients", "5", "--clients-per-round", "3", "--rounds", str(ROUNDS), "--epochs", "1",
        "--model", "logistic", "--data", "synthetic:0.5,0.5", "--eval-every", "2",
        "--quiet"]  # fmt: skip

#: Every step of a run, in the order a round takes them: (owner, attribute). The interrupt is
#: raised before a call starts or after it returns.
POINTS = [
    (CLI, "_write_rounds_csv"),  # rounds.csv rebuilt at the start, rewritten at the end
    (SIM._Run, "begin"),  # the initial model, evaluated as round 0
    (SIM._Run, "round"),
    (SIM._Run, "sample"),
    (SIM._Run, "train"),
    (SIM._Run, "report"),
    (SIM._Run, "aggregate"),
    (SIM._Run, "record"),
    (SIM.History, "record_round"),
    (SIM._EvaluationSets, "evaluate"),
    (SIM.History, "record_eval"),
    (CLI, "_latest_rounds_row"),  # the callback's rounds.csv row
    (SIM._Run, "checkpoint"),
    (SIM, "_write_checkpoint"),  # after every round here (see the fixture), and at the end
    (SIM.History, "save"),  # history.npz
]
_ARMED: dict[str, object] = {}  # {"point": name, "when": "before"|"after", "call": k}
_CALLS: dict[str, int] = {}


def _name(owner, attr: str) -> str:
    return f"{getattr(owner, '__name__', owner)}.{attr}"


def _wrap(name: str, real):
    def hooked(*args, **kwargs):
        _CALLS[name] = _CALLS.get(name, 0) + 1
        hit = _ARMED.get("point") == name and _ARMED.get("call") == _CALLS[name]
        if hit and _ARMED["when"] == "before":
            raise KeyboardInterrupt
        out = real(*args, **kwargs)
        if hit:
            raise KeyboardInterrupt
        return out

    return hooked


@pytest.fixture(scope="module")
def hooks():
    """Every point hooked; a checkpoint after every round (so that each periodic write is a
    point too, and the calls are the same in every run); no report or plots (not the run's
    record, and slow)."""
    with pytest.MonkeyPatch.context() as mp:
        for owner, attr in POINTS:
            mp.setattr(owner, attr, _wrap(_name(owner, attr), getattr(owner, attr)))
        mp.setattr(SIM, "CHECKPOINT_OVERHEAD", 1e12)
        mp.setattr(importlib.import_module("fairagg.report"), "write_report", lambda *a, **k: [])
        mp.setattr(importlib.import_module("fairagg.plots"), "plot_acf", lambda *a, **k: None)
        yield


def _run(argv) -> int:
    _CALLS.clear()
    return main(argv)


@pytest.fixture(scope="module")
def reference(hooks, tmp_path_factory):
    """A run that never stopped, and how often it calls each point."""
    out = tmp_path_factory.mktemp("whole") / "run"
    _ARMED.clear()
    assert _run(["run", *ARGV, "--out", str(out)]) == 0
    return out, dict(_CALLS)


def _csv_rows(folder) -> list[list[str]]:
    with open(folder / "rounds.csv", newline="") as fh:
        return list(csv.reader(fh))


def _history_as_csv(h: History, tmp) -> list[list[str]]:
    """rounds.csv as the history ``h`` says it must be (timings included)."""
    CLI._write_rounds_csv(tmp / "expected.csv", h)
    with open(tmp / "expected.csv", newline="") as fh:
        return list(csv.reader(fh))


def _check_consistent(folder) -> int:
    """rounds.csv holds rounds 1..n once each, and history.npz and the checkpoint (where they
    exist) hold the same n rounds, the CSV's rows being the history's own. Returns n."""
    rows = _csv_rows(folder) if (folder / "rounds.csv").exists() else [CLI._ROUNDS_HEADER]
    assert rows[0] == CLI._ROUNDS_HEADER
    n = len(rows) - 1
    assert [r[0] for r in rows[1:]] == [str(t) for t in range(1, n + 1)], rows
    if (folder / "history.npz").exists():
        h = History.load(folder / "history.npz")
        assert h.num_rounds == n
        assert _history_as_csv(h, folder.parent) == rows
    if (folder / "checkpoint.npz").exists():
        saved = SIM.load_checkpoint(folder / "checkpoint.npz")
        assert saved["round"] == n and saved["history"].num_rounds == n
    return n


def _same_run(a, b) -> None:
    """Bitwise the same history (all but its timings), result and rounds.csv (all but its
    timing columns)."""
    ha, hb = History.load(a / "history.npz"), History.load(b / "history.npz")
    for k in ("round", "selected", "weights", "reported_losses", "eval_round", "test_accuracy",
              "test_loss", "train_accuracy", "train_loss"):  # fmt: skip
        x, y = getattr(ha, k), getattr(hb, k)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), k
    assert np.array_equal(ha.final_params, hb.final_params)
    assert ha.status == hb.status == "completed"
    assert [r[:7] for r in _csv_rows(a)] == [r[:7] for r in _csv_rows(b)]
    sa, sb = (json.loads((f / "summary.json").read_text()) for f in (a, b))
    assert sa == sb


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("point", [_name(o, a) for o, a in POINTS])
def test_an_interrupt_at_any_call_loses_no_round_and_resumes_bitwise(
    reference, tmp_path, point, when
):
    whole, calls = reference
    assert calls.get(point, 0) >= 1, f"{point} is never called: not a point of a run"
    assert _check_consistent(whole) == ROUNDS
    for k in range(1, calls[point] + 1):
        run = tmp_path / f"call{k}"
        _ARMED.update(point=point, when=when, call=k)
        try:
            assert _run(["run", *ARGV, "--out", str(run)]) == 130  # main's Ctrl-C status
        finally:
            _ARMED.clear()
        _check_consistent(run)
        assert _run(["run", "--resume", str(run), "--quiet"]) == 0
        assert _check_consistent(run) == ROUNDS
        _same_run(run, whole)


@pytest.mark.parametrize("kill", ["row missing", "row extra", "row cut short"])
def test_a_killed_runs_rounds_csv_is_rebuilt_from_its_checkpoint(
    reference, tmp_path, monkeypatch, kill
):
    # SIGKILL runs no clean-up: the rows on disk may miss a round the checkpoint holds (killed
    # after the checkpoint, before the row), hold one it does not (the other way round), or
    # end in a partial line. Resuming rebuilds them from the checkpoint's history before its
    # first round (as a reader of the file sees it while the run goes on), and at its end.
    whole, _ = reference
    run = tmp_path / "run"
    argv = [("2" if a == str(ROUNDS) and ARGV[i - 1] == "--rounds" else a) for i, a in
            enumerate(ARGV)]  # fmt: skip
    assert _run(["run", *argv, "--out", str(run)]) == 0
    rows = _csv_rows(run)
    assert [r[0] for r in rows[1:]] == ["1", "2"]
    lines = (run / "rounds.csv").read_text().splitlines(keepends=True)
    edited = {
        "row missing": lines[:-1],
        "row extra": [*lines, lines[-1].replace("2,", "3,", 1)],
        "row cut short": [*lines, "3,41.2"],
    }[kill]
    (run / "rounds.csv").write_text("".join(edited))
    seen, real = [], CLI._latest_rounds_row

    def watched(h):  # the rows on disk when round 3's is about to be written
        seen.append([r[0] for r in _csv_rows(run)[1:]])
        return real(h)

    monkeypatch.setattr(CLI, "_latest_rounds_row", watched)
    assert _run(["run", "--resume", str(run), "--rounds", str(ROUNDS), "--quiet"]) == 0
    assert seen == [["1", "2"]]
    assert _check_consistent(run) == ROUNDS
    _same_run(run, whole)


def test_every_checkpoint_is_written_after_the_rows_it_holds(reference, tmp_path, monkeypatch):
    # a kill right after any checkpoint finds rounds.csv already holding its rounds (the row
    # first, then the checkpoint that says the round exists)
    run, seen = tmp_path / "run", []
    real = SIM._write_checkpoint

    def watched(path, payload, types=None):
        real(path, payload, types)
        seen.append((payload["round"], len(_csv_rows(run)) - 1))

    monkeypatch.setattr(SIM, "_write_checkpoint", watched)
    assert _run(["run", *ARGV, "--out", str(run)]) == 0
    assert seen == [(t, t) for t in range(ROUNDS + 1)]
