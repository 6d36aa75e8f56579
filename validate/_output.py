"""Output helpers shared by the reproduction scripts: CSVs that keep what a run has done so far,
progress on standard error, mean ± std cells and aligned text tables, the comma lists of
integer flags, and Numba's thread count pinned for a run."""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np


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


@contextlib.contextmanager
def numba_threads(n: int) -> Iterator[None]:
    """Numba's thread count set to ``n`` (at most what Numba started with), restored after."""
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(old)


def log(msg: str) -> None:
    """One line of progress on standard error, flushed."""
    print(msg, file=sys.stderr, flush=True)


def int_list(text: str) -> list[int]:
    """An argparse type: a comma list of integers ≥ 0, duplicates dropped, order kept."""
    try:
        vals = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of integers; got {text!r}"
        ) from None
    if not vals or any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected a comma list of integers >= 0; got {text!r}")
    return list(dict.fromkeys(vals))


def mean_std(vals: Sequence[float]) -> tuple[float | None, float | None]:
    """(mean, population std) of ``vals``; (None, None) when there are none."""
    if not vals:
        return None, None
    a = np.asarray(vals, dtype=np.float64)
    return float(a.mean()), float(a.std())


def cell(mean: float | None, std: float | None, dec: int = 1, sign: bool = False) -> str:
    """``"mean ± std"`` with ``dec`` decimals (a sign on the mean if ``sign``), the mean alone
    when ``std`` is None, ``"n/a"`` when ``mean`` is None."""
    if mean is None:
        return "n/a"
    fmt = f"{{:+.{dec}f}}" if sign else f"{{:.{dec}f}}"
    return fmt.format(mean) if std is None else f"{fmt.format(mean)} ± {std:.{dec}f}"


def render_columns(header: list[str], lines: list[list[str]]) -> list[str]:
    """Text table lines: the first column left-aligned, the others right-aligned."""
    widths = [max(len(c) for c in col) for col in zip(header, *lines, strict=True)]
    fmt = "  ".join(["{:<" + str(widths[0]) + "}"] + [f"{{:>{w}}}" for w in widths[1:]])
    return [fmt.format(*header), *(fmt.format(*ln) for ln in lines)]
