#!/usr/bin/env python3
"""A fleet audit: 16 seed hosts in one lab, `gpuhost audit` of all of them next to one
`setup` (gather_subset=min) task on all of them.

    .venv/bin/python benchmarks/fleet_audit.py [--hosts 16] [--runs 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from audit_vs_setup import SEED, lab_audit_and_setup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuhost-fleet-") as tmp:
        tmp = Path(tmp)
        specs = []
        for i in range(args.hosts):
            data = yaml.safe_load(SEED.read_text())
            data["hostname"] = f"pve-gpu{i + 1}"
            (tmp / f"h{i}.yml").write_text(yaml.safe_dump(data))
            specs.append(str(tmp / f"h{i}.yml"))
        a, s = lab_audit_and_setup(specs, tmp, args.runs, [], (2,))
    ma, ms = statistics.median(a), statistics.median(s)
    print(f"{args.hosts} seed hosts, {args.runs} runs each, medians")
    print(f"  gpuhost audit (14 controls each)  {ma:6.2f} s   ({ma / args.hosts:.2f} s per host)")
    print(f"  ansible-playbook setup (min)      {ms:6.2f} s")
    print(f"  ratio                             {ma / ms:6.2f}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
