"""Each role used alone, as a user's playbook calls it: it judges what it needs itself,
fixes its controls (changed), changes nothing the second time, and in --check reports
exactly what a real run changes."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import COLLECTION, SEED_HOST


def run_role(lab, tmp_path, role: str, *args: str) -> subprocess.CompletedProcess:
    play = tmp_path / f"{role}.yml"
    play.write_text(f"---\n- name: Use one gpuhost role\n  hosts: pve-gpu1\n  gather_facts: false\n"
                    f"  roles:\n    - gpuhost.stack.{role}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(COLLECTION / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(lab.inventory), str(play),
                           *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)


def changed_controls(out: str) -> set[str]:
    return set(re.findall(r"^TASK \[[^\]]* \| ([a-z_]+\.[a-z_]+)\][^\n]*\n(?:(?!TASK).*\n)*?changed: \[pve-gpu1\]", out, re.M))


def recap_changed(out: str) -> int:
    return int(re.search(r"pve-gpu1\s+: ok=\d+\s+changed=(\d+)", out).group(1))


@pytest.mark.parametrize("role, controls", [
    ("numa", {"numa.balancing"}),
    ("pcie", {"pcie.mrrs"}),
    ("nvidia", {"nvidia.persistence"}),
    ("storage", {"storage.scheduler"}),
    ("cpu", {"cpu.driver", "cpu.cstates"}),
    ("lxc", {"lxc.gpu_passthrough", "lxc.cpuset"}),
    ("kernel", {"kernel.version"}),
])
def test_a_role_alone_fixes_its_controls_and_is_idempotent(make_lab, tmp_path, role, controls):
    lab = make_lab(SEED_HOST)
    disk = lab.disk("pve-gpu1")
    check = run_role(lab, tmp_path, role, "--check")
    assert check.returncode == 0, check.stdout[-3000:]
    assert changed_controls(check.stdout) == controls, "check mode reports what a real run changes"
    assert lab.disk("pve-gpu1") == disk, "check mode writes nothing"
    first = run_role(lab, tmp_path, role)
    assert first.returncode == 0, first.stdout[-3000:]
    assert changed_controls(first.stdout) == controls
    again = run_role(lab, tmp_path, role)
    assert again.returncode == 0 and recap_changed(again.stdout) == 0, again.stdout[-3000:]


def test_the_reboot_contract_reboots_only_when_allowed(make_lab, tmp_path):
    lab = make_lab(SEED_HOST)
    boot = lab.status("pve-gpu1")["boot_id"]
    told_not = run_role(lab, tmp_path, "iommu")
    assert told_not.returncode == 0 and changed_controls(told_not.stdout) == {"iommu.mode"}, told_not.stdout[-3000:]
    assert lab.status("pve-gpu1")["boot_id"] == boot, "no reboot unless gpuhost_reboot_ok"
    allowed = run_role(lab, tmp_path, "iommu", "-e", "gpuhost_reboot_ok=true")
    assert allowed.returncode == 0, allowed.stdout[-3000:]
    assert "RUNNING HANDLER [gpuhost.stack.common : Reboot to apply the fixes | kernel.reboot_pending]" \
        in allowed.stdout
    assert lab.status("pve-gpu1")["boot_id"] != boot
    assert "iommu=pt" in lab.out("pve-gpu1", "cat /proc/cmdline")
