"""Benchmark: the aggregation step's achieved memory bandwidth against a probe in the same run.

What it shows: for m client updates of length d (float64, one preallocated C-contiguous (m, d)
buffer, as the simulator keeps them), the time of FedAvg's full ``step`` (validation, weights,
θ − Σ a_k δ_k, the finiteness check) on each backend, as GB/s of the traffic the step cannot avoid
— reading the (m, d) updates and θ once and writing θ^{t+1} once, (m + 2)·d·8 bytes, as STREAM
counts — and as a ratio to a memory-read probe (a parallel Numba sum over an array of m·d
float64) timed in the same process. Aggregation is memory-bound: the probe is its physical limit.
Target (issue 2): at least 70 % of the probe for m·d ≥ 10⁷. The CSV also gives the ratio counting
the (m, d) updates alone.

Run: ``python validate/bench_aggregation.py [--out DIR] [--repeats R]``; writes
``DIR/bench_aggregation.{csv,json}`` (default ``runs/bench``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _bench import median_time, read_probe, write_results  # noqa: E402

from fairagg import fedavg, make_reports  # noqa: E402
from fairagg.kernels import available_backends  # noqa: E402

SIZES = ((10, 10**5), (100, 10**5), (10, 10**6), (100, 10**6))
BACKENDS = available_backends()


def measure(m: int, d: int, repeats: int, rng: np.random.Generator) -> dict:
    """One row of the table: medians of the probe and of the FedAvg step on each backend."""
    deltas = rng.standard_normal((m, d))
    theta = rng.standard_normal(d)
    reports = make_reports(deltas, rng.integers(50, 500, m))
    probe_array = np.ones(m * d)
    fns = {"probe": lambda: read_probe(probe_array)}
    for backend in BACKENDS:
        rule = fedavg(backend=backend)
        state = rule.init(theta, m)
        fns[backend] = lambda rule=rule, state=state: rule.step(theta, reports, state)
    # Interleaved in one loop so that the machine's noise hits the probe and the steps alike.
    times = median_time(fns, repeats, block=5, settle=0.2)
    probe = probe_array.nbytes / 1e9 / times["probe"]
    gb = (m + 2) * d * 8 / 1e9  # updates and θ read, θ^{t+1} written
    row = {"m": m, "d": d, "m_times_d": m * d, "probe_GBps": probe}
    for backend in BACKENDS:
        row[f"{backend}_GBps"] = gb / times[backend]
        row[f"{backend}_ratio"] = gb / times[backend] / probe
        row[f"{backend}_matrix_only_ratio"] = deltas.nbytes / 1e9 / times[backend] / probe
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = [measure(m, d, args.repeats, rng) for m, d in SIZES]
    write_results(args.out, "bench_aggregation", rows, {"cpus": os.cpu_count()})
    print("Aggregation (FedAvg step) against a memory-read probe in the same run, float64.")
    print("GB/s count (m + 2)·d·8 bytes (updates and θ read, θ^{t+1} written); 'upd.' is the")
    print("ratio counting the (m, d) updates alone.")
    head = "".join(f"{b + ' GB/s':>13}{'ratio':>7}{'upd.':>6}" for b in BACKENDS)
    print(f"{'m':>5}{'d':>9}{'probe GB/s':>12}" + head)
    for r in rows:
        cells = "".join(
            f"{r[b + '_GBps']:>13.1f}{r[b + '_ratio']:>7.2f}{r[b + '_matrix_only_ratio']:>6.2f}"
            for b in BACKENDS
        )
        print(f"{r['m']:>5}{r['d']:>9}{r['probe_GBps']:>12.1f}" + cells)
    print(f"wrote {args.out}/bench_aggregation.csv and .json")


if __name__ == "__main__":
    main()
