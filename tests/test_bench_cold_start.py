"""Smoke test of ``validate/bench_cold_start.py`` (the first ``fairagg run`` after install against
a warm run) on one rule."""

from __future__ import annotations

import json
import math

import pytest

from tests.scripts import csv_rows, load_script


@pytest.fixture(scope="module")
def afl_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_cold_start")
    status = load_script("bench_cold_start").main(
        ["--rules", "afl", "--backends", "default", "--out", str(out)]
    )
    return status, out


def test_writes_csv_json_and_png(afl_run):
    status, out = afl_run
    assert status == 0
    for name in ("bench_cold_start.csv", "bench_cold_start.json"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "bench_cold_start.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_cold_run_compiles_and_the_warm_run_loads_the_cache(afl_run):
    # An empty cache makes the first process compile the training and evaluation kernels (seconds
    # of events); the second finds them cached and compiles nothing of that size.
    _, out = afl_run
    (r,) = csv_rows(out / "bench_cold_start.csv")
    assert r["rule"] == "afl" and r["backend"] == "default" and int(r["repeats"]) == 1
    compile_s, warm_compile_s = float(r["compile_s"]), float(r["warm_compile_s"])
    assert compile_s > 0.5
    assert warm_compile_s < 0.1 * compile_s
    assert "batch_loss_grad" in r["longest"]
    cold, warm, extra = float(r["t_cold_s"]), float(r["t_warm_s"]), float(r["one_off_s"])
    assert math.isclose(extra, cold - warm, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(float(r["extra_over_warm"]), extra / warm, rel_tol=1e-9)
    assert r["load"] == "idle"  # the default --load
    assert r["meets_target"] == str(extra <= float(r["target_s"]))
    assert float(r["target_s"]) == 4.0  # issue 38 item 6
    assert int(r["compiled"]) > 0 and r["float32"] == "False"
    assert "models" in r["by_module"]


def test_no_fairagg_function_is_compiled_twice_for_the_same_types(afl_run):
    # A function compiled for Literal[int](0) as well as int64 (what the simplex QP's callees
    # were) is listed in "repeated"; the training and gradient kernels have none.
    _, out = afl_run
    data = json.loads((out / "bench_cold_start.json").read_text())
    assert data["rows"][0]["repeated"] == ""


def test_a_failing_run_is_reported_with_its_error(tmp_path):
    bench = load_script("bench_cold_start")
    with pytest.raises(RuntimeError, match="fairagg run --rule no-such-rule failed"):
        bench.main(["--rules", "no-such-rule", "--out", str(tmp_path)])


def test_load_both_measures_every_rule_idle_then_beside_a_spinner(tmp_path, monkeypatch, capsys):
    # the wiring of --load, with the measurement replaced: each (rule, load) measured once, the
    # spinner running exactly while the busy rows are measured, the rows and printed lines
    # labelled by load; a failing measurement stops the spinner
    from tests.test_bench_load import spinners

    bench = load_script("bench_cold_start")
    seen = []

    def fake_measure(rule, repeats, backend="default", load="idle"):
        seen.append((rule, load, len(spinners())))
        if rule == "fails":
            raise RuntimeError("fairagg run --rule fails failed")
        own = {"by_module": "models 1.00", "longest": "k 1.00", "repeated": ""}
        return {
            "load": load,
            "rule": rule,
            "backend": backend,
            "repeats": repeats,
            "t_cold_s": 3.0,
            "t_warm_s": 2.0,
            "one_off_s": 1.0,
            "extra_over_warm": 0.5,
            "compile_s": 1.0,
            "warm_compile_s": 0.0,
            "target_s": 4.0,
            "meets_target": True,
            "compiled": 3,
            "float32": False,
            **own,
        }

    monkeypatch.setattr(bench, "measure", fake_measure)
    args = ["--rules", "fedavg,afl", "--backends", "default", "--load", "both"]
    assert bench.main([*args, "--out", str(tmp_path)]) == 0
    assert seen == [
        ("fedavg", "idle", 0),
        ("afl", "idle", 0),
        ("fedavg", "busy", 1),
        ("afl", "busy", 1),
    ]
    assert spinners() == []
    rows = csv_rows(tmp_path / "bench_cold_start.csv")
    assert [(r["rule"], r["load"]) for r in rows] == [(r, load) for r, load, _ in seen]
    printed = capsys.readouterr().out
    assert "[idle] fedavg" in printed and "[busy] afl" in printed
    with pytest.raises(RuntimeError, match="fails failed"):
        bench.main(["--rules", "fails", "--load", "busy", "--out", str(tmp_path)])
    assert seen[-1] == ("fails", "busy", 1) and spinners() == []


@pytest.fixture(scope="module")
def fedmgda_step(tmp_path_factory):
    """The compilations of one FedMGDA+ aggregation step on the Numba backend in a fresh process
    with an empty Numba cache, from the package's import on."""
    import os
    import subprocess
    import sys

    from tests.scripts import VALIDATE

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path_factory.mktemp("numba-cache")))
    proc = subprocess.run(
        [sys.executable, str(VALIDATE / "bench_cold_start.py"), "--child-aggregate", "fedmgda"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_fedmgda_step_compiles_only_what_it_uses(fedmgda_step):
    # "Compile only what a run uses" (issue 38 item 6), counted instead of timed: importing the
    # package compiles nothing; the step compiles the Gram and update kernels and the positive
    # definite QP path for float64 only, each once: not the bordered-LU fallback
    # (_active_set_lu, _bordered_kkt), which a run compiles only if it takes it, and not
    # np.sort's quicksort (a dozen helpers; _box_crossing sorts with a heapsort of its own). The
    # QP's pieces are called one by one from Python (_qp is not compiled: a compiled caller
    # optimised and generated the machine code of all of them again), the input check is NumPy
    # (_symmetrize, all_finite: not compiled) and the box projection is two functions (five
    # before). 10 of the QP's functions: absmax is compiled for 1-D arrays only, not also for A.
    s = fedmgda_step
    names = [name.rsplit(".", 1)[-1] for name, _ in s["compiled"]]
    assert s["at_import"] == 0
    assert not {"_qp_chol", "_qp_lu", "_active_set_lu", "_bordered_kkt"} & set(names), names
    assert not {"_symmetrize", "all_finite"} & set(names), names
    assert {"_active_set_chol", "_gram_chunks_plain", "_box_crossing"} <= set(names), names
    assert "_gram_chunks_whole" not in names  # 6 clients, no copy: the Gram pass's plain version
    assert not {"_heap_sort", "_box_free", "_box_sum"} & set(names), names
    assert not s["float32"] and not any("float32" in args for _, args in s["compiled"])
    assert s["repeated"] == []
    assert names.count("absmax") == 1, names
    qp = [name for name, _ in s["compiled"] if name.startswith("fairagg.simplex.")]
    assert len(qp) <= 10, qp
    assert len(s["compiled"]) <= 18, names
    # the simplex QP's compilations start in its private modules (fairagg.simplex._active_set, ...)
    assert {m.split(".")[0] if m.startswith("simplex.") else m for m in s["by_module"]} == {
        "kernels.cpu",
        "simplex",
    }


def _events(script):
    """Fake ``numba:compile`` events: ``script`` is [(time, "start"/"end", module, name, args)]."""
    from types import SimpleNamespace

    out = []
    for ts, kind, module, name, args in script:
        fn = SimpleNamespace(__module__=module, __qualname__=name)
        data = {"dispatcher": SimpleNamespace(py_func=fn), "args": args}
        out.append((ts, SimpleNamespace(is_start=kind == "start", data=data)))
    return out


def test_summarize_counts_own_time_and_literal_repeats():
    bench = load_script("bench_cold_start")
    qp, kkt, lib = "fairagg.simplex", "fairagg.simplex", "numba.np.arraymath"
    s = bench.summarize(
        _events(
            [
                (0.0, "start", qp, "_qp", "(A, int64)"),
                (1.0, "start", kkt, "_chol_kkt", "(A, Literal[int](0))"),
                (1.5, "end", kkt, "_chol_kkt", ""),
                (2.0, "start", kkt, "_chol_kkt", "(A, int64)"),
                (2.25, "end", kkt, "_chol_kkt", ""),
                (3.0, "start", lib, "np_sort", "(A,)"),
                (3.5, "start", lib, "np_sort", "(A,)"),  # not fairagg's: never listed
                (3.75, "end", lib, "np_sort", ""),
                (4.0, "end", lib, "np_sort", ""),
                (5.0, "start", kkt, "_absmax", "(A2,)"),
                (5.5, "end", kkt, "_absmax", ""),
                (6.0, "start", kkt, "_absmax", "(A1,)"),  # other types: a legitimate second
                (6.5, "end", kkt, "_absmax", ""),
                (7.0, "end", qp, "_qp", ""),
                (8.0, "start", qp, "_box_project", "(A,)"),
                (8.5, "end", qp, "_box_project", ""),
            ]
        )
    )
    assert s["compile_s"] == 7.5  # the outermost compilations: 7.0 + 0.5
    assert s["own"]["fairagg.simplex._qp"] == 7.0 - 0.75 - 1.0 - 1.0
    assert s["own"]["fairagg.simplex._chol_kkt"] == 0.75
    assert s["repeated"] == ["fairagg.simplex._chol_kkt"]
    assert not any(k.startswith("numba") for k in s["own"])
