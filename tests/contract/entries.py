"""The contract registry: entry key (where a public name is defined) -> its entry."""

from __future__ import annotations

from typing import Any

from tests.contract.driver import FIXTURE
from tests.contract.entries_io import ENTRIES as IO
from tests.contract.entries_numeric import ENTRIES as NUMERIC
from tests.contract.entries_rules import ENTRIES as RULES

CONTRACT: dict[str, Any] = {
    **NUMERIC,
    **RULES,
    **IO,
    "fairagg.pytest_plugin.fairagg_conformance": FIXTURE,
}
