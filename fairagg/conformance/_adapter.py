"""How fairagg's inputs reach the user's function, and how its result comes back."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..vectors import FORMULAS, RULE_EXCLUDE
from ._common import Json, UsageError


@dataclass(frozen=True)
class Adapter:
    """How fairagg's inputs reach your function, and how its result comes back.

    Attributes
    ----------
    rename : mapping
        fairagg's name → your argument name (``{"deltas": "updates"}``); the same names are
        read back from a returned dict.
    fixed : mapping
        Extra keyword arguments passed as they are on every call.
    outputs : str or sequence of str, optional
        fairagg's names for your result: one name for an array (default: the target's main
        output), a sequence for a tuple's items.
    call : callable, optional
        ``call(fn, inputs)`` makes the call itself from the dict of fairagg's inputs (every one
        of them, with fairagg's names) and returns the result.
    stateful : bool
        Rules only: your function is a factory called once per case (with ``params`` θ⁰,
        ``num_clients`` and the hyper-parameters) that returns the per-round function.
    """

    rename: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    outputs: str | Sequence[str] | None = None
    call: Callable[[Callable[..., Any], dict[str, Any]], Any] | None = None
    stateful: bool = False

    def __post_init__(self) -> None:
        for name in ("rename", "fixed"):
            if not isinstance(getattr(self, name), Mapping):
                raise TypeError(f"Adapter.{name} must be a mapping")
        if self.outputs is not None and not isinstance(self.outputs, str):
            if not isinstance(self.outputs, Sequence) or not all(
                isinstance(o, str) for o in self.outputs
            ):
                raise TypeError("Adapter.outputs must be a name or a sequence of names")
        if self.call is not None and not callable(self.call):
            raise TypeError("Adapter.call must be callable")
        if not isinstance(self.stateful, bool):
            raise TypeError("Adapter.stateful must be a bool")


def fresh(value: Any) -> Any:
    """A copy the user's function may modify without touching fairagg's inputs."""
    return copy.deepcopy(value)


def invoke(fn: Callable[..., Any], kwargs: dict[str, Any], adapter: Adapter, target: str) -> Any:
    kwargs = {k: fresh(v) for k, v in kwargs.items()}
    if adapter.call is not None:
        return adapter.call(fn, kwargs)
    named = {adapter.rename.get(k, k): v for k, v in kwargs.items()}
    named.update(adapter.fixed)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: pass everything
        return fn(**named)
    ps = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ps.values()):
        return fn(**named)
    missing = [
        k
        for k, p in ps.items()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and k not in named
    ]
    if missing:
        raise UsageError(
            TypeError(
                f"your function's argument{'s' if len(missing) > 1 else ''} "
                f"{', '.join(map(repr, missing))} {'are' if len(missing) > 1 else 'is'} not "
                f"among what the harness passes for {target!r}: {', '.join(sorted(named))}. "
                "Map names with Adapter(rename={fairagg_name: your_name}) or give a default"
            )
        )
    return fn(**{k: v for k, v in named.items() if k in ps})


def named(
    result: Any, outputs: Sequence[str], known: Sequence[str], adapter: Adapter, target: str
) -> Json:
    """Your result as {fairagg name: value}: an array is the first of fairagg's ``outputs``, a
    tuple as long as ``outputs`` is read in their order."""
    primary = outputs[0]
    back = {v: k for k, v in adapter.rename.items()}
    if result is None:
        raise UsageError(TypeError(f"your function returned None for {target!r}"))
    if isinstance(adapter.outputs, str):
        out = {adapter.outputs: result}
    elif adapter.outputs is not None:
        items = tuple(result) if isinstance(result, (tuple, list)) else None
        if items is None or len(items) != len(adapter.outputs):
            raise UsageError(
                ValueError(
                    f"Adapter.outputs names {len(adapter.outputs)} items; your function "
                    f"returned {type(result).__name__}"
                    + (f" of {len(items)}" if items is not None else "")
                )
            )
        out = dict(zip(adapter.outputs, items, strict=True))
    elif isinstance(result, Mapping):
        out = {(back[k] if k in back else k): v for k, v in result.items()}
    elif hasattr(result, "_fields"):
        out = {back.get(k, k): getattr(result, k) for k in result._fields}
    elif isinstance(result, tuple) and len(result) == len(outputs):
        out = dict(zip(outputs, result, strict=True))
    elif isinstance(result, tuple):
        raise UsageError(
            TypeError(
                f"your function returned a tuple of {len(result)} for {target!r}; name its items "
                f"with Adapter(outputs=(...)) from: {', '.join(known)}"
            )
        )
    else:
        out = {primary: result}
    # outputs fairagg has but does not compare (iteration counts, solver diagnostics)
    ignored = set(FORMULAS[target].exclude if target in FORMULAS else RULE_EXCLUDE)
    unknown = sorted(set(out) - set(known) - ignored)
    if unknown and (
        isinstance(result, Mapping) or hasattr(result, "_fields") or adapter.outputs is not None
    ):
        raise UsageError(
            ValueError(
                f"your function returned {', '.join(map(repr, unknown))}, which {target!r} does "
                f"not have; it has: {', '.join(known)}"
            )
        )
    out = {k: v for k, v in out.items() if k in known}
    if not out:  # nothing would be compared: a check that cannot fail
        raise UsageError(
            ValueError(f"your function returned nothing that {target!r} has: {', '.join(known)}")
        )
    return out
