"""The benchmarks' shared load modes (``validate/_bench.py``): ``--load {idle,busy,both}`` and the
loop that runs a process spinning on one core while the busy load is measured."""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path

import pytest

from tests.scripts import VALIDATE


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(VALIDATE))
    return importlib.import_module("_bench")


def spinners() -> list[int]:
    """Pids of this process's children running the benchmarks' spin loop."""
    pids = []
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except FileNotFoundError:  # exited meanwhile
                continue
            if b"sched_setaffinity" in cmd and b"while True" in cmd:
                pids.append(int(pid))
    return pids


def test_the_load_option_takes_idle_busy_or_both(bench):
    ap = argparse.ArgumentParser()
    bench.add_load_argument(ap)
    assert ap.parse_args([]).load == "idle"
    assert ap.parse_args(["--load", "both"]).load == "both"
    with pytest.raises(SystemExit):
        ap.parse_args(["--load", "loaded"])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("idle", ["idle"]), ("busy", ["busy"]), ("both", ["idle", "busy"])],
)
def test_a_spinner_runs_while_and_only_while_the_busy_load_is_measured(bench, mode, expected):
    assert spinners() == []
    seen = []
    for load in bench.loads(mode):
        seen.append((load, len(spinners())))
    assert seen == [(load, int(load == "busy")) for load in expected]
    assert spinners() == []


def test_the_spinner_holds_the_last_core_and_stops_when_the_loop_is_left(bench):
    for load in bench.loads("busy"):
        assert load == "busy"
        (pid,) = spinners()
        assert os.sched_getaffinity(pid) == {max(os.sched_getaffinity(0))}
        break
    assert spinners() == []
