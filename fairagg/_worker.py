"""The conformance harness's side of the worker protocol (``fairagg check TARGET --cmd``).

fairagg starts the user's command once and talks to it over its stdin and stdout: one JSON
request per line, one JSON reply per line (protocol 1, written out in the conformance guide and
in the Python worker users copy (``fairagg check --template``)). Arrays travel as the golden
vectors write them, ``{"dtype": ..., "shape": [...], "data": [...]}``, always inline, with the
non-finite floats written as the strings ``"nan"``, ``"inf"`` and ``"-inf"`` (JSON has no
literal for them; the bare tokens ``NaN``/``Infinity`` that Python's json writes are read too).

Requests (``id`` counts from 1; ``args`` are keyword arguments named as fairagg names them):

- ``{"id", "op": "hello", "protocol": 1}`` → ``{"result": {"protocol": 1, "targets": [...]}}``
- ``{"id", "op": "call", "target", "args"}`` → a formula's result
- ``{"id", "op": "start", "target", "case", "args"}`` → null (a rule's state for one case,
  built from ``params`` θ⁰, ``num_clients`` and the hyper-parameters)
- ``{"id", "op": "round", "target", "case", "args"}`` → θ^{t+1}, or a dict of named outputs
- ``{"id", "op": "end", "target", "case"}`` → null (the case's state can go)

Replies: ``{"id", "result": value}``, ``{"id", "skip": "why"}`` (an input outside the
implementation's domain), ``{"id", "error": {"type", "message", "usage": bool}}`` (the code
raised; ``usage`` marks a request the worker cannot serve as written, e.g. an unknown target).
"""

from __future__ import annotations

import json
import math
import os
import queue
import shlex
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

PROTOCOL = 1
_TAIL = 2000  # characters of the worker's stderr shown when it fails


class WorkerError(RuntimeError):
    """The worker cannot be driven: it did not start, exited, stalled, or broke the protocol."""


class WorkerUsageError(ValueError):
    """The worker refused a request as written (unknown target, an argument fairagg does not
    pass): a mistake of set-up, not a difference of formula."""


class WorkerRaised(Exception):  # noqa: N818 - the user's exception, carried back
    """The user's code raised ``type``: ``message`` on a request."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message = type_name, message


class WorkerSkipped(Exception):  # noqa: N818 - a signal, not an error
    """The worker declared the input outside its domain."""


# ---------------------------------------------------------------------------------- encoding
def _float(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)  # "nan", "inf", "-inf"


def encode(value: Any) -> Any:
    """A JSON value for ``value`` (arrays inline, non-finite floats as strings)."""
    if isinstance(value, (np.ndarray, np.generic)) and np.ndim(value) > 0:
        a = np.asarray(value)
        if a.dtype.kind == "f":
            data = [_float(float(x)) for x in a.astype(np.float64).ravel()]
            return {"dtype": "float64", "shape": list(a.shape), "data": data}
        if a.dtype.kind in "biu":
            kind = "bool" if a.dtype.kind == "b" else "int64"
            return {"dtype": kind, "shape": list(a.shape), "data": a.ravel().tolist()}
        raise TypeError(f"cannot encode an array of dtype {a.dtype}")
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _float(float(value))
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"cannot encode {type(value).__name__}")


def _number(x: Any) -> Any:
    if isinstance(x, str) and x.lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
        return float(x)
    return x


def _is_number(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    return isinstance(x, (int, float)) or (isinstance(x, str) and isinstance(_number(x), float))


def decode(value: Any) -> Any:
    """The value a reply holds: encoded arrays become NumPy arrays."""
    if isinstance(value, dict) and {"dtype", "shape", "data"} <= set(value):
        try:
            data = [_number(x) for x in value["data"]]
            return np.array(data, dtype=value["dtype"]).reshape(value["shape"])
        except (TypeError, ValueError) as exc:
            raise WorkerError(f"the worker sent an array that cannot be read: {exc}") from None
    if isinstance(value, dict):
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(_is_number(x) for x in value):  # a plain list of numbers: an array
            return np.array([_number(x) for x in value], dtype=np.float64)
        return [decode(v) for v in value]
    return _number(value)


# ------------------------------------------------------------------------------------ worker
class Worker:
    """A user's implementation running as a separate process (``fairagg check --cmd``).

    Use it as ``check(Worker(cmd), target)`` or as a context manager;
    [`close`][fairagg.conformance.Worker.close] ends the process (it is also ended when the object
    is collected).

    Parameters
    ----------
    command : str or sequence of str
        The command that starts the worker, e.g. ``"python my_worker.py"`` (split like a shell
        would, without running one) or ``["python", "my_worker.py"]``.
    timeout : float
        Seconds to wait for each reply (the first one includes the worker's start-up).
    cwd : str, optional
        Working directory of the worker.
    """

    def __init__(
        self, command: str | Sequence[str], *, timeout: float = 60.0, cwd: str | None = None
    ) -> None:
        if isinstance(command, str):
            if not command.strip():
                raise ValueError("command must not be empty")
            try:
                argv = shlex.split(command)
            except ValueError as exc:
                raise ValueError(f"command cannot be split into arguments: {exc}") from None
        elif isinstance(command, Sequence) and command and all(isinstance(c, str) for c in command):
            argv = list(command)
        else:
            raise TypeError("command must be a string or a non-empty sequence of strings")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"timeout must be a number of seconds; got {type(timeout).__name__}")
        if not 0 < timeout <= threading.TIMEOUT_MAX:
            raise ValueError(
                f"timeout must be a positive number of seconds up to {threading.TIMEOUT_MAX:g}; "
                f"got {timeout!r}"
            )
        self.command = " ".join(shlex.quote(a) for a in argv)
        self.timeout = float(timeout)
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=cwd,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        except OSError as exc:
            self._stderr.close()
            raise WorkerError(
                f"cannot start the worker (command {self.command!r}): {exc}"
            ) from None
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next = 0
        self.targets: list[str] = []
        hello = self._request({"op": "hello", "protocol": PROTOCOL})
        if not isinstance(hello, dict) or hello.get("protocol") != PROTOCOL:
            self.close()
            raise WorkerError(
                f"the worker {self.command!r} answered hello with {hello!r}; it must answer "
                f'{{"result": {{"protocol": {PROTOCOL}, "targets": [...]}}}}'
            )
        self.targets = [str(t) for t in hello.get("targets", [])]

    def _read(self) -> None:
        assert self._proc.stdout is not None
        try:
            for line in self._proc.stdout:
                self._lines.put(line)
        except (OSError, ValueError):  # the pipe closed under the reader
            pass
        self._lines.put(None)

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        text = text.strip()
        if not text:
            return ""
        if len(text) > _TAIL:
            text = "..." + text[-_TAIL:]
        return "\nits stderr ends with:\n" + text

    def _fail(self, what: str) -> WorkerError:
        self._stop()  # first, so that the worker's last words are in its stderr
        tail = self._stderr_tail()
        self.close()
        return WorkerError(f"the worker {self.command!r} {what}{tail}")

    def _request(self, req: dict[str, Any]) -> Any:
        self._next += 1
        req = {"id": self._next, **req}
        gone = f"exited (status {{}}) before answering request {self._next} ({req['op']})"
        if self._proc.poll() is not None and self._lines.empty():
            raise self._fail(gone.format(self._proc.returncode))
        try:
            line = json.dumps(req, allow_nan=False) + "\n"
            assert self._proc.stdin is not None
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._proc.wait(timeout=5)
            raise self._fail(gone.format(self._proc.returncode)) from None
        while True:
            try:
                raw = self._lines.get(timeout=self.timeout)
            except queue.Empty:
                raise self._fail(
                    f"sent no reply to request {self._next} ({req['op']}) within the timeout, "
                    f"{self.timeout:g} s"
                ) from None
            if raw is None:
                self._proc.wait(timeout=5)
                raise self._fail(gone.format(self._proc.returncode))
            text = raw.decode("utf-8", "replace").strip()
            if text:
                break
        try:
            reply = json.loads(text)
        except json.JSONDecodeError:
            raise self._fail(
                f"wrote a line that is not JSON on its stdout: {text[:200]!r} (the protocol "
                "owns stdout; print diagnostics to stderr)"
            ) from None
        if not isinstance(reply, dict) or reply.get("id") != self._next:
            raise self._fail(
                f"answered request {self._next} with {text[:200]!r}; a reply is a JSON object "
                'with the request\'s "id" and one of "result", "skip", "error"'
            )
        if "error" in reply:
            err = reply["error"]
            if not isinstance(err, dict):
                err = {"message": err}
            message = str(err.get("message", ""))
            if err.get("usage"):
                raise WorkerUsageError(f"the worker refused the request: {message}")
            raise WorkerRaised(str(err.get("type", "Exception")), message)
        if "skip" in reply:
            raise WorkerSkipped(str(reply["skip"]))
        if "result" not in reply:
            raise self._fail(f"answered request {self._next} without a result: {text[:200]!r}")
        return decode(reply["result"])

    # requests -------------------------------------------------------------------------------
    def _has(self, target: str) -> None:
        if self.targets and target not in self.targets:
            raise WorkerUsageError(
                f"the worker {self.command!r} does not implement {target!r}; it implements "
                f"{', '.join(self.targets)}"
            )

    def call(self, target: str, args: Mapping[str, Any]) -> Any:
        """A formula's result for keyword arguments ``args``."""
        self._has(target)
        return self._request({"op": "call", "target": target, "args": encode(args)})

    def start(self, target: str, case: int, args: Mapping[str, Any]) -> None:
        """Build the worker's state of rule ``target`` for one case."""
        self._has(target)
        self._request({"op": "start", "target": target, "case": case, "args": encode(args)})

    def round(self, target: str, case: int, args: Mapping[str, Any]) -> Any:
        """One round of a started case: θ^{t+1} or named outputs."""
        return self._request({"op": "round", "target": target, "case": case, "args": encode(args)})

    def end(self, target: str, case: int) -> None:
        """Let the worker drop a case's state."""
        self._request({"op": "end", "target": target, "case": case})

    # lifetime -------------------------------------------------------------------------------
    def _stop(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is None:
            return
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()

    def close(self) -> None:
        """End the worker process (closing its stdin first, so a worker can end by itself)."""
        proc = getattr(self, "_proc", None)
        if proc is None:
            return
        self._stop()
        self._reader.join(timeout=2)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self._stderr.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - nothing to report at collection time
            pass

    def __repr__(self) -> str:
        return f"Worker({self.command!r})"
