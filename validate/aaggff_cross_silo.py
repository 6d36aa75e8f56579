"""Cross-silo experiment: AAgFF-S against FedAvg and the OCO views of q-FedAvg, TERM and PropFair.

The AAgFF poster's cross-silo table (K < T, every client every round) in miniature: K = 10 clients
of Synthetic(1, 1), multinomial logistic regression (a convex problem), T = 100 rounds of one local
epoch, full participation, for several draws of the data. Each draw runs ``fairagg compare`` with
the rules below and the same client training seeds; the table gives mean ± std over the draws of
the final per-client test accuracies' average (sample-weighted), worst and best client, and the
Gini coefficient (×100), as in the poster.

Rules: ``fedavg``; ``qffl-eg`` (q = 1), ``term-eg`` (λ = 1), ``propfair-eg`` (M = 50, above
every loss these runs reach), the EG rows of the poster's table; ``aaggff-s`` (Weibull response,
the paper's defaults).

Run: ``python validate/aaggff_cross_silo.py [--out DIR] [--draws N] [--rounds T]``; writes each
draw's ``fairagg compare`` folder and ``DIR/table.{csv,txt}`` (default ``runs/aaggff_cross_silo``).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from fairagg.cli import main as fairagg_main

RULES = ("fedavg", "qffl-eg", "term-eg", "propfair-eg", "aaggff-s")
RULE_ARGS = ("qffl-eg.q=1", "term-eg.tilt=1", "propfair-eg.M=50")
COLUMNS = (("average", "Avg."), ("min", "Worst"), ("max", "Best"), ("gini", "Gini×100"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/aaggff_cross_silo"))
    ap.add_argument("--draws", type=int, default=5, help="data draws (data seeds 0..N-1)")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--clients", type=int, default=10)
    args = ap.parse_args(argv)
    records: list[dict] = []
    for draw in range(args.draws):
        out = args.out / f"data{draw}"
        cmd = [
            "compare",
            "--rules",
            ",".join(RULES),
            "--data",
            "synthetic:1,1",
            "--data-seed",
            str(draw),
            "--clients",
            str(args.clients),
            "--clients-per-round",
            str(args.clients),
            "--model",
            "logistic",
            "--rounds",
            str(args.rounds),
            "--epochs",
            "1",
            "--batch",
            "10",
            "--lr",
            "0.01",
            "--seeds",
            "0",
            "--quiet",
            "--out",
            str(out),
        ]
        for ra in RULE_ARGS:
            cmd += ["--rule-arg", ra]
        print(f"data draw {draw + 1}/{args.draws}", flush=True)
        status = fairagg_main(cmd)
        if status:
            return status
        with open(out / "summary.csv", newline="") as fh:
            for row in csv.DictReader(fh):
                records.append({"draw": draw, **row})
    lines = []
    rows = []
    header = ["rule"] + [h for _, h in COLUMNS]
    for rule in RULES:
        sel = [r for r in records if r["rule"] == rule]
        row = {"rule": rule}
        cells = [rule]
        for key, _ in COLUMNS:
            vals = np.array([float(r[key]) for r in sel])
            if key == "gini":
                vals = 100.0 * vals
            row[f"{key}_mean"] = float(vals.mean())
            row[f"{key}_std"] = float(vals.std())
            cells.append(f"{vals.mean():.2f} ({vals.std():.2f})")
        rows.append(row)
        lines.append(cells)
    widths = [max(len(str(c)) for c in col) for col in zip(header, *lines, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    caption = (
        f"Cross-silo Synthetic(1,1), K = {args.clients}, T = {args.rounds}, logistic regression; "
        f"final test accuracy (%), mean (std) over {args.draws} data draws"
    )
    text = "\n".join([caption, fmt.format(*header), *(fmt.format(*c) for c in lines)])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.txt").write_text(text + "\n")
    with open(args.out / "table.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print("\n" + text)
    print(f"\nwrote {args.out}/table.csv, table.txt and one compare folder per draw")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
