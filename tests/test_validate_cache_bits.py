"""``validate/cache_bits.py`` (the compiled kernels' bits in a process that compiles them against
one that loads them from Numba's cache): its comparison and report, with the two processes
replaced (the real check compiles every kernel, about 2 minutes, and is not run here)."""

from __future__ import annotations

import json

from tests.scripts import load_script


def test_compare_lists_every_case_that_differs_or_is_missing():
    bits = load_script("cache_bits")
    compiled = {"a": "1", "b": "2", "c": "3"}
    assert bits.compare(compiled, dict(compiled)) == []
    assert bits.compare(compiled, {"a": "1", "b": "9", "d": "4"}) == ["b", "c", "d"]


def test_the_report_and_exit_status_follow_the_two_processes(tmp_path, monkeypatch, capsys):
    bits = load_script("cache_bits")
    results = iter([{"x": "1", "y": "2"}, {"x": "1", "y": "2"}, {"x": "1", "y": "2"},
                    {"x": "1", "y": "3"}])  # fmt: skip
    caches = []

    def fake_run(cache, result):
        caches.append(cache)
        result.write_text(json.dumps(next(results)))
        return 1.0

    monkeypatch.setattr(bits, "_run", fake_run)
    assert bits.main(["--out", str(tmp_path)]) == 0
    assert caches[0] == caches[1]  # the second process loads what the first compiled
    assert "2 results" in capsys.readouterr().out
    assert bits.main(["--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "1 differ" in out and "differs: y" in out
    saved = json.loads((tmp_path / "cache_bits.json").read_text())
    assert saved["differ"] == ["y"] and saved["loaded"]["y"] == "3"
