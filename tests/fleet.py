"""Synthetic fleets for the report renderers: the seed host's real judgement (its spec
rendered by the lab's kernel model and read by the probe), copied onto N hosts with the
variations a fleet has: hosts that pass, a manual finding, an unreachable host, a fix that
failed half-way, and long host names."""
from __future__ import annotations

import copy
import tempfile
from functools import lru_cache
from pathlib import Path

import scenarios

SEED_SPEC = scenarios.ROOT / "tests/specs/seed/pve-gpu1.yml"


@lru_cache(maxsize=1)
def seed_findings() -> dict:
    with tempfile.TemporaryDirectory(prefix="gpuhost-fleet-") as tmp:
        return scenarios.render(SEED_SPEC, Path(tmp)).judge()


def host_name(i: int) -> str:
    # every fifth a fully qualified name, longer than any status word
    return f"gpu-a100-rack{i % 40:02d}-node{i:04d}.dc1.example.internal" if i % 5 == 4 else f"pve-gpu{i + 1}"


def fleet_hosts(n: int, mode: str = "audit") -> dict[str, dict]:
    """name -> what app.hosts_from gives the report builder."""
    base = seed_findings()
    hosts = {}
    for i in range(n):
        findings = copy.deepcopy(base)
        changed: list[str] = []
        entry: dict = {"reachable": True, "facts": {"kernel": "6.8.12-4-pve", "gpus": 8,
                                                    "cpu": "AMD EPYC 9335 32-Core Processor"}}
        if i % 3 == 2:              # a host already fixed: all pass but one that needs a person
            for f in findings.values():
                if f["status"] == "drift":
                    f.update(status="pass", message="as expected")
            findings["pcie.mrrs"].update(status="manual", message="MaxReadReq is 4096 live but a BIOS setting "
                                         "resets it at boot: set it in the firmware")
        if mode == "fix" and i % 3 == 0:
            changed = [c for c, f in findings.items() if f["status"] == "drift"]
        if n > 1 and i == n - 1:    # the last one did not answer
            entry.update(reachable=False, error="unreachable: ssh: connect to host 127.0.1.250 port 22: "
                                                 "Connection refused", findings={})
        elif n > 2 and i == 1 and mode == "fix":   # a fix that stopped half-way keeps the audit's findings
            changed = ["numa.balancing", "cpu.cstates"]
            entry.update(error="Apply it now | pcie.mrrs: setpci exited 1 (during the fix, after changing "
                               "numa.balancing, cpu.cstates; the findings are the audit's, not judged again)",
                         findings=findings)
        else:
            entry["findings"] = findings
        entry["changed"] = changed
        hosts[host_name(i)] = entry
    return hosts
