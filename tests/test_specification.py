"""The specification ships with the project: every "SPEC §N" the code, the golden files, the tests
and the docs cite is a section of the docs' Specification page (``docs/pages/specification.md``),
every section is cited, every rule page links to the page's sections by anchors that exist, and
nothing points users at a file they do not have."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPECIFICATION = ROOT / "docs" / "pages" / "specification.md"
RULE_PAGES = sorted((ROOT / "docs" / "pages" / "rules").glob("*.md"))

#: Where citations live: the package, the models, the tests (golden files included), the
#: validation scripts, the docs pages, the examples and the README.
SCANNED = ("fairagg", "models", "tests", "validate", "docs/pages", "examples", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".json", ".txt", ".toml", ".yml", ".yaml", ".cfg", ".csv", ".sh"}

#: A heading of the page: ``## §N title {#spec-N}`` (the explicit anchor needs ``attr_list``).
HEADING = re.compile(r"^## §(\d+) (.+?) \{#(spec-\d+)\}$", re.M)
#: A citation: "SPEC", then one section or a list or range of them ("SPEC §3-§5, §8"); the line
#: may break between "SPEC" and "§".
CITATION = re.compile(r"SPEC\s+(§\d+(?:\s*(?:[-–,]|and|or)\s*§\d+)*)")
#: A link to the page from a rule page, with its anchor.
LINK = re.compile(r"\]\(\.\./specification\.md(?:#([\w-]+))?\)")


def text_files() -> list[Path]:
    out = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts
            )
    return out


def cited_sections(text: str) -> list[int]:
    """The section numbers ``text`` cites; a range "§3-§5" cites 3, 4 and 5."""
    out: list[int] = []
    for m in CITATION.finditer(text):
        group = m.group(1)
        numbers = [int(n) for n in re.findall(r"§(\d+)", group)]
        out += numbers
        for a, b in re.findall(r"§(\d+)\s*[-–]\s*§(\d+)", group):
            out += range(int(a), int(b) + 1)
    return out


def headings(text: str) -> dict[int, str]:
    """Section number → anchor, checking that each anchor is ``spec-N`` of its own N."""
    out = {}
    for n, _, anchor in HEADING.findall(text):
        assert anchor == f"spec-{n}", f"§{n} has the anchor #{anchor}"
        assert int(n) not in out, f"§{n} is a heading twice"
        out[int(n)] = anchor
    return out


def citations() -> dict[int, list[str]]:
    """Section number → the files citing it (relative paths)."""
    out: dict[int, list[str]] = {}
    for path in text_files():
        for n in cited_sections(path.read_text(encoding="utf-8", errors="replace")):
            out.setdefault(n, []).append(str(path.relative_to(ROOT)))
    return out


def test_the_citation_pattern_reads_every_form_the_code_uses():
    text = (
        "(SPEC §7) SPEC §3-§5, §8; SPEC §0, §6. (default, SPEC\n        §0 and the public code) "
        "SPEC §9 and the code; SPEC §N (a placeholder); SPEC.md; the SPEC decisions"
    )
    assert sorted(cited_sections(text)) == [0, 0, 3, 3, 4, 5, 5, 6, 7, 8, 9]


def test_every_cited_section_is_a_heading_of_the_specification_page():
    sections = headings(SPECIFICATION.read_text())
    cited = citations()
    assert cited, "no citation found: the scan is broken"
    missing = {f"§{n}": sorted(set(files)) for n, files in cited.items() if n not in sections}
    assert not missing, f"cited but not a section of {SPECIFICATION.name}: {missing}"


def test_every_section_of_the_specification_page_is_cited():
    sections = headings(SPECIFICATION.read_text())
    assert sorted(sections) == list(range(len(sections))), "sections are §0, §1, ... in order"
    uncited = sorted(set(sections) - set(citations()))
    assert not uncited, f"sections nobody cites: {uncited}"


@pytest.mark.parametrize("page", RULE_PAGES, ids=lambda p: p.name)
def test_every_rule_page_links_to_existing_sections(page):
    anchors = set(headings(SPECIFICATION.read_text()).values())
    links = LINK.findall(page.read_text())
    assert links, f"{page.name} does not link to the specification"
    bad = [a for a in links if a and a not in anchors]
    assert not bad, f"{page.name} links to anchors the specification lacks: {bad}"
    if page.name != "index.md":  # a rule's own page names its sections
        assert any(links), f"{page.name} links to no section of the specification"


def test_nothing_tells_users_to_read_a_file_they_do_not_have():
    # SPEC.md was the team's own contract, outside the repository; the docs page replaces it.
    here = Path(__file__).resolve()
    found = [
        str(p.relative_to(ROOT))
        for p in text_files()
        if p.resolve() != here and "SPEC.md" in p.read_text(encoding="utf-8", errors="replace")
    ]
    assert not found, f"these files point at SPEC.md: {found}"


def test_the_specification_page_is_in_the_docs_navigation_with_explicit_anchors_enabled():
    config = (ROOT / "docs" / "mkdocs.yml").read_text()
    assert re.search(r"^  - Specification: specification\.md$", config, re.M)
    assert re.search(r"^  - attr_list$", config, re.M)
