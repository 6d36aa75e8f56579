"""Write the docs site's generated pages: one page per registered rule (``pages/rules/NAME.md``)
and the rules' navigation.

A rule's page is built from what the code knows (``fairagg.RULES``: paper, equations, summary,
reports, participation; ``fairagg rules NAME``: hyper-parameters with defaults, ranges and
meaning; the factory's docstring, rendered by mkdocstrings with its equations) and from its row of
the rules table in ``pages/rules/index.md`` (formula functions, status, backends); it links to
its sections of the Specification page (``SPEC_SECTIONS``; the titles are the page's headings). Run
``python docs/gen_pages.py`` after adding a rule or changing one's docstring; ``--check`` exits 1
when a committed page differs from what it would write (the test suite runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fairagg import RULES
from fairagg.cli._describe import describe_rule

PAGES = Path(__file__).resolve().parent / "pages"
RULES_DIR = PAGES / "rules"
SPECIFICATION = PAGES / "specification.md"

#: The sections of the Specification page (``pages/specification.md``) each rule's page links to.
SPEC_SECTIONS: dict[str, tuple[int, ...]] = {
    "fedavg": (1, 0),
    "fairavg": (1, 0),
    "qfedavg": (2, 0),
    "qfedsgd": (2, 0),
    "afl": (3, 0),
    "term": (6, 4),
    "propfair": (6, 4),
    "fedfv": (7, 0),
    "fedmgda": (8,),
    "fedfa": (9, 0),
    "qffl-eg": (4, 2),
    "term-eg": (4, 6),
    "propfair-eg": (4, 6),
    "aaggff-s": (5, 4),
    "aaggff-d": (5, 4),
}


def spec_headings() -> dict[int, str]:
    """The Specification page's sections: N → the heading's title (``§N ...``), read from the
    headings ``## §N title {#spec-N}``."""
    found = re.findall(r"^## (§(\d+) .+?) \{#spec-\2\}$", SPECIFICATION.read_text(), re.M)
    return {int(n): title for title, n in found}


def spec_links(name: str) -> str:
    """The rule page's links to its sections of the Specification page."""
    titles = spec_headings()
    if name not in SPEC_SECTIONS:
        raise KeyError(f"rule {name!r}: add the Specification sections it follows to SPEC_SECTIONS")
    return ", ".join(f"[{titles[n]}](../specification.md#spec-{n})" for n in SPEC_SECTIONS[name])


def table_rows() -> dict[str, list[str]]:
    """The rules table of ``rules/index.md``: rule name → its cells."""
    rows = {}
    for line in (RULES_DIR / "index.md").read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = cells
    return rows


def example(name: str) -> str:
    spec = RULES[name]
    m = 10 if spec.full_participation else 5
    lr = 0.1 if name == "afl" else 0.01  # AFL takes one gradient step per round
    return (
        "```python\n"
        "import fairagg\n"
        "from fairagg.data import synthetic\n"
        "from fairagg.models import LogisticRegression\n\n"
        "data = synthetic(1, 1, num_clients=10, seed=0)\n"
        "model = LogisticRegression(data.n_features, data.n_classes)\n"
        f'history = fairagg.simulate("{name}", model, data, rounds=3, clients_per_round={m},\n'
        f"                           epochs=1, batch_size=10, lr={lr}, seed=0)\n"
        'print(history.summary()["worst_10"])  # the worst 10 % of clients, test accuracy in %\n'
        f'rule = fairagg.make_rule("{name}")    # the rule alone: rule.init, rule.step\n'
        "```\n"
    )


def rule_page(name: str, row: list[str] | None) -> str:
    spec = RULES[name]
    who = "every client, every round" if spec.full_participation else "any clients per round"
    reports = ", ".join(("deltas", "num_samples", *spec.needs))
    factory = f"{spec.factory.__module__}.{spec.factory.__qualname__}"
    parts = [
        f"# `{name}`\n",
        f"{spec.summary[0].upper()}{spec.summary[1:]}.\n",
        f"- **Paper:** {spec.paper}, {spec.equations}",
        f"- **Reports it reads:** {reports}",
        f"- **Clients:** {who}",
        f"- **Specification:** {spec_links(name)}",
    ]
    if row is not None:
        parts += [
            f"- **Formula functions:** {row[3]}",
            f"- **Status:** {row[4]}",
            f"- **Backends:** {row[5]}",
        ]
    parts += [
        "",
        "## Hyper-parameters and variants",
        "",
        f"What `fairagg rules {name}` prints (`--rule-arg NAME=VALUE` on the command line,",
        f'keyword arguments of `fairagg.make_rule("{name}", ...)`):',
        "",
        "```text",
        describe_rule(name),
        "```",
        "",
        "## Example",
        "",
        example(name),
        "## The rule's factory",
        "",
        "The paper's equations, the decisions of the [specification](../specification.md)",
        "(cited as SPEC §N) and the variants, as the factory's docstring gives them; the formula",
        "functions are in the [API reference](../api/fairagg.md) and",
        "[the rules' modules](../api/rules.md).",
        "",
        f"::: {factory}",
        "    options:",
        "      show_root_heading: true",
        "      heading_level: 3",
        "",
    ]
    return "\n".join(parts)


#: The API reference: page → the modules it documents.
API = {
    "fairagg.md": ["fairagg"],
    "rules.md": [
        "fairagg.rules",
        "fairagg.rules.fedavg",
        "fairagg.rules.qffl",
        "fairagg.rules.afl",
        "fairagg.rules.term",
        "fairagg.rules.propfair",
        "fairagg.rules.fedfv",
        "fairagg.rules.fedmgda",
        "fairagg.rules.fedfa",
        "fairagg.rules.oco",
        "fairagg.rules.aaggff",
    ],
    "simplex.md": ["fairagg.simplex"],
    "online.md": ["fairagg.online"],
    "pareto.md": ["fairagg.pareto"],
    "metrics.md": ["fairagg.metrics"],
    "data.md": ["fairagg.data"],
    "local.md": ["fairagg.local"],
    "simulation.md": ["fairagg.simulation"],
    "sampling.md": ["fairagg.sampling"],
    "kernels.md": ["fairagg.kernels"],
    "oracles.md": ["fairagg.oracles"],
    "vectors.md": ["fairagg.vectors"],
    "conformance.md": ["fairagg.conformance"],
    "flower.md": ["fairagg.flower"],
    "models.md": ["models"],
}

GUIDES = [
    ("The command line", "guides/command-line.md"),
    ("Golden vectors", "guides/golden-vectors.md"),
    ("Conformance harness", "guides/conformance.md"),
    ("Flower", "guides/flower.md"),
    ("Your own model", "guides/own-model.md"),
    ("Conventions", "guides/conventions.md"),
    ("Errors and edge cases", "guides/errors.md"),
    ("How it is verified", "guides/verification.md"),
    ("Results", "guides/results.md"),
    ("Benchmarks", "guides/benchmarks.md"),
    ("Rationale", "guides/rationale.md"),
    ("Layout", "guides/layout.md"),
]


def api_page(page: str, modules: list[str]) -> str:
    title = "fairagg.models" if modules == ["models"] else modules[0]
    lines = [f"# `{title}`", ""]
    if modules == ["models"]:
        lines += [
            "The repository's `models/` folder, installed as `fairagg.models` (listed here under",
            "its folder's name).",
            "",
        ]
    for mod in modules:
        lines += [f"::: {mod}", ""]
    return "\n".join(lines)


def mkdocs_yml() -> str:
    rules = "\n".join(f"      - {name}: rules/{name}.md" for name in RULES)
    guides = "\n".join(f"      - {title}: {path}" for title, path in GUIDES)
    api = "\n".join(
        f"      - {mods[0] if mods != ['models'] else 'fairagg.models'}: api/{page}"
        for page, mods in API.items()
    )
    return f"""# Generated by docs/gen_pages.py (the rules' pages follow fairagg.RULES): edit there.
# Build: pip install -e '.[docs]' && mkdocs build --strict -f docs/mkdocs.yml
site_name: fairagg
site_description: The reference implementation of fair federated-learning aggregation
docs_dir: pages
site_dir: ../site
strict: true
theme:
  name: material
  features:
    - navigation.sections
    - content.code.copy
markdown_extensions:
  - admonition
  - attr_list
  - tables
  - toc:
      permalink: true
  - pymdownx.superfences
  - pymdownx.arithmatex:
      generic: true
extra_javascript:
  - https://unpkg.com/mathjax@3/es5/tex-mml-chtml.js
plugins:
  - search
  # A rule's factory is rendered on its rule page and in the API reference: a cross-reference to
  # it goes to the nearer of the two.
  - autorefs:
      resolve_closest: true
  - mkdocstrings:
      handlers:
        python:
          paths: [..]
          options:
            extensions: [griffe_math.py:ReSTMath]
            docstring_style: numpy
            show_source: false
            members_order: source
            show_signature_annotations: false
            filters: public
            show_if_no_docstring: true
validation:
  links:
    not_found: warn
    anchors: warn
    absolute_links: warn
    unrecognized_links: warn
nav:
  - Home: index.md
  - Rules:
      - Overview: rules/index.md
{rules}
  - Specification: specification.md
  - Guides:
{guides}
  - API reference:
{api}
  - Changelog: changelog.md
"""


def pages() -> dict[Path, str]:
    rows = table_rows()
    out = {RULES_DIR / f"{name}.md": rule_page(name, rows.get(name)) for name in RULES}
    for page, modules in API.items():
        out[PAGES / "api" / page] = api_page(page, modules)
    out[PAGES.parent / "mkdocs.yml"] = mkdocs_yml()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a page is out of date")
    args = ap.parse_args(argv)
    stale = []
    for path, text in pages().items():
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date (run python docs/gen_pages.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
