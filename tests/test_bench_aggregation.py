"""Smoke test of ``validate/bench_aggregation.py`` (the weighted sum's bandwidth and the Gram
matrix's roofline ratio on each backend) on two tiny sizes, cuda rows in numba's simulator."""

from __future__ import annotations

import csv
import json
import math

import pytest

from fairagg.kernels import available_backends
from tests.conftest import on_simulator
from tests.scripts import load_script

SIZES = {(3, 5000), (5, 700)}
# The cuda rows: in numba's simulator (CI), or on the GPU when the tests run on one.
ARGS = ["--cases", "3x5000,5x700", "--repeats", "1"] + (["--simulator"] if on_simulator() else [])
POSITIVE = (
    "probe_GBps",
    "ws_s",
    "ws_GBps",
    "ws_ratio",
    "compute_GFLOPs",
    "gram_s",
    "gram_GFLOPs",
    "gram_of_compute",
    "roofline_s",
    "gram_over_roofline",
)


@pytest.fixture(scope="module")
def script():
    return load_script("bench_aggregation")


@pytest.fixture(scope="module")
def tiny_run(script, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_aggregation")
    status = script.main([*ARGS, "--out", str(out)])
    with open(out / "bench_aggregation.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return status, out, rows


def test_tiny_run_succeeds_and_writes_csv_json_png(tiny_run):
    status, out, _ = tiny_run
    assert status == 0
    for name in ("bench_aggregation.csv", "bench_aggregation.json", "bench_aggregation.png"):
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, name
    assert (out / "bench_aggregation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_row_per_size_and_backend_with_cuda_simulated(tiny_run):
    _, _, rows = tiny_run
    keys = [(int(r["m"]), int(r["d"]), r["backend"]) for r in rows]
    assert len(keys) == len(set(keys))
    backends = available_backends(simulator=True)
    assert set(keys) == {(m, d, b) for m, d in SIZES for b in backends}
    for r in rows:
        assert r["simulated"] == str(r["backend"] == "cuda" and on_simulator())
        assert int(r["m_times_d"]) == int(r["m"]) * int(r["d"])
        if r["backend"] == "cuda":
            assert ("SIMULATOR" in r["note"]) == on_simulator()
            assert r["bw_probe"] == "device copy"  # the whole of D: the simulator has room
            assert r["compute_probe"] == "GPU FP64 FMA chains"
        else:
            assert r["bw_probe"].startswith("read")
            assert r["compute_probe"] == "CPU DGEMM n=2000"
    numba_rows = [r for r in rows if r["backend"] == "numba"]
    # Tiny m: numba's own Gram kernel, timed on its own.
    assert all("register-tiled" in r["note"] for r in numba_rows)


def test_measurements_are_positive_finite_and_consistent(tiny_run):
    _, _, rows = tiny_run
    for r in rows:
        for key in POSITIVE:
            v = float(r[key])
            assert math.isfinite(v) and v > 0.0, (r["backend"], key, v)
        m, d = int(r["m"]), int(r["d"])
        ws_s, gram_s = float(r["ws_s"]), float(r["gram_s"])
        # The byte and flop counts of the module docstring.
        assert math.isclose(float(r["ws_GBps"]), (m * d + d) * 8 / ws_s / 1e9, rel_tol=1e-9)
        assert math.isclose(
            float(r["ws_ratio"]), float(r["ws_GBps"]) / float(r["probe_GBps"]), rel_tol=1e-9
        )
        assert math.isclose(float(r["gram_GFLOPs"]), m * (m + 1) * d / gram_s / 1e9, rel_tol=1e-9)
        roof = max(
            float(r["gram_GFLOPs"]) / float(r["compute_GFLOPs"]) * gram_s,
            m * d * 8 / (float(r["probe_GBps"]) * 1e9),
        )
        assert math.isclose(float(r["roofline_s"]), roof, rel_tol=1e-9)
        assert math.isclose(float(r["gram_over_roofline"]), gram_s / roof, rel_tol=1e-9)
        assert r["bound"] in ("flops", "bytes")
        for key in ("ws_rounds", "ws_block", "ws_inner", "gram_rounds", "gram_block"):
            assert int(r[key]) >= 1, key


def test_results_agree_with_numpy(tiny_run):
    _, _, rows = tiny_run
    for r in rows:
        assert r["correct"] == "True"
        for key in ("ws_err", "gram_err"):
            v = float(r[key])
            assert 0.0 <= v <= 1e-12, (r["backend"], key, v)
        if r["backend"] == "numpy":  # the reference itself
            assert float(r["ws_err"]) == 0.0 and float(r["gram_err"]) == 0.0


def test_target_is_not_applicable_to_small_or_simulated_rows(tiny_run):
    _, _, rows = tiny_run
    assert all(r["ws_target"] == "n/a" for r in rows)  # m·d < 1e7 everywhere


def test_json_holds_meta_and_the_same_rows(tiny_run):
    _, out, rows = tiny_run
    data = json.loads((out / "bench_aggregation.json").read_text())
    meta = data["meta"]
    assert meta["cpus"] >= 1 and meta["numba_threads"] >= 1
    assert meta["backends"] == list(available_backends(simulator=True))
    if on_simulator():
        assert meta["simulated_cuda"] is True and "simulator" in meta["device"]
    assert meta["numpy"] and meta["numba"]
    assert meta["target"] == {"ws_ratio": 0.7, "min_m_times_d": 10**7}
    assert meta["skipped"] == []
    assert len(data["rows"]) == len(rows)
    for jr, cr in zip(data["rows"], rows, strict=True):
        assert (jr["m"], jr["d"], jr["backend"]) == (int(cr["m"]), int(cr["d"]), cr["backend"])
        assert math.isclose(jr["ws_ratio"], float(cr["ws_ratio"]), rel_tol=1e-12)


def test_target_rule_and_tolerances(script):
    row = {"simulated": False, "m_times_d": 10**7, "ws_ratio": 0.7}
    assert script.target(row) == "PASS"
    assert script.target({**row, "ws_ratio": 0.69}) == "MISS"
    assert script.target({**row, "m_times_d": 10**7 - 1}) == "n/a"
    assert script.target({**row, "simulated": True}) == "n/a"
    assert script.tolerances(10, 100) == (1e-12, 1e-12)
    ws_tol, gram_tol = script.tolerances(10**5, 10**10)
    assert ws_tol > 1e-12 and gram_tol > 1e-12


def test_fill_is_finite_nontrivial_and_bounded(script):
    import numpy as np

    D = np.empty((4, 1000))
    amax = script.fill(D, np.random.default_rng(0))
    assert np.all(np.isfinite(D)) and np.abs(D).max() <= amax
    assert np.linalg.matrix_rank(D) == 4  # rows are not copies of each other


def test_host_memory_check_skips_what_does_not_fit(script):
    assert script.host_skip_reason(10, 10**4) is None
    reason = script.host_skip_reason(10**6, 10**7)  # 80 TB
    assert reason is not None and "host memory" in reason


@pytest.mark.parametrize("bad", ["3by5000", "3x", "0x10", "", "3x5000,x7"])
def test_bad_cases_is_a_clear_error(script, bad, capsys):
    with pytest.raises(SystemExit) as exc:
        script.main(["--cases", bad, "--out", "unused"])
    assert exc.value.code == 2
    assert "--cases" in capsys.readouterr().err


def test_a_wrong_backend_result_fails_the_run(script, tmp_path, monkeypatch, capsys):
    real = script.weighted_sum

    def off_by_a_little(w, D, backend):
        out = real(w, D, backend)
        return out * (1 + 1e-9) if backend == "numba" else out

    monkeypatch.setattr(script, "weighted_sum", off_by_a_little)
    status = script.main(["--cases", "2x300", "--repeats", "1", "--out", str(tmp_path)])
    assert status == 1
    with open(tmp_path / "bench_aggregation.csv", newline="") as fh:
        rows = {r["backend"]: r for r in csv.DictReader(fh)}
    assert rows["numpy"]["correct"] == "True" and rows["numba"]["correct"] == "False"
    assert float(rows["numba"]["ws_err"]) > float(rows["numba"]["ws_tol"])
    out = capsys.readouterr().out
    assert "FAIL" in out and "correctness: FAILED for numba 2x300" in out
