"""``validate/cache_bits.py`` (the compiled kernels' bits in a process that compiles them against
one that loads them from Numba's cache): its comparison and report, with the two processes
replaced (the real check compiles every kernel, about 2 minutes, and is not run here)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.scripts import load_script


def test_compare_lists_every_case_that_differs_or_is_missing():
    bits = load_script("cache_bits")
    compiled = {"a": "1", "b": "2", "c": "3"}
    assert bits.compare(compiled, dict(compiled)) == []
    assert bits.compare(compiled, {"a": "1", "b": "9", "d": "4"}) == ["b", "c", "d"]


def _fake_processes(bits, monkeypatch, *children):
    """Replace the two processes by ``children``: (results, compiled names) in turn."""
    outputs = iter(children)
    caches = []

    def fake_run(cache, result):
        caches.append(cache)
        results, compiled = next(outputs)
        result.write_text(json.dumps({"results": results, "compiled": compiled}))
        return 1.0

    monkeypatch.setattr(bits, "_run", fake_run)
    return caches


def test_the_report_and_exit_status_follow_the_two_processes(tmp_path, monkeypatch, capsys):
    bits = load_script("cache_bits")
    same, other = {"x": "1", "y": "2"}, {"x": "1", "y": "3"}
    caches = _fake_processes(bits, monkeypatch, (same, ["f", "g"]), (same, []))
    assert bits.main(["--out", str(tmp_path)]) == 0
    assert caches[0] == caches[1]  # the second process loads what the first compiled
    assert "2 results" in capsys.readouterr().out
    _fake_processes(bits, monkeypatch, (same, ["f"]), (other, []))
    assert bits.main(["--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "1 differ" in out and "differs: y" in out
    saved = json.loads((tmp_path / "cache_bits.json").read_text())
    assert saved["differ"] == ["y"] and saved["loaded"]["y"] == "3"


@pytest.mark.parametrize(
    ("first", "second", "said"),
    [
        (["f"], ["f"], "not loaded from the cache, so not compared: f"),
        ([], [], "the first process compiled nothing"),
    ],
)
def test_a_kernel_not_loaded_from_the_cache_fails_the_check(
    first, second, said, tmp_path, monkeypatch, capsys
):
    # equal bits prove nothing of a kernel the second process compiled again, nor of a first
    # process that found a cache already there
    bits = load_script("cache_bits")
    same = {"x": "1"}
    _fake_processes(bits, monkeypatch, (same, first), (same, second))
    assert bits.main(["--out", str(tmp_path)]) == 1
    assert said in capsys.readouterr().out


def test_each_process_runs_the_battery_with_the_given_numba_cache(tmp_path, monkeypatch):
    bits = load_script("cache_bits")
    seen = {}

    def fake_subprocess_run(cmd, env, **kwargs):
        seen["cmd"], seen["cache"] = cmd, env["NUMBA_CACHE_DIR"]
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bits.subprocess, "run", fake_subprocess_run)
    bits._run(tmp_path / "cache", tmp_path / "out.json")
    assert seen["cache"] == str(tmp_path / "cache")
    assert seen["cmd"][-2:] == ["--child", str(tmp_path / "out.json")]
