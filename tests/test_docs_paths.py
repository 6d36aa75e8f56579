"""What the docs name exists under that name: no public name shadows a module, every dotted path
in the README and the docs pages resolves, and no raw Sphinx role (``:func:`x```, which neither
the docs site nor a terminal renders) is left in a docstring or in what the command line prints.
The built site is checked for roles and unresolved cross-references by ``docs/check_pages.py``
(CI runs it after ``mkdocs build``)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import keyword
import pkgutil
import re
import types
from pathlib import Path

import pytest

import fairagg
from fairagg import RULES
from fairagg.cli import main
from fairagg.cli._parser import _build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "pages").rglob("*.md"))]

#: Names allowed to shadow a submodule: none (the module of ``fairagg.simulate``, the function,
#: is ``fairagg.simulation``).
SHADOW_KEPT: set[str] = set()


def _packages() -> list[types.ModuleType]:
    """fairagg and every package inside it (``fairagg.models`` is installed from ``models/``)."""
    seen: dict[str, types.ModuleType] = {}

    def walk(pkg: types.ModuleType) -> None:
        seen[pkg.__name__] = pkg
        for info in pkgutil.iter_modules(pkg.__path__):
            if info.ispkg:
                walk(importlib.import_module(f"{pkg.__name__}.{info.name}"))

    walk(fairagg)
    walk(importlib.import_module("fairagg.models"))
    return list(seen.values())


def _submodules(pkg: types.ModuleType) -> list[str]:
    names = {i.name for i in pkgutil.iter_modules(pkg.__path__)} - {"__main__"}
    if pkg is fairagg:
        names.add("models")
    return sorted(names)


def test_no_name_in_a_package_shadows_its_submodule():
    shadows = set()
    for pkg in _packages():
        for name in _submodules(pkg):
            bound = vars(pkg).get(name)  # what the package's own code bound, nothing imported here
            full = f"{pkg.__name__}.{name}"
            if bound is not None and getattr(bound, "__name__", None) != full:
                shadows.add(full)
            elif bound is not None:
                assert isinstance(bound, types.ModuleType), full
    assert shadows == SHADOW_KEPT


def test_a_rule_module_imports_as_itself():
    import fairagg.rules.afl as afl_module

    assert isinstance(afl_module, types.ModuleType)
    assert fairagg.rules.afl is afl_module and callable(fairagg.rules.afl.afl_step)
    # the factories stay at the top level and in the registry
    assert fairagg.fedavg is fairagg.rules.fedavg.fedavg is RULES["fedavg"].factory
    assert RULES["afl"].factory is fairagg.rules.afl.afl


# --- every dotted path the README and the docs name ---------------------------------------------

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_DIRECTIVE = re.compile(r"^::: +([\w.]+)", re.M)
_FORMULA_LINE = re.compile(r"^- \*\*Formula functions:\*\* (.*)$")
#: A backticked ``name.ext`` is a file, not a path.
_FILE_EXTENSIONS = {"py", "md", "json", "csv", "npz", "npy", "png", "html", "txt", "pkl", "toml"}


def _prefixes() -> set[str]:
    """First names that make a backticked dotted name a fairagg path: ``fairagg``, its public
    submodules (``rules.afl.afl_step``) and its public names (``RoundReports.gradients``)."""
    subs = {n for n in _submodules(fairagg) if not n.startswith("_")}
    return {"fairagg", *subs, *fairagg.__all__}


def resolve(path: str) -> object:
    """``path`` as a user reaches it: attribute by attribute from ``fairagg`` (a shorthand such as
    ``rules.qffl.qfedavg_step`` is under ``fairagg``), importing a submodule only where the
    package has no attribute of that name yet."""
    parts = path.split(".")
    if parts[0] != "fairagg":
        parts = ["fairagg", *parts]
    obj: object = fairagg
    for i, part in enumerate(parts[1:], start=2):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            if not hasattr(obj, "__path__"):
                raise
            obj = importlib.import_module(".".join(parts[:i]))
    return obj


def _cells(text: str) -> list[tuple[str, bool]]:
    """Table cells and formula-function lines of a page, each with whether it lists formula
    functions (every name in it must then resolve)."""
    out = []
    header: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _FORMULA_LINE.match(line)
        if m:
            out.append((m.group(1), True))
            continue
        if not line.startswith("|") or re.fullmatch(r"[|\s:-]+", line):
            continue
        cells = [c.strip() for c in re.split(r"\|(?=(?:[^`]*`[^`]*`)*[^`]*$)", line.strip("|"))]
        if i + 1 < len(lines) and re.fullmatch(r"\|[|\s:-]+", lines[i + 1]):
            header = [c.lower() for c in cells]
            continue
        for j, cell in enumerate(cells):
            out.append((cell, j < len(header) and header[j] == "formula functions"))
    return out


def documented_paths(text: str) -> list[str]:
    """Every name the page says resolves: backticked dotted fairagg paths (outside code
    blocks), ``::: path`` directives, and the bare names of a cell (a table cell or a
    "Formula functions" line) after a dotted path, which name members of that path's module or
    parameters of that function (``rules.qffl.qfedsgd_step`` (``static_step``)); in a formula
    functions cell a bare name before any path is fairagg's own (``fedavg_weights``). Bare
    names are returned as ``"module:name"``, with ``"|param"`` where a parameter also counts."""
    prefixes = _prefixes()
    prose = _FENCE.sub("", text)

    def path_of(span: str) -> str | None:
        span = span.strip().removesuffix("()")
        parts = span.split(".")
        if not _DOTTED.fullmatch(span) or parts[0] not in prefixes:
            return None
        return None if parts[-1] in _FILE_EXTENSIONS else span

    out = [p for p in map(path_of, _SPAN.findall(prose)) if p is not None]
    out += _DIRECTIVE.findall(text)
    for cell, formulas in _cells(prose):
        last: str | None = None
        for span in _SPAN.findall(cell):
            path = path_of(span)
            if path is not None:
                last = path
            elif _IDENT.fullmatch(span) and not keyword.iskeyword(span):
                if last is not None:
                    out.append(f"{last.rsplit('.', 1)[0]}:{span}|{last}")
                elif formulas:
                    out.append(f"fairagg:{span}")
    return out


def _check(name: str) -> None:
    if ":" not in name:
        resolve(name)
        return
    module, _, rest = name.partition(":")
    member, _, function = rest.partition("|")
    if hasattr(resolve(module), member):
        return
    params = inspect.signature(resolve(function)).parameters if function else {}
    assert member in params, f"{member!r} is neither in {module} nor a parameter of {function}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_path_resolves(page):
    names = documented_paths(page.read_text())
    failed = []
    for name in names:
        try:
            _check(name)
        except (AttributeError, ImportError, AssertionError) as exc:
            failed.append(f"{name}: {exc}")
    assert not failed, "\n".join(failed)


def test_the_path_check_reads_tables_cells_and_directives():
    # The extraction itself, on a page written for it: a shorthand, a file name (skipped), a
    # relative name, a parameter, a formula functions cell's bare top-level name, a directive.
    page = (
        "See `rules.afl.afl_step` and `models.py`; `report.conforms` is not a path (it is\n"
        "checked: `report` is a module).\n\n"
        "| rule | formula functions |\n|---|---|\n"
        "| `x` | `fedavg_weights`, `rules.qffl.qfedsgd_step` (`static_step`), `lipschitz_q` |\n\n"
        "::: fairagg.rules.term\n"
    )
    got = documented_paths(page)
    assert got == [
        "rules.afl.afl_step",
        "report.conforms",
        "rules.qffl.qfedsgd_step",
        "fairagg.rules.term",
        "fairagg:fedavg_weights",
        "rules.qffl:static_step|rules.qffl.qfedsgd_step",
        "rules.qffl:lipschitz_q|rules.qffl.qfedsgd_step",
    ]
    for name in got[2:]:
        _check(name)
    for bad in (
        "report.conforms",
        "rules.afl.afl_stepp",
        "rules.qffl:nope|rules.qffl.qffl_objective",
    ):
        with pytest.raises((AttributeError, AssertionError)):
            _check(bad)


# --- no raw Sphinx role in a docstring or in what the command line prints -----------------------

#: A Sphinx role other than ``:math:`` (the docs render that one, see ``docs/griffe_math.py``).
ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const|ref|doc|any):`")


def _sources() -> list[Path]:
    roots = {
        Path(fairagg.__file__).parent,
        Path(importlib.import_module("fairagg.models").__file__).parent,
    }
    return sorted(p for root in roots for p in root.rglob("*.py"))


def test_no_raw_sphinx_role_in_the_package_sources():
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in _sources()
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if ROLE.search(line)
    ]
    assert not found, "\n".join(found)


def _public_objects():
    """Every public module of fairagg and every public object they hold, with the methods and
    properties of its classes."""
    modules = []
    for pkg in _packages():
        modules.append(pkg)
        for name in _submodules(pkg):
            if not name.startswith("_"):
                try:
                    modules.append(importlib.import_module(f"{pkg.__name__}.{name}"))
                except ModuleNotFoundError as exc:  # an extra that is not installed (flwr)
                    if exc.name and exc.name.startswith("fairagg"):
                        raise
    for module in modules:
        yield module.__name__, module
        names = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
        for name in names:
            obj = getattr(module, name)
            if not str(getattr(obj, "__module__", "")).startswith("fairagg"):
                continue  # imported from elsewhere (numpy, the standard library), or a constant
            yield f"{module.__name__}.{name}", obj
            if isinstance(obj, type):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") or attr == "__init__":
                        yield f"{module.__name__}.{name}.{attr}", member


def test_no_raw_sphinx_role_in_a_public_docstring():
    found = []
    for where, obj in _public_objects():
        doc = obj.__doc__ if isinstance(obj, (types.ModuleType, property)) else None
        if doc is None and (inspect.isroutine(obj) or isinstance(obj, type)):
            doc = obj.__doc__
        if doc and ROLE.search(doc):
            found.append(where)
    assert not found, "raw roles in the docstrings of " + ", ".join(sorted(set(found)))


#: What a terminal would show of a docstring's markup: a role, a cross-reference
#: ``[`name`][path]``, a reST literal.
_MARKUP = re.compile(ROLE.pattern + r"|\]\[[\w.]+\]|``")


@pytest.mark.parametrize("rule", list(RULES))
def test_fairagg_rules_prints_no_docstring_markup(rule, capsys):
    assert main(["rules", rule]) == 0
    out = capsys.readouterr().out
    assert not _MARKUP.search(out), out


def test_the_command_line_help_prints_no_docstring_markup(capsys):
    parser = _build_parser()
    texts = [parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            texts += [sub.format_help() for sub in action.choices.values()]
    assert main(["rules"]) == 0
    texts.append(capsys.readouterr().out)
    for text in texts:
        assert not _MARKUP.search(text), text


def test_the_built_pages_check_finds_roles_and_unresolved_references(tmp_path):
    # docs/check_pages.py runs on the built site in CI (after mkdocs build); here on pages made
    # for it, as mkdocstrings renders a raw role and autorefs leaves a reference it cannot find.
    import sys

    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from check_pages import main as check_pages
    finally:
        sys.path.remove(str(ROOT / "docs"))
    page = tmp_path / "api" / "index.html"
    page.parent.mkdir()
    good = '<p>See <a href="#fairagg.x"><code>x</code></a>; <code>a[i][j]</code>.</p>'
    page.write_text(good)
    assert check_pages([str(tmp_path)]) == 0
    for bad in (
        "<p>see :func:<code>qfedavg_step</code></p>",
        "<p>see :class:`History`</p>",
        "<p>See [<code>x</code>][fairagg.rules.qffl.nope]</p>",
    ):
        page.write_text(good + bad)
        assert check_pages([str(tmp_path)]) == 1, bad
    page.unlink()
    assert check_pages([str(tmp_path)]) == 1  # no built page at all is not a pass
