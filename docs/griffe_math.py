"""A griffe extension for the docs site: the docstrings' reStructuredText maths (``:math:`x```
and ``.. math::`` blocks, which the numpydoc style uses) become the ``$x$`` / ``$$ … $$``
that ``pymdownx.arithmatex`` renders with MathJax. The docstrings themselves stay as they are."""

from __future__ import annotations

import re
import textwrap
from typing import Any

try:
    import griffe
except ImportError:  # the tests import convert() without the docs extra
    griffe = None

_ROLE = re.compile(r":math:`([^`]+)`")
_BLOCK = re.compile(
    r"^([ \t]*)\.\. math::[ \t]*\n((?:[ \t]*\n)*)((?:\1[ \t]+\S.*\n|[ \t]*\n)+)", re.M
)


def convert(text: str) -> str:
    """``text`` with its reST maths in arithmatex's syntax."""

    def block(m: re.Match) -> str:
        indent, body = m.group(1), textwrap.dedent(m.group(3)).strip("\n")
        equations = [e.strip() for e in re.split(r"\n[ \t]*\n", body) if e.strip()]
        if len(equations) > 1:  # one display, no blank line inside it (Markdown would split it)
            body = "\\begin{gathered}\n" + " \\\\\n".join(equations) + "\n\\end{gathered}"
        return f"{indent}$$\n" + textwrap.indent(body, indent) + f"\n{indent}$$\n\n"

    text = _BLOCK.sub(block, text if text.endswith("\n") else text + "\n")
    return _ROLE.sub(lambda m: f"${m.group(1)}$", text).rstrip("\n")


if griffe is not None:

    class ReSTMath(griffe.Extension):
        """Rewrite every docstring's maths when griffe loads an object."""

        def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value)
