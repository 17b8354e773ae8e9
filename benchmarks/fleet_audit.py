#!/usr/bin/env python3
"""A fleet audit: N seed hosts in one lab, `gpuhost audit` of all of them next to one
`setup` (gather_subset=min) task on all of them: wall time and controller CPU time.

    .venv/bin/python benchmarks/fleet_audit.py [--hosts 16,64] [--runs 3] [--halt-poll-ns 200000]

Controller CPU is the command's and every descendant's it waited for (the CLI,
ansible-playbook, its workers, ssh clients), not the lab hosts' sshd and module processes.
The two commands run alternately in the same lab. Medians.
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
from audit_vs_setup import CONFIG, SEED, SETUP_PLAY, timed, timed_with_cpu  # noqa: E402
from halt_poll import describe, halt_poll  # noqa: E402

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG  # noqa: E402
from gpuhost.lab import manager  # noqa: E402


def fleet(hosts: int, runs: int, tmp: Path) -> dict[str, tuple[float, float]]:
    specs = []
    for i in range(hosts):
        data = yaml.safe_load(SEED.read_text())
        data["hostname"] = f"pve-gpu{i + 1}"
        (tmp / f"h{i}.yml").write_text(yaml.safe_dump(data))
        specs.append(str(tmp / f"h{i}.yml"))
    bindir = Path(sys.executable).parent
    env = dict(os.environ, ANSIBLE_CONFIG=str(CONFIG), PATH=f"{bindir}:{os.environ['PATH']}")
    inventory = manager.up(specs, tmp / "lab")
    try:
        (tmp / "setup.yml").write_text(SETUP_PLAY)
        audit = [str(bindir / "gpuhost"), "audit", "-i", str(inventory), "--json", str(tmp / "r.json")]
        setup = [str(bindir / "ansible-playbook"), "-i", str(inventory), str(tmp / "setup.yml")]
        timed(setup, env, (0,))                  # warm: SSH masters, caches
        timed(audit, env, (0, 2))
        a, s = [], []
        for _ in range(runs):
            a.append(timed_with_cpu(audit, env, (0, 2)))
            s.append(timed_with_cpu(setup, env, (0,)))
    finally:
        manager.down(tmp / "lab")
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    return {"audit": (med(a, 0), med(a, 1)), "setup": (med(s, 0), med(s, 1))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="16,64", help="fleet sizes, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--halt-poll-ns", type=int, metavar="NS",
                    help="guest_halt_poll_ns for the run, put back after (see benchmarks/halt_poll.py)")
    args = ap.parse_args()
    sizes = [int(n) for n in args.hosts.split(",")]
    with halt_poll(args.halt_poll_ns) as ns:
        print(f"seed hosts, {args.runs} runs each, medians; CPU = controller CPU (user + system); {describe(ns)}")
        print(f"{'hosts':>5}  {'command':<30} {'wall s':>8} {'CPU s':>8} {'CPU s/host':>11}")
        for n in sizes:
            report(n, args.runs)


def report(n: int, runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="gpuhost-fleet-") as tmp:
        r = fleet(n, runs, Path(tmp))
    for name, label in (("audit", f"gpuhost audit ({len(CATALOG)} controls)"), ("setup", "ansible-playbook setup (min)")):
        wall, cpu = r[name]
        print(f"{n:>5}  {label:<30} {wall:8.2f} {cpu:8.2f} {cpu / n:11.3f}")
    (aw, ac), (sw, sc) = r["audit"], r["setup"]
    print(f"{n:>5}  {'ratio audit/setup':<30} {aw / sw:8.2f} {ac / sc:8.2f}   (goal: CPU <= 1.25 at 64 hosts; the wall goal is one host's: audit_vs_setup.py)")


if __name__ == "__main__":
    main()
