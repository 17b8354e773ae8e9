#!/usr/bin/env python3
"""The audit's time on a container with three Python environments and a CUDA toolkit, next to
the same container with one toolkit only, and next to one `setup` (gather_subset=min) task.

    .venv/bin/python benchmarks/guest_cuda.py [--runs 5]

The seed host and two guests of it in one lab: `llm-two` as the seed has it (one CUDA 12.8
toolkit) and `llm-envs` with that toolkit plus torch in a conda env, a venv under /opt and one
under /srv (the look-ups guest.cuda makes: globs of the usual places, never a walk of the
disk). Each `gpuhost audit --limit GUEST` is the whole command (inventory check, the play,
the report). Medians.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_vs_setup import CONFIG, SETUP_PLAY, timed  # noqa: E402
from gpuhost.lab import manager  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / "tests/specs/seed"
ENVS = [
    {"path": "/usr/local/cuda-12.8", "version": "12.8.1"},
    {"path": "/opt/conda/envs/serve/lib/python3.11/site-packages", "version": "12.8", "torch": "2.7.0"},
    {"path": "/opt/vllm/.venv/lib/python3.12/site-packages", "version": "12.8", "torch": "2.7.1"},
    {"path": "/srv/bench/.venv/lib/python3.12/site-packages", "version": "12.6", "torch": "2.6.0"},
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    bindir = Path(sys.executable).parent
    env = dict(os.environ, ANSIBLE_CONFIG=str(CONFIG), PATH=f"{bindir}:{os.environ['PATH']}")
    with tempfile.TemporaryDirectory(prefix="gpuhost-bench-") as tmp:
        tmp = Path(tmp)
        # the seed host with a second container like 129, whose guest has the environments
        host = yaml.safe_load((SHARED / "pve-gpu1.yml").read_text())
        ct = next(c for c in host["lxc"] if c["vmid"] == 129)
        host["lxc"].append({"vmid": 131, "config": ct["config"].replace("hostname: llm-two", "hostname: llm-envs")})
        (tmp / "pve-gpu1.yml").write_text(yaml.safe_dump(host))
        guest = yaml.safe_load((SHARED / "llm-two.yml").read_text())
        guest.update(hostname="llm-envs", lxc_vmid=131, cuda_runtimes=ENVS)
        (tmp / "llm-envs.yml").write_text(yaml.safe_dump(guest))
        inventory = manager.up([str(tmp / "pve-gpu1.yml"), str(SHARED / "llm-two.yml"), str(tmp / "llm-envs.yml")],
                               tmp / "lab")
        try:
            play = tmp / "setup.yml"
            play.write_text(SETUP_PLAY)
            times: dict[str, list[float]] = {"llm-envs": [], "llm-two": [], "setup": []}
            commands = {h: [str(bindir / "gpuhost"), "audit", "-i", str(inventory), "--limit", h,
                            "--json", str(tmp / "r.json")] for h in ("llm-envs", "llm-two")}
            commands["setup"] = [str(bindir / "ansible-playbook"), "-i", str(inventory), "--limit", "llm-envs", str(play)]
            for name, argv in commands.items():             # warm: SSH masters, caches
                timed(argv, env, (0, 2))
            for _ in range(args.runs):
                for name, argv in commands.items():
                    times[name].append(timed(argv, env, (0, 2)))
            # what the look-ups found: the judgement of the container with the environments
            timed(commands["llm-envs"][:-1] + [str(tmp / "envs.json")], env, (0, 2))
            found = json.loads((tmp / "envs.json").read_text())["hosts"]["llm-envs"]["findings"]
            cuda = next(f for f in found if f["control"] == "guest.cuda")
        finally:
            manager.down(tmp / "lab")
    m = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.runs} runs each, medians")
    print(f"  audit of llm-envs (a toolkit, 3 Python envs)  {m['llm-envs']:6.2f} s")
    print(f"  audit of llm-two (a toolkit)                  {m['llm-two']:6.2f} s")
    print(f"  ansible-playbook setup (min) on llm-envs      {m['setup']:6.2f} s")
    print(f"  guest.cuda on llm-envs: {cuda['status']}: {cuda['message']}")
    print(f"  the three environments cost                   {m['llm-envs'] - m['llm-two']:+6.2f} s; "
          f"ratio to setup {m['llm-envs'] / m['setup']:.2f}")


if __name__ == "__main__":
    main()
