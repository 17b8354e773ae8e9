#!/usr/bin/env python3
"""gpuhost prove's bounds, measured: time per host and pinned memory per GPU, on the seed lab
(eight GPUs) and its container, with the defaults (5 repeats, 256 MiB copies, 60 s a host).

    .venv/bin/python benchmarks/prove_bounds.py [--runs 3]

Prints, per run and host: the measurement's own time (the module's elapsed_s), the whole
command's wall time, the pinned memory the measurement held at its peak (per GPU and in all)
and what it still held at the end. The lab's copies take modelled time (its libcuda.so.1
answers from a model in virtual time), its launches and waits real time (spun): so the
measurement time here is the Python and driver-call overhead plus the launch paths, not a
real host's copy time. The bound on a real host: 256 MiB at 55 GB/s is 4.9 ms a copy, some
6 copies a path and 4 host-copy paths a GPU, 28 pairs on 8 GPUs: about 2 s of copies.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuhost.lab import manager, provision

os.environ.pop(provision.BYTECODE_CACHE_ENV, None)       # hosts as they are
ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / "tests/specs/seed"
LIMIT_S, PINNED_PER_GPU = 60, 1 << 30                      # issue 38's bounds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuhost-bench-") as tmp:
        lab = Path(tmp) / "lab"
        inventory = manager.up([str(SHARED / "pve-gpu1.yml"), str(SHARED / "llm-two.yml")], lab)
        try:
            rows = []
            for run in range(args.runs):
                report = Path(tmp) / f"r{run}.json"
                started = time.monotonic()
                proc = subprocess.run([sys.executable, "-m", "gpuhost.cli", "prove", "-i", str(inventory),
                                       "--json", str(report), "--format", "oneline"],
                                      capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
                wall = time.monotonic() - started
                if proc.returncode not in (0, 2):
                    print(proc.stderr[-2000:], file=sys.stderr)
                    return 1
                for host, h in json.loads(report.read_text())["hosts"].items():
                    p = h["proof"]
                    gpus = len([g for g in p["gpus"] if not g.get("refused")]) or 1
                    rows.append((host, p["elapsed_s"], wall, p["pinned_peak_bytes"], gpus))
                    print(f"run {run + 1} {host:10} measurement {p['elapsed_s']:6.2f} s (bound {LIMIT_S} s), "
                          f"command {wall:5.1f} s, pinned peak {p['pinned_peak_bytes'] / 2**20:6.0f} MiB "
                          f"for {gpus} GPUs ({p['pinned_peak_bytes'] / gpus / 2**20:.0f} MiB a GPU, bound "
                          f"{PINNED_PER_GPU // 2**20}), held at the end: {p.get('pinned_left_bytes', 0)} bytes")
            for host in sorted({r[0] for r in rows}):
                mine = [r for r in rows if r[0] == host]
                print(f"median {host:10} measurement {statistics.median(r[1] for r in mine):.2f} s, "
                      f"command {statistics.median(r[2] for r in mine):.1f} s, "
                      f"pinned a GPU at most {max(r[3] / r[4] for r in mine) / 2**20:.0f} MiB")
        finally:
            manager.down(lab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
