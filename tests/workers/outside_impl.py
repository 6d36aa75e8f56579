"""A worker's implementations: outside code, nothing from fairagg (``planted.py``).

The conformance tests copy the worker template (``fairagg check --template``), point its
``FORMULAS`` and ``RULES`` at this module and drive it through ``fairagg check --cmd``. A
``--mistake NAME`` argument on the worker's command line plants one known mistake
(``planted.PLANTED``). Importing fairagg from here fails: the point is code that cannot reach
fairagg's own functions.
"""

import sys


class _NoFairagg:
    """An import hook that refuses fairagg, so this worker provably computes on its own."""

    def find_spec(self, name, path=None, target=None):
        if name == "fairagg" or name.startswith("fairagg."):
            raise ImportError("the outside worker must not import fairagg")
        return None


sys.meta_path.insert(0, _NoFairagg())

import planted  # noqa: E402 - after the hook, so that planted cannot reach fairagg either

planted.MISTAKE = sys.argv[sys.argv.index("--mistake") + 1] if "--mistake" in sys.argv else None
FORMULAS = dict(planted.FORMULAS)
RULES = dict(planted.RULES)
if planted.MISTAKE == "domain":
    RULES["fedavg"] = planted.domain_limited
if planted.MISTAKE == "float32":
    RULES["fedavg"] = planted.fedavg


def set_skip(cls):
    planted.SKIP = cls
