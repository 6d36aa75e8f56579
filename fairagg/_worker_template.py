#!/usr/bin/env python3
"""A conformance worker: your implementation, checked by ``fairagg check TARGET --cmd``.

Copy this file (``fairagg check --template > my_worker.py``), put your code where the examples
are, and run, in fairagg's environment::

    fairagg check qfedavg_step --cmd "python my_worker.py"
    fairagg check afl --cmd "/path/to/other/env/bin/python my_worker.py"

The worker runs in *your* environment (any Python, any numpy, torch, ...): it imports nothing
from fairagg. fairagg starts it once and sends one JSON request per line on its stdin; it answers
one JSON line per request on its stdout (print your own diagnostics freely: while your code
runs, ``print`` goes to stderr). The protocol is written out in fairagg's conformance guide,
for workers in other languages.

- A formula (``project_simplex``, ``qfedavg_step``, ...) is a function, called with keyword
  arguments named as fairagg names them (only those your signature takes, unless it takes
  ``**kwargs``).
- A rule (``fedavg``, ``afl``, ...) is a class: one instance per case, built with ``params``
  (θ⁰), ``num_clients`` and the rule's hyper-parameters; its ``round`` method gets ``params``
  (θ^t) and the round's fields (``deltas`` or ``gradients``, ``num_samples``, ``losses``,
  ``client_ids``, ``lr``, ``round_index``, ...) and returns θ^{t+1}. A plain function is also
  accepted for a rule that keeps no state: it is called every round with all of these.
- Return an array, or a dict of named outputs (e.g. ``{"params": ..., "weights": ...}``, and
  intermediate terms; ``fairagg check TARGET --describe`` lists the names).
- ``raise Skip("why")`` for an input your code does not handle by design (outside its
  domain): the case is counted as skipped, not as a difference. Any other exception is
  reported as what your code does on that case.
"""

import inspect
import json
import math
import sys
import traceback

try:
    import numpy as np
except ImportError:  # a worker without numpy gets nested lists
    np = None  # type: ignore[assignment]  # the None the code below tests for: no numpy here


class Skip(Exception):  # noqa: N818 - the name users raise
    """Raise for an input outside your implementation's domain."""


# ----------------------------------------------------------------- your code goes here
def project_simplex(y, total=1.0):
    """Euclidean projection onto {x >= 0, sum x = total} (an example to replace)."""
    u = np.sort(y)[::-1]
    css = np.cumsum(u)
    j = np.arange(1, len(u) + 1)
    rho = np.nonzero(u + (total - css) / j > 0)[0][-1]
    tau = (total - css[rho]) / (rho + 1)
    return np.maximum(y + tau, 0.0)


class FedAvg:
    """FedAvg as a rule object (an example to replace): θ − Σ_k n_k δ_k / Σ_k n_k."""

    def __init__(self, params, num_clients, **hyper):
        self.num_clients = num_clients

    def round(self, params, deltas, num_samples, **fields):
        w = num_samples / num_samples.sum()
        return {"params": params - w @ deltas, "weights": w}


FORMULAS = {"project_simplex": project_simplex}
RULES = {"fedavg": FedAvg}


# ------------------------------------------------- the protocol: no need to edit below
PROTOCOL = 1


class _Usage(Exception):
    """A request your worker cannot serve as written (not a difference of formula)."""


def _decode(v):
    if isinstance(v, dict) and "dtype" in v and "shape" in v and "data" in v:
        data = [_number(x) for x in v["data"]]
        if np is None:
            return data
        return np.array(data, dtype=v["dtype"]).reshape(v["shape"])
    if isinstance(v, dict):
        return {k: _decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return _number(v)


def _number(x):
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    return x


def _float(x):
    x = float(x)
    return x if math.isfinite(x) else str(x)


def _encode(v):
    if np is not None and isinstance(v, (np.ndarray, np.generic)) and np.ndim(v) > 0:
        a = np.asarray(v)
        if a.dtype.kind == "f":
            return {
                "dtype": "float64",
                "shape": list(a.shape),
                "data": [_float(x) for x in a.astype(np.float64).ravel()],
            }
        if a.dtype.kind in "biu":
            kind = "bool" if a.dtype.kind == "b" else "int64"
            return {"dtype": kind, "shape": list(a.shape), "data": a.ravel().tolist()}
        raise TypeError(f"cannot send an array of dtype {a.dtype}")
    if hasattr(v, "detach"):  # a torch tensor
        return _encode(v.detach().cpu().double().numpy())
    if isinstance(v, dict):
        return {str(k): _encode(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_encode(x) for x in v]
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int) or (np is not None and isinstance(v, np.integer)):
        return int(v)
    return _float(v)


def _call(fn, args, what):
    try:
        ps = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(**args)
    if any(p.kind is p.VAR_KEYWORD for p in ps.values()):
        return fn(**args)
    missing = [
        k
        for k, p in ps.items()
        if p.default is p.empty
        and k not in args
        and k != "self"
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if missing:
        raise _Usage(
            f"{what} takes {', '.join(missing)}, which fairagg does not pass; it "
            f"passes {', '.join(sorted(args))}"
        )
    return fn(**{k: v for k, v in args.items() if k in ps})


class _Stateless:
    def __init__(self, fn, params, num_clients, **hyper):
        self.fn = fn

    def round(self, **args):
        return _call(self.fn, args, "your rule function")


def _serve(req, sessions):
    op, target = req.get("op"), req.get("target")
    args = _decode(req.get("args", {}))
    if op == "hello":
        return {"protocol": PROTOCOL, "targets": sorted([*FORMULAS, *RULES])}
    if op == "call":
        if target not in FORMULAS:
            raise _Usage(f"this worker has no formula {target!r}; it has {sorted(FORMULAS)}")
        return _call(FORMULAS[target], args, f"your {target}")
    if op == "start":
        if target not in RULES:
            raise _Usage(f"this worker has no rule {target!r}; it has {sorted(RULES)}")
        impl = RULES[target]
        if inspect.isclass(impl):
            sessions[req["case"]] = _call(impl, args, f"your {target} class")
        else:
            sessions[req["case"]] = _Stateless(impl, **args)
        return None
    if op == "round":
        return _call(sessions[req["case"]].round, args, f"your {target}.round")
    if op == "end":
        sessions.pop(req.get("case"), None)
        return None
    raise _Usage(f"unknown request {op!r} (protocol {PROTOCOL})")


def main():
    out = sys.stdout
    sys.stdout = sys.stderr  # your prints go to stderr, the replies alone to stdout
    sessions = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        reply = {"id": req.get("id")}
        try:
            reply["result"] = _encode(_serve(req, sessions))
        except Skip as exc:
            reply["skip"] = str(exc) or "outside the worker's domain"
        except _Usage as exc:
            reply["error"] = {"type": "UsageError", "message": str(exc), "usage": True}
        except Exception as exc:  # noqa: BLE001 - any failure of your code is reported
            traceback.print_exc()
            reply["error"] = {"type": type(exc).__name__, "message": str(exc)}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
