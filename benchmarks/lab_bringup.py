#!/usr/bin/env python3
"""Time to bring up 1 and 16 seed hosts, and memory per host.

    .venv/bin/python benchmarks/lab_bringup.py [--counts 1,16]

Memory is the proportional set size (PSS) of every process of the lab (the supervisor
and each host's init, sshd and children), divided by the number of hosts.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from gpuhost.lab import manager

SEED = Path(__file__).resolve().parents[1] / "tests/specs/seed/pve-gpu1.yml"


def lab_pss_kib(lab_dir: Path) -> tuple[int, int]:
    total, count = 0, 0
    marker = str(lab_dir).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
            mine = marker in cmd
            if not mine:
                # processes inside a host: their root is the host's overlay in the lab dir
                mine = str(lab_dir) in str((proc / "root").resolve())
            if not mine:
                continue
            rollup = (proc / "smaps_rollup").read_text()
        except OSError:
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
                count += 1
    return total, count


def bring_up(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="gpuhost-bench-") as tmp:
        tmp = Path(tmp)
        specs = []
        for i in range(n):
            data = yaml.safe_load(SEED.read_text())
            data["hostname"] = f"pve-gpu{i + 1}"
            path = tmp / f"pve-gpu{i + 1}.yml"
            path.write_text(yaml.safe_dump(data))
            specs.append(str(path))
        lab_dir = tmp / "lab"
        t0 = time.perf_counter()
        manager.up(specs, lab_dir)
        up_s = time.perf_counter() - t0
        time.sleep(1.0)
        pss, procs = lab_pss_kib(lab_dir)
        t0 = time.perf_counter()
        manager.down(lab_dir)
        down_s = time.perf_counter() - t0
        print(f"{n:>3} hosts: up {up_s:6.2f} s   down {down_s:5.2f} s   "
              f"memory {pss / 1024 / n:6.1f} MiB/host (PSS of {procs} processes, {pss / 1024:.1f} MiB in all)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="1,16")
    args = ap.parse_args()
    print(f"seed spec: {SEED}")
    for n in (int(c) for c in args.counts.split(",")):
        bring_up(n)


if __name__ == "__main__":
    main()
