"""Smoke test of ``validate/bench_simplex_qp.py`` (the exact simplex QPs against cvxpy) at tiny
sizes, under both loads."""

from __future__ import annotations

import json

from tests.scripts import csv_rows, load_script


def test_both_loads_print_every_row_twice_on_the_same_problems(tmp_path, capsys):
    status = load_script("bench_simplex_qp").main(
        ["--sizes", "8", "--mgda-sizes", "12", "--spread", "0.3", "--repeats", "2",
         "--mgda-repeats", "1", "--load", "both", "--out", str(tmp_path)]
    )  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    for load in ("idle", "busy"):
        assert printed.count(f"[{load}] min-norm m=   12") == 2  # plain simplex and ε-box
        assert printed.count(f"[{load}] K=    8") == 1
    qp = csv_rows(tmp_path / "bench_simplex_qp.csv")
    mn = csv_rows(tmp_path / "bench_min_norm.csv")
    assert [r["load"] for r in qp] == ["idle", "busy"]
    assert [r["load"] for r in mn] == ["idle", "idle", "busy", "busy"]
    # the same problems under each load: the same answers' facts
    for a, b in ((qp[0], qp[1]), (mn[0], mn[2]), (mn[1], mn[3])):
        for key in ("free", "kkt_residual") if "K" not in a else ("free", "max_abs_dp_cold"):
            assert a[key] == b[key], key
    for r in mn:
        assert float(r["max_abs_dlambda"]) <= 1e-6  # CLARABEL's accuracy
    assert json.loads((tmp_path / "bench_min_norm.json").read_text())["meta"]["load"] == "both"
