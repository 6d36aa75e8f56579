"""The contract driver: valid inputs, then every bad family, for one public name at a time.

An :class:`Entry` says how to draw valid keyword arguments for a public callable and what a valid
result must satisfy. :func:`run_entry` draws valid arguments with Hypothesis, checks the result
(finite, inputs not modified, the same twice, the entry's own property), then replaces one
argument at a time by each member of its bad families and requires either

- a :class:`ValueError` or :class:`TypeError` (or a type the entry documents, such as
  ``fairagg.oracles.OracleError``) whose message names the argument as the caller passed it, or
- a result that satisfies the same checks; for a power-of-two rescaling of an argument in which
  the entry declares the result homogeneous, the result must equal the valid result rescaled
  (to 1e-9 relative, plus what subnormal output can hold).

Anything else fails: another exception type, a warning (the suite turns warnings into errors), a
non-finite result for finite input, NaN or infinity accepted, a changed input.

The families (the Errors guide): NaN, +inf and -inf in an array; an empty array; one axis
more or fewer; one row more or fewer; int, bool, float32, complex, object and str dtypes; a
Python list; the array times 2^-1000, 2^-530, 2^530 and 2^1000; None and a wrong type for every
argument; for numbers NaN, ±inf, -1, 0, 2^±1000; for integers 1.5, -1, 0, 2^70; for strings an
unknown value.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

#: Examples per entry: the default profile keeps the whole module near a minute on a small
#: shared machine; ``FAIRAGG_CONTRACT_PROFILE=long`` multiplies them (see
#: docs/pages/guides/verification.md).
PROFILE = os.environ.get("FAIRAGG_CONTRACT_PROFILE", "default")
EXAMPLE_FACTOR = {"default": 1, "long": 25}[PROFILE]

#: Power-of-two exponents of the scale families: across float64's range and near its edges.
SCALES = (-1000, -530, 530, 1000)

NONFINITE = ("NaN", "+inf", "-inf")


@dataclass(frozen=True)
class Entry:
    """The contract of one public callable.

    ``valid`` draws keyword arguments (``draw`` is Hypothesis' draw function). ``check(kwargs,
    result)`` asserts the property of a result on those arguments. ``scale`` maps an argument to
    the degree of homogeneity of the result in it: a number for every numeric leaf of the result,
    or a tuple with one degree (or None: not homogeneous) per leaf, or a mapping from a field of
    a result tuple to its degree. ``fixed`` names arguments
    that are not corrupted (a callback, an output folder), ``allowed`` extra exception types
    whose messages must still name the argument, ``nonfinite_ok`` the ``"argument:family"`` pairs
    that are valid (``"upper:+inf"``, an absent bound), ``finite`` whether a valid result must be
    finite, ``subprocess`` whether the calls run in a child interpreter (compiled code).
    """

    valid: Callable[[Any], dict[str, Any]]
    call: Callable[..., Any] | None = None
    check: Callable[[dict[str, Any], Any], None] | None = None
    scale: Mapping[str, Any] = field(default_factory=dict)
    fixed: tuple[str, ...] = ()
    allowed: tuple[type[BaseException], ...] = ()
    examples: int = 2
    finite: bool = True
    nonfinite_ok: tuple[str, ...] = ()
    overflow_ok: tuple[str, ...] = ()
    deterministic: bool = True
    subprocess: bool = False
    compare_copies: bool = True


@dataclass(frozen=True)
class Kind:
    """A public name that is not called: a constant, a result type, an exception class."""

    kind: str  # "constant", "type" or "exception"


CONSTANT = Kind("constant")
TYPE = Kind("type")
EXCEPTION = Kind("exception")
FIXTURE = Kind("fixture")


# --------------------------------------------------------------------------------------------
# results


def leaves(x: Any) -> Iterator[np.ndarray]:
    """The numeric leaves of a result, in order: arrays, numbers, and those inside tuples,
    lists and dicts (other objects are skipped)."""
    if x is None or isinstance(x, (bool, np.bool_, str, bytes)):
        return
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "iuf":
            yield x
        return
    if isinstance(x, (int, float, np.integer, np.floating)):
        yield np.asarray(x, dtype=np.float64)
        return
    if hasattr(x, "copy_to_host") and hasattr(x, "dtype"):
        yield np.asarray(x.copy_to_host())
        return
    if isinstance(x, Mapping):
        for v in x.values():
            yield from leaves(v)
        return
    if isinstance(x, (tuple, list)):
        for v in x:
            yield from leaves(v)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (int, str, bytes, type(None), np.generic)):
        return type(a) is type(b) and bool(a == b)
    return True  # other objects (rules, models, generators): not compared


def _nonfinite(result: Any, overflow_ok: tuple[str, ...]) -> list[str]:
    """Non-finite numeric leaves of a result, but ±inf in a field of ``overflow_ok`` (a quantity
    documented to round to ±inf where its exact value exceeds float64)."""
    if hasattr(result, "_fields"):
        return [
            f"{field}: {f}"
            for field in result._fields
            for f in _nonfinite(getattr(result, field), ())
            if not (field in overflow_ok and "nan" not in f)
        ]
    return [
        f"leaf {i} is not finite: {leaf!r}"
        for i, leaf in enumerate(leaves(result))
        if leaf.dtype.kind == "f" and not np.isfinite(leaf).all()
    ]


def _result_fails(entry: Entry, kwargs: dict[str, Any], result: Any) -> list[str]:
    out = []
    if entry.finite:
        out += [f"result {f}" for f in _nonfinite(result, entry.overflow_ok)]
    return out + _check_fails(entry, kwargs, result)


def _check_fails(entry: Entry, kwargs: dict[str, Any], result: Any) -> list[str]:
    if entry.check is None:
        return []
    try:
        entry.check(kwargs, result)
    except AssertionError as exc:
        return [f"property fails: {exc}"]
    return []


def _rescaled_fails(degrees: Any, k: int, ref: Any, result: Any) -> list[str]:
    if isinstance(degrees, Mapping):  # named fields of a result tuple, each with its degree
        return [
            f"{field}: {f}"
            for field, deg in degrees.items()
            for f in _rescaled_fails(deg, k, getattr(ref, field), getattr(result, field))
        ]
    ref_leaves, got_leaves = list(leaves(ref)), list(leaves(result))
    if len(ref_leaves) != len(got_leaves):
        return [f"result has {len(got_leaves)} numeric leaves, not {len(ref_leaves)}"]
    if not isinstance(degrees, tuple):
        degrees = (degrees,) * len(ref_leaves)
    out = []
    for i, (deg, r, g) in enumerate(zip(degrees, ref_leaves, got_leaves, strict=True)):
        if deg is None:
            continue
        r64, g64 = np.asarray(r, dtype=np.float64), np.asarray(g, dtype=np.float64)
        if r64.shape != g64.shape:
            out.append(f"leaf {i}: shape {g64.shape}, not {r64.shape}")
            continue
        with np.errstate(over="ignore", under="ignore"):
            want = np.ldexp(r64, k * deg)
            back = np.ldexp(g64, -k * deg)  # exact unless the result is subnormal
        # Where the exact result exceeds float64, a finite value would be wrong; ±inf is its
        # rounding, and raw arithmetic (the kernels) may also give NaN or the other infinity
        # from partial sums that overflow first.
        over = np.isinf(want)
        if np.isfinite(g64[over]).any():
            out.append(f"leaf {i}: at 2^{k} got {g64!r}, expected {want!r} (overflow)")
        back, r64 = back[~over], r64[~over]
        # what a subnormal output can hold, mapped back to the reference's scale
        floor = math.ldexp(2.0**-1022, -k * deg) if k * deg < 0 else 0.0
        bound = 1e-9 * np.abs(r64) + 1e-9 * float(np.max(np.abs(r64), initial=0.0)) + floor
        if not (np.abs(back - r64) <= bound).all():
            out.append(
                f"leaf {i}: not homogeneous of degree {deg}: at 2^{k} got {g64!r}, "
                f"expected {want!r}"
            )
    return out


# --------------------------------------------------------------------------------------------
# the bad families


def _with_first(a: np.ndarray, value: float) -> np.ndarray:
    b = a.astype(np.float64, copy=True)
    b.flat[0] = value
    return b


def array_families(a: np.ndarray) -> Iterator[tuple[str, Any]]:
    """Bad (or merely unusual) versions of an array argument."""
    if a.size:
        for name, v in zip(NONFINITE, (np.nan, np.inf, -np.inf), strict=True):
            yield name, _with_first(a, v)
    if a.ndim >= 1:
        yield "empty", a[:0]
        yield "one axis fewer", a[0]
        yield "one row more", np.concatenate([a, a[:1]]) if len(a) else a
        if len(a) > 1:
            yield "one row fewer", a[:-1]
    yield "one axis more", a[None]
    yield "bool dtype", a != 0
    yield "complex dtype", a.astype(np.complex128)
    yield "object dtype", a.astype(object)
    yield "str dtype", a.astype(str)
    yield "list", a.tolist()
    if a.dtype.kind == "f":
        yield "int dtype", np.rint(a).astype(np.int64)
        yield "float32 dtype", a.astype(np.float32)
        for k in SCALES:
            yield f"2^{k}", np.ldexp(a, k)
    else:
        yield "float dtype", a.astype(np.float64)
        yield "fractional", a + 0.5
        if a.size:
            b = a.copy()
            b.flat[0] = -1
            yield "a -1", b
            c = a.astype(np.float64)
            c.flat[0] = 2.0**70
            yield "2^70", c


def scalar_families(x: Any) -> Iterator[tuple[str, Any]]:
    """Bad versions of a scalar argument (None everywhere; then by the value's type)."""
    yield "None", None
    if isinstance(x, (bool, np.bool_)):
        yield "str", "yes"
        yield "2", 2
        return
    if isinstance(x, (int, np.integer)):
        yield "str", "1"
        yield "1.5", 1.5
        yield "-1", -1
        yield "0", 0
        yield "2^70", 2**70
        yield "True", True
        yield "array", np.array([x, x])
        return
    if isinstance(x, (float, np.floating)):
        yield "str", "1.0"
        yield from zip(NONFINITE, (math.nan, math.inf, -math.inf), strict=True)
        yield "-1.0", -1.0
        yield "0.0", 0.0
        yield "2^1000", 2.0**1000
        yield "2^-1000", 2.0**-1000
        yield "complex", complex(x, 1.0)
        yield "array", np.array([x, x])
        return
    if isinstance(x, str):
        yield "int", 3
        yield "unknown value", "no-such-value"
        return
    yield "int", 3
    yield "str", "text"


def families(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, np.ndarray):
        yield "None", None
        yield "str", "text"
        yield from array_families(value)
    elif value is None:
        yield "str", "text"
        yield "int", 3
    else:
        yield from scalar_families(value)


# --------------------------------------------------------------------------------------------
# the driver


#: Families that are values of the right kind: they may be valid, or make another argument
#: invalid (an empty array against its partner's length, a tolerance of 0 against a point that
#: sums to 1 - 2^-53), so the message may name any argument of the call. The other families are
#: the wrong kind of thing and must be blamed on the argument itself.
VALUE_FAMILIES = ("empty", "one row", "0", "-1", "2^", "fractional", "a -1")


def _names_argument(message: str, argument: str, others: tuple[str, ...], family: str) -> bool:
    if argument in message:
        return True
    return family.startswith(VALUE_FAMILIES) and any(o in message for o in others)


def _call(entry: Entry, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    return (entry.call or fn)(**kwargs)


def check_entry_once(name: str, entry: Entry, fn: Callable[..., Any], kwargs: dict[str, Any]):
    """Run one valid example and all its bad variants; raise AssertionError listing failures."""
    fails: list[str] = []
    saved = copy.deepcopy(kwargs)
    result = _call(entry, fn, kwargs)
    for key, value in kwargs.items():
        if entry.compare_copies and not _same(value, saved[key]):
            fails.append(f"valid call modified its argument {key}")
    fails += [f"valid call: {f}" for f in _result_fails(entry, kwargs, result)]
    if entry.deterministic:
        again = _call(entry, fn, copy.deepcopy(saved))
        if not _same(list(leaves(result)), list(leaves(again))):
            fails.append("valid call: a second call gave another result")
    for arg in saved:
        if arg in entry.fixed:
            continue
        others = tuple(k for k in saved if k != arg)
        for family, bad in families(saved[arg]):
            bad_kwargs = copy.deepcopy(saved)
            bad_kwargs[arg] = bad
            where = f"{arg} <- {family}"
            try:
                got = _call(entry, fn, bad_kwargs)
            except (ValueError, TypeError, *entry.allowed) as exc:
                if not _names_argument(str(exc), arg, others, family):
                    fails.append(f"{where}: {type(exc).__name__} does not name {arg!r}: {exc}")
                continue
            except BaseException as exc:  # noqa: BLE001 - every other outcome is a failure
                fails.append(f"{where}: raised {type(exc).__name__}: {exc}")
                continue
            if (
                family in NONFINITE
                and isinstance(saved[arg], (np.ndarray, float))
                and f"{arg}:{family}" not in entry.nonfinite_ok
            ):
                fails.append(f"{where}: accepted a non-finite value")
                continue
            scaled = (
                family.startswith("2^")
                and arg in entry.scale
                and isinstance(saved[arg], np.ndarray)
            )
            if scaled:  # the rescaled comparison below judges ±inf (exact overflow) itself
                fails += [f"{where}: {f}" for f in _check_fails(entry, bad_kwargs, got)]
                degrees = entry.scale[arg]
                if isinstance(degrees, Mapping):  # fields without a degree must be finite
                    covered = entry.overflow_ok + tuple(degrees)
                    fails += [f"{where}: result {f}" for f in _nonfinite(got, covered)]
            else:
                fails += [f"{where}: {f}" for f in _result_fails(entry, bad_kwargs, got)]
            if scaled:
                k = int(family[2:])
                fails += [
                    f"{where}: {f}" for f in _rescaled_fails(entry.scale[arg], k, result, got)
                ]
    if fails:
        raise AssertionError(f"{name} breaks its contract:\n  " + "\n  ".join(fails))


def run_entry(name: str, entry: Entry, fn: Callable[..., Any]) -> None:
    """Check ``entry`` on ``entry.examples × EXAMPLE_FACTOR`` drawn valid inputs."""

    @settings(
        max_examples=entry.examples * EXAMPLE_FACTOR,
        deadline=None,
        derandomize=PROFILE == "default",
        database=None,
        # no shrinking: a failure already lists every broken family of its example, and
        # shrinking would re-run the whole family loop hundreds of times
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def run(data: st.DataObject) -> None:
        kwargs = entry.valid(data.draw)
        check_entry_once(name, entry, fn, kwargs)

    run()
