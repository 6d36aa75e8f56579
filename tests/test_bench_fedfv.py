"""Smoke test of ``validate/bench_fedfv.py`` (FedFV's Gram path against the vector path and its
roofline) on one tiny case."""

from __future__ import annotations

import csv
import json
import math

import pytest

from fairagg.kernels import available_backends
from tests.scripts import load_script


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_fedfv")
    status = load_script("bench_fedfv").main(
        ["--cases", "6x3000", "--repeats", "1", "--out", str(out)]
    )
    return status, out


def test_tiny_run_writes_csv_and_json(tiny_run):
    status, out = tiny_run
    assert status == 0
    for name in ("bench_fedfv.csv", "bench_fedfv.json"):
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, name


def test_row_is_complete_and_consistent(tiny_run):
    _, out = tiny_run
    with open(out / "bench_fedfv.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1
    r = rows[0]
    assert r["load"] == "idle"
    assert (int(r["m"]), int(r["d"]), int(r["repeats"])) == (6, 3000, 1)
    assert int(r["pairs"]) == 15
    assert 0 < int(r["conflicts_found"]) <= 15  # the data are drawn to conflict
    assert int(r["projections"]) > 0
    assert r["counts_agree"] == "True"
    assert 0.0 <= float(r["max_abs_diff_rel"]) <= 1e-10
    for key in (
        "t_vector_s",
        "t_gram_s",
        "ratio_vector_gram",
        "peak_GFLOPs",
        "ddt_GFLOPs",
        "probe_GBps",
        "roofline_s",
        "gram_over_roofline",
        "gram_over_parts",
    ):
        v = float(r[key])
        assert math.isfinite(v) and v > 0.0, (key, v)
    assert math.isclose(
        float(r["ratio_vector_gram"]), float(r["t_vector_s"]) / float(r["t_gram_s"]), rel_tol=1e-12
    )
    assert r["bound"] in ("flops", "bytes")
    assert int(r["gram_bytes"]) == 2 * 6 * 3000 * 8  # the updates read twice
    assert int(r["gram_flops"]) == 6 * 7 * 3000 + 4 * 6 * 3000 + 4 * 6**3
    shares = sum(float(r[f"share_{k}"]) for k in ("ddt", "final", "rest"))
    assert math.isclose(shares, 1.0, rel_tol=1e-12)


def test_json_holds_meta_and_the_same_rows(tiny_run):
    _, out = tiny_run
    data = json.loads((out / "bench_fedfv.json").read_text())
    assert data["meta"]["threads"] == 1
    assert data["meta"]["agree_tol"] == 1e-10
    assert data["meta"]["seconds"] > 0.0
    assert [(r["m"], r["d"]) for r in data["rows"]] == [(6, 3000)]
    assert data["rows"][0]["counts_agree"] is True


def test_both_loads_print_every_target_twice_and_label_the_rows(tmp_path, capsys):
    status = load_script("bench_fedfv").main(
        ["--cases", "6x3000", "--repeats", "1", "--load", "both", "--out", str(tmp_path)]
    )
    assert status == 0
    printed = capsys.readouterr().out
    for load in ("idle", "busy"):
        assert printed.count(f"[{load}] m=6 d=3000: vector") == 1
        assert printed.count(f"[{load}] FedFV direction") == 1
        assert printed.count(f"[{load}] Gram path against the roofline") == 1
    with open(tmp_path / "bench_fedfv.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["load"], r["m"], r["d"]) for r in rows] == [
        ("idle", "6", "3000"),
        ("busy", "6", "3000"),
    ]
    data = json.loads((tmp_path / "bench_fedfv.json").read_text())
    assert data["meta"]["load"] == "both"
    assert [r["load"] for r in data["rows"]] == ["idle", "busy"]


def test_the_default_path_is_the_rule_an_experiment_runs(tiny_run, capsys):
    """The default-path rows time fedfv as simulate builds it (backend auto: numba here) on
    every thread, against a roofline of three passes over the updates."""
    status, out = tiny_run
    data = json.loads((out / "bench_fedfv_default.json").read_text())
    (row,) = data["rows"]
    auto = "cuda" if "cuda" in available_backends() else "numba"
    assert (row["m"], row["d"], row["backend"]) == (6, 3000, auto)
    bytes_time = 3 * 6 * 3000 * 8 / (row["probe_GBps"] * 1e9)
    flops_time = (6 * 7 * 3000 + 4 * 6 * 3000 + 4 * 6**3) / (row["peak_GFLOPs"] * 1e9)
    assert math.isclose(row["roofline_s"], max(bytes_time, flops_time), rel_tol=1e-9)
    assert math.isclose(row["step_over_roofline"], row["t_step_s"] / row["roofline_s"])
    # what the step's time is made of: its two passes timed alone, and the rest
    for key in ("t_ddt_copy_s", "t_final_s"):
        assert math.isfinite(row[key]) and row[key] > 0.0, key
    assert math.isclose(row["share_ddt_copy"], row["t_ddt_copy_s"] / row["t_step_s"])
    assert math.isclose(row["share_final"], row["t_final_s"] / row["t_step_s"])
    shares = sum(row[f"share_{k}"] for k in ("ddt_copy", "final", "rest"))
    assert math.isclose(shares, 1.0, rel_tol=1e-12)
