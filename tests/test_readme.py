"""The README's and the docs' examples run as written, the docs site covers every rule, and the
README stays a front door."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from tests.tolerances import assert_close

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = DOCS / "pages"


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


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


DOC_PAGES = sorted(PAGES.rglob("*.md"))


@pytest.mark.parametrize("path", [README, *DOC_PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_runs(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    text = path.read_text()
    quick = re.search(r"## Quick start\n\n```python\n(.*?)```", text, re.S)
    blocks = [b for b in _python_blocks(path) if quick is None or b != quick.group(1)]
    for code in blocks:
        if "fairagg.flower" in code and importlib.util.find_spec("flwr") is None:
            continue  # the flower extra is absent (CI installs it, so CI runs the block)
        exec(compile(code, str(path), "exec"), {})  # noqa: S102 - our own docs


def test_the_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for link in re.findall(r"\]\(([^)#]+)\)", text):  # every relative link resolves
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link


def test_every_registered_rule_has_its_page_and_the_pages_are_current():
    import subprocess
    import sys

    from fairagg import RULES

    for name in RULES:
        page = PAGES / "rules" / f"{name}.md"
        assert page.is_file(), f"no docs page for rule {name!r}"
        assert f"rules/{name}.md" in (DOCS / "mkdocs.yml").read_text()
        assert f'fairagg.simulate("{name}"' in page.read_text()
    run = subprocess.run(
        [sys.executable, str(DOCS / "gen_pages.py"), "--check"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr


def test_the_conformance_example_fails_as_the_readme_shows():
    # The harness's README example is a failing test: run it and compare the printed report.
    from fairagg.conformance import ConformanceError

    section = (PAGES / "guides" / "conformance.md").read_text()
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"fails with\n\n```text\n(.*?)\n```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - our own README
    with pytest.raises(ConformanceError) as err:
        namespace["test_my_qfedavg"]()

    def numbers_of_the_bound(text: str) -> str:  # the bound's last digits follow the CPU's maths
        return re.sub(r"\(tolerance [^)]*\)", "(tolerance ...)", text)

    assert numbers_of_the_bound(str(err.value)) == numbers_of_the_bound(shown)
    fixed = code.replace("np.linalg.norm(dw, axis=1)", "np.sum(dw * dw, axis=1)")
    exec(compile(fixed, str(README), "exec"), namespace)  # noqa: S102
    namespace["test_my_qfedavg"]()  # passes once the norm is squared


def test_the_docs_render_the_docstrings_rest_maths():
    import sys

    sys.path.insert(0, str(DOCS))
    try:
        from griffe_math import convert
    finally:
        sys.path.remove(str(DOCS))
    text = "A :math:`a_k = 1` b.\n\n.. math::\n\n    x = 1\n\n    y = 2\n\nAfter."
    assert convert(text) == (
        "A $a_k = 1$ b.\n\n$$\n\\begin{gathered}\nx = 1 \\\\\ny = 2\n\\end{gathered}\n$$\n\nAfter."
    )
    assert convert(".. math::\n\n    z\n") == "$$\nz\n$$"
