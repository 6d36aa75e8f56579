"""Test-session settings shared by the whole suite."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

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
