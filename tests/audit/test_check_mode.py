"""ansible-playbook --check is the audit in Ansible's own sense: a change reported for
every drifted control, the diffs with --diff, nothing written."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from test_seed import SEED_EXPECTED


def playbook(lab, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(lab.inventory),
                           "--limit", "pve-gpu1", str(ROOT / "playbooks/site.yml"), *args],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_check_mode_reports_every_drifted_control_as_a_change_and_writes_nothing(seed_lab):
    disk, sys_before = seed_lab.disk("pve-gpu1"), seed_lab.snapshot("pve-gpu1")
    run = playbook(seed_lab, "--check", "--diff")
    assert run.returncode == 0, run.stdout[-3000:]
    changed_tasks = re.findall(r"^changed: \[pve-gpu1\]", run.stdout, re.M)
    names = re.findall(r"^TASK \[[^\]]*?: ([a-z_.]+) \| [^\]]*\][^\n]*\n(?:(?!TASK).*\n)*?changed: \[pve-gpu1\]",
                       run.stdout, re.M)
    drifted = {c for c, s in SEED_EXPECTED.items() if s == "drift"}
    assert drifted <= set(names), f"not reported as changed: {drifted - set(names)}"
    assert not set(names) - drifted, "only drifted controls report a change"
    recap = re.search(r"pve-gpu1\s+: ok=\d+\s+changed=(\d+)", run.stdout)
    assert recap and int(recap.group(1)) >= len(drifted) and len(changed_tasks) >= len(drifted)
    assert "+kernel.numa_balancing = 0" in run.stdout and "/proc/sys/kernel/numa_balancing: 0" in run.stdout
    assert seed_lab.disk("pve-gpu1") == disk and seed_lab.snapshot("pve-gpu1") == sys_before
