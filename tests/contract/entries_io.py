"""Contract entries of the I/O side: data, local training, the simulator and its history, plots,
golden vectors, the conformance harness, the Flower adapter, the CLI, the models, and the
model-level certificate and oracles.

Shared fixtures (a tiny federated dataset, models, a hand-built history) are built once and
memoised; every call on them takes milliseconds. Entries whose calls reach compiled (Numba) code
run in the child interpreter (``subprocess=True``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

import fairagg
from fairagg import flower
from fairagg._worker import WorkerError
from fairagg.flower import RecordDict  # flwr, imported the way fairagg.flower does (quietly)
from fairagg.models import LogisticRegression
from fairagg.oracles import OracleError
from tests.contract.driver import CONSTANT, EXCEPTION, TYPE, Entry
from tests.contract.strategies import f64, floats, on_simplex, size

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"

P, C = 3, 3  # features and classes of the shared dataset

# Every folder the entries create lives under one per-process directory removed at exit: the
# entries run hundreds of times a session, and folders made by tempfile.mkdtemp alone were left
# behind (about 135 a run of the suite).
_SCRATCH = tempfile.TemporaryDirectory(prefix="fairagg-contract-")


def _scratch(prefix: str | None = None) -> str:
    """A new empty folder under this process's scratch directory."""
    return tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH.name)


# --------------------------------------------------------------------------------------------
# shared fixtures (built once)


@functools.cache
def _data():
    """Three clients of 6 to 8 rows, 3 features, 3 classes."""
    from fairagg.data import from_client_arrays

    rng = np.random.default_rng(0)
    clients = []
    for n in (6, 7, 8):
        y = np.arange(n) % C
        clients.append((rng.normal(size=(n, P)) + y[:, None], y))
    return from_client_arrays(clients, n_classes=C, test_fraction=0.3, name="tiny")


@functools.cache
def _logistic():
    from fairagg.models import LogisticRegression

    return LogisticRegression(P, C)


@functools.cache
def _mlp():
    from fairagg.models import MLP

    return MLP(P, C, n_hidden=4)


def _model(draw: Any):
    return draw(st.sampled_from([_logistic(), _mlp()]))


def _params(draw: Any, model: Any) -> np.ndarray:
    return floats(draw, model.num_params, -0.5, 0.5)


@functools.cache
def _history():
    """A history of three rounds on the shared dataset, recorded by hand (no compiled code)."""
    from fairagg.simulation import History

    data = _data()
    K = data.num_clients
    h = History({"rule": "fedavg"}, data.num_train_samples, data.num_test_samples)
    rng = np.random.default_rng(1)
    h.record_eval(0, rng.uniform(0, 1, K), rng.uniform(0.5, 2, K), rng.uniform(0, 1, K),
                  rng.uniform(0.5, 2, K), 0.0)  # fmt: skip
    for t in range(1, 5):
        h.record_round(t, np.array([0, 2]), np.array([0.5, 0.5]), rng.uniform(0.5, 2, 2), 0, 0)
        h.record_eval(t, rng.uniform(0, 1, K), rng.uniform(0.5, 2, K), rng.uniform(0, 1, K),
                      rng.uniform(0.5, 2, K), 0.0)  # fmt: skip
    h.status = "completed"
    return h


def _assert(ok: bool, what: Any) -> None:
    if not ok:
        raise AssertionError(what)


def _fails_as_assertion(fn):
    """Report an exception raised by a check's own calls as a property failure."""

    @functools.wraps(fn)
    def check(kwargs: dict[str, Any], result: Any) -> None:
        try:
            fn(kwargs, result)
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - any other error is a broken property
            raise AssertionError(f"{type(exc).__name__}: {exc}") from exc

    return check


# --------------------------------------------------------------------------------------------
# fairagg.data


def _federated_ok(kwargs: dict[str, Any], d: Any, *, rows: int | None = None) -> None:
    from fairagg.data import FederatedData

    assert isinstance(d, FederatedData), type(d)
    for split in ("train", "test"):
        X, y, off = (
            getattr(d, f"X_{split}"),
            getattr(d, f"y_{split}"),
            getattr(d, f"{split}_offsets"),
        )
        assert X.dtype == np.float64 and X.ndim == 2 and X.flags.c_contiguous, (X.dtype, X.shape)
        assert y.dtype == np.int64 and y.shape == (X.shape[0],), (y.dtype, y.shape)
        assert off.dtype == np.int64 and off[0] == 0 and off[-1] == X.shape[0], off
        assert (np.diff(off) >= 1).all(), f"a client without {split} rows: {off}"
        assert y.min() >= 0 and y.max() < d.n_classes
        assert np.isfinite(X).all()
    assert d.test_offsets.shape == d.train_offsets.shape
    if rows is not None:
        got = d.X_train.shape[0] + d.X_test.shape[0]
        got += 0 if d.X_val is None else d.X_val.shape[0]
        assert got == rows, f"{got} rows, not {rows}"


def _labelled(draw: Any, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    n = size(draw, 8, 14) if n is None else n
    X = floats(draw, (n, size(draw, 1, 3)))
    y = np.arange(n, dtype=np.int64) % 3
    return X, y


def _federate(draw: Any) -> dict[str, Any]:
    from fairagg.data import partition_iid

    X, y = _labelled(draw)
    return {
        "X": X,
        "y": y,
        "parts": partition_iid(X.shape[0], 2, seed=draw(st.integers(0, 9))),
        "n_classes": 3,
        "test_fraction": 0.25,
        "val_fraction": 0.0,
        "seed": draw(st.integers(0, 9)),
        "name": "t",
    }


def _federate_check(kwargs: dict[str, Any], d: Any) -> None:
    parts = kwargs["parts"]
    _federated_ok(kwargs, d, rows=sum(len(p) for p in parts))
    assert d.num_clients == len(parts)
    X = f64(kwargs["X"])
    if X.ndim == 2 and X.shape[1] == d.n_features:  # every row is a row of X
        rows = {r.tobytes() for r in X}
        assert all(r.tobytes() in rows for r in d.X_train), "a training row is not a row of X"


def _client_arrays(draw: Any) -> dict[str, Any]:
    clients = [_labelled(draw, size(draw, 4, 6)) for _ in range(size(draw, 1, 3))]
    p = clients[0][0].shape[1]
    clients = [(X[:, :1].repeat(p, axis=1) if X.shape[1] != p else X, y) for X, y in clients]
    return {"clients": clients, "n_classes": 3, "test_fraction": 0.25, "seed": 0, "name": "c"}


def _from_clients_check(kwargs: dict[str, Any], d: Any) -> None:
    clients = kwargs["clients"]
    _federated_ok(kwargs, d, rows=sum(len(c[1]) for c in clients))
    assert d.num_clients == len(clients)
    assert (d.num_train_samples + d.num_test_samples == [len(c[1]) for c in clients]).all()


def _covers_once(kwargs: dict[str, Any], parts: Any) -> None:
    n = kwargs.get("num_items")
    if n is None:
        n = len(kwargs["labels"])
    assert isinstance(parts, list) and len(parts) == kwargs["num_clients"], len(parts)
    for p in parts:
        assert isinstance(p, np.ndarray) and p.dtype == np.int64 and p.ndim == 1, p
        assert p.size >= kwargs.get("min_size", 1), f"a part of {p.size} items"
    flat = np.sort(np.concatenate(parts))
    assert np.array_equal(flat, np.arange(n)), "the parts do not cover range(N) exactly once"


def _labels(draw: Any) -> np.ndarray:
    n = size(draw, 6, 16)
    return draw(st.lists(st.integers(0, 3), min_size=n, max_size=n).map(np.array)).astype(np.int64)


def _synthetic_clients_check(kwargs: dict[str, Any], clients: Any) -> None:
    assert len(clients) == kwargs["num_clients"]
    cap = kwargs.get("max_samples_per_client")
    for X, y in clients:
        assert X.dtype == np.float64 and X.shape[1] == 60 and np.isfinite(X).all()
        assert y.dtype == np.int64 and y.shape == (X.shape[0],) and 0 <= y.min() and y.max() < 10
        assert X.shape[0] >= 1 and (cap is None or X.shape[0] <= cap)


def _synthetic_kwargs(draw: Any) -> dict[str, Any]:
    return {
        "alpha": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "beta": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "num_clients": size(draw, 1, 3),
        "iid": draw(st.booleans()),
        "seed": draw(st.integers(0, 9)),
        "max_samples_per_client": 12,
    }


def _load_check(kwargs: dict[str, Any], d: Any) -> None:
    _federated_ok(kwargs, d)
    assert d.num_clients == kwargs["num_clients"] and d.n_classes == 10


DATA = {
    "fairagg.data.DATA_SPECS": CONSTANT,
    # a record type: its consumers validate it (check_federated_data), a NamedTuple cannot
    "fairagg.data.FederatedData": TYPE,
    "fairagg.data.federate": Entry(valid=_federate, check=_federate_check),
    "fairagg.data.from_client_arrays": Entry(valid=_client_arrays, check=_from_clients_check),
    "fairagg.data.load": Entry(
        valid=lambda draw: {
            "spec": draw(st.sampled_from(["synthetic_iid", "synthetic:1,0.5", "digits:iid"])),
            "num_clients": size(draw, 2, 3),
            "seed": draw(st.integers(0, 9)),
            "test_fraction": 0.25,
        },
        check=_load_check,
        examples=1,
    ),
    "fairagg.data.load_digits": Entry(
        valid=lambda draw: {
            "num_clients": size(draw, 2, 4),
            "partition": draw(st.sampled_from(["iid", "powerlaw", "shards", "dirichlet"])),
            "alpha": 1.0,
            "seed": draw(st.integers(0, 9)),
            "test_fraction": 0.25,
        },
        check=_load_check,
        examples=1,
    ),
    "fairagg.data.partition_iid": Entry(
        valid=lambda draw: {
            "num_items": (n := size(draw, 1, 20)),
            "num_clients": size(draw, 1, n),
            "seed": draw(st.integers(0, 9)),
        },
        check=_covers_once,
    ),
    "fairagg.data.partition_power_law": Entry(
        valid=lambda draw: {
            "num_items": (n := size(draw, 4, 20)),
            "num_clients": size(draw, 1, n // 2),
            "exponent": draw(st.sampled_from([0.5, 1.5, 3.0])),
            "min_size": 2,
            "seed": draw(st.integers(0, 9)),
        },
        check=_covers_once,
    ),
    "fairagg.data.partition_shards": Entry(
        valid=lambda draw: {
            "labels": (y := _labels(draw)),
            "num_clients": size(draw, 1, len(y) // 2),
            "shards_per_client": 2,
            "seed": draw(st.integers(0, 9)),
        },
        check=_covers_once,
    ),
    "fairagg.data.partition_dirichlet": Entry(
        valid=lambda draw: {
            "labels": (y := _labels(draw)),
            "num_clients": size(draw, 1, len(y) // 3),
            "alpha": 5.0,
            "min_size": 1,
            "max_tries": 50,
            "seed": draw(st.integers(0, 9)),
        },
        check=_covers_once,
    ),
    "fairagg.data.synthetic": Entry(
        valid=lambda draw: {
            **_synthetic_kwargs(draw),
            "test_fraction": 0.25,
            "val_fraction": 0.0,
            "split_seed": 3,
        },
        check=_federated_ok,
    ),
    "fairagg.data.synthetic_clients": Entry(
        valid=_synthetic_kwargs, check=_synthetic_clients_check
    ),
}


# --------------------------------------------------------------------------------------------
# fairagg.local (compiled: child process)


def _clients(draw: Any) -> np.ndarray:
    K = _data().num_clients
    return np.array(draw(st.lists(st.integers(0, K - 1), min_size=1, max_size=K, unique=True)))


@_fails_as_assertion
def _local_check(kwargs: dict[str, Any], res: Any) -> None:
    from fairagg.local import LocalResult, client_shuffles, sgd_reference

    assert isinstance(res, LocalResult), type(res)
    ids = np.asarray(kwargs["clients"]).astype(np.int64)
    params = np.asarray(kwargs["params"])
    data = kwargs["data"]
    m, d = ids.size, params.size
    assert res.deltas.shape == (m, d) and res.deltas.dtype == params.dtype, res.deltas.shape
    assert res.losses.shape == (m,) and res.accuracies.shape == (m,)
    assert ((res.accuracies >= 0) & (res.accuracies <= 1)).all(), res.accuracies
    assert np.array_equal(res.num_samples, data.num_train_samples[ids])
    if "epochs" in kwargs and params.dtype == np.float64:  # the NumPy specification, client 0
        k = int(ids[0])
        X, y = data.client_train(k)
        order = client_shuffles(
            X.shape[0], kwargs["epochs"], kwargs["seed"], kwargs["round_index"], k
        )
        try:
            delta, loss, acc = sgd_reference(
                kwargs["model"], params, X, y, order, batch_size=kwargs["batch_size"],
                lr=kwargs["lr"], momentum=kwargs["momentum"], prox_mu=kwargs["prox_mu"],
            )  # fmt: skip
        except FloatingPointError:
            return  # the specification diverges (a step of 2^1000): nothing to compare
        scale = max(1.0, float(np.abs(delta).max()))
        assert np.allclose(res.deltas[0], delta, rtol=1e-9, atol=1e-9 * scale), "not the spec"
        assert abs(res.losses[0] - loss) <= 1e-9 * max(1.0, abs(loss)) and res.accuracies[0] == acc


@_fails_as_assertion
def _trained_accuracies_check(kwargs: dict[str, Any], acc: Any) -> None:
    """Each entry is the training accuracy of θ − δ_i on client i's rows, computed directly."""
    model, data = kwargs["model"], kwargs["data"]
    theta, deltas = f64(kwargs["params"]), f64(kwargs["deltas"])
    ids = np.asarray(kwargs["clients"]).astype(np.int64)
    assert acc.shape == (ids.size,) and acc.dtype == np.float64, acc
    for i, k in enumerate(ids):
        X, y = data.client_train(int(k))
        assert acc[i] == model.accuracy(theta - deltas[i], X, y), (i, acc[i])


def _train_kwargs(draw: Any) -> dict[str, Any]:
    model = _model(draw)
    return {
        "model": model,
        "params": _params(draw, model),
        "data": _data(),
        "clients": _clients(draw),
        "epochs": size(draw, 1, 2),
        "batch_size": size(draw, 2, 5),
        "lr": 0.1,
        "momentum": draw(st.sampled_from([0.0, 0.5])),
        "prox_mu": draw(st.sampled_from([0.0, 0.1])),
        "seed": draw(st.integers(0, 9)),
        "round_index": draw(st.integers(0, 3)),
        "parallel": draw(st.booleans()),
    }


def _shuffles_check(kwargs: dict[str, Any], order: Any) -> None:
    n, e = kwargs["num_samples"], kwargs["epochs"]
    assert order.shape == (e, n) and order.dtype == np.int64, order.shape
    for row in order:
        assert np.array_equal(np.sort(row), np.arange(n)), "a row is not a permutation"


def _propfair_scale_check(kwargs: dict[str, Any], s: Any) -> None:
    f, m, eps, huber = (kwargs[k] for k in ("f", "m", "epsilon", "huber"))
    want = 1.0 / (m - f) if m - f >= eps else (1.0 / eps if huber else 1.0 / m)
    assert isinstance(s, float) and s == want, (s, want)


LOCAL = {
    "fairagg.local.LocalResult": TYPE,
    "fairagg.local.check_propfair": Entry(
        valid=lambda draw: {
            "m": draw(st.sampled_from([1.0, 10.0])),
            "epsilon": 0.2,
            "huber": draw(st.booleans()),
        },
        check=lambda k, r: _assert(r == (k["m"] or 0.0, k["epsilon"], k["huber"]), r),
    ),
    "fairagg.local.client_shuffles": Entry(
        valid=lambda draw: {
            "num_samples": size(draw, 1, 8),
            "epochs": size(draw, 1, 3),
            "seed": draw(st.integers(0, 9)),
            "round_index": draw(st.integers(0, 9)),
            "client": draw(st.integers(0, 9)),
        },
        check=_shuffles_check,
    ),
    "fairagg.local.propfair_scale": Entry(
        valid=lambda draw: {
            "f": floats(draw, (), 0.0, 3.0).item(),
            "m": 2.0,
            "epsilon": 0.2,
            "huber": draw(st.booleans()),
        },
        check=_propfair_scale_check,
    ),
    "fairagg.local.train_clients": Entry(
        valid=_train_kwargs, check=_local_check, allowed=(FloatingPointError,), subprocess=True
    ),
    "fairagg.local.client_gradients": Entry(
        valid=lambda draw: {
            "model": (m := _model(draw)),
            "params": _params(draw, m),
            "data": _data(),
            "clients": _clients(draw),
            "batch_size": draw(st.sampled_from([None, 2, 4])),
            "seed": draw(st.integers(0, 9)),
            "round_index": draw(st.integers(0, 3)),
        },
        check=_local_check,
        subprocess=True,
    ),
    "fairagg.local.trained_accuracies": Entry(
        valid=lambda draw: {
            "model": (m := _model(draw)),
            "params": _params(draw, m),
            "deltas": floats(draw, ((ids := _clients(draw)).size, m.num_params), -0.5, 0.5),
            "data": _data(),
            "clients": ids,
        },
        check=_trained_accuracies_check,
        subprocess=True,
    ),
    "fairagg.local.sgd_reference": Entry(
        valid=lambda draw: {
            "model": (m := _model(draw)),
            "params": _params(draw, m),
            "X": (X := _data().client_train(0)[0]),
            "y": _data().client_train(0)[1],
            "order": np.stack([np.random.default_rng(s).permutation(len(X)) for s in (0, 1)]),
            "batch_size": size(draw, 2, 5),
            "lr": 0.1,
            "momentum": 0.0,
            "prox_mu": 0.0,
        },
        check=lambda k, r: _assert(r[0].shape == (k["model"].num_params,) and 0 <= r[2] <= 1, r),
        allowed=(FloatingPointError,),  # as in simulate: the training diverged (lower lr)
        subprocess=True,
    ),
}


# --------------------------------------------------------------------------------------------
# fairagg.simulate


class _Stop(Exception):
    pass


def _simulate(**kwargs: Any) -> Any:
    """simulate, stopped after 3 rounds by a callback: ``rounds`` may be drawn as 2^70, a valid
    count that would run for ever; the history then holds the 3 rounds completed."""
    from fairagg.simulation import simulate

    def stop(history: Any) -> None:
        if history.num_rounds >= 3:
            raise _Stop

    history = kwargs.get("history")
    here, there = os.getcwd(), _scratch()
    os.chdir(there)  # a checkpoint drawn as a relative path ("text") is written there
    try:
        return simulate(**kwargs, callback=stop)
    except _Stop as exc:
        return exc.history if history is None else history
    finally:
        os.chdir(here)


@_fails_as_assertion
def _simulate_check(kwargs: dict[str, Any], h: Any) -> None:
    from fairagg.simulation import History

    assert isinstance(h, History), type(h)
    T = min(kwargs["rounds"], 3) if isinstance(kwargs["rounds"], int) else None
    assert h.num_rounds == T, f"{h.num_rounds} rounds, not {T}"
    assert h.selected.shape == (T, kwargs["clients_per_round"]), h.selected.shape
    assert h.eval_round[0] == 0 and h.eval_round[-1] == T, h.eval_round
    assert np.isfinite(h.test_loss).all() and np.isfinite(h.final_params).all()
    assert h.test_accuracy.shape[1] == kwargs["data"].num_clients


def _history_check(kwargs: dict[str, Any], h: Any) -> None:
    from fairagg.simulation import History

    assert isinstance(h, History) and h.status == "running" and h.num_rounds == 0
    assert h.config == dict(kwargs["config"] or {})
    for key in ("num_train_samples", "num_test_samples"):
        got, want = getattr(h, key), kwargs[key]
        assert (got is None) == (want is None) and (
            want is None or np.array_equal(got, np.asarray(want))
        ), (key, got)


def _report_files() -> tuple[str, ...]:
    from fairagg.report import REPORT_FILES

    return REPORT_FILES


@functools.cache
def _run_folder() -> Path:
    """A run folder holding a saved history of one round."""
    from fairagg.simulation import simulate

    folder = Path(_scratch("run-"))
    atexit.register(shutil.rmtree, folder, True)  # the process's temporary run, not left behind
    h = simulate("fedavg", _logistic(), _data(), rounds=1, clients_per_round=2, epochs=1)
    h.save(folder / "history.npz")
    return folder


@functools.cache
def _checkpoint_file() -> Path:
    """A checkpoint of a one-round run, written once per process."""
    from fairagg.simulation import simulate

    folder = Path(_scratch("ckpt-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "run.ckpt"
    simulate("fedavg", _logistic(), _data(), rounds=1, clients_per_round=2, epochs=1,
             checkpoint=path)  # fmt: skip
    return path


SIMULATE = {
    "fairagg.simulation.simulate": Entry(
        valid=lambda draw: {
            "rule": draw(st.sampled_from(["fedavg", "qfedavg", "term"])),
            "model": _model(draw),
            "data": _data(),
            "rounds": size(draw, 1, 2),
            "clients_per_round": size(draw, 1, 3),
            "epochs": 1,
            "batch_size": size(draw, 2, 5),
            "lr": 0.1,
            "seed": draw(st.integers(0, 9)),
            "eval_every": 1,
            "checkpoint": None,
            "resume": False,
        },
        call=_simulate,
        check=_simulate_check,
        allowed=(FloatingPointError,),  # documented: local training or the rule diverged
        examples=1,
        subprocess=True,
    ),
    "fairagg.simulation.CHECKPOINT_OVERHEAD": CONSTANT,
    "fairagg.report.REPORT_FILES": CONSTANT,
    "fairagg.report.write_report": Entry(
        valid=lambda draw: {"runs": [str(_run_folder())], "out": _scratch()},
        call=lambda **kw: _in_fresh_folder("fairagg.report.write_report")(**kw),  # relative out
        check=lambda k, r: _assert([p.name for p in r] == list(_report_files()), r),
        deterministic=False,  # writes files
        examples=1,
        subprocess=True,
    ),
    "fairagg.simulation.load_checkpoint": Entry(
        valid=lambda draw: {"checkpoint": str(_checkpoint_file())},
        check=lambda k, r: _assert(r["round"] == 1 and r["history"].num_rounds == 1, r),
        allowed=(FileNotFoundError,),
        deterministic=False,
        examples=1,
        subprocess=True,
    ),
    "fairagg.simulation.History": Entry(
        valid=lambda draw: {
            "config": {"rule": "fedavg"},
            "num_train_samples": (n := np.array([4, 5, 6])),
            "num_test_samples": n // 2,
        },
        check=_history_check,
        deterministic=False,  # a new object each time (nothing numeric to compare)
    ),
}


# --------------------------------------------------------------------------------------------
# fairagg.plots


def _in_fresh_folder(fn_path: str):
    """Call the public function ``fn_path`` from a fresh temporary working folder: a bad family
    may turn an output path into a relative one (``"no-such-value"``), written there."""
    module, _, name = fn_path.rpartition(".")

    def call(**kwargs: Any) -> Any:
        import importlib
        import os

        fn = getattr(importlib.import_module(module), name)
        here, there = os.getcwd(), _scratch()
        os.chdir(there)
        try:
            out = fn(**kwargs)
        finally:
            os.chdir(here)
        if isinstance(out, Path) and not out.is_absolute():
            return Path(there, out)
        if isinstance(out, list) and out and all(isinstance(p, Path) for p in out):
            return [p if p.is_absolute() else Path(there, p) for p in out]
        return out

    return call


def _is_png(kwargs: dict[str, Any], path: Any) -> None:
    assert isinstance(path, Path) and str(path).endswith(str(kwargs["path"])), path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"


def _plot_kwargs(draw: Any) -> dict[str, Any]:
    n = size(draw, 1, 2)
    return {
        "histories": {f"rule{i}": _history() for i in range(n)},
        "path": str(Path(_scratch()) / "plot.png"),
    }


PLOTS = {
    "fairagg.plots.plot_curves": Entry(
        valid=_plot_kwargs,
        call=_in_fresh_folder("fairagg.plots.plot_curves"),
        check=_is_png,
        examples=1,
    ),
    "fairagg.plots.plot_accuracy_distribution": Entry(
        valid=_plot_kwargs,
        call=_in_fresh_folder("fairagg.plots.plot_accuracy_distribution"),
        check=_is_png,
        examples=1,
    ),
    "fairagg.plots.plot_acf": Entry(
        valid=lambda draw: {**_plot_kwargs(draw), "max_lag": size(draw, 1, 3)},
        call=_in_fresh_folder("fairagg.plots.plot_acf"),
        check=_is_png,
        examples=1,
    ),
}


# --------------------------------------------------------------------------------------------
# fairagg.vectors


def _cases_check(kwargs: dict[str, Any], cases: Any) -> None:
    assert isinstance(cases, dict) and cases, cases
    for what, inputs, params in cases.values():
        assert isinstance(what, str) and isinstance(inputs, dict) and isinstance(params, dict)


def _generate_check(kwargs: dict[str, Any], cases: Any) -> None:
    assert isinstance(cases, list) and len(cases) > 100, len(cases)
    assert {c["kind"] for c in cases} == {"rule", "formula"}


def _written_check(kwargs: dict[str, Any], paths: Any) -> None:
    from fairagg.vectors import check_vectors

    out = Path(kwargs["out"])
    if not out.is_absolute():  # written from a fresh folder: the paths returned say which
        first = Path(paths[0])
        out = Path(*first.parts[: len(first.parts) - first.parts[::-1].index(out.parts[0])])
    assert (out / "index.json").is_file() and (out / "schema.json").is_file()
    assert paths and all(Path(p).is_file() for p in paths)
    assert check_vectors(out) == [], "the vectors written do not check"


def _compare_check(kwargs: dict[str, Any], checks: Any) -> None:
    from fairagg.vectors import CaseCheck

    assert checks and all(isinstance(c, CaseCheck) and not c.fails for c in checks)


VECTORS = {
    "fairagg.vectors.FORMULAS": CONSTANT,
    "fairagg.vectors.INLINE_MAX": CONSTANT,
    "fairagg.vectors.SCHEMA_VERSION": CONSTANT,
    "fairagg.vectors.CaseCheck": TYPE,
    "fairagg.vectors.Formula": TYPE,
    "fairagg.vectors.case_inputs": Entry(
        valid=lambda draw: {
            "kind": (kind := draw(st.sampled_from(["rule", "formula"]))),
            "name": draw(
                st.sampled_from(["fedavg", "term"] if kind == "rule" else ["fedavg_weights"])
            ),
            "seed": draw(st.integers(0, 9)),
        },
        check=_cases_check,
    ),
    "fairagg.vectors.generate": Entry(
        valid=lambda draw: {"seed": draw(st.integers(0, 9))},
        check=_generate_check,
        examples=1,
        subprocess=True,
        # resolved_params hold documented infinities (min_norm_weights' upper = inf: no bound)
        finite=False,
    ),
    "fairagg.vectors.write_vectors": Entry(
        valid=lambda draw: {"out": _scratch(), "seed": draw(st.integers(0, 9))},
        call=_in_fresh_folder("fairagg.vectors.write_vectors"),
        check=_written_check,
        examples=1,
        deterministic=False,  # writes files; the paths differ from folder to folder
        subprocess=True,
    ),
    # a missing folder or file is a FileNotFoundError that names the argument
    "fairagg.vectors.compare_vectors": Entry(
        valid=lambda draw: {"root": str(GOLDEN)},
        check=_compare_check,
        allowed=(FileNotFoundError,),
        examples=1,
        subprocess=True,
    ),
    "fairagg.vectors.check_vectors": Entry(
        valid=lambda draw: {"root": str(GOLDEN)},
        check=lambda k, r: _assert(r == [], r),
        allowed=(FileNotFoundError,),
        examples=1,
        subprocess=True,
    ),
    "fairagg.vectors.load_case": Entry(
        valid=lambda draw: {
            "path": str(
                draw(
                    st.sampled_from(sorted((GOLDEN / "formulas" / "fedavg_weights").glob("*.json")))
                )
            )
        },
        check=lambda k, r: _assert({"kind", "name", "inputs", "expected"} <= set(r), sorted(r)),
        allowed=(FileNotFoundError,),
    ),
}


# --------------------------------------------------------------------------------------------
# fairagg.conformance


def _formula_fn(name: str) -> Any:
    import importlib

    from fairagg.vectors import FORMULAS

    module, _, attr = FORMULAS[name].function.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _report_check(kwargs: dict[str, Any], report: Any) -> None:
    from fairagg.conformance import ConformanceReport

    assert isinstance(report, ConformanceReport) and report.mismatch is None, report
    assert report.target == kwargs["target"] and report.golden + report.generated >= 1, report


_TEMPLATE = Path(fairagg.__file__).with_name("_worker_template.py")
_GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@functools.cache
def _results_file(case: str) -> Path:
    """A results file holding the golden answer of formulas/project_simplex/<case>."""
    import json

    from fairagg.vectors import load_case

    want = load_case(_GOLDEN / "formulas" / "project_simplex" / f"{case}.json")["expected"]
    path = Path(_scratch()) / "results.json"
    path.write_text(json.dumps({f"formulas/project_simplex/{case}": {"out": want["out"].tolist()}}))
    return path


def _worker_targets(**kwargs: Any) -> list[str]:
    """A Worker started on the template and closed: the targets it announced."""
    from fairagg.conformance import Worker

    with Worker(**kwargs) as w:
        return w.targets


CONFORMANCE = {
    "fairagg.conformance.ACCEPTABLE": CONSTANT,
    "fairagg.conformance.MISTAKES": CONSTANT,
    "fairagg.conformance.Cause": TYPE,
    "fairagg.conformance.Mistake": TYPE,
    "fairagg.conformance.ConformanceError": EXCEPTION,
    "fairagg.conformance.Skip": EXCEPTION,
    "fairagg.conformance.Row": TYPE,
    "fairagg._worker.WorkerError": EXCEPTION,
    "fairagg._worker.Worker": Entry(
        valid=lambda draw: {
            "command": [sys.executable, str(_TEMPLATE)],
            "timeout": draw(st.sampled_from([30.0, 60.0])),
            "cwd": None,
        },
        call=_worker_targets,
        check=lambda k, r: _assert(r == ["fedavg", "project_simplex"], r),
        allowed=(WorkerError,),
        fixed=("cwd",),
        examples=1,
    ),
    "fairagg.conformance.ConformanceReport": TYPE,
    "fairagg.conformance.Mismatch": TYPE,
    "fairagg.conformance.Adapter": Entry(
        valid=lambda draw: {
            "rename": {},
            "fixed": {},
            "outputs": draw(st.sampled_from([None, "x"])),
            "stateful": False,
        },
        deterministic=False,
    ),
    "fairagg.conformance.check": Entry(
        valid=lambda draw: {
            "fn": _formula_fn(target := draw(st.sampled_from(["fedavg_weights", "term_weights"]))),
            "target": target,
            "adapter": None,
            "params": None,
            "golden": True,
            "hypothesis": False,
            "max_examples": 2,
            "rtol": 1e-9,
            "atol": 1e-9,
            "precision": "float64",
            "solver_tol": None,
            "seed": draw(st.sampled_from([0, 7])),
            "generated": None,
            "derandomize": True,
            "raise_on_mismatch": True,
            "round_base": draw(st.sampled_from([0, 1])),
            "domain": None,
            "keep_going": draw(st.booleans()),
            "accept": draw(st.sampled_from([(), ["nan-on-zero-update"]])),
        },
        check=_report_check,
        examples=1,
        subprocess=True,
    ),
    "fairagg.conformance.compare_results": Entry(
        valid=lambda draw: {
            "results": str(_results_file(draw(st.sampled_from(["single", "inside"])))),
            "golden": str(_GOLDEN),
            "precision": draw(st.sampled_from(["float64", "float32"])),
            "rtol": None,
            "atol": None,
            "solver_tol": 1e-6,
        },
        check=lambda k, r: _assert(r.failed == 0 and r.golden == 1, r),
        fixed=("results", "golden"),
        allowed=(FileNotFoundError,),
    ),
    "fairagg.conformance.describe": Entry(
        valid=lambda draw: {"target": draw(st.sampled_from(["fedavg", "fedavg_weights"]))},
        check=lambda k, r: _assert(isinstance(r, str) and k["target"] in r, r),
    ),
    "fairagg.conformance.targets": Entry(
        valid=lambda draw: {},
        check=lambda k, r: _assert("fedavg" in r and "fedavg_weights" in r, r),
    ),
}


# --------------------------------------------------------------------------------------------
# fairagg.flower


@functools.cache
def _client_app():
    from fairagg.flower import fairagg_client_app

    return fairagg_client_app(_logistic(), _data())


def _train_content(draw: Any, model: Any) -> Any:
    from flwr.app import ConfigRecord, RecordDict

    from fairagg.flower import FairaggStrategy, params_to_arrays

    strategy = FairaggStrategy(draw(st.sampled_from(["fedavg", "qfedsgd"])), 3, lr=0.1)
    return RecordDict(
        {
            "arrays": params_to_arrays(_params(draw, model)),
            "config": ConfigRecord(strategy.train_config(draw(st.integers(1, 3)))),
        }
    )


@_fails_as_assertion
def _reply_check(kwargs: dict[str, Any], reply: Any) -> None:
    from fairagg.flower import ACCURACY, LOSS, NUM_EXAMPLES, TRAIN_LOSS

    assert isinstance(reply, RecordDict), type(reply)
    metrics = reply.metric_records["metrics"]
    loss = LOSS if not reply.array_records else TRAIN_LOSS  # evaluate / train reply
    assert 0 <= metrics[ACCURACY] <= 1 and np.isfinite(metrics[loss]), metrics
    k = int(kwargs["client_id"])
    data = kwargs["data"]
    sizes = (
        data.num_test_samples
        if "content" in kwargs and not reply.array_records
        else (data.num_train_samples)
    )
    assert metrics[NUM_EXAMPLES] == sizes[k], metrics
    for arrays in reply.array_records.values():
        from fairagg.flower import arrays_to_params

        assert arrays_to_params(arrays).shape == (kwargs["model"].num_params,)


@_fails_as_assertion
def _strategy_check(kwargs: dict[str, Any], s: Any) -> None:
    from fairagg.flower import TRAIN_CONFIG_KEYS

    assert s.num_clients == kwargs["num_clients"] and s.lr == kwargs["lr"]
    assert set(s.train_config(1)) == set(TRAIN_CONFIG_KEYS)


FLOWER = {
    **{
        f"fairagg.flower.{name}": CONSTANT
        for name in (
            "ACCURACY",
            "CLIENT_ID",
            "CONFIG_PREFIX",
            "DELTA_KEY",
            "GRADIENT_KEY",
            "LOSS",
            "NUM_EXAMPLES",
            "PARTITION_ID",
            "QUERY_MESSAGE_TYPE",
            "TRAIN_CONFIG_KEYS",
            "TRAIN_LOSS",
        )
    },
    "fairagg.flower.RoundLog": TYPE,
    "fairagg.flower.params_to_arrays": Entry(
        valid=lambda draw: {"params": floats(draw, size(draw, 1, 5)), "key": "theta"},
        check=lambda k, r: _assert(
            np.array_equal(flower.arrays_to_params(r), np.asarray(k["params"])),
            "no round trip",
        ),  # fmt: skip
        scale={"params": 1},
    ),
    "fairagg.flower.arrays_to_params": Entry(
        valid=lambda draw: {"arrays": flower.params_to_arrays(floats(draw, size(draw, 1, 5)))},
    ),
    "fairagg.flower.FairaggStrategy": Entry(
        valid=lambda draw: {
            "rule": draw(st.sampled_from(["fedavg", "qfedavg", "afl"])),
            "num_clients": (K := size(draw, 2, 4)),
            "clients_per_round": K,
            "sampling": "uniform",
            "seed": draw(st.integers(0, 9)),
            "epochs": 1,
            "batch_size": 4,
            "lr": 0.1,
            "prox_mu": 0.0,
            "on_failure": "drop",
            "discovery_timeout": 10.0,
            "train_loss_key": "train_loss",
            "evaluate_accuracy_key": "accuracy",
        },
        check=_strategy_check,
        deterministic=False,
    ),
    "fairagg.flower.QFedAvg": Entry(
        valid=lambda draw: {
            "client_learning_rate": draw(st.sampled_from([0.01, 0.1, 1.0])),
            "q": draw(st.sampled_from([0.0, 0.1, 2.0])),
            "train_loss_key": "train_loss",
        },
        check=lambda k, s: _assert(
            s.q == k["q"] and s.lr == k["client_learning_rate"] and s.rule.name == "qfedavg",
            "arguments not taken",
        ),  # fmt: skip
        deterministic=False,
    ),
    "fairagg.flower.InProcessGrid": Entry(
        valid=lambda draw: {
            "client_app": _client_app(),
            "num_nodes": (n := size(draw, 1, 3)),
            "seed": draw(st.integers(0, 9)),
            "failing": (0,) if n > 1 else (),
        },
        check=lambda k, g: _assert(len(g.get_node_ids()) == k["num_nodes"], "node count"),
        deterministic=False,
    ),
    "fairagg.flower.fairagg_client_app": Entry(
        valid=lambda draw: {
            "model": _model(draw),
            "data": _data(),
            "client_id": draw(st.integers(0, 2)),
            "reply": draw(st.sampled_from(["delta", "model"])),
        },
        check=lambda k, app: _assert(type(app).__name__ == "ClientApp", type(app)),
        deterministic=False,
    ),
    "fairagg.flower.query_reply": Entry(
        valid=lambda draw: {"data": _data(), "client_id": draw(st.integers(0, 2))},
        check=lambda k, r: _assert(
            r.metric_records["metrics"]["num-examples"]
            == _data().num_train_samples[int(k["client_id"])],
            r,
        ),  # fmt: skip
        deterministic=False,
    ),
    "fairagg.flower.train_reply": Entry(
        valid=lambda draw: {
            "model": (m := _model(draw)),
            "data": _data(),
            "client_id": draw(st.integers(0, 2)),
            "content": _train_content(draw, m),
            "reply": draw(st.sampled_from(["delta", "model"])),
        },
        check=_reply_check,
        allowed=(FloatingPointError,),
        deterministic=False,
        compare_copies=False,
        examples=1,
        subprocess=True,
    ),
    "fairagg.flower.evaluate_reply": Entry(
        valid=lambda draw: {
            "model": (m := _model(draw)),
            "data": _data(),
            "client_id": draw(st.integers(0, 2)),
            "content": RecordDict({"arrays": flower.params_to_arrays(_params(draw, m))}),
        },
        check=_reply_check,
        deterministic=False,
        compare_copies=False,
        examples=1,
        subprocess=True,
    ),
}


# --------------------------------------------------------------------------------------------
# fairagg.cli


def _main(argv: Any) -> Any:
    """cli.main with its output captured. argparse refuses bad command lines with
    SystemExit(2) and a message on stderr (its documented outcome): turned here into a
    ValueError carrying that message, prefixed with the argument's name, argv."""
    from fairagg.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["fairagg"]  # argv=None reads sys.argv[1:]: make that an empty command line
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return main(argv)
    except SystemExit as exc:
        if exc.code == 2:
            raise ValueError(f"argv: {err.getvalue().strip()}") from None
        raise
    finally:
        sys.argv = saved


def _cli_argv(draw: Any) -> dict[str, Any]:
    out = _scratch()
    tiny = ["--clients", "3", "--rounds", "2", "--epochs", "1", "--model", "logistic", "--quiet"]
    return {
        "argv": draw(
            st.sampled_from(
                [
                    ["rules"],
                    ["run", "--data", "synthetic_iid", "--clients-per-round", "2", "--out", out,
                     *tiny],
                    ["vectors", "--check", "--out", str(GOLDEN)],
                ]
            )
        )
    }  # fmt: skip


def _cli_check(kwargs: dict[str, Any], status: Any) -> None:
    assert status == 0, f"exit status {status}"
    argv = kwargs["argv"]
    if argv[0] == "run":
        out = Path(argv[argv.index("--out") + 1])
        for f in ("config.json", "summary.json", "curves.png", "acf.png"):
            assert (out / f).is_file(), f"{f} not written"


CLI = {
    "fairagg.cli.main": Entry(
        valid=_cli_argv, call=_main, check=_cli_check, examples=2, subprocess=True
    ),
}


# --------------------------------------------------------------------------------------------
# fairagg.models (model methods are compiled: child process)


@_fails_as_assertion
def _model_check(kwargs: dict[str, Any], model: Any) -> None:
    from fairagg.models import FlatModel

    assert isinstance(model, FlatModel), type(model)
    for key in ("n_features", "n_classes", "n_hidden", "activation", "l2"):
        if key in kwargs:
            assert getattr(model, key) == kwargs[key], key
    theta = model.init_params(0)
    assert theta.shape == (model.num_params,) and theta.dtype == np.float64
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, model.n_features))
    y = np.arange(4) % model.n_classes
    loss, grad = model.loss_and_grad(theta, X, y)
    loss_nb, grad_nb = model.loss_and_grad_numba(theta, X, y)
    assert np.isfinite(loss) and np.isfinite(grad).all(), (loss, grad)
    assert abs(loss - loss_nb) <= 1e-9 * max(1.0, abs(loss)), (loss, loss_nb)
    assert np.allclose(grad, grad_nb, rtol=1e-9, atol=1e-12), "the Numba gradient differs"


MODELS = {
    "fairagg.models._base.FlatModel": TYPE,
    "fairagg.models.make_model": Entry(
        valid=lambda draw: {
            "name": draw(st.sampled_from(["logistic", "mlp"])),
            "n_features": size(draw, 1, 4),
            "n_classes": size(draw, 2, 4),
        },
        check=_model_check,
        subprocess=True,
    ),
    "fairagg.models.logistic.LogisticRegression": Entry(
        valid=lambda draw: {
            "n_features": size(draw, 1, 4),
            "n_classes": size(draw, 2, 4),
            "l2": draw(st.sampled_from([0.0, 0.1])),
        },
        check=_model_check,
        subprocess=True,
    ),
    "fairagg.models.mlp.MLP": Entry(
        valid=lambda draw: {
            "n_features": size(draw, 1, 4),
            "n_classes": size(draw, 2, 4),
            "n_hidden": size(draw, 1, 4),
            "activation": draw(st.sampled_from(["tanh", "relu"])),
            "l2": draw(st.sampled_from([0.0, 0.1])),
        },
        check=_model_check,
        subprocess=True,
    ),
}


# --------------------------------------------------------------------------------------------
# fairagg.pareto and the federated oracles


def _tiny_federated(draw: Any) -> dict[str, Any]:
    """Two clients of 3 rows, 2 features, 2 classes (both classes at each client)."""
    X = floats(draw, (6, 2), -1.0, 1.0)
    return {
        "model": LogisticRegression(2, 2, l2=0.1),
        "X": X,
        "y": np.array([0, 1, 0, 1, 0, 1]),
        "offsets": np.array([0, 3, 6]),
    }


@_fails_as_assertion
def _minimax_check(kwargs: dict[str, Any], r: Any) -> None:
    """The AFL value is the worst client's loss at x (to the solver's tolerance), and the
    multipliers are a point of the simplex."""
    model, X = kwargs["model"], f64(kwargs["X"])
    y, off = (np.asarray(kwargs[k]).astype(np.int64) for k in ("y", "offsets"))
    losses = [model.loss(r.x, X[a:b], y[a:b]) for a, b in zip(off[:-1], off[1:], strict=True)]
    assert abs(r.value - max(losses)) <= 1e-6 * max(1.0, abs(r.value)), (r.value, losses)
    w = np.asarray(r.weights)
    assert w.shape == (len(off) - 1,) and (w >= -1e-7).all() and abs(w.sum() - 1) <= 1e-6, w


@_fails_as_assertion
def _qffl_check(kwargs: dict[str, Any], r: Any) -> None:
    """The q-FFL value is Σ_k p_k F_k(x)^(q+1)/(q+1) at x, p_k the clients' sample shares."""
    model, X, q = kwargs["model"], f64(kwargs["X"]), kwargs["q"]
    y, off = (np.asarray(kwargs[k]).astype(np.int64) for k in ("y", "offsets"))
    losses = np.array(
        [model.loss(r.x, X[a:b], y[a:b]) for a, b in zip(off[:-1], off[1:], strict=True)]
    )
    p = np.diff(off) / off[-1]
    want = float(p @ losses ** (q + 1) / (q + 1))
    assert abs(r.value - want) <= 1e-6 * max(1.0, abs(want)), (r.value, want)


ORACLES = {
    "fairagg.pareto.model_pareto_certificate": Entry(
        valid=lambda draw: {
            "model": (m := _model(draw)),
            "params": _params(draw, m),
            "data": _data(),
        },
        check=lambda k, r: on_simplex()(k, (r.weights,)),
        subprocess=True,
    ),
    "fairagg.oracles.afl_optimum": Entry(
        valid=_tiny_federated,
        check=_minimax_check,
        allowed=(OracleError,),
        examples=1,
    ),
    "fairagg.oracles.qffl_optimum": Entry(
        valid=lambda draw: {**_tiny_federated(draw), "q": draw(st.sampled_from([0.0, 1.0]))},
        check=_qffl_check,
        allowed=(OracleError,),
        examples=1,
    ),
}


ENTRIES: dict[str, Any] = {
    **DATA,
    **LOCAL,
    **SIMULATE,
    **PLOTS,
    **VECTORS,
    **CONFORMANCE,
    **FLOWER,
    **CLI,
    **MODELS,
    **ORACLES,
}
