"""Test-session settings shared by the whole suite."""

from __future__ import annotations

import os
import sys

# The CUDA backend's kernels run in numba's simulator unless the caller says otherwise (set
# NUMBA_ENABLE_CUDASIM=0 to run them on a GPU). This must happen before numba is imported.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from fairagg.kernels import BACKENDS  # noqa: E402

# pytester runs test files that use the fairagg_conformance fixture (tests/test_conformance.py).
pytest_plugins = ["pytester"]

# Numba compiles a kernel the first time a dtype is seen: the first example can take seconds, so no
# per-example deadline. CI runs derandomised so that a red run is reproducible from its log.
settings.register_profile(
    "default",
    deadline=None,
    max_examples=50,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=50,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else "default")


def pytest_configure(config):
    simulator_switch_interval()
    _blas_threads_per_worker(config)


def simulator_switch_interval():
    """In numba's CUDA simulator every CUDA thread is a Python thread, and the launching thread
    polls them in a loop: at Python's default switch interval (5 ms) each poll holds the GIL that
    the simulated threads are waiting for. 0.1 ms made the simulated kernels' tests about 4x
    cheaper in CPU time (a Gram matrix and a weighted sum of 3 x 2000: 3.6 s -> 0.8 s). Only the
    scheduling of Python threads changes, never a value."""
    if on_simulator():
        sys.setswitchinterval(1e-4)


def _blas_threads_per_worker(config):
    """With ``-n N`` workers, each worker's BLAS gets cores // N threads (at least one): the
    variables are set here, in the controller, before it starts the workers, so that every
    worker's OpenBLAS reads them as it loads. Two workers each running 2-thread OpenBLAS on 2
    cores made the BLAS-heavy tests several times slower (OpenBLAS's threads wait by spinning).
    A variable the caller set is kept. The numerics do not depend on it: the tests pin no
    result that the BLAS thread count can change (their pins pass either way)."""
    workers = getattr(config.option, "numprocesses", None)
    if os.environ.get("PYTEST_XDIST_WORKER") or not isinstance(workers, int) or workers < 2:
        return
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", threads)  # numpy's and scipy's OpenBLAS


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Every backend of ``fairagg.kernels`` in turn: the backend-parity tests take it."""
    return request.param


def on_simulator() -> bool:
    """Whether the CUDA backend runs in numba's simulator (slow: keep its inputs small)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


@pytest.fixture(autouse=True)
def _flower_without_forced_collections(monkeypatch):
    """Flower's ``ArrayRecord.to_numpy_ndarrays(keep_input=False)`` (its strategies read replies
    with it) runs a full ``gc.collect()`` on every call: in a test process holding numba's and
    Hypothesis' objects that is about 85 ms, most of the Flower comparison tests' time. A
    collection changes no value, so the tests run Flower's code with that call made a no-op."""
    import types

    arrayrecord = sys.modules.get("flwr.app.message.arrayrecord")
    if arrayrecord is not None and hasattr(arrayrecord, "gc"):
        monkeypatch.setattr(arrayrecord, "gc", types.SimpleNamespace(collect=lambda *a: 0))
