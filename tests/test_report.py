"""fairagg report: tables, plots and a self-contained HTML page from saved runs."""

from __future__ import annotations

import csv
import json
import re
import warnings

import numpy as np
import pytest

from fairagg import History
from fairagg.cli import main
from fairagg.plots import plot_acf
from fairagg.report import REPORT_FILES, write_report
from tests.test_compare_resume import _count_rounds

SMALL = ["--clients", "6", "--rounds", "3", "--epochs", "1", "--model", "logistic", "--quiet",
         "--data", "synthetic:0.5,0.5", "--clients-per-round", "3"]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for rule, seed in (("fedavg", 0), ("fedavg", 1), ("term", 0), ("term", 1)):
        assert main(["run", *SMALL, "--rule", rule, "--seed", str(seed),
                     "--out", str(root / f"{rule}-{seed}")]) == 0  # fmt: skip
    return root


def _csv(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_runs_of_one_configuration_are_one_group_with_mean_and_std(runs, tmp_path, capsys):
    out = tmp_path / "report"
    paths = write_report([runs / "fedavg-0", runs / "fedavg-1", runs / "term-0", runs / "term-1"],
                         out)  # fmt: skip
    assert [p.name for p in paths] == list(REPORT_FILES)
    rows = {r["group"]: r for r in _csv(out / "report.csv")}
    assert set(rows) == {"fedavg", "term"}
    for rule in ("fedavg", "term"):
        s = [History.load(runs / f"{rule}-{k}" / "history.npz").summary() for k in (0, 1)]
        assert rows[rule]["runs"] == "2"
        for key in ("average", "worst_10", "variance"):
            vals = [x[key] for x in s]
            assert float(rows[rule][f"{key}_mean"]) == pytest.approx(np.mean(vals), abs=1e-12)
            assert float(rows[rule][f"{key}_std"]) == pytest.approx(np.std(vals), abs=1e-12)
    md = (out / "report.md").read_text()
    assert "| fedavg | 2 |" in md and "| term | 2 |" in md
    capsys.readouterr()


def test_the_html_page_is_self_contained(runs, tmp_path):
    out = tmp_path / "report"
    write_report([runs], out)  # a folder of runs, searched
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert not re.search(r'src="(?!data:)', page)  # nothing fetched from elsewhere
    assert "&quot;rule&quot;: &quot;term&quot;" in page and "seeds 0, 1" in page


def test_groups_of_one_rule_are_told_apart_by_their_settings(runs, tmp_path, capsys):
    assert main(["run", *SMALL, "--rule", "term", "--rule-arg", "tilt=2",
                 "--out", str(tmp_path / "term-tilt2")]) == 0  # fmt: skip
    write_report([runs / "term-0", tmp_path / "term-tilt2"], tmp_path / "report")
    groups = {r["group"] for r in _csv(tmp_path / "report" / "report.csv")}
    assert len(groups) == 2 and all(g.startswith("term (") for g in groups), groups
    assert any("tilt=2" in g for g in groups), groups
    capsys.readouterr()


def test_compare_reports_every_seed(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", *SMALL, "--rules", "fedavg,fairavg", "--seeds", "0,1,2",
                 "--out", str(out)]) == 0  # fmt: skip
    rows = _csv(out / "report.csv")
    assert [(r["group"], r["runs"]) for r in rows] == [("fedavg", "3"), ("fairavg", "3")]
    assert (out / "curves.png").stat().st_size > 0
    capsys.readouterr()


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("{tmp}/nothing", "runs: no such file or folder"),
        ("{tmp}/empty", "holds no saved run (history.npz)"),
        ("{tmp}/notes.txt", "is not a saved history (*history.npz)"),
    ],
)
def test_the_cli_refuses_what_is_not_a_run_in_one_line(tmp_path, capsys, arg, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    rc = main(["report", arg.replace("{tmp}", str(tmp_path)), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "r").exists()


def test_the_cli_writes_the_report(runs, tmp_path, capsys):
    assert main(["report", str(runs / "fedavg-0"), "--out", str(tmp_path / "r")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "r").iterdir()} == set(REPORT_FILES)


# ------------------------------------------------------- runs that stopped, folders kept, plots


def test_a_stopped_run_is_reported_as_stopped_never_as_final(tmp_path, capsys, monkeypatch):
    argv = [*SMALL, "--rounds", "4"]
    stopped, done = tmp_path / "stopped", tmp_path / "done"
    with monkeypatch.context() as m:
        _count_rounds(m, interrupt_at=3)  # rounds 1 and 2 complete, round 3 is interrupted
        assert main(["run", *argv, "--out", str(stopped)]) == 130
    assert main(["run", *argv, "--seed", "1", "--out", str(done)]) == 0
    # the run's own summary.json says what happened, and so does a completed run's
    summary = json.loads((stopped / "summary.json").read_text())
    assert summary["status"] == "stopped: KeyboardInterrupt: "
    assert (summary["rounds_asked"], summary["rounds_completed"]) == (4, 2)
    assert summary["evaluated_round"] == 2
    h = History.load(stopped / "history.npz")
    assert summary["average"] == h.summary()["average"]
    summary = json.loads((done / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert (summary["rounds_asked"], summary["rounds_completed"], summary["evaluated_round"]) == (
        4, 4, 4)  # fmt: skip
    capsys.readouterr()

    assert main(["report", str(stopped), "--out", str(tmp_path / "r1")]) == 0
    md = (tmp_path / "r1" / "report.md").read_text()
    page = re.sub(r"base64,[^\"]*", "", (tmp_path / "r1" / "report.html").read_text())
    for text in (md, page):
        words = text.replace(str(tmp_path), "").replace("Not final", "").lower()
        assert "final" not in words, text
        assert "Not final: 1 of 1 runs stopped before their last round" in text
        assert "2 of 4 rounds, stopped (KeyboardInterrupt)" in text
    assert "| fedavg | 1 | 2 of 4 | stopped |" in md
    (row,) = _csv(tmp_path / "r1" / "report.csv")
    assert (row["status"], row["runs_stopped"]) == ("stopped", "1")
    assert (row["rounds_asked"], row["rounds_completed"], row["evaluated_round"]) == ("4", "2", "2")

    # a group of a stopped and a completed run (seeds 0, 1): its curves are the mean over the
    # runs that reached each round
    assert main(["report", str(stopped), str(done), "--out", str(tmp_path / "r2")]) == 0
    md = (tmp_path / "r2" / "report.md").read_text()
    assert "| fedavg | 2 | 2–4 of 4 | 1 of 2 stopped |" in md
    assert "seed 0: 2 of 4 rounds, stopped (KeyboardInterrupt)" in md
    assert "seed 1: 4 of 4 rounds, completed" in md
    (row,) = _csv(tmp_path / "r2" / "report.csv")
    assert (row["status"], row["runs_stopped"], row["rounds_completed"]) == ("stopped", "1", "2")

    # every run completed: the tables are final
    assert main(["report", str(done), "--out", str(tmp_path / "r3")]) == 0
    md = (tmp_path / "r3" / "report.md").read_text().replace(str(tmp_path), "")
    assert "Final test accuracies" in md and "Not final" not in md and "stopped" not in md
    assert "| fedavg | 1 | 4 of 4 | completed |" in md
    assert _csv(tmp_path / "r3" / "report.csv")[0]["status"] == "completed"
    capsys.readouterr()


def test_report_refuses_a_folder_holding_a_report_unless_overwrite(runs, tmp_path, capsys):
    out = tmp_path / "r"
    argv = ["report", str(runs / "fedavg-0"), "--out", str(out)]
    assert main(argv) == 0
    (out / "mine.txt").write_text("kept")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main(["report", str(runs / "term-0"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fairagg: error: --out: ") and (
        "already holds a report" in err and "--overwrite" in err), err  # fmt: skip
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert main(["report", str(runs / "term-0"), "--out", str(out), "--overwrite"]) == 0
    assert "| term | 1 |" in (out / "report.md").read_text()
    assert (out / "mine.txt").read_text() == "kept"
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    capsys.readouterr()


def test_report_out_on_a_file_names_the_flag(runs, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["report", str(runs / "fedavg-0"), "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out: " in err and "is a file" in err, err


def test_a_run_of_one_round_plots_without_a_warning(tmp_path, capsys):
    # pytest turns warnings into errors here: matplotlib's "No artists with labels found to
    # put in legend" (a correlogram of one evaluation) failed this run
    out = tmp_path / "one"
    assert main(["run", *SMALL, "--rounds", "1", "--out", str(out)]) == 0
    assert (out / "acf.png").stat().st_size > 0
    h = History.load(out / "history.npz")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_acf({"fedavg": h}, tmp_path / "acf.png")
    capsys.readouterr()
