"""How the CPU work of a round is shared between threads: a dynamic schedule of whole tasks.

Each task (one client's local SGD, one client's gradient, one block of evaluated rows) is computed
from start to end by one thread, with the same kernel as the serial path, so results are bitwise
independent of the thread count and of which thread took which task. The threads are Python
threads running Numba kernels compiled with ``nogil=True``; they take the next task from a shared
counter when they finish one (a dynamic schedule) and wait, when idle, by blocking, never by
spinning.

Why not Numba's ``prange``: its OpenMP and workqueue layers split a loop into equal static chunks
and their threads spin at the barrier. When another process holds one of two cores, the thread
that shares its core finishes last and the spinning one takes time from it: the default
two-thread round of the benchmark ``validate/bench_e2e.py`` ran at 0.48× the speed of one thread
beside a busy core, and power-law client sizes (one large client) left the second thread idle.
With the dynamic schedule, tasks largest first, a slowed thread just takes fewer tasks.

The thread count is Numba's, ``numba.get_num_threads()`` in the calling thread: set it with
``numba.set_num_threads`` or the ``NUMBA_NUM_THREADS`` environment variable.

BLAS: code that shares work on these threads calls BLAS inside ``blas_single_thread``. Idle
OpenBLAS threads keep spinning for a while after a call, and took the second core from these
threads: FedFV's ``backend="numba"`` step at m = 10, d = 10⁵ ran 8× slower on two threads than
on one until its two BLAS norms ran single-threaded.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numba

__all__ = [
    "MIN_PARALLEL_MACS",
    "blas_single_thread",
    "num_threads",
    "run_tasks",
    "shutdown_pool",
    "threads_for",
]

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_local = threading.local()  # in_pool: this thread is running a task for the pool


def _forget_pool_in_child() -> None:
    """A forked child has none of the parent's threads: its first parallel call starts a new
    pool (reusing the parent's executor would queue tasks that no thread ever runs)."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


#: Below this many multiply-adds a call runs on the calling thread alone: handing tasks to a
#: second thread (a wake-up, and the GIL between a task's kernels) costs more than it saves.
#: Measured break-even on two cores (``validate/bench_e2e.py``): evaluating about 8000 rows of the
#: 60 × 10 logistic model or 2000 of the 60-32-10 MLP, about 2^22 multiply-adds.
MIN_PARALLEL_MACS = 2**22


def threads_for(macs: int) -> int | None:
    """The ``threads`` argument of ``run_tasks`` for a call of ``macs`` multiply-adds: None
    (every thread) from ``MIN_PARALLEL_MACS`` on, else 1."""
    return None if macs >= MIN_PARALLEL_MACS else 1


_controller = None


@contextlib.contextmanager
def blas_single_thread() -> Iterator[None]:
    """Limit the BLAS libraries loaded in the process to one thread inside the block (threadpoolctl;
    about 6 µs to enter and leave), restoring their settings after."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    with _controller.limit(limits=1, user_api="blas"):
        yield


def num_threads() -> int:
    """Threads the CPU kernels use: Numba's thread count in the calling thread."""
    return int(numba.get_num_threads())


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            # at most Numba's launch-time maximum; workers beyond the requested count stay idle
            _pool = ThreadPoolExecutor(
                # numba.config sets its attributes from the environment at import: no stub
                max_workers=max(1, numba.config.NUMBA_NUM_THREADS - 1),  # type: ignore[attr-defined]
                thread_name_prefix="fairagg",
            )
        return _pool


def shutdown_pool() -> None:
    """Stop the worker threads (each ends once its current task does) and forget the pool: the
    next parallel call starts a new one. For an interrupted program about to exit: a Ctrl-C
    that lands while the pool starts a thread can leave that thread unknown to the executor's
    exit hook, and the interpreter's exit then waits for it for ever."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def run_tasks(
    fn: Callable[[int], object], order: Sequence[int], threads: int | None = None
) -> None:
    """Call ``fn(i)`` for every ``i`` of ``order``, each call by one thread.

    Calls start in the order given (put the largest first: a dynamic schedule then ends with small
    tasks). ``threads`` defaults to ``num_threads``; with one thread, or one task, every call
    runs in the calling thread. The first exception raised by a call is re-raised once every
    thread has stopped (tasks not yet started are then skipped).
    """
    n = len(order)
    t = min(num_threads() if threads is None else threads, n)
    if getattr(_local, "in_pool", False):
        t = 1  # called from a task on a pool thread: queueing on the pool could wait for itself
    if t <= 1:
        for i in order:
            fn(i)
        return
    lock = threading.Lock()
    state = {"next": 0, "failed": False}

    def worker() -> None:
        while True:
            with lock:
                k = state["next"]
                if k >= n or state["failed"]:
                    return
                state["next"] = k + 1
            try:
                fn(order[k])
            except BaseException:
                with lock:
                    state["failed"] = True
                raise

    def pool_worker() -> None:
        _local.in_pool = True
        try:
            worker()
        finally:
            _local.in_pool = False

    pool = _get_pool()
    futures = []
    error: BaseException | None = None
    try:
        for _ in range(t - 1):
            futures.append(pool.submit(pool_worker))
        worker()
    except BaseException as raised:  # re-raised below, after the other threads stopped
        error = raised
        with lock:
            state["failed"] = True  # no thread starts another task
    # Every thread that was given work has stopped before this returns or raises, even on a
    # Ctrl-C while waiting: the tasks write into the caller's arrays, which a thread still
    # running would change after the caller has moved on.
    for f in futures:
        while True:
            try:
                exc = f.exception()
                break
            except KeyboardInterrupt as interrupt:
                with lock:
                    state["failed"] = True
                if error is None:
                    error = interrupt
        if error is None and exc is not None:
            error = exc
    if error is not None:
        raise error
