"""The lint-and-types tooling holds together: CI and the pre-commit hooks run the pinned tools, mypy
sees ``models/`` under its installed name, and every rule's factory cites its paper and the
Specification."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from fairagg import RULES

ROOT = Path(__file__).resolve().parents[1]


PYPROJECT = (ROOT / "pyproject.toml").read_text()  # (tomllib is Python 3.11+; the floor is 3.10)


def _pins() -> dict[str, str]:
    dev = re.search(r"^dev = \[(.*)\]$", PYPROJECT, re.M).group(1)
    return dict(re.findall(r'"([\w-]+)==([\w.]+)"', dev))


def test_the_dev_extra_pins_ruff_and_mypy_exactly():
    assert set(_pins()) >= {"ruff", "mypy"}


def test_the_pre_commit_ruff_hooks_run_the_pinned_ruff():
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    rev = re.search(r"astral-sh/ruff-pre-commit\n\s+rev: v([\w.]+)", config).group(1)
    assert rev == _pins()["ruff"]
    for hook in ("id: ruff-check", "args: [--fix]", "id: ruff-format", "id: mypy"):
        assert hook in config, hook
    assert "language: system" in config  # mypy checks against the project's own numpy


def test_ci_runs_lint_and_types_after_the_docs_and_fails_on_a_finding():
    ci = (ROOT / ".ci" / "run").read_text()
    # mypy starts in the background before the docs build; its exit status is required after
    # the linter's
    steps = [
        'mypy > "$tmp/mypy.log" 2>&1 &',
        "mkdocs build --strict",
        "ruff check . || exit 1",
        "ruff format --check . || exit 1",
        'wait "$mypy_pid"',
        '[ "$mypy_rc" -eq 0 ] || exit 1',
    ]
    at = [ci.index(s) for s in steps]
    assert at == sorted(at)
    # the docs' and the linters' extras are installed before (by uv, else by pip)
    assert ci.index("uv pip install --quiet -e '.[test,flower,docs,dev]'") < at[0]
    assert ci.index("pip install --quiet -e '.[docs,dev]'") < at[0]


def test_mypy_checks_models_as_fairagg_models():
    link = ROOT / ".mypy" / "fairagg" / "models"
    assert link.is_symlink() and link.resolve() == (ROOT / "models").resolve()
    mypy = PYPROJECT.split("\n[tool.mypy]\n", 1)[1].split("\n[", 1)[0]
    assert 'mypy_path = ".mypy"' in mypy and '".mypy/fairagg/models"' in mypy


@pytest.mark.parametrize("name", list(RULES))
def test_every_rule_factory_cites_its_paper_and_the_specification(name):
    doc = inspect.getdoc(RULES[name].factory)
    assert "\nReferences\n----------\n.. [1] " in doc, name
    refs = doc.split("\nReferences\n----------\n", 1)[1]
    assert re.search(r"\b(19|20)\d\d\b", refs), "a reference gives its year"
    assert re.search(r"\[SPEC §\d+ [^\]]+\]\[spec-\d+\]", refs), "a link to its SPEC section"


def test_every_package_of_the_source_tree_is_installed():
    """[tool.setuptools] names its packages one by one: a subpackage left out of the list is
    missing from a wheel (an editable install may still find it), so every folder of fairagg/
    with an __init__.py, and models/ as fairagg.models, must be listed."""
    block = re.search(r"^packages = \[(.*?)\]", PYPROJECT, re.S | re.M)
    assert block is not None, "pyproject.toml has no [tool.setuptools] packages list"
    listed = set(re.findall(r'"([\w.]+)"', block.group(1)))
    tree = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "fairagg").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    tree.add("fairagg.models")
    assert tree - listed == set(), f"packages missing from pyproject.toml: {sorted(tree - listed)}"
