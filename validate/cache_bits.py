"""Check: the compiled kernels compute the same bits whether a process compiles them or loads
them from Numba's cache.

Why: numba links a copy of each compiled callee into its caller's machine code, re-optimised
there, and a call runs whichever copy the process loaded first: the callee's own code in a
process that compiles (callees compile before their caller), the caller's copy in one that loads
the caller from the cache. With reassociation allowed the two copies may sum in different orders.
That made AAgFF-S's decisions differ in the last bits between the first run after install and
every later run until the simplex QP loaded its callees first (``fairagg.simplex._active_set``).
This script checks the other compiled callers the same way, on this machine.

What it does: a battery of computations runs in a fresh process with an empty ``NUMBA_CACHE_DIR``
(everything compiles), then in a second fresh process with the same cache (everything loads), and
the SHA-1 of every result's bytes is compared:

- local training (``fairagg.local.train_clients``): logistic regression and the MLP (tanh and
  ReLU), float64 and float32, five feature/class/hidden shapes, four settings of epochs, batch
  size, momentum and FedProx's μ, parallel and serial, seven client sizes (1 to 333 rows); the
  reported losses and accuracies with the updates;
- one gradient per client (``fairagg.local.client_gradients``), full and minibatch;
- the aggregation kernels of ``fairagg.kernels.cpu``: the Gram matrix, with and without the
  copy, for 14 row counts (1 to 130, across the staging threshold) and 7 lengths (1 to 10⁵), the
  weighted sum and update, the two combinations, the row norms and the weighted norms, float64
  and float32;
- first of all, eight AAgFF-S FTRL rounds (``fairagg.online``) at K = 30 and 80; last,
  min-norm weights and simplex QPs (``fairagg.simplex``), cold and warm-started, K = 2 to 200.

It finds the QP's difference: with the callee loading of ``fairagg.simplex._active_set`` taken
out, the FTRL rounds at K = 30 and 80 differ.

It prints the number of results and of differences, and each differing case; exit status 1 if
any differ, if the second process compiled a fairagg function again (then that kernel was not
loaded from the cache and the comparison says nothing of it) or if the first compiled none (its
cache was not empty). About 2 minutes on two cores (the first process compiles everything).

Run: ``python validate/cache_bits.py [--out DIR]``; writes ``DIR/cache_bits.json`` (default
``runs/bench``): the cases, their digests in both processes and the differing ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAME = "cache_bits"


def _digest(*arrays) -> str:
    import numpy as np

    h = hashlib.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def battery() -> dict[str, str]:
    """Every case's name and the digest of its results (see the module docstring)."""
    import numpy as np

    from fairagg.data import FederatedData
    from fairagg.kernels import cpu
    from fairagg.local import client_gradients, train_clients
    from fairagg.models import MLP, LogisticRegression
    from fairagg.online import aaggff_s_defaults, quadratic_ftrl_init, quadratic_ftrl_round
    from fairagg.simplex import min_norm_weights, solve_simplex_qp

    out: dict[str, str] = {}
    rng = np.random.default_rng(0)
    # First, before anything else loads the QP's pieces: AAgFF-S's FTRL rounds, where the QP's
    # cache-load difference showed (K = 30 and 80). Which code a loading process runs depends on
    # what it loaded before: the same rounds after a cold-started solve showed no difference.
    for K in (30, 80):
        _, alpha, beta = aaggff_s_defaults(K)
        state, x, factor = quadratic_ftrl_init(K), np.full(K, 1.0 / K), None
        for t in range(8):
            g = rng.standard_normal(K) * (1 + t % 4)
            state, r, factor = quadratic_ftrl_round(state, g, x, alpha, beta, "paper", factor)
            x = r.x
            out[f"AAgFF-S FTRL round {t} K={K}"] = _digest(x, np.float64(r.multiplier))
    sizes = [1, 3, 9, 17, 40, 101, 333]
    clients = np.arange(len(sizes))
    for p, C, H in ((60, 10, 32), (7, 3, 5), (33, 5, 17), (100, 26, 64), (784, 10, 100)):
        N = sum(sizes)
        X = rng.standard_normal((N, p))
        y = rng.integers(0, C, N)
        off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        data = FederatedData(X, y, off, X, y, off, C, "battery")
        models = {
            "logistic": LogisticRegression(p, C, l2=1e-3),
            "mlp-tanh": MLP(p, C, n_hidden=H, l2=1e-3),
            "mlp-relu": MLP(p, C, n_hidden=H, activation="relu"),
        }
        for name, model in models.items():
            for dt in (np.float64, np.float32):
                theta = model.init_params(seed=3, dtype=dt)
                tag = f"{name} p={p} C={C} H={H} {dt.__name__}"
                for E, B, mom, prox in ((1, 10, 0.0, 0.0), (2, 7, 0.9, 0.1), (1, 64, 0.0, 0.0),
                                        (3, 1, 0.5, 0.0)):  # fmt: skip
                    for par in (True, False):
                        r = train_clients(
                            model, theta, data, clients, epochs=E, batch_size=B, lr=0.05,
                            momentum=mom, prox_mu=prox, seed=1, round_index=2, parallel=par,
                        )  # fmt: skip
                        arrays = [v for v in r if isinstance(v, np.ndarray)]
                        out[f"train {tag} E={E} B={B} mu={mom} prox={prox} par={par}"] = _digest(
                            *arrays
                        )
                for bsz in (None, 5):
                    g = client_gradients(model, theta, data, clients, batch_size=bsz, seed=4)
                    arrays = [v for v in g if isinstance(v, np.ndarray)]
                    out[f"gradient {tag} batch={bsz}"] = _digest(*arrays)
    for m in (1, 2, 3, 5, 6, 7, 10, 13, 31, 32, 33, 50, 100, 130):
        for d in (1, 7, 64, 513, 2049, 10007, 100000):
            for dt in (np.float64, np.float32):
                tag = f"m={m} d={d} {dt.__name__}"
                D = rng.standard_normal((m, d)).astype(dt)
                w = rng.random(m).astype(dt)
                copy = np.empty_like(D)
                out[f"gram {tag}"] = _digest(cpu.gram(D))
                out[f"gram and copy {tag}"] = _digest(cpu._gram_and_copy(D, copy), copy)
                out[f"weighted sum {tag}"] = _digest(cpu.weighted_sum(w, D))
                theta = rng.standard_normal(d).astype(dt)
                out[f"weighted update {tag}"] = _digest(cpu.weighted_update(theta, D, w)[0])
                W2 = rng.random((2, m)).astype(dt)
                out[f"two combinations {tag}"] = _digest(cpu.two_combinations(W2, D))
                out[f"row norms {tag}"] = _digest(cpu.row_sq_norms(D))
                out[f"weighted norms {tag}"] = _digest(*cpu.weighted_sum_sq_norms(w, D))
    for K in (2, 7, 30, 80, 200):
        G = rng.standard_normal((K, 3 * K))
        A = G @ G.T
        b = rng.standard_normal(K)
        x0 = rng.random(K)
        for case, r in (
            (f"min-norm weights K={K}", min_norm_weights(A)),
            (f"simplex QP K={K}", solve_simplex_qp(A + np.eye(K), b)),
            (f"simplex QP warm K={K}", solve_simplex_qp(A + np.eye(K), b, x0=x0 / x0.sum())),
        ):
            out[case] = _digest(r.x, np.float64(r.multiplier), np.float64(r.kkt_residual))
    return out


def _child(path: str) -> int:
    """The battery, with the fairagg functions Numba compiled while it ran (none where every
    kernel loads from the cache), read from its compile events as ``bench_cold_start`` reads
    them."""
    from numba.core import event

    sys.path.insert(0, os.path.dirname(__file__))
    from bench_cold_start import summarize

    with event.install_recorder("numba:compile") as rec:
        results = battery()
    compiled = sorted({name for name, _ in summarize(rec.buffer)["compiled"]})
    Path(path).write_text(json.dumps({"results": results, "compiled": compiled}))
    return 0


def _run(cache: Path, result: Path) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(result)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the battery failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def compare(compiled: dict[str, str], loaded: dict[str, str]) -> list[str]:
    """The cases whose digests differ between the two processes (or that only one has)."""
    return sorted(k for k in compiled.keys() | loaded.keys() if compiled.get(k) != loaded.get(k))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fairagg-cache-bits-") as tmp:
        cache, first, second = Path(tmp) / "cache", Path(tmp) / "a.json", Path(tmp) / "b.json"
        print("compiling process (empty cache) ...", file=sys.stderr, flush=True)
        t_compile = _run(cache, first)
        print("loading process (the same cache) ...", file=sys.stderr, flush=True)
        t_load = _run(cache, second)
        a, b = json.loads(first.read_text()), json.loads(second.read_text())
    bits_a, bits_b = a["results"], b["results"]
    differ = compare(bits_a, bits_b)
    print(
        f"{len(bits_a)} results; compiling process {t_compile:.1f} s ({len(a['compiled'])} "
        f"fairagg functions compiled), loading process {t_load:.1f} s "
        f"({len(b['compiled'])} compiled); {len(differ)} differ between them"
    )
    for case in differ:
        print(f"  differs: {case}")
    # a kernel the second process compiled again was not loaded: the comparison says nothing
    # of it (a cache that is not written, or not read)
    for name in b["compiled"]:
        print(f"  not loaded from the cache, so not compared: {name}")
    if not a["compiled"]:
        print("  the first process compiled nothing: its cache was not empty")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{NAME}.json").write_text(
        json.dumps(
            {
                "compiled": bits_a,
                "loaded": bits_b,
                "differ": differ,
                "compiled_in_first": a["compiled"],
                "compiled_in_second": b["compiled"],
                "seconds": {"compile": t_compile, "load": t_load},
            },
            indent=1,
        )  # fmt: skip
    )
    print(f"wrote {args.out}/{NAME}.json")
    return 1 if differ or b["compiled"] or not a["compiled"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
