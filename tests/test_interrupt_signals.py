"""A real Ctrl-C (SIGINT), not a raised KeyboardInterrupt: it can land anywhere, also in the
middle of writing a run's record or while the training threads finish their tasks."""

from __future__ import annotations

import importlib
import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from fairagg.cli import main
from fairagg.kernels._threads import run_tasks

SIM = importlib.import_module("fairagg.simulation")
ARGV = ["--clients", "5", "--clients-per-round", "3", "--rounds", "3", "--epochs", "1",
        "--model", "logistic", "--data", "synthetic:0.5,0.5", "--quiet"]  # fmt: skip


@pytest.fixture(autouse=True)
def python_sigint_handler():
    """Python's own SIGINT handler (raise KeyboardInterrupt), as in a terminal: pytest-xdist's
    workers ignore SIGINT, which would make every signal here a no-op."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_a_ctrl_c_while_the_history_is_written_leaves_every_record_whole(tmp_path, monkeypatch):
    # SIGINT lands as history.npz starts to be written, after the last round: the history,
    # rounds.csv and summary.json are still written whole, and the run says it was interrupted
    real, out = SIM.History.save, tmp_path / "run"

    def save(self, path):
        signal.raise_signal(signal.SIGINT)
        return real(self, path)

    monkeypatch.setattr(SIM.History, "save", save)
    assert main(["run", *ARGV, "--out", str(out)]) == 130
    saved = SIM.History.load(out / "history.npz")
    assert saved.num_rounds == 3
    assert len((out / "rounds.csv").read_text().splitlines()) == 1 + 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 3


def test_a_ctrl_c_while_waiting_for_the_threads_returns_only_once_they_stopped():
    # the calling thread finishes its task and waits for the pool's; a Ctrl-C then must not
    # return control while the pool's thread still writes into the caller's array
    out = np.zeros(2)
    started = threading.Event()

    def task(i):
        if threading.current_thread() is threading.main_thread():
            assert started.wait(5.0)
            # a real signal, which interrupts the wait (interrupt_main would wait for it)
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        else:
            started.set()
            time.sleep(0.5)
            out[i] = 1.0

    with pytest.raises(KeyboardInterrupt):
        run_tasks(task, [0, 1], threads=2)
    assert out.sum() == 1.0  # the pool's task had ended when the interrupt came through


def test_an_interrupted_command_stops_the_training_threads(tmp_path, monkeypatch):
    # a Ctrl-C that lands while the pool starts a thread can leave that thread unknown to the
    # executor's exit hook, and the interpreter would wait for it for ever: the command line
    # stops the pool's threads itself before it exits
    from fairagg.kernels import _threads as _parallel

    run_tasks(lambda i: None, [0, 1], threads=2)  # the pool exists, its threads idle
    threads = [t for t in threading.enumerate() if t.name.startswith("fairagg")]
    assert threads

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(SIM, "sample_clients", interrupted)
    assert main(["run", *ARGV, "--out", str(tmp_path / "run")]) == 130
    for t in threads:
        t.join(5.0)
        assert not t.is_alive()
    assert _parallel._pool is None
    run_tasks(lambda i: None, [0, 1], threads=2)  # a later call starts a new pool
