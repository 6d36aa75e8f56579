"""``fairagg rules``: the registered rules, and one rule described from its factory's signature
and docstring (the docs' rule pages show the same description).
"""

from __future__ import annotations

import argparse
import inspect
import re
import textwrap

from ..rules import RULES
from ._config import EXPERIMENT_RULE_ARGS


def _doc_parameters(doc: str) -> dict[str, tuple[str, str]]:
    """``{name: (type, description)}`` from a numpydoc ``Parameters`` section."""
    lines = inspect.cleandoc(doc or "").splitlines()
    out: dict[str, tuple[str, str]] = {}
    try:
        i = lines.index("Parameters") + 2
    except ValueError:
        return out
    names: list[str] = []
    for line in lines[i:]:
        if not line.strip():
            if names and out[names[0]][1]:
                names = []  # a blank line after a description ends the section's entries
            continue
        if not line.startswith(" "):
            if line.startswith("``") or line.endswith(":") and " : " not in line:
                break  # prose after the section
            head, _, kind = line.partition(" : ")
            names = [n.strip() for n in head.split(",")]  # "alpha, beta : float"
            for n in names:
                out[n] = (kind.strip(), "")
        elif names:
            for n in names:
                kind, text = out[n]
                out[n] = (kind, f"{text} {line.strip()}".strip())
    return out


#: A docstring's cross-reference to the docs site, ``[`name`][fairagg.path]``.
_XREF = re.compile(r"\[`?([^\]`]+?)`?\]\[[\w.]+\]")


def _plain(text: str) -> str:
    """``text`` of a docstring as the terminal shows it: a cross-reference is its name alone and
    a literal (````name````) loses its backticks."""
    return _XREF.sub(r"\1", text).replace("``", "")


def _wrap(text: str, indent: str, width: int = 100) -> str:
    return textwrap.fill(
        text, width=width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
    )


def describe_rule(name: str) -> str:
    """What ``fairagg rules NAME`` prints (and the docs' page of the rule shows): the rule's
    paper, equations and reports, each hyper-parameter with its default and meaning from its
    factory's docstring, and the values ``run`` and ``compare`` set themselves."""
    spec = RULES[name]
    params = inspect.signature(spec.factory).parameters
    docs = _doc_parameters(spec.factory.__doc__ or "")
    first = " ".join(inspect.cleandoc(spec.factory.__doc__ or "").split("\n\n")[0].split())
    who = "every client, every round" if spec.full_participation else "any clients per round"
    lines = [
        _wrap(f"{name}: {spec.summary}", ""),
        _wrap(f"{spec.paper}, {spec.equations}. {_plain(first)}", "  "),
        f"  reports: {', '.join(('deltas', 'num_samples', *spec.needs))}; clients: {who}",
        "",
        "hyper-parameters (--rule-arg NAME=VALUE):",
    ]
    for p in params.values():
        default = "required" if p.default is inspect.Parameter.empty else repr(p.default)
        kind, text = docs.get(p.name, ("", ""))
        lines.append(f"  {p.name} = {default}" + (f"    ({kind})" if kind else ""))
        if text:
            lines.append(_wrap(_plain(text), "      "))
    for key, value in EXPERIMENT_RULE_ARGS.get(name, {}).items():
        lines += [
            "",
            _wrap(
                f"fairagg run and fairagg compare set {key} = {value!r}, not the default "
                f"{params[key].default!r} above, unless --rule-arg sets it (--rule-arg "
                f"{name}.{key}=none for the default; why: the docs' Results page, default runs)",
                "",
            ),
        ]
    return "\n".join(lines)


def _cmd_rules(args: argparse.Namespace) -> int:
    if args.rule is not None:
        print(describe_rule(args.rule))
        return 0
    w_name = max(len(n) for n in RULES) + 2
    w_paper = max(len(s.paper) for s in RULES.values()) + 2
    print(f"{'rule':<{w_name}}{'paper':<{w_paper}}equations")
    for spec in RULES.values():
        print(f"{spec.name:<{w_name}}{spec.paper:<{w_paper}}{spec.equations}")
        needs = f" (reports {', '.join(spec.needs)})" if spec.needs else ""
        print(_wrap(spec.summary + needs, " " * 4))
    print("\nfairagg rules RULE: a rule's hyper-parameters, defaults, ranges and variants")
    return 0
