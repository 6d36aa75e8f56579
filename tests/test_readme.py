"""The README's quick start runs as written and its claims about the CLI hold."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from tests.tolerances import assert_close

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_runs_and_its_values_are_right():
    text = README.read_text()
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)  # noqa: S102 - our own README
    theta_new = scope["new"]
    deltas = np.random.default_rng(0).normal(size=(3, 5))
    assert_close(theta_new, -np.array([0.1, 0.2, 0.7]) @ deltas)
    assert scope["history"].num_rounds == 50


def test_readme_gives_the_ci_test_command():
    ci = (README.parent / ".ci" / "run").read_text()
    command = "pip install -e '.[test,flower]' && python -m pytest -n auto"
    assert command in README.read_text() and command in ci


def test_every_other_python_block_runs():
    text = README.read_text()
    quick = re.search(r"## Quick start\n\n```python\n(.*?)```", text, re.S).group(1)
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b != quick]
    assert blocks, "the README has python examples besides the quick start"
    for code in blocks:
        if "fairagg.flower" in code and importlib.util.find_spec("flwr") is None:
            continue  # the flower extra is absent (CI installs it, so CI runs the block)
        exec(compile(code, str(README), "exec"), {})  # noqa: S102 - our own README


def test_the_conformance_example_fails_as_the_readme_shows():
    # The harness's README example is a failing test: run it and compare the printed report.
    from fairagg.conformance import ConformanceError

    section = README.read_text().split("## Conformance harness", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"fails with\n\n```text\n(.*?)\n```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - our own README
    with pytest.raises(ConformanceError) as err:
        namespace["test_my_qfedavg"]()
    assert str(err.value) == shown
    fixed = code.replace("np.linalg.norm(dw, axis=1)", "np.sum(dw * dw, axis=1)")
    exec(compile(fixed, str(README), "exec"), namespace)  # noqa: S102
    namespace["test_my_qfedavg"]()  # passes once the norm is squared
