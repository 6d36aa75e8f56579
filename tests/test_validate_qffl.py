"""Smoke test of ``validate/qffl_synthetic.py`` (the q-FFL Table 9 reproduction) in --quick mode."""

from __future__ import annotations

import json
import math

import pytest

from tests.scripts import csv_rows, load_script


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("qffl_synthetic")
    status = load_script("qffl_synthetic").main(["--quick", "--rounds", "10", "--out", str(out)])
    return status, out


def test_quick_run_writes_every_file(quick_run):
    status, out = quick_run
    assert status == 0
    for name in (
        "runs.csv",
        "accuracies.csv",
        "table.csv",
        "table.txt",
        "summary.json",
        "accuracy_distribution.png",
    ):
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, name
    assert (out / "accuracy_distribution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_csv_has_one_finite_row_per_q_and_seed(quick_run):
    _, out = quick_run
    rows = csv_rows(out / "runs.csv")
    assert sorted((float(r["q"]), int(r["seed"])) for r in rows) == [(0.0, 1), (1.0, 1)]
    for r in rows:
        assert r["status"] == "completed"
        assert int(r["rounds"]) == 10
        vals = {k: float(r[k]) for k in ("average", "worst_10", "best_10", "variance", "angle")}
        vals["kl"] = float(r["kl"])
        vals["client_mean"] = float(r["client_mean"])
        assert all(math.isfinite(v) for v in vals.values()), vals
        for key in ("average", "client_mean", "worst_10", "best_10"):
            assert 0.0 <= vals[key] <= 100.0, (key, vals[key])
        assert vals["worst_10"] <= vals["client_mean"] + 1e-9 <= vals["best_10"] + 2e-9
        assert 0.0 <= vals["variance"] <= 2500.0  # population variance of values in [0, 100]
        assert 0.0 <= vals["angle"] < 90.0
        assert 0.0 <= vals["kl"] <= math.log(20) + 1e-12  # 20 devices in --quick


def test_accuracies_csv_has_every_device(quick_run):
    _, out = quick_run
    rows = csv_rows(out / "accuracies.csv")
    assert len(rows) == 2 * 20  # two q's, one seed, 20 devices
    assert all(0.0 <= float(r["test_accuracy"]) <= 1.0 for r in rows)
    assert all(int(r["test_samples"]) >= 1 for r in rows)


def test_table_has_one_row_per_q(quick_run):
    _, out = quick_run
    rows = csv_rows(out / "table.csv")
    assert [float(r["q"]) for r in rows] == [0.0, 1.0]
    for r in rows:
        assert int(r["runs"]) == 1
        for key in ("average", "worst_10", "best_10", "variance", "angle", "kl"):
            assert math.isfinite(float(r[f"{key}_mean"]))
            assert float(r[f"{key}_std"]) == 0.0  # one seed
    text = (out / "table.txt").read_text()
    assert "Worst 10%" in text and "verdict" in text
    summary = json.loads((out / "summary.json").read_text())
    assert [row["q"] for row in summary["table"]] == [0.0, 1.0]
    assert len(summary["runs"]) == 2
    assert summary["config"]["devices"] == 20
    assert summary["verdict"]["comparable"] is True
