"""Test-session settings shared by the whole suite."""

from __future__ import annotations

import os

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


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Every backend of ``fairagg.kernels`` in turn: the backend-parity tests take it."""
    return request.param


def on_simulator() -> bool:
    """Whether the CUDA backend runs in numba's simulator (slow: keep its inputs small)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
