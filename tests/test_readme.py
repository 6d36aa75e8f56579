"""The README's quick start runs as written and its claims about the CLI hold."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np

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
    command = "pip install -e '.[test,flower]' && python -m pytest"
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
