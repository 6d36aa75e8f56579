"""Smoke test of ``validate/fedfa_synthetic.py`` (FedFa's Table 2 / Fig. 2 set-up), --quick mode."""

from __future__ import annotations

import json
import math

import numba
import numpy as np
import pytest

from fairagg.data import synthetic
from fairagg.models import LogisticRegression
from fairagg.rules import make_rule
from fairagg.simulation import simulate
from tests.scripts import csv_rows, load_script

FILES = (
    "runs.csv",
    "accuracies.csv",
    "curves.csv",
    "table.csv",
    "table.txt",
    "summary.json",
    "momentum_ablation.png",
    "final_accuracies.png",
)


@pytest.fixture(scope="module")
def script():
    return load_script("fedfa_synthetic")


@pytest.fixture(scope="module")
def quick_run(script, tmp_path_factory):
    out = tmp_path_factory.mktemp("fedfa_synthetic")
    threads = numba.get_num_threads()
    status = script.main(["--quick", "--seeds", "1,2", "--out", str(out)])
    return status, out, threads


def test_quick_run_writes_every_file(quick_run):
    status, out, _ = quick_run
    assert status == 0
    for name in FILES:
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, name
    for name in ("momentum_ablation.png", "final_accuracies.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_numba_thread_count_is_restored(quick_run):
    _, _, threads = quick_run
    assert numba.get_num_threads() == threads


def test_runs_csv_has_one_finite_row_per_dataset_method_and_seed(script, quick_run):
    _, out, _ = quick_run
    rows = csv_rows(out / "runs.csv")
    expected = [(d, m, s) for d in script.DATASET_KEYS for s in (1, 2) for m in script.METHOD_KEYS]
    assert [(r["dataset"], r["method"], int(r["seed"])) for r in rows] == expected
    for r in rows:
        assert r["status"] == "completed", (r["dataset"], r["method"], r["status"])
        assert int(r["rounds"]) == 4
        vals = {k: float(r[k]) for k in ("average", "client_mean", "worst_20", "best_20")}
        vals["variance"] = float(r["variance"])
        assert all(math.isfinite(v) for v in vals.values()), vals
        for key in ("average", "client_mean", "worst_20", "best_20"):
            assert 0.0 <= vals[key] <= 100.0, (key, vals[key])
        assert vals["worst_20"] <= vals["client_mean"] + 1e-9 <= vals["best_20"] + 2e-9
        assert 0.0 <= vals["variance"] <= 2500.0  # population variance of values in [0, 100]
        assert math.isfinite(float(r["train_loss"])) and float(r["train_loss"]) >= 0.0
        # every rule's recorded weights lie on the simplex, in every round
        assert float(r["weights_min"]) >= 0.0
        assert float(r["weights_sum_error"]) < 1e-12


def test_accuracies_and_curves_csv(script, quick_run):
    _, out, _ = quick_run
    rows = csv_rows(out / "accuracies.csv")
    n_runs = len(script.DATASET_KEYS) * len(script.METHOD_KEYS) * 2
    assert len(rows) == n_runs * 12  # 12 devices in --quick
    assert all(0.0 <= float(r["test_accuracy"]) <= 1.0 for r in rows)
    assert all(int(r["test_samples"]) >= 1 for r in rows)
    curves = csv_rows(out / "curves.csv")
    assert len(curves) == n_runs * 5  # rounds 0..4, --eval-every 1
    assert all(0.0 <= float(r["mean_test_accuracy"]) <= 100.0 for r in curves)


def test_table_has_one_row_per_dataset_and_method(script, quick_run):
    _, out, _ = quick_run
    rows = csv_rows(out / "table.csv")
    expected = [(d, m) for d in script.DATASET_KEYS for m in script.METHOD_KEYS]
    assert [(r["dataset"], r["method"]) for r in rows] == expected
    for r in rows:
        assert int(r["runs"]) == 2
        for key in ("average", "worst_20", "best_20", "variance"):
            assert math.isfinite(float(r[f"{key}_mean"])) and float(r[f"{key}_std"]) >= 0.0
        for key in ("average", "worst_20", "best_20"):
            assert 0.0 <= float(r[f"{key}_mean"]) <= 100.0
        paper = script.PAPER_TABLE2[r["dataset"]]
        if r["method"] in ("fedavg", "fedprox") or r["method"] in script.FEDFA_KEYS:
            row = {"fedavg": "FedAvg", "fedprox": "FedProx"}.get(r["method"], "FedFa")
            assert float(r["paper_average"]) == paper[row][0]
        else:
            assert r["paper_average"] == ""
    text = (out / "table.txt").read_text()
    for label in ("Synthetic_iid", "Synthetic_0_0", "Synthetic_0.5_0.5", "Synthetic_1_1"):
        assert label in text
    assert "Worst 20%" in text and "verdict" in text and "findings" in text
    assert "603.69" in text and "89.11" in text  # the paper's numbers beside ours


def test_quick_methods_differ(quick_run):
    """The methods are not all the same run under different names."""
    _, out, _ = quick_run
    rows = csv_rows(out / "runs.csv")

    def finals(method: str) -> list[float]:
        return [float(r["train_loss"]) for r in rows if r["method"] == method]

    base = finals("fedavg")
    for method in ("fedprox", "uniform", "fedfa-0.5-0.5", "fedfa-none", "mom-both"):
        assert finals(method) != base, method
    assert finals("fedfa-0.5-0.5") != finals("fedfa-none")  # momentum changes FedFa


def test_summary_json(script, quick_run):
    _, out, _ = quick_run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["devices"] == 12
    assert summary["config"]["client_momentum"] == {
        "iid": 0.9,
        "0_0": 0.9,
        "0.5_0.5": 0.5,
        "1_1": 0.5,
    }
    assert summary["verdict"]["comparable"] is True
    assert summary["findings"]
    assert len(summary["runs"]) == len(script.DATASET_KEYS) * len(script.METHOD_KEYS) * 2
    hyper = summary["config"]["methods"]
    assert hyper["fedfa-none"]["eta_s"] == 0.0 and hyper["fedfa-none"]["client_momentum"] == 0.0
    assert hyper["fedfa-server"]["client_momentum"] == 0.0 and hyper["fedfa-server"]["eta_s"] == 1
    assert hyper["fedprox"]["prox_mu"] == 1.0
    for run in summary["runs"]:
        assert run["curve_round"] == [0, 1, 2, 3, 4]
        assert len(run["curve_accuracy"]) == len(run["curve_loss"]) == 5


def _tiny():
    data = synthetic(1.0, 1.0, num_clients=8, seed=0, split_seed=1, max_samples_per_client=60)
    return data, LogisticRegression(60, 10)


def test_momentum_only_rule_without_momentum_is_fedavg(script):
    data, model = _tiny()
    kw = dict(rounds=3, clients_per_round=4, epochs=1, batch_size=10, lr=0.05, seed=2)
    ref = simulate(make_rule("fedavg"), model, data, parallel=False, **kw)
    off = script.momentum_only_rule(eta_s=0.0, client_momentum=0.0)
    got = simulate(off, model, data, parallel=False, **kw)
    np.testing.assert_array_equal(got.final_params, ref.final_params)
    np.testing.assert_array_equal(got.weights, ref.weights)
    on = simulate(script.momentum_only_rule(client_momentum=0.5), model, data, parallel=False, **kw)
    assert not np.array_equal(on.final_params, ref.final_params)
    np.testing.assert_array_equal(on.weights, ref.weights)  # n_k weights whatever the momentum


def test_momentum_only_rule_takes_fedfa_server_step(script):
    """With FedFa's weights equal to n_k's (equal sizes, accuracies, participations), the
    momentum-only rule and the library's fedfa rule take the same steps."""
    from fairagg.types import make_reports

    rng = np.random.default_rng(0)
    theta = rng.normal(size=7)
    mine = script.momentum_only_rule(gamma=0.3, eta_s=0.7, tau=2, client_momentum=0.0)
    ref = make_rule("fedfa", gamma=0.3, eta_s=0.7, tau=2, client_momentum=0.0)
    s_mine, s_ref = mine.init(theta, 4), ref.init(theta, 4)
    t_mine = t_ref = theta
    for t in range(4):
        reports = make_reports(
            rng.normal(size=(4, 7)),
            np.full(4, 20),
            accuracies=np.full(4, 0.5),
            participations=np.full(4, t + 1),
            round_index=t,
            num_clients=4,
        )
        a = mine.step(t_mine, reports, s_mine)
        b = ref.step(t_ref, reports, s_ref)
        np.testing.assert_allclose(a.params, b.params, rtol=1e-12, atol=1e-12)
        assert a.info["server_correction"] == b.info["server_correction"] == (t % 2 == 1)
        t_mine, s_mine, t_ref, s_ref = a.params, a.state, b.params, b.state


def test_bad_arguments_are_refused(script):
    with pytest.raises(SystemExit):
        script._parse(["--methods", "fedavg,nope"])
    with pytest.raises(SystemExit):
        script._parse(["--client-momentum", "1.0"])
    args = script._parse(["--quick", "--client-momentum", "0.3", "--datasets", "1_1,iid"])
    assert args.datasets == ["iid", "1_1"] and args.client_momentum == 0.3
    assert script._parse([]).fedfa_lr == 0.01


def test_a_failing_run_is_recorded_not_raised(script, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise FloatingPointError("diverged on purpose")

    monkeypatch.setattr(script, "simulate", boom)
    argv = ["--quick", "--datasets", "1_1", "--methods", "fedavg,fedfa-0.5-0.5"]
    status = script.main([*argv, "--out", str(tmp_path)])
    assert status == 1
    rows = csv_rows(tmp_path / "runs.csv")
    assert [r["method"] for r in rows] == ["fedavg", "fedfa-0.5-0.5"]
    assert all(r["status"].startswith("failed after 0 rounds: FloatingPointError") for r in rows)
    assert (tmp_path / "table.txt").is_file() and (tmp_path / "summary.json").is_file()
