"""The contract over the whole public surface (docs/pages/guides/errors.md).

Every name in ``__all__`` of every public module has an entry in :data:`CONTRACT`; a new public
name without one fails :func:`test_every_public_name_has_a_contract_entry`. Each callable's entry
is run by :func:`tests.contract.driver.run_entry`: valid inputs give a result with the entry's
property, and every bad family gives that result or a ValueError/TypeError naming the argument.
Calls into compiled code with bad input run in a child interpreter, so that a crash there is a
failure here and not the end of the test session.

Profiles: the default keeps this module near a minute; ``FAIRAGG_CONTRACT_PROFILE=long`` draws
25 times as many valid inputs per entry (minutes to an hour).
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import fairagg
from tests.contract.driver import Entry, Kind, run_entry
from tests.contract.entries import CONTRACT

ROOT = Path(__file__).resolve().parents[2]


def public_modules() -> list[str]:
    """fairagg, its modules and packages whose names do not start with an underscore, and the
    models package."""
    names = ["fairagg"]
    for info in pkgutil.walk_packages(fairagg.__path__, "fairagg."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    models = importlib.import_module("fairagg.models")
    names.append("fairagg.models")
    for info in pkgutil.walk_packages(models.__path__, "fairagg.models."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(set(names))


def canonical(module: str, name: str) -> str:
    """The entry key of a public name: where a function or class is defined (a re-export shares
    the entry of its definition), the public name itself for a constant."""
    obj = getattr(importlib.import_module(module), name)
    if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__.startswith("fairagg"):
        return f"{obj.__module__}.{obj.__qualname__}"
    return f"{module}.{name}"


def public_names() -> dict[str, str]:
    """entry key -> one public name that resolves to it."""
    out: dict[str, str] = {}
    for module in public_modules():
        for name in importlib.import_module(module).__all__:
            out.setdefault(canonical(module, name), f"{module}.{name}")
    return out


def resolve(key: str):
    module, _, name = key.rpartition(".")
    while True:
        try:
            obj = importlib.import_module(module)
            break
        except ModuleNotFoundError:  # a class attribute: walk back one more dot
            module, _, outer = module.rpartition(".")
            name = f"{outer}.{name}"
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def test_every_public_module_declares_all():
    missing = [m for m in public_modules() if not hasattr(importlib.import_module(m), "__all__")]
    assert not missing, f"public modules without __all__: {missing}"


def test_every_public_name_has_a_contract_entry():
    public = public_names()
    missing = sorted(public[k] for k in public.keys() - CONTRACT.keys())
    stale = sorted(CONTRACT.keys() - public.keys())
    assert not missing, f"public names without a contract entry: {missing}"
    assert not stale, f"contract entries for names that are no longer public: {stale}"


KINDS = sorted(k for k, e in CONTRACT.items() if isinstance(e, Kind))
IN_PROCESS = sorted(k for k, e in CONTRACT.items() if isinstance(e, Entry) and not e.subprocess)
COMPILED = sorted(k for k, e in CONTRACT.items() if isinstance(e, Entry) and e.subprocess)


@pytest.mark.parametrize("key", KINDS)
def test_non_callable_names_are_what_their_entry_says(key):
    obj, kind = resolve(key), CONTRACT[key].kind
    if kind == "constant":
        assert not callable(obj) or isinstance(obj, dict), f"{key} is callable"
        return
    if kind == "fixture":
        assert getattr(obj, "__doc__", None) or hasattr(obj, "_fixture_function"), key
        return
    assert inspect.isclass(obj), f"{key} is not a class"
    assert inspect.getdoc(obj), f"{key} has no docstring"
    if kind == "exception":
        assert issubclass(obj, Exception)
    elif kind == "type":
        assert not issubclass(obj, BaseException)


@pytest.mark.parametrize("key", IN_PROCESS)
def test_entry(key):
    run_entry(key, CONTRACT[key], resolve(key))


def test_compiled_entries_in_a_child_interpreter():
    """The entries that hand arrays to compiled code, run where a crash cannot end this session:
    the child must exit 0 (a crash is a negative exit status, a broken contract exit 1)."""
    code = (
        "import sys\n"
        "from tests.conftest import simulator_switch_interval\n"
        "simulator_switch_interval()\n"
        "from tests.contract.entries import CONTRACT\n"
        "from tests.contract.driver import run_entry\n"
        "from tests.contract.test_contract import resolve\n"
        "for key in sys.argv[1:]:\n"
        "    run_entry(key, CONTRACT[key], resolve(key))\n"
        "    print('ok', key, flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", code, *COMPILED],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (
        f"child exited {proc.returncode} after:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    )
    assert proc.stdout.count("ok ") == len(COMPILED)
