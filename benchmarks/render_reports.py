#!/usr/bin/env python3
"""Rendering the reports of a synthetic 1,000-host run: terminal (fleet summary and
problems), JSON, JUnit, HTML and Prometheus, each timed; goal: all of them under 2 s.

    .venv/bin/python benchmarks/render_reports.py [--hosts 1000] [--runs 3]

The fleet is the seed host's real judgement copied onto N hosts (tests/fleet.py). Medians.
"""
from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import fleet  # noqa: E402
from rich.console import Console  # noqa: E402

from gpuhost import htmlreport, junit, metrics, terminal  # noqa: E402
from gpuhost import report as rep  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    hosts = fleet.fleet_hosts(args.hosts)
    with tempfile.TemporaryDirectory(prefix="gpuhost-render-") as tmp:
        out = Path(tmp)
        steps = {
            "build the report": lambda: rep.build("audit", rep.now(), hosts),
            "terminal (80 columns)": lambda: terminal.render(report, Console(file=io.StringIO(), width=80)),
            "JSON": lambda: rep.write_json(report, out / "r.json"),
            "JUnit": lambda: junit.write(report, out / "r.xml"),
            "HTML": lambda: htmlreport.write(report, out / "r.html"),
            "Prometheus": lambda: metrics.write(report, str(out / "r.prom")),
        }
        report = rep.build("audit", rep.now(), hosts)
        times = {name: [] for name in steps}
        for _ in range(args.runs):
            for name, step in steps.items():
                t0 = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - t0)
        sizes = {p.suffix: p.stat().st_size for p in out.iterdir()}
    print(f"{args.hosts} hosts, {args.runs} runs, medians")
    total = 0.0
    for name, ts in times.items():
        med = statistics.median(ts)
        total += med
        print(f"  {name:<24} {med:7.3f} s")
    print(f"  {'all of them':<24} {total:7.3f} s   (goal: under 2 s)")
    print("  sizes: " + ", ".join(f"{k[1:]} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items())))


if __name__ == "__main__":
    main()
