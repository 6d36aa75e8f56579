"""fairagg report: tables, plots and a self-contained HTML page from saved runs."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest

from fairagg import History
from fairagg.cli import main
from fairagg.report import REPORT_FILES, write_report

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
