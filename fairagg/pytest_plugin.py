"""pytest plugin: the ``fairagg_conformance`` fixture.

Enable it in your ``conftest.py`` with ``pytest_plugins = ["fairagg.pytest_plugin"]`` (or run
``pytest -p fairagg.pytest_plugin``); then a test checks an implementation in one line::

    def test_my_qfedavg(fairagg_conformance):
        fairagg_conformance(my_qfedavg, "qfedavg_step")

The fixture is [`fairagg.conformance.check`][fairagg.conformance.check] that fails the test with the
minimised mismatch (no traceback into the harness) and returns the report when the implementation
conforms. The option ``--fairagg-max-examples N`` sets the generated examples of every check that
does not give ``max_examples`` itself.

It is opt-in, not registered for every pytest run of an environment with fairagg installed:
loading it imports fairagg (and numba), which a test suite that never uses the fixture should
not pay for, and which must come after any numba settings a suite makes in its conftest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

__all__ = ["fairagg_conformance"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fairagg")
    group.addoption(
        "--fairagg-max-examples",
        type=int,
        default=None,
        metavar="N",
        help="generated examples per fairagg_conformance check (default: the check's own, 100)",
    )


@pytest.fixture
def fairagg_conformance(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``check(fn, target, **options)`` (see
    [`fairagg.conformance.check`][fairagg.conformance.check]) that fails the test with the minimised
    case on a mismatch."""
    from fairagg.conformance import check

    default = request.config.getoption("fairagg_max_examples")

    def run(fn: Callable[..., Any], target: str, **options: Any) -> Any:
        if default is not None:
            options.setdefault("max_examples", default)
        options["raise_on_mismatch"] = False
        report = check(fn, target, **options)
        if report.mismatch is not None:
            pytest.fail(str(report.mismatch), pytrace=False)
        return report

    return run
