#!/usr/bin/env python3
"""A fleet audit: 16 seed hosts in one lab, `gpuhost audit` of all of them next to one
`setup` (gather_subset=min) task on all of them.

    .venv/bin/python benchmarks/fleet_audit.py [--hosts 16] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from audit_vs_setup import ROOT, SEED, SETUP_PLAY, timed
from gpuhost.lab import manager


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    bindir = Path(sys.executable).parent
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{bindir}:{os.environ['PATH']}")
    with tempfile.TemporaryDirectory(prefix="gpuhost-fleet-") as tmp:
        tmp = Path(tmp)
        specs = []
        for i in range(args.hosts):
            data = yaml.safe_load(SEED.read_text())
            data["hostname"] = f"pve-gpu{i + 1}"
            (tmp / f"h{i}.yml").write_text(yaml.safe_dump(data))
            specs.append(str(tmp / f"h{i}.yml"))
        inventory = manager.up(specs, tmp / "lab")
        try:
            (tmp / "setup.yml").write_text(SETUP_PLAY)
            audit = [str(bindir / "gpuhost"), "audit", "-i", str(inventory), "--json", str(tmp / "r.json")]
            setup = [str(bindir / "ansible-playbook"), "-i", str(inventory), str(tmp / "setup.yml")]
            timed(setup, env, (0,))
            a, s = [], []
            for _ in range(args.runs):
                a.append(timed(audit, env, (2,)))
                s.append(timed(setup, env, (0,)))
        finally:
            manager.down(tmp / "lab")
    ma, ms = statistics.median(a), statistics.median(s)
    print(f"{args.hosts} seed hosts, {args.runs} runs each, medians")
    print(f"  gpuhost audit (14 controls each)  {ma:6.2f} s   ({ma / args.hosts:.2f} s per host)")
    print(f"  ansible-playbook setup (min)      {ms:6.2f} s")
    print(f"  ratio                             {ma / ms:6.2f}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
