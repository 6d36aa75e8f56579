"""Smoke test of ``validate/fedfv_fmnist_style.py`` (FedFV Tables 3-4 on digits), --quick mode."""

from __future__ import annotations

import json
import math

import numba
import pytest

from tests.scripts import csv_rows, load_script


@pytest.fixture(scope="module")
def script():
    return load_script("fedfv_fmnist_style")


@pytest.fixture(scope="module")
def quick_run(script, tmp_path_factory):
    out = tmp_path_factory.mktemp("fedfv_fmnist_style")
    threads = numba.get_num_threads()
    status = script.main(["--quick", "--rounds", "10", "--out", str(out)])
    return status, out, threads


def test_quick_run_writes_every_file(quick_run):
    status, out, _ = quick_run
    assert status == 0
    for name in ("runs.csv", "table.csv", "table.txt", "summary.json", "fedfv_fmnist_style.png"):
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, name
    assert (out / "fedfv_fmnist_style.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_numba_thread_count_is_restored(quick_run):
    _, _, threads = quick_run
    assert numba.get_num_threads() == threads


def test_runs_csv_has_one_finite_row_per_method(script, quick_run):
    _, out, _ = quick_run
    rows = csv_rows(out / "runs.csv")
    assert [r["method"] for r in rows] == list(script.METHOD_KEYS)
    for r in rows:
        assert r["status"] == "completed", (r["method"], r["status"])
        assert int(r["rounds"]) == 10 and int(r["seed"]) == 1
        accs = [float(r[f"acc_{k}"]) for k in (1, 2, 3)]
        assert all(0.0 <= a <= 100.0 for a in accs)
        mean, std, var = float(r["mean"]), float(r["std"]), float(r["variance"])
        assert mean == pytest.approx(sum(accs) / 3, rel=1e-12)
        assert std**2 == pytest.approx(var, rel=1e-9, abs=1e-9)  # variance of percent accuracies
        assert 0.0 <= std <= 50.0  # population std of three values in [0, 100]
        losses = [float(r[f"train_loss_{k}"]) for k in (1, 2, 3)]
        assert all(math.isfinite(v) and v >= 0 for v in losses)


def test_table_and_summary(script, quick_run):
    _, out, _ = quick_run
    rows = csv_rows(out / "table.csv")
    assert [r["method"] for r in rows] == list(script.METHOD_KEYS)
    assert all(int(r["runs"]) == 1 for r in rows)
    assert all(float(r["std_std"]) == 0.0 for r in rows)  # one seed
    text = (out / "table.txt").read_text()
    assert "Table 4" in text and "verdict" in text and "13.76" in text
    summary = json.loads((out / "summary.json").read_text())
    classes = summary["config"]["classes"]
    assert len(set(classes)) == 3 and all(0 <= c <= 9 for c in classes)
    conf = summary["class_choice"]["confusion_matrix"]
    assert sum(map(sum, conf)) == 1797  # every digit predicted once in the cross-validation
    assert summary["class_choice"]["top_triples"][0]["classes"] == sorted(classes)
    assert len(summary["runs"]) == len(script.METHOD_KEYS)
    assert summary["verdict"]["comparable"] is True
    for run in summary["runs"]:
        assert run["curve_round"][0] == 0 and run["curve_round"][-1] == 10
        assert len(run["curve_test_acc"]) == len(run["curve_round"])


def test_client_k_holds_class_k(script):
    args = script._parse(["--quick", "--classes", "1,8,9"])
    X, y = script._digits(args.pool)
    assert X.shape == (1797, 16)
    data = script._federate(X, y, args.classes, args, seed=3)
    for k in range(3):
        _, y_train = data.client_train(k)
        _, y_test = data.client_test(k)
        assert set(y_train.tolist()) == {k} and set(y_test.tolist()) == {k}
    n = [int((y == c).sum()) for c in (1, 8, 9)]
    assert (data.num_train_samples + data.num_test_samples).tolist() == n
    # standardised on the training rows of all clients together
    assert abs(data.X_train.mean(axis=0)).max() < 1e-12


def test_a_failing_run_is_recorded_not_raised(script, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise FloatingPointError("diverged on purpose")

    monkeypatch.setattr(script, "simulate", boom)
    status = script.main(
        ["--quick", "--rounds", "2", "--methods", "fedavg,fedfv-a0", "--out", str(tmp_path)]
    )
    assert status == 1
    rows = csv_rows(tmp_path / "runs.csv")
    assert [r["method"] for r in rows] == ["fedavg", "fedfv-a0"]
    assert all(r["status"].startswith("failed after 0 rounds: FloatingPointError") for r in rows)
