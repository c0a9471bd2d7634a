#!/usr/bin/env python3
"""Prints a table from kvserve-loadgen JSON results (bench/serving/*.sh).

  table.py --cols rate,done,req_s,ttft_p50 [--md OUT.md] LABEL=RESULT.json ...

Each LABEL=FILE adds one row per phase of FILE (a sweep gives several rows).
Columns (latencies in ms): see COLUMNS below. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _pct(key: str, q: str):
    return lambda p: p[key][q]


def _delta(name: str):
    def get(p):
        v = (p.get("server_metrics_delta") or {}).get(name)
        return int(v) if isinstance(v, float) and v.is_integer() else v  # counters are integral
    return get


COLUMNS = {
    "rate": ("rate", lambda p: p["request_rate"] if p["request_rate"] == "inf" else f"{p['request_rate']:g}"),
    "conc": ("conc", lambda p: p["concurrency"] or "-"),
    "done": ("done", lambda p: p["num_completed"]),
    "failed": ("failed", lambda p: p["num_failed"]),
    "errors": ("errors", lambda p: " ".join(f"{k}={v}" for k, v in p["errors"].items()) or "-"),
    "duration": ("dur_s", lambda p: p["duration_s"]),
    "req_s": ("req/s", lambda p: p["request_throughput"]),
    "out_tok_s": ("out_tok/s", lambda p: p["output_token_throughput"]),
    "tot_tok_s": ("tot_tok/s", lambda p: p["total_token_throughput"]),
    "goodput": ("goodput", lambda p: p["goodput"]["request_goodput"]),
    "ttft_p50": ("ttft_p50", _pct("ttft_ms", "p50")),
    "ttft_p99": ("ttft_p99", _pct("ttft_ms", "p99")),
    "tpot_p50": ("tpot_p50", _pct("tpot_ms", "p50")),
    "tpot_p99": ("tpot_p99", _pct("tpot_ms", "p99")),
    "itl_p50": ("itl_p50", _pct("itl_ms", "p50")),
    "itl_p99": ("itl_p99", _pct("itl_ms", "p99")),
    "itl_max": ("itl_max", _pct("itl_ms", "max")),
    "e2e_p50": ("e2e_p50", _pct("e2e_ms", "p50")),
    "e2e_p99": ("e2e_p99", _pct("e2e_ms", "p99")),
    "hit_ratio": ("hit_ratio", lambda p: p["prefix_cache"]["hit_ratio"]),
    "cached_ratio": ("cached_ratio", lambda p: p["prefix_cache"]["client_cached_token_ratio"]),
    "preemptions": ("preempt", _delta("kvserve_num_preemptions_total")),
    "finished": ("srv_finished", _delta("kvserve_requests_finished_total")),
}


def fmt(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:.1f}"
        return f"{v:.2f}" if abs(v) >= 10 else f"{v:.3f}"
    return str(v)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cols", required=True, help="comma-separated: " + ",".join(COLUMNS))
    ap.add_argument("--md", type=Path, help="also write the table as Markdown here")
    ap.add_argument("rows", nargs="+", help="LABEL=RESULT.json")
    args = ap.parse_args(argv)
    cols = args.cols.split(",")
    unknown = [c for c in cols if c not in COLUMNS]
    if unknown:
        ap.error(f"unknown columns {unknown}")
    header = ["run"] + [COLUMNS[c][0] for c in cols]
    table = []
    for spec in args.rows:
        label, _, path = spec.rpartition("=")  # the label may hold "="
        data = json.loads(Path(path).read_text())
        for phase in data["phases"]:
            table.append([label] + [fmt(COLUMNS[c][1](phase)) for c in cols])
    widths = [max(len(r[i]) for r in [header] + table) for i in range(len(header))]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in table:
        print(line(r))
    if args.md:
        md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        md += ["| " + " | ".join(r) + " |" for r in table]
        args.md.write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
