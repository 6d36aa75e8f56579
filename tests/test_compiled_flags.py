"""Every compiled function called by a compiled function with fast-math flags states flags of its
own.

numba compiles a callee that has no ``fastmath`` of its own with its caller's flags, but only the
first time. The version it keeps, in memory and in the on-disk cache, is whichever was compiled
first: by a fast-math caller, or by a direct call (a test, a user) without flags. Until issue 22
the softmax helpers of local training and the simplex QP's free-set updates were such callees.
Compiling them directly first in a fresh cache changed the trained bits (13 pins failed) and the
QP's results (1531 of 1745 recorded solves). A callee with flags of its own always runs with them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _compiled_functions() -> dict[str, list[tuple[str, bool, set[str]]]]:
    """name -> [(file, has fastmath, names it calls)] for every numba.njit / numba.jit function
    of the package (fairagg/ and models/)."""
    out: dict[str, list[tuple[str, bool, set[str]]]] = {}
    for path in sorted((ROOT / "fairagg").rglob("*.py")) + sorted((ROOT / "models").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef):
                continue
            decorators = [ast.unparse(d) for d in node.decorator_list]
            jit = [d for d in decorators if "njit" in d or d.startswith(("numba.jit", "jit("))]
            if not jit or any("cuda" in d for d in decorators):
                continue
            calls = {
                ast.unparse(c.func).rsplit(".", 1)[-1]
                for c in ast.walk(node)
                if isinstance(c, ast.Call)
            }
            rel = str(path.relative_to(ROOT))
            out.setdefault(node.name, []).append((rel, any("fastmath" in d for d in jit), calls))
    return out


def test_the_scan_finds_the_compiled_kernels():
    # the test below is only as good as this list: the known fast-math callers and callees
    found = _compiled_functions()
    for name in ("batch_loss_grad", "_active_set", "_chol_kkt", "_softmax_probs", "_chol_delete"):
        assert name in found, name
    assert all(fm for _, fm, _ in found["batch_loss_grad"])
    assert "_cross_entropy_row" in found["batch_loss_grad"][0][2]


def test_callees_of_fast_math_functions_state_their_own_flags():
    found = _compiled_functions()
    plain = {name for name, defs in found.items() if not any(fm for _, fm, _ in defs)}
    bad = sorted(
        f"{where}: {name} (fast-math) calls {callee}, which has no fastmath of its own"
        for name, defs in found.items()
        for where, fm, calls in defs
        if fm
        for callee in sorted(calls & plain)
    )
    assert not bad, "\n".join(bad)
