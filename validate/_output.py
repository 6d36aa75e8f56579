"""Output helpers shared by the reproduction scripts: CSVs that keep what a run has done so far,
and progress on standard error."""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class CsvAppender:
    """A CSV file whose header is written once and whose rows are appended and flushed as they
    come, so that a run stopped midway keeps every row it wrote. Keys of a row that are not
    among ``fields`` are ignored."""

    def __init__(self, path: Path, fields: Sequence[str]) -> None:
        self.path = path
        self.fields = list(fields)
        with open(path, "w", newline="") as fh:
            csv.DictWriter(fh, fieldnames=self.fields).writeheader()

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        with open(self.path, "a", newline="") as fh:
            csv.DictWriter(fh, fieldnames=self.fields, extrasaction="ignore").writerows(rows)


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` (dicts with the same keys, at least one) to ``path`` with a header."""
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def log(msg: str) -> None:
    """One line of progress on standard error, flushed."""
    print(msg, file=sys.stderr, flush=True)
