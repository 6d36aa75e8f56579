"""After ``mkdocs build``: no page of the built site shows a raw Sphinx role (``:func:`x```, which
mkdocstrings leaves as plain text) or an unresolved cross-reference (``[x][fairagg.path]`` left
as text). Run by CI; exits 1 naming each page and what it shows. ``python docs/check_pages.py
[SITE]`` (default: the ``site/`` folder ``mkdocs build -f docs/mkdocs.yml`` writes)."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parents[1] / "site"

#: A role as the site shows it: ``:func:`` then the name, in backticks or in a code element.
ROLE = re.compile(
    r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const|ref|doc|any):(?:`|<code>)"
)
#: A cross-reference autorefs did not resolve: the Markdown ``[title][a.dotted.identifier]`` left
#: as text, or the placeholder element autorefs puts in before it resolves one.
UNRESOLVED = re.compile(r"\]\[[A-Za-z_]\w*(?:\.\w+)+\]|<autoref\b")


def problems(site: Path) -> list[str]:
    """``page: what`` for every raw role and unresolved cross-reference in ``site``'s pages."""
    out = []
    pages = sorted(site.rglob("*.html"))
    if not pages:
        return [f"{site}: no built pages (run mkdocs build first)"]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for pattern, what in ((ROLE, "raw Sphinx role"), (UNRESOLVED, "unresolved reference")):
            for m in pattern.finditer(text):
                context = html.unescape(re.sub(r"<[^>]+>", "", text[m.start() - 40 : m.end() + 40]))
                out.append(f"{page.relative_to(site)}: {what}: ...{' '.join(context.split())}...")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    site = Path(argv[0]) if argv else SITE
    found = problems(site)
    if found:
        print("\n".join(found), file=sys.stderr)
        return 1
    print("no raw role and no unresolved cross-reference in the built pages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
