#!/usr/bin/env python3
"""Plots for kvserve-loadgen results (matplotlib, PNG).

  plot.py --json RESULT.json [--json OTHER.json ...] [--label A --label B] --out_dir DIR
  plot.py --csv RESULT.csv --out_dir DIR

Writes into DIR:
  latency_cdf.png         CDFs of TTFT, ITL and E2E latency, one line per phase (and input)
  throughput_vs_rate.png  request and output-token throughput against the request rate
  latency_vs_rate.png     TTFT / TPOT / ITL / E2E p50 and p99 against the request rate
The two *_vs_rate plots are drawn when some input has more than one phase
with a finite rate (a --sweep_rates run). Per-request data comes from the
JSON's "requests" (kvserve-loadgen --json_requests, the default) or the CSV.

ITL samples are the gaps between consecutive distinct token arrival times of
a request: tokens that came in one message share a time, so this is one
sample per message, the definition kvserve-loadgen's report uses.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


class Phase:
    """One phase of one input: its rate, summary (JSON only) and per-request samples."""

    def __init__(self, label: str, rate, summary: dict | None):
        self.label = label
        self.rate = rate  # float or "inf"
        self.summary = summary
        self.ttft_ms: list[float] = []
        self.e2e_ms: list[float] = []
        self.itl_ms: list[float] = []

    def add_request(self, ok: bool, ttft_ms, e2e_ms, token_times_ms: list[float]) -> None:
        if not ok:
            return
        if ttft_ms is not None:
            self.ttft_ms.append(float(ttft_ms))
        if e2e_ms is not None:
            self.e2e_ms.append(float(e2e_ms))
        distinct = sorted(set(token_times_ms))
        self.itl_ms.extend(b - a for a, b in zip(distinct, distinct[1:]))


def rate_of(value):
    return "inf" if value in ("inf", None) or (isinstance(value, float) and math.isinf(value)) else float(value)


def load_json(path: Path, label: str) -> list[Phase]:
    data = json.loads(path.read_text())
    phases = []
    for p in data["phases"]:
        phase = Phase(label, rate_of(p["request_rate"]), p)
        for r in p.get("requests", []):
            phase.add_request(r["status"] == "OK" and r["e2e_ms"] is not None, r["ttft_ms"],
                              r["e2e_ms"], r["token_times_ms"])
        phases.append(phase)
    return phases


def load_csv(path: Path, label: str) -> list[Phase]:
    phases: dict[str, Phase] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            phase = phases.setdefault(row["phase"], Phase(label, rate_of(row["request_rate"]), None))
            times = [float(t) for t in row["token_times_ms"].split(";") if t]
            phase.add_request(row["status"] == "OK" and row["e2e_ms"] != "",
                              row["ttft_ms"] or None, row["e2e_ms"] or None, times)
    return list(phases.values())


def phase_name(p: Phase) -> str:
    rate = "inf" if p.rate == "inf" else f"{p.rate:g}"
    return f"{p.label} rate={rate}".strip()


def plot_cdfs(phases: list[Phase], out: Path, title: str) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, attr, name in zip(axes, ("ttft_ms", "itl_ms", "e2e_ms"), ("TTFT", "ITL", "E2E latency")):
        for p in phases:
            # Zero gaps cannot sit on the ITL's log axis; they are rare (two
            # messages in the same microsecond).
            values = sorted(v for v in getattr(p, attr) if v > 0 or attr != "itl_ms")
            if not values:
                continue
            n = len(values)
            ax.step(values, [(i + 1) / n for i in range(n)], where="post", label=phase_name(p))
        if attr == "itl_ms" and ax.lines:
            ax.set_xscale("log")  # ITL: a bulk near the step time and a long tail of stalls
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of samples")
        ax.set_title(f"{name} CDF")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def plot_vs_rate(phases: list[Phase], out_dir: Path, title: str) -> list[Path]:
    """Throughput and latency percentiles against the rate, one line per input label."""
    by_label: dict[str, list[Phase]] = {}
    for p in phases:
        if p.summary is not None and p.rate != "inf":
            by_label.setdefault(p.label, []).append(p)
    by_label = {k: sorted(v, key=lambda p: p.rate) for k, v in by_label.items() if len(v) > 1}
    if not by_label:
        return []
    written = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for label, ps in by_label.items():
        rates = [p.rate for p in ps]
        axes[0].plot(rates, [p.summary["request_throughput"] for p in ps], "o-", label=f"{label} achieved".strip())
        axes[1].plot(rates, [p.summary["output_token_throughput"] for p in ps], "o-", label=label or "output")
    all_rates = [p.rate for ps in by_label.values() for p in ps]
    span = [min(all_rates), max(all_rates)]
    axes[0].plot(span, span, "k--", alpha=0.4, label="offered (y = x)")
    axes[0].set_ylabel("requests/s")
    axes[0].set_title("request throughput")
    axes[1].set_ylabel("tokens/s")
    axes[1].set_title("output token throughput")
    for ax in axes:
        ax.set_xlabel("request rate (req/s)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    path = out_dir / "throughput_vs_rate.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)

    fig, axes = plt.subplots(1, 4, figsize=(18, 4.5))
    for ax, key, name in zip(axes, ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"), ("TTFT", "TPOT", "ITL", "E2E")):
        for label, ps in by_label.items():
            rates = [p.rate for p in ps]
            for q, style in (("p50", "o-"), ("p99", "s--")):
                values = [p.summary[key][q] if p.summary[key][q] is not None else math.nan for p in ps]
                ax.plot(rates, values, style, label=f"{label} {q}".strip())
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel("ms")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    path = out_dir / "latency_vs_rate.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
    return written


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="append", default=[], type=Path, help="kvserve-loadgen --output_json file")
    ap.add_argument("--csv", action="append", default=[], type=Path, help="kvserve-loadgen --output_csv file")
    ap.add_argument("--label", action="append", default=[], help="one per input, in order (JSON first)")
    ap.add_argument("--out_dir", required=True, type=Path)
    ap.add_argument("--title", default="kvserve-loadgen")
    args = ap.parse_args(argv)
    inputs = [(p, load_json) for p in args.json] + [(p, load_csv) for p in args.csv]
    if not inputs:
        ap.error("give at least one --json or --csv")
    if args.label and len(args.label) != len(inputs):
        ap.error("give one --label per input")
    labels = args.label or [""] * len(inputs)
    phases = []
    for (path, loader), label in zip(inputs, labels):
        phases += loader(path, label)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    written = [args.out_dir / "latency_cdf.png"]
    plot_cdfs(phases, written[0], args.title)
    written += plot_vs_rate(phases, args.out_dir, args.title)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
