"""Smoke test of ``validate/bench_aaggff.py`` (AAgFF-S's low-rank step against the dense one) at
tiny K, under both loads."""

from __future__ import annotations

import json

from tests.scripts import csv_rows, load_script


def test_both_loads_print_every_row_and_ratio_twice_and_label_the_rows(tmp_path, capsys):
    status = load_script("bench_aaggff").main(
        ["--sizes", "20,60", "--rounds", "8", "--repeats", "1", "--dense-max", "60",
         "--load", "both", "--out", str(tmp_path)]
    )  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    for load in ("idle", "busy"):
        assert printed.count(f"[{load}] AAgFF-S K=") == 2
        assert printed.count(f"[{load}] low-rank step K=60 / K=20:") == 1
    rows = csv_rows(tmp_path / "bench_aaggff.csv")
    assert [(r["load"], int(r["K"])) for r in rows] == [
        ("idle", 20), ("idle", 60), ("busy", 20), ("busy", 60)
    ]  # fmt: skip
    for r in rows:
        assert float(r["max_abs_dp"]) <= 1e-12  # low-rank and dense decisions: round-off apart
        assert float(r["t_low_rank_s"]) > 0 and float(r["t_dense_s"]) > 0
    data = json.loads((tmp_path / "bench_aaggff.json").read_text())
    assert data["meta"]["load"] == "both"
    assert [r["load"] for r in data["rows"]] == ["idle", "idle", "busy", "busy"]
