"""Smoke test of ``validate/bench_scaling.py`` (one aggregation step of every rule as m, d and K
grow, each beside its baseline) in quick mode, and of its exponent fit on known power laws."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fairagg.rules import RULES
from tests.scripts import csv_rows, load_script

bench = load_script("bench_scaling")

#: A rule of each kind of baseline: linear (and one whose clients report gradients), Gram-based
#: with FedMGDA+'s QP against cvxpy, and the full-participation AAgFF-S against the dense solve.
RULES_RUN = ("fedavg", "qfedsgd", "fedmgda", "aaggff-s")


@pytest.mark.parametrize("b", [0.5, 1.0, 2.8, 3.0])
def test_fit_exponent_recovers_a_power_law(b):
    sizes = np.array([10, 100, 1000, 10_000])
    assert math.isclose(bench.fit_exponent(sizes, 3e-6 * sizes**b), b, rel_tol=1e-12)


def test_fit_exponent_is_the_least_squares_slope_of_noisy_times():
    sizes = np.array([10.0, 100.0, 1000.0])
    times = 2e-3 * sizes**1.5 * np.array([1.0, 2.0, 1.0])  # the middle point 2× slow
    # residuals (0, log 2, 0) at equally spaced log sizes: symmetric, so the slope is unchanged
    assert math.isclose(bench.fit_exponent(sizes, times), 1.5, rel_tol=1e-12)
    times = 2e-3 * sizes**1.5 * np.array([1.0, 1.0, 4.0])  # the last point 4× slow
    # residuals (0, 0, log 4) at log sizes (0, L, 2L) + const: slope log 4 / (2L), L = log 10
    expected = 1.5 + math.log(4.0) / (2 * math.log(10.0))
    assert math.isclose(bench.fit_exponent(sizes, times), expected, rel_tol=1e-12)


def test_fit_exponent_refuses_a_single_size_and_times_that_are_not_positive():
    with pytest.raises(ValueError, match="two distinct sizes"):
        bench.fit_exponent([100, 100], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite and > 0"):
        bench.fit_exponent([10, 100], [0.0, 2.0])


def test_every_registered_rule_has_its_axes():
    for name, spec in RULES.items():
        axes = [axis for axis, _ in bench.axes_of(name, quick=False)]
        assert axes == (["K", "d"] if spec.full_participation else ["m", "d"]), name
        for axis, pts in bench.axes_of(name, quick=False):
            assert len({p[("m", "d", "K").index(axis)] for p in pts}) >= 3, (name, axis)
            assert all(m == K for m, _, K in pts) or not spec.full_participation


@pytest.mark.parametrize("name", list(RULES))
def test_every_rule_steps_on_the_bench_reports_beside_its_baseline(name):
    """Each registered rule takes the bench's reports on each of its axes (the smallest quick
    size) and its row carries a baseline and their ratio."""
    args = bench.parse_args(["--quick", "--repeats", "1", "--threads", "1", "--rounds", "2"])
    for axis, pts in bench.axes_of(name, quick=True):
        m, d, K = pts[0]
        theta, reports = bench.make_round(m, d, K, seed=0)
        row = bench.measure(name, axis, theta, bench.for_rule(name, reports), "numpy", args)
        assert (row["rule"], row["axis"], row["m"], row["d"], row["K"]) == (name, axis, m, d, K)
        assert row["t_step_s"] > 0 and row["t_baseline_s"] > 0
        assert row["step_over_baseline"] == row["t_step_s"] / row["t_baseline_s"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_scaling")
    status = bench.main(
        ["--quick", "--rules", ",".join(RULES_RUN), "--repeats", "1", "--threads", "1",
         "--rounds", "5", "--backend", "numba", "--compare", "numpy", "--out", str(out)]
    )  # fmt: skip
    return status, out


def test_quick_run_writes_its_outputs(quick_run):
    status, out = quick_run
    assert status == 0
    for name in ("bench_scaling.csv", "bench_scaling.json", "bench_scaling.png",
                 "bench_scaling_exponents.csv"):  # fmt: skip
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, name


def test_quick_rows_cover_each_rule_axis_and_backend_beside_a_baseline(quick_run):
    _, out = quick_run
    rows = csv_rows(out / "bench_scaling.csv")
    got = {(r["rule"], r["axis"], r["backend"]) for r in rows}
    want = {
        (name, axis, backend)
        for name in RULES_RUN
        for axis in (("K", "d") if RULES[name].full_participation else ("m", "d"))
        for backend in ("numba", "numpy")
    }
    assert got == want
    assert {r["load"] for r in rows} == {"idle"}
    for r in rows:
        assert float(r["t_step_s"]) > 0
        assert math.isclose(
            float(r["step_over_baseline"]),
            float(r["t_step_s"]) / float(r["t_baseline_s"]),
            rel_tol=1e-12,
        )
        if r["rule"] == "aaggff-s" and r["axis"] == "K":
            assert r["baseline"] == "dense FTRL solve"
            assert int(r["m"]) == int(r["K"])
            assert float(r["max_abs_dp"]) <= 1e-10  # the dense solve of the same round
        elif r["rule"] == "fedmgda":
            assert r["baseline"].startswith("roofline: SYRK")
            assert float(r["peak_GFLOPs"]) > 0
        else:
            assert r["baseline"] == "roofline: one read"
    qp = [r for r in rows if r["rule"] == "fedmgda" and r["axis"] == "m" and r["t_qp_s"]]
    assert [int(r["m"]) for r in qp] == list(bench.QUICK_M)  # once per size, on one backend
    for r in qp:
        assert float(r["cvxpy_over_qp"]) > 0
        assert float(r["max_abs_dlambda"]) <= 1e-6  # CLARABEL's accuracy (tests/tolerances.py)


def test_quick_exponents_are_the_fits_of_the_rows(quick_run):
    _, out = quick_run
    rows = csv_rows(out / "bench_scaling.csv")
    data = json.loads((out / "bench_scaling.json").read_text())
    exps = data["meta"]["exponents"]
    assert len(exps) == len(RULES_RUN) * 2 * 2  # rules × axes × backends
    assert len(csv_rows(out / "bench_scaling_exponents.csv")) == len(exps)
    for e in exps:
        sel = [
            r for r in rows
            if (r["rule"], r["axis"], r["backend"]) == (e["rule"], e["axis"], e["backend"])
        ]  # fmt: skip
        sizes = [int(r[e["axis"]]) for r in sel]
        assert sizes == sorted(sizes) and len(sizes) == 3
        assert math.isclose(
            e["exponent_step"],
            bench.fit_exponent(sizes, [float(r["t_step_s"]) for r in sel]),
            rel_tol=1e-9,
        )
