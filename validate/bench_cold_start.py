"""Benchmark: the first ``fairagg run`` after install, while Numba compiles, against a warm run.

What it shows: for each rule and backend, the wall time of ``fairagg run --rule R --rounds 2``
(the default data and model) in a fresh Python process, twice:

- ``cold``: with an empty Numba cache (``NUMBA_CACHE_DIR`` set to a new folder), as the first run
  after install finds it;
- ``warm``: the same command again, loading what the cold run cached;

and the one-off cost, cold − warm, against the issue's target of at most 4 s over a warm run for
FedMGDA+ and AAgFF-S (issue "Fast at every scale a user reaches", item 6: compile only what a run
uses; the other rules are reported against the same line). The backends are the default command
(``--backend auto``: the Numba aggregation kernels on a CPU) and ``--backend numpy`` (no
aggregation kernel to compile). In the cold process Numba's compile events are recorded:
- the seconds spent compiling, in all and by the package module whose function started each
  outermost compilation (``models`` local training, ``simplex`` the QP, ``kernels`` the
  aggregation kernels, ...);
- the fairagg functions that took longest to compile (their own time, callees excluded);
- how many fairagg functions were compiled (function and argument types), and whether any of
  them for float32 (a run of the float64 default compiles none);
- every fairagg function compiled more than once in that process for the same argument types
  (counting a literal type, ``Literal[int](0)``, as its ``int64``).

A repeated compile is usually the same function compiled for a literal argument type
(``Literal[int](0)``) as well as for ``int64``: the simplex QP's callees were compiled twice that
way until issue 22. The column should stay empty.

Both processes run on whatever cores the machine has (no thread setting), and are timed from their
start to their exit: the time a user waits. Compile time is CPU-bound and a busy machine stretches
it; compare rows of one run. The runs' own output goes to a temporary folder, removed afterwards.
Beside the seconds, ``extra / warm`` is the one-off cost as a multiple of the warm run measured
in the same pair, which moves less with the host's speed than the seconds do.

``--load`` ``idle`` (default), ``busy`` (beside a process this benchmark starts spinning on one
core) or ``both``: every rule and backend measured under each load in turn, the table printed per
load, its lines labelled ``[idle]`` / ``[busy]``, and a ``load`` column in the CSV and JSON.

Run: ``python validate/bench_cold_start.py [--rules fedavg,fedmgda] [--backends default,numpy]
[--repeats N] [--load L] [--out DIR]``; writes ``DIR/bench_cold_start.{csv,json,png}`` (default
``runs/bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _bench import add_load_argument, loads, write_results  # noqa: E402
from _output import log  # noqa: E402

NAME = "bench_cold_start"
RULES = ("fedavg", "fedfv", "afl", "fedmgda", "aaggff-s")
#: "default": the command without --backend (auto); any other name is passed as --backend.
BACKENDS = ("default", "numpy")
TARGET_S = 4.0

_LITERAL = re.compile(r"Literal\[(\w+)\]\([^)]*\)")


def summarize(events: list) -> dict:
    """Numba's ``numba:compile`` events of one process, ``[(timestamp, event), ...]`` in order:
    the seconds spent compiling (outermost compilations), those seconds by the fairagg module
    that started each outermost compilation (``fairagg.`` left off; ``other`` for the rest),
    each fairagg function's own compile time (its callees' excluded), the fairagg functions
    compiled with their argument types (``compiled``, in order), whether any of those types is
    float32, and the fairagg functions compiled more than once for the same argument types, a
    literal type counting as its ``int64`` (``Literal[int](0)``)."""
    stack: list[list] = []
    own: dict[str, float] = {}
    count: dict[tuple[str, str], int] = {}
    by_module: dict[str, float] = {}
    compiled: list[list[str]] = []
    total = 0.0
    for ts, ev in events:
        fn = getattr(ev.data.get("dispatcher"), "py_func", None)
        mod = getattr(fn, "__module__", "") or ""
        name = f"{mod}.{getattr(fn, '__qualname__', '?')}" if mod.startswith("fairagg") else ""
        if ev.is_start:
            stack.append([name, ts, 0.0, mod])
            if name:
                args = _LITERAL.sub(
                    lambda m: "int64" if m.group(1) == "int" else m.group(1),
                    str(ev.data.get("args")),
                )
                count[name, args] = count.get((name, args), 0) + 1
                compiled.append([name, str(ev.data.get("args"))])
            continue
        name, start, inner, mod = stack.pop()
        dur = ts - start
        if stack:
            stack[-1][2] += dur
        else:
            total += dur
            key = mod.removeprefix("fairagg.") if mod.startswith("fairagg") else "other"
            by_module[key] = by_module.get(key, 0.0) + dur
        if name:
            own[name] = own.get(name, 0.0) + dur - inner
    repeated = sorted({name for (name, _), n in count.items() if n > 1})
    return {
        "compile_s": total,
        "by_module": by_module,
        "own": own,
        "compiled": compiled,
        "float32": any("float32" in args for _, args in compiled),
        "repeated": repeated,
    }


def child(rule: str, out: str, backend: str = "default") -> int:
    """One ``fairagg run`` with Numba's compile events recorded; prints their summary as JSON."""
    from numba.core import event

    import fairagg.cli

    argv = ["run", "--rule", rule, "--rounds", "2", "--out", out, "--quiet"]
    if backend != "default":
        argv += ["--backend", backend]
    with event.install_recorder("numba:compile") as rec:
        status = fairagg.cli.main(argv)
    print(json.dumps({"status": status, **summarize(rec.buffer)}))
    return 0


def child_aggregate(rule: str) -> int:
    """One aggregation step of ``rule`` on the Numba backend (6 clients, d = 40, random
    updates) with Numba's compile events recorded, from the package's import on; prints their
    summary as JSON with ``at_import``, the compilations the import itself started. In a
    process with an empty cache it lists what the step compiles, and nothing else: what
    ``tests/test_bench_cold_start.py`` checks ("compile only what a run uses")."""
    from numba.core import event

    with event.install_recorder("numba:compile") as rec:
        import numpy as np

        import fairagg
        from fairagg.types import make_reports

        at_import = len(rec.buffer)
        rng = np.random.default_rng(0)
        m, d = 6, 40
        params = rng.standard_normal(d)
        deltas = rng.standard_normal((m, d))
        reports = make_reports(
            deltas,
            rng.integers(5, 50, m),
            losses=rng.uniform(0.5, 2.0, m),
            client_ids=np.arange(m),
            num_clients=m,
        )
        built = fairagg.make_rule(rule, backend="numba")
        state = built.init(params, m)
        built.step(params, reports, state)
    print(json.dumps({"at_import": at_import, **summarize(rec.buffer)}))
    return 0


def run_once(rule: str, cache: Path, work: Path, tag: str, backend: str = "default") -> dict:
    """One `fairagg run` of ``rule`` in a fresh process with Numba's cache in ``cache``."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", rule, str(work / f"{rule}-{tag}"), backend],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"fairagg run --rule {rule} failed:\n{proc.stderr[-2000:]}")
    result = json.loads(lines[-1])
    if result["status"] != 0:
        raise RuntimeError(f"fairagg run --rule {rule} returned {result['status']}")
    return result | {"wall_s": wall}


def measure(rule: str, repeats: int, backend: str = "default", load: str = "idle") -> dict:
    """Median cold and warm wall times of ``rule`` over ``repeats`` cold/warm pairs, each pair
    with a new, empty cache."""
    cold, warm, compile_s, warm_compile_s, ncompiled = [], [], [], [], []
    own: dict[str, float] = {}
    by_module: dict[str, float] = {}
    repeated: set[str] = set()
    float32 = False
    with tempfile.TemporaryDirectory(prefix="fairagg-cold-") as tmp:
        for i in range(repeats):
            cache = Path(tmp) / f"cache{i}"
            c = run_once(rule, cache, Path(tmp), f"cold{i}", backend)
            w = run_once(rule, cache, Path(tmp), f"warm{i}", backend)
            cold.append(c["wall_s"])
            warm.append(w["wall_s"])
            compile_s.append(c["compile_s"])
            warm_compile_s.append(w["compile_s"])
            ncompiled.append(len({tuple(e) for e in c["compiled"]}))
            float32 = float32 or c["float32"]
            repeated.update(c["repeated"])
            for k, v in c["own"].items():
                own[k] = own.get(k, 0.0) + v / repeats
            for k, v in c["by_module"].items():
                by_module[k] = by_module.get(k, 0.0) + v / repeats
    t_cold, t_warm = statistics.median(cold), statistics.median(warm)
    top = sorted(own.items(), key=lambda kv: -kv[1])[:3]
    return {
        "load": load,
        "rule": rule,
        "backend": backend,
        "repeats": repeats,
        "t_cold_s": t_cold,
        "t_warm_s": t_warm,
        "one_off_s": t_cold - t_warm,
        "extra_over_warm": (t_cold - t_warm) / t_warm,
        "compile_s": statistics.median(compile_s),
        "warm_compile_s": statistics.median(warm_compile_s),
        "target_s": TARGET_S,
        "meets_target": t_cold - t_warm <= TARGET_S,
        "compiled": int(statistics.median(ncompiled)),
        "float32": float32,
        "by_module": "; ".join(
            f"{k} {v:.2f}" for k, v in sorted(by_module.items(), key=lambda kv: -kv[1])
        ),
        "longest": "; ".join(f"{k.rsplit('.', 1)[-1]} {v:.2f}" for k, v in top),
        "repeated": "; ".join(sorted(repeated)),
    }


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 0.6 * len(rows) + 2.0))
    loaded = len({r["load"] for r in rows}) > 1
    names = [f"{r['rule']} ({r['backend']}{', ' + r['load'] if loaded else ''})" for r in rows]
    warm = [r["t_warm_s"] for r in rows]
    extra = [r["one_off_s"] for r in rows]
    ax.barh(names, warm, color="#4c72b0", label="warm run")
    ax.barh(names, extra, left=warm, color="#dd8452", label="first run's extra (compiling)")
    for i, r in enumerate(rows):
        ax.plot([r["t_warm_s"] + TARGET_S] * 2, [i - 0.4, i + 0.4], color="black", lw=1.5)
    ax.plot([], [], color="black", lw=1.5, label=f"target: warm + {TARGET_S:g} s")
    ax.invert_yaxis()
    ax.set_xlabel("seconds, `fairagg run --rounds 2` in a fresh process")
    ax.set_title("First run after install (empty Numba cache) against a warm run")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_table(rows: list[dict], load: str) -> None:
    """The table of one load's rows, each line labelled with the load."""
    tag = f"[{load}]"
    cpus = os.cpu_count()
    print(f"\n{tag} First `fairagg run --rounds 2` after install against a warm run ({cpus} CPUs)")
    print(
        f"{tag} {'rule':10} {'backend':8} {'cold s':>7} {'warm s':>7} {'extra s':>8} "
        f"{'extra/warm':>10} {'compile s':>9} {'fns':>4}  target"
    )
    for r in rows:
        mark = "PASS" if r["meets_target"] else "MISS"
        print(
            f"{tag} {r['rule']:10} {r['backend']:8} {r['t_cold_s']:7.2f} {r['t_warm_s']:7.2f} "
            f"{r['one_off_s']:8.2f} {r['extra_over_warm']:10.2f} {r['compile_s']:9.2f} "
            f"{r['compiled']:4d}  <= {TARGET_S:g} s {mark}   by module: {r['by_module']}   "
            f"longest: {r['longest']}"
        )
    twice = [f"{r['rule']}: {r['repeated']}" for r in rows if r["repeated"]]
    print(f"{tag} compiled more than once: " + ("; ".join(twice) if twice else "none"))
    f32 = [f"{r['rule']} ({r['backend']})" for r in rows if r["float32"]]
    print(f"{tag} compiled for float32: " + ("; ".join(f32) if f32 else "none"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:  # the measured process (see run_once)
        return child(*argv[1:4])
    if argv[:1] == ["--child-aggregate"]:  # one aggregation step (see child_aggregate)
        return child_aggregate(argv[1])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rules", type=str, default=",".join(RULES))
    ap.add_argument(
        "--backends",
        type=str,
        default=",".join(BACKENDS),
        help="'default' (the command as a user types it: --backend auto) and/or backend names",
    )
    ap.add_argument("--repeats", type=int, default=1, help="cold/warm pairs per rule (median)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    add_load_argument(ap)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    rows = []
    for load in loads(args.load):
        part = []
        for rule in rules:
            for backend in backends:
                log(f"[{load}] {rule} ({backend}): cold and warm runs ...")
                part.append(measure(rule, args.repeats, backend, load))
        print_table(part, load)
        rows += part
    meta = {
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load": args.load,
    }
    write_results(args.out, NAME, rows, meta)
    plot(rows, args.out / f"{NAME}.png")
    print(f"wrote {args.out}/{NAME}.csv, .json and .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
