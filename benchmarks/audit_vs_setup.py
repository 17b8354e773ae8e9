#!/usr/bin/env python3
"""The audit's wall time on the seed host, next to one `setup` (gather_subset=min) task.

    .venv/bin/python benchmarks/audit_vs_setup.py [--runs 5] [--halt-poll-ns 200000]

Both run in the same lab, alternately, with gpuhost's ansible.cfg (same SSH settings):
`gpuhost audit -i INVENTORY --limit pve-gpu1` (the whole command: inventory check, the
play, the report) against `ansible-playbook` of a play with one setup task. Medians.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from halt_poll import describe, halt_poll  # noqa: E402

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG  # noqa: E402
from gpuhost import COLLECTION  # noqa: E402
from gpuhost.lab import manager, provision  # noqa: E402

# the figures are for hosts as they are: no bytecode cache on the lab's hosts, even where the
# caller's environment (a test run) asks for one; fleet_audit and guest_cuda import this
os.environ.pop(provision.BYTECODE_CACHE_ENV, None)

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "tests/specs/seed/pve-gpu1.yml"
# gpuhost's own settings (forks, pipelining, SSH multiplexing) for both commands: the CLI
# merges it under the operator's file, and setup's play reads it directly
CONFIG = COLLECTION / "ansible.cfg"
SETUP_PLAY = """- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.setup:
        gather_subset: [min]
"""


def timed_with_cpu(argv: list[str], env: dict, expect: tuple[int, ...]) -> tuple[float, float]:
    """Wall time and controller CPU time of one command: user + system of the command and
    every descendant it waited for (ansible-playbook, its workers, ssh clients; not the lab
    hosts' sshd and module processes, which are the lab supervisor's)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode not in expect:
        sys.exit(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.strip()[-400:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def timed(argv: list[str], env: dict, expect: tuple[int, ...]) -> float:
    return timed_with_cpu(argv, env, expect)[0]


def audit_and_setup(inventory: Path, tmp: Path, env: dict, runs: int, limit: list[str],
                    audit_ok: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Warm both, then time `gpuhost audit` and a one-`setup` play alternately, *runs* times each."""
    bindir = Path(sys.executable).parent
    play = tmp / "setup.yml"
    play.write_text(SETUP_PLAY)
    audit = [str(bindir / "gpuhost"), "audit", "-i", str(inventory), *limit, "--json", str(tmp / "r.json")]
    setup = [str(bindir / "ansible-playbook"), "-i", str(inventory), *limit, str(play)]
    timed(setup, env, (0,))                      # warm: SSH masters, caches
    timed(audit, env, audit_ok)
    a, s = [], []
    for _ in range(runs):
        a.append(timed(audit, env, audit_ok))
        s.append(timed(setup, env, (0,)))
    return a, s



def lab_audit_and_setup(specs: list[str], tmp: Path, runs: int, limit: list[str],
                        audit_ok: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Bring up a lab of *specs* under *tmp*, time both commands in it, take it down."""
    bindir = Path(sys.executable).parent
    env = dict(os.environ, ANSIBLE_CONFIG=str(CONFIG), PATH=f"{bindir}:{os.environ['PATH']}")
    inventory = manager.up(specs, tmp / "lab")
    try:
        return audit_and_setup(inventory, tmp, env, runs, limit, audit_ok)
    finally:
        manager.down(tmp / "lab")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--halt-poll-ns", type=int, metavar="NS",
                    help="guest_halt_poll_ns for the run, put back after (see benchmarks/halt_poll.py)")
    args = ap.parse_args()
    with halt_poll(args.halt_poll_ns) as ns, tempfile.TemporaryDirectory(prefix="gpuhost-bench-") as tmp:
        a, s = lab_audit_and_setup([str(SEED)], Path(tmp), args.runs, ["--limit", "pve-gpu1"], (0, 2))
    ma, ms = statistics.median(a), statistics.median(s)
    print(f"seed host pve-gpu1, {args.runs} runs each, medians; {describe(ns)}")
    print(f"  gpuhost audit ({len(CATALOG)} controls)       {ma:6.2f} s   (min {min(a):.2f}, max {max(a):.2f})")
    print(f"  ansible-playbook setup (min)      {ms:6.2f} s   (min {min(s):.2f}, max {max(s):.2f})")
    print(f"  ratio                             {ma / ms:6.2f}   (goal <= 1.2)")


if __name__ == "__main__":
    main()
