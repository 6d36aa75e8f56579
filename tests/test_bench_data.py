"""Smoke test of ``validate/bench_data.py`` (Synthetic(α, β) generation and the evaluation of all
clients against their targets) at a tiny K."""

from __future__ import annotations

import json

from tests.scripts import csv_rows, load_script


def test_tiny_run_prints_every_target_and_writes_its_rows(tmp_path, capsys):
    status = load_script("bench_data").main(
        ["--clients", "20", "--repeats", "1", "--out", str(tmp_path)]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "bit-identical: True" in printed
    assert "peak memory / returned arrays:" in printed and "(target <= 2)" in printed
    assert "(target <= 0.68 = 2.5 / 3.7)" in printed
    assert printed.count("same-shape GEMM") >= 2  # logistic and MLP, each on one thread at least
    rows = csv_rows(tmp_path / "bench_data.csv")
    gen = rows[0]
    assert gen["what"] == "synthetic(1,1)" and int(gen["K"]) == 20
    assert {r["load"] for r in rows} == {"idle"}
    assert gen["bit_identical"] == "True"
    assert 0 < float(gen["peak_over_returned"]) < float(gen["reference_peak_over_returned"])
    evals = [r for r in rows[1:] if r["what"].startswith("evaluate ")]
    assert {r["what"] for r in evals} == {"evaluate LogisticRegression", "evaluate MLP"}
    assert all(float(r["eval_over_gemm"]) > 0 for r in evals)
    assert json.loads((tmp_path / "bench_data.json").read_text())["rows"][0]["K"] == 20


def test_both_loads_print_every_target_twice_and_label_the_rows(tmp_path, capsys):
    status = load_script("bench_data").main(
        ["--clients", "10", "--repeats", "1", "--no-reference", "--load", "both",
         "--out", str(tmp_path)]
    )  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    for load in ("idle", "busy"):
        assert printed.count(f"[{load}]   peak memory / returned arrays:") == 1
        assert printed.count(f"[{load}]   fairagg ") == 1
        assert printed.count(f"[{load}] evaluate_clients ") >= 2
    rows = csv_rows(tmp_path / "bench_data.csv")
    half = len(rows) // 2
    assert [r["load"] for r in rows] == ["idle"] * half + ["busy"] * half
    assert [r["what"] for r in rows[:half]] == [r["what"] for r in rows[half:]]
