"""The fast backend by default where speed is the point (issue "Fast at every scale", item 3):
``simulate``, ``fairagg run``/``compare`` and ``FairaggStrategy`` build rules on
``backend="auto"``; the factories, ``make_rule`` and the formula functions keep ``"numpy"``."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from fairagg import RULES, make_rule, simulate
from fairagg.cli import main
from fairagg.data import synthetic
from fairagg.kernels import available_backends, resolve_backend
from fairagg.models import LogisticRegression
from fairagg.simulation import load_checkpoint

DATA = synthetic(0.5, 0.5, 6, seed=0)
MODEL = LogisticRegression(60, 10)
RUN = dict(rounds=2, clients_per_round=3, epochs=1)
#: What "auto" is here: cuda where numba sees a GPU (the simulator never counts), else numba.
AUTO = "cuda" if "cuda" in available_backends() else "numba"
SMALL = ["--clients", "6", "--clients-per-round", "3", "--rounds", "2", "--epochs", "1",
         "--model", "logistic", "--quiet"]  # fmt: skip


def test_auto_is_numba_on_a_cpu_and_cuda_with_a_gpu(monkeypatch):
    import fairagg.kernels as k

    monkeypatch.setattr(k, "available_backends", lambda **_: k.BACKENDS[:2])  # a CPU only
    assert resolve_backend("auto") == "numba"
    monkeypatch.setattr(k, "available_backends", lambda **_: k.BACKENDS)
    assert resolve_backend("auto") == "cuda"
    for b in k.BACKENDS:
        assert resolve_backend(b) == b
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'numpy'"):
        resolve_backend("gpu")


def test_factories_and_make_rule_keep_the_specification():
    for name, spec in RULES.items():
        assert inspect.signature(spec.factory).parameters["backend"].default == "numpy", name
        assert make_rule(name).hyperparams["backend"] == "numpy", name


def test_simulate_builds_a_named_rule_on_auto_and_records_it():
    h = simulate("fedavg", MODEL, DATA, **RUN)
    assert h.config["rule_hyperparams"]["backend"] == AUTO
    ref = simulate("fedavg", MODEL, DATA, **RUN, backend="numpy")
    assert ref.config["rule_hyperparams"]["backend"] == "numpy"
    # round-off apart (docs: Conventions, Backends), not bit for bit
    np.testing.assert_allclose(h.final_params, ref.final_params, rtol=1e-9, atol=1e-12)


def test_a_built_rule_keeps_its_backend_and_refuses_another():
    built = make_rule("fedavg")  # numpy
    h = simulate(built, MODEL, DATA, **RUN)
    assert h.config["rule_hyperparams"]["backend"] == "numpy"
    same = simulate(built, MODEL, DATA, **RUN, backend="numpy")
    assert np.array_equal(same.final_params, h.final_params)
    with pytest.raises(ValueError, match="backend='numba' cannot change a built rule"):
        simulate(built, MODEL, DATA, **RUN, backend="numba")
    with pytest.raises(ValueError, match="backend must be one of"):
        simulate("fedavg", MODEL, DATA, **RUN, backend="gpu")
    with pytest.raises(ValueError, match="backend must be one of"):
        simulate("fedavg", MODEL, DATA, **RUN, backend=1)


def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch):
    import fairagg.kernels as k

    monkeypatch.setattr(k._cuda(), "available", lambda: False)
    with pytest.raises(ValueError, match="backend='cuda' needs a CUDA GPU"):
        simulate("fedavg", MODEL, DATA, **RUN, backend="cuda")


def test_the_command_line_runs_on_auto_and_takes_backend(tmp_path, capsys):
    main(["run", *SMALL, "--out", str(tmp_path / "a")])
    assert json.loads((tmp_path / "a" / "config.json").read_text())["backend"] == "auto"
    saved = load_checkpoint(tmp_path / "a" / "checkpoint.npz")
    assert saved["config"]["rule_hyperparams"]["backend"] == AUTO
    main(["run", *SMALL, "--backend", "numpy", "--out", str(tmp_path / "b")])
    saved = load_checkpoint(tmp_path / "b" / "checkpoint.npz")
    assert saved["config"]["rule_hyperparams"]["backend"] == "numpy"


def test_the_command_line_refuses_cuda_without_a_gpu(tmp_path, monkeypatch, capsys):
    import fairagg.kernels as k

    monkeypatch.setattr(k._cuda(), "available", lambda: False)
    assert main(["run", *SMALL, "--backend", "cuda", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fairagg: error: --backend cannot be 'cuda' here")
    assert not (tmp_path / "c").exists()


def test_a_run_written_before_backend_resumes_on_numpy(tmp_path, capsys):
    """Runs of older versions recorded no backend and ran on numpy: they resume there, to the
    bits of a run that never stopped."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    main(["run", *SMALL, "--backend", "numpy", "--out", str(whole)])
    main(
        ["run", *[a if a != "2" else "1" for a in SMALL], "--backend", "numpy", "--out", str(part)]
    )
    cfg = json.loads((part / "config.json").read_text())
    del cfg["backend"]  # as an older version wrote it
    (part / "config.json").write_text(json.dumps(cfg))
    main(["run", "--resume", str(part), "--rounds", "2", "--quiet"])
    a = load_checkpoint(whole / "checkpoint.npz")["params"]
    b = load_checkpoint(part / "checkpoint.npz")["params"]
    assert np.array_equal(a, b)


def test_the_flower_strategy_builds_on_auto():
    pytest.importorskip("flwr")
    from fairagg.flower import FairaggStrategy, QFedAvg

    assert FairaggStrategy("fedavg").rule.hyperparams["backend"] == AUTO
    assert FairaggStrategy("fedavg", backend="numpy").rule.hyperparams["backend"] == "numpy"
    assert FairaggStrategy(make_rule("term")).rule.hyperparams["backend"] == "numpy"
    with pytest.raises(ValueError, match="cannot change a built rule"):
        FairaggStrategy(make_rule("term"), backend="numba")
    assert QFedAvg(0.1).rule.hyperparams["backend"] == AUTO
    assert QFedAvg(0.1, backend="numpy").rule.hyperparams["backend"] == "numpy"


def test_a_comparison_written_before_backend_resumes_on_numpy(tmp_path, capsys):
    from fairagg.cli._compare import _stored_compare_args

    out = tmp_path / "cmp"
    argv = ["compare", "--rules", "fedavg", *SMALL[:-1], "--quiet", "--out", str(out)]
    argv[argv.index("--rounds") + 1] = "1"
    main(argv)
    assert _stored_compare_args(out)[0].backend == "auto"
    cfg = json.loads((out / "config.json").read_text())
    del cfg["backend"]  # as an older version wrote it
    (out / "config.json").write_text(json.dumps(cfg))
    assert _stored_compare_args(out)[0].backend == "numpy"


@pytest.mark.parametrize("name", ["fedavg", "fedfv"])
def test_simulate_runs_on_cuda_as_auto_does_with_a_gpu(name):
    """The path auto takes on a GPU: a whole run on backend="cuda" (numba's simulator on CI)
    ends where the numpy run ends, round-off apart, with host arrays throughout."""
    a = simulate(name, MODEL, DATA, **RUN, backend="cuda")
    b = simulate(name, MODEL, DATA, **RUN, backend="numpy")
    assert a.config["rule_hyperparams"]["backend"] == "cuda"
    assert isinstance(a.final_params, np.ndarray)
    np.testing.assert_allclose(a.final_params, b.final_params, rtol=1e-9, atol=1e-12)
