"""The thread schedule of the CPU kernels (``fairagg.kernels._threads``): every task once, errors
raised, results bitwise independent of the thread count, and a FedAvg trajectory pinned to its
bits."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

from fairagg import simulate
from fairagg.data import synthetic
from fairagg.kernels import _threads as parallel
from fairagg.kernels._threads import num_threads, run_tasks, threads_for
from fairagg.local import client_gradients, train_clients
from fairagg.models import MLP, LogisticRegression
from fairagg.models import _base as model_base

MAX_THREADS = numba.config.NUMBA_NUM_THREADS
needs_two = pytest.mark.skipif(MAX_THREADS < 2, reason="Numba was started with one thread")


def with_threads(n, fn):
    old = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        return fn()
    finally:
        numba.set_num_threads(old)


def test_num_threads_follows_numba():
    assert with_threads(1, num_threads) == 1
    assert num_threads() == numba.get_num_threads()


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_run_tasks_calls_every_task_once(threads):
    seen = []
    lock = threading.Lock()

    def fn(i):
        with lock:
            seen.append(i)

    order = [5, 3, 9, 0, 1, 7]
    run_tasks(fn, order, threads)
    assert sorted(seen) == sorted(order)


def test_one_thread_runs_in_order_in_the_calling_thread():
    seen = []
    run_tasks(lambda i: seen.append((i, threading.get_ident())), [2, 0, 1], 1)
    assert seen == [
        (2, threading.get_ident()),
        (0, threading.get_ident()),
        (1, threading.get_ident()),
    ]
    seen.clear()
    with_threads(1, lambda: run_tasks(lambda i: seen.append(threading.get_ident()), [0, 1, 2]))
    assert set(seen) == {threading.get_ident()}


@needs_two
def test_two_threads_share_the_tasks():
    gate = threading.Barrier(2, timeout=10)
    who = {}

    def fn(i):
        who[i] = threading.get_ident()
        if i < 2:
            gate.wait()  # the first two tasks run at once, or the barrier times out

    run_tasks(fn, [0, 1, 2, 3], 2)
    assert len(set(who.values())) == 2 and sorted(who) == [0, 1, 2, 3]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("where", [0, 3])
def test_run_tasks_raises_the_error_and_stops_starting_tasks(threads, where):
    started = []

    def fn(i):
        started.append(i)
        if i == where:
            raise ZeroDivisionError(f"task {i}")

    with pytest.raises(ZeroDivisionError, match=f"task {where}"):
        run_tasks(fn, list(range(50)), threads)
    assert len(started) < 50


# --------------------------------------------------------------------------------------------
# bitwise independence of the thread count
# --------------------------------------------------------------------------------------------

DATA = synthetic(1, 1, 30, seed=0)
MODELS = {
    "logistic": LogisticRegression(60, 10, l2=1e-3),
    "tanh": MLP(60, 10, n_hidden=8),
    "relu": MLP(60, 10, n_hidden=8, activation="relu"),
}


@needs_two
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(MODELS))
def test_evaluation_does_not_depend_on_the_thread_count(name, dtype, monkeypatch):
    # many blocks, client rows split across them, and on two threads
    monkeypatch.setattr(model_base, "EVAL_BLOCK_MACS", 97 * 600)
    monkeypatch.setattr(parallel, "MIN_PARALLEL_MACS", 0)
    model = MODELS[name]
    theta = (model.init_params(1) + 0.05).astype(dtype)
    X, y, off = DATA.X_train, DATA.y_train, DATA.train_offsets

    def run():
        return model.evaluate_clients(theta, X, y, off)

    one, two = with_threads(1, run), with_threads(2, run)
    for a, b in zip(one, two, strict=True):
        assert np.array_equal(a, b)
    # and the blocks are a partition: the same as one block over everything, to round-off
    monkeypatch.setattr(model_base, "EVAL_BLOCK_MACS", 1 << 40)
    whole = run()
    assert np.array_equal(one[1], whole[1])
    np.testing.assert_allclose(one[0], whole[0], rtol=1e-5 if dtype == np.float32 else 1e-14)


@pytest.fixture
def always_parallel(monkeypatch):
    """Every call on every thread, however small (the tests' data are far below the threshold)."""
    monkeypatch.setattr(parallel, "MIN_PARALLEL_MACS", 0)


def test_threads_for_runs_small_work_on_one_thread(monkeypatch):
    assert threads_for(parallel.MIN_PARALLEL_MACS - 1) == 1
    assert threads_for(parallel.MIN_PARALLEL_MACS) is None


@needs_two
@pytest.mark.usefixtures("always_parallel")
@pytest.mark.parametrize("batch_size", [None, 4])
def test_gradients_do_not_depend_on_the_thread_count(batch_size):
    model = MODELS["tanh"]
    theta = model.init_params(2)
    S = [4, 17, 0, 29, 8]

    def run():
        return client_gradients(model, theta, DATA, S, batch_size=batch_size, seed=1, round_index=3)

    one, two = with_threads(1, run), with_threads(2, run)
    for a, b in zip(one, two, strict=True):
        assert np.array_equal(a, b)


@needs_two
@pytest.mark.usefixtures("always_parallel")
def test_local_training_does_not_depend_on_the_thread_count():
    model = MODELS["logistic"]
    theta = model.init_params(0)
    S = [4, 17, 0, 29, 8, 3]

    def run():
        return train_clients(model, theta, DATA, S, epochs=2, batch_size=5, lr=0.05, seed=2)

    one, two = with_threads(1, run), with_threads(2, run)
    for a, b in zip(one, two, strict=True):
        assert np.array_equal(a, b)


def test_clients_are_scheduled_largest_first(monkeypatch):
    import fairagg.local as local

    seen = []
    real = local.run_tasks
    monkeypatch.setattr(
        local, "run_tasks", lambda fn, order, t: (seen.append(order), real(fn, order, t))
    )
    S = [0, 1, 2, 3, 4, 5]
    n = DATA.num_train_samples[S]
    train_clients(
        MODELS["logistic"],
        MODELS["logistic"].init_params(0),
        DATA,
        S,
        epochs=1,
        batch_size=5,
        lr=0.1,
    )
    client_gradients(MODELS["logistic"], MODELS["logistic"].init_params(0), DATA, S)
    for order in seen:
        assert sorted(order) == list(range(6))
        assert list(n[order]) == sorted(n, reverse=True)
    assert len(seen) == 2


# --------------------------------------------------------------------------------------------
# the FedAvg trajectory, pinned
# --------------------------------------------------------------------------------------------

PATH = Path(__file__).parent / "data" / "fedavg_trajectory.npz"
PINNED = np.load(PATH)
TRAJECTORY_MODELS = {"logistic": LogisticRegression(60, 10), "mlp": MLP(60, 10, n_hidden=8)}


def fedavg_trajectory(model, threads: int) -> np.ndarray:
    """θ after each of 8 FedAvg rounds (Synthetic(1,1), 10 of 30 clients, E = 2, B = 10, seed
    3), shape (8, d)."""
    thetas = []
    with_threads(
        threads,
        lambda: simulate(
            "fedavg", model, DATA, rounds=8, clients_per_round=10, epochs=2, batch_size=10,
            lr=0.01, seed=3, callback=lambda h: thetas.append(h.final_params.copy()),
        ),
    )  # fmt: skip
    return np.stack(thetas)


@pytest.mark.usefixtures("always_parallel")
@pytest.mark.parametrize("threads", [1, MAX_THREADS])
@pytest.mark.parametrize("name", list(TRAJECTORY_MODELS))
def test_fedavg_trajectory_is_pinned(name, threads):
    """The trajectory of ``fedavg_trajectory``, first recorded before the round's work moved
    from prange to the pool now in fairagg.kernels._threads, re-recorded once when local SGD's
    kernel took new training bits (issue 38: blocked minibatch steps, round-off from the NumPy
    loop) and pinned since.
    Bitwise on the CPU it was recorded on; Numba compiles for the host, so another CPU may
    reassociate the dot products differently and is held to round-off. Re-record (only for a
    change meant to change training bits, and say so in its commit) with
    ``python -m tests.test_parallel --record``."""
    got, want = fedavg_trajectory(TRAJECTORY_MODELS[name], threads), PINNED[name]
    if str(PINNED["cpu"]) == llvm.get_host_cpu_name():
        assert np.array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------------------------
# the aggregation kernels (fairagg.kernels.cpu) share their blocks the same way
# --------------------------------------------------------------------------------------------


def _aggregation_calls():
    from fairagg.kernels import cpu, gram

    rng = np.random.default_rng(5)
    out = {}
    for m, d in ((13, 20000), (600, 100)):  # column blocks (8 + 4 + 1 rows); many short rows
        D = rng.standard_normal((m, d))
        theta, w, W2 = rng.standard_normal(d), rng.standard_normal(m), rng.standard_normal((2, m))
        out[f"weighted_update {m}x{d}"] = lambda D=D, t=theta, w=w: cpu.weighted_update(t, D, w)
        out[f"weighted_sum {m}x{d}"] = lambda D=D, w=w: cpu.weighted_sum(w, D)
        out[f"two_combinations {m}x{d}"] = lambda D=D, W=W2: cpu.two_combinations(W, D)
        out[f"row_sq_norms {m}x{d}"] = lambda D=D: cpu.row_sq_norms(D)
        out[f"weighted_sum_sq_norms {m}x{d}"] = lambda D=D, w=w: cpu.weighted_sum_sq_norms(w, D)
    D = rng.standard_normal((9, 70000)).astype(np.float32)
    out["gram 9x70000 float32"] = lambda D=D: cpu.gram(D)
    # the backend's dispatch at and past the kernel's row limit (one limit for every thread
    # count: which code computes G does not depend on it)
    for m in (cpu.GRAM_MAX_M, cpu.GRAM_MAX_M + 1):  # three column blocks: tasks split them
        D = rng.standard_normal((m, 2 * 2048 + 1))
        out[f"gram(D, 'numba') {m}x4097"] = lambda D=D: gram(D, "numba")
    return out


AGGREGATION = _aggregation_calls()


def _flat(result):
    parts = result if isinstance(result, tuple) else (result,)
    return [np.asarray(p) for p in parts]


@needs_two
@pytest.mark.parametrize("name", list(AGGREGATION))
def test_aggregation_kernels_do_not_depend_on_threads_or_tasks(name, monkeypatch):
    from fairagg.kernels import cpu

    call = AGGREGATION[name]
    monkeypatch.setattr(parallel, "MIN_PARALLEL_MACS", 1 << 62)
    serial = _flat(call())  # one call over every block, on this thread
    monkeypatch.setattr(parallel, "MIN_PARALLEL_MACS", 0)
    for task_macs in (1, 5000, 1 << 40):  # a block a task, a few, one task
        monkeypatch.setattr(cpu, "_TASK_MACS", task_macs)
        for threads in (1, 2):
            got = _flat(with_threads(threads, call))
            for a, b in zip(got, serial, strict=True):
                assert np.array_equal(a, b), (task_macs, threads)


def test_share_covers_every_block_once(monkeypatch):
    from fairagg.kernels import cpu

    monkeypatch.setattr(parallel, "MIN_PARALLEL_MACS", 0)
    for nblk, macs, task in ((1, 10, 1), (7, 700, 100), (7, 700, 250), (10, 10, 1 << 30)):
        monkeypatch.setattr(cpu, "_TASK_MACS", task)
        seen = []
        lock = threading.Lock()

        def kernel(lo, hi, seen=seen, lock=lock):
            with lock:
                seen.extend(range(lo, hi))

        with_threads(
            2 if MAX_THREADS >= 2 else 1, lambda k=kernel, n=nblk, w=macs: cpu._share(k, n, w)
        )
        assert sorted(seen) == list(range(nblk))


def _blas_threads():
    from threadpoolctl import threadpool_info

    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_fedfv_numba_runs_blas_on_one_thread_and_restores_it(monkeypatch):
    import fairagg.rules.fedfv as fedfv

    seen = {}
    real = fedfv._fedfv_direction

    def spy(*args):
        seen[args[-1]] = _blas_threads()
        return real(*args)

    from threadpoolctl import threadpool_limits

    monkeypatch.setattr(fedfv, "_fedfv_direction", spy)
    D = np.random.default_rng(0).standard_normal((5, 300))
    # two BLAS threads, whatever the session runs with (the suite's workers run one each), so
    # that one thread inside the numba path is the rule's doing
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        # a BLAS built single-threaded (one that another package loads) stays at 1: what
        # matters is one library at 2, which the numba path must bring to 1
        assert 2 in before
        got = {b: fedfv.fedfv_direction(D, np.arange(5.0), backend=b) for b in ("numpy", "numba")}
        assert _blas_threads() == before
    assert seen["numba"] and set(seen["numba"]) == {1}
    assert seen["numpy"] == before  # the reference leaves BLAS as the user set it
    np.testing.assert_allclose(got["numba"].direction, got["numpy"].direction, rtol=1e-12)


def _fork_child(queue):
    calls = []
    lock = threading.Lock()

    def fn(i):
        with lock:
            calls.append(i)

    run_tasks(fn, list(range(8)), 2)
    queue.put(sorted(calls))


@needs_two
def test_a_forked_child_gets_a_pool_of_its_own():
    """After the parent has used the pool, a child forked from it (multiprocessing's default on
    Linux) must not queue its tasks on the parent's executor, whose threads it does not have."""
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork on this platform")
    run_tasks(lambda i: None, list(range(4)), 2)  # the parent's pool exists
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_fork_child, args=(queue,))
    child.start()
    child.join(timeout=30)
    hung = child.is_alive()
    if hung:
        child.kill()
    assert not hung, "the forked child hung on the parent's thread pool"
    assert queue.get(timeout=5) == list(range(8))


@needs_two
def test_a_task_may_run_tasks_itself():
    """A task that calls run_tasks (on a pool thread, whose pool has no other thread to run
    what it queues) runs them on its own thread instead of waiting for itself."""
    seen = []
    lock = threading.Lock()

    def inner(j):
        with lock:
            seen.append(j)

    def outer(i):
        run_tasks(inner, [10 * i + j for j in range(3)], 2)

    done = threading.Event()

    def go():
        run_tasks(outer, list(range(4)), 2)
        done.set()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    assert done.wait(timeout=30), "nested run_tasks deadlocked"
    assert sorted(seen) == sorted(10 * i + j for i in range(4) for j in range(3))


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    traj = {name: fedavg_trajectory(model, 1) for name, model in TRAJECTORY_MODELS.items()}
    np.savez(PATH, cpu=np.array(llvm.get_host_cpu_name()), **traj)
    print(f"wrote {PATH}")
