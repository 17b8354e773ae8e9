"""ansible-playbook --check is the audit in Ansible's own sense: a change reported for
every drifted control, the diffs with --diff, nothing written."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import COLLECTION, ROOT
from test_seed import SEED_EXPECTED


def changed_controls(output: str, host: str) -> set[str]:
    """The controls whose tasks (named "... | <control>") reported a change on *host*."""
    return set(re.findall(r"^TASK \[[^\]]* \| ([a-z_]+\.[a-z0-9_]+)\][^\n]*\n(?:(?!TASK).*\n)*?changed: \[%s\]"
                          % re.escape(host), output, re.M))


def playbook(lab, *args: str) -> subprocess.CompletedProcess:
    """The first thing an Ansible user types, from the checkout's top with nothing set in the
    environment: its ansible.cfg finds the collection, its playbooks/site.yml imports the
    collection's play."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {"ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(lab.inventory),
                           "--limit", "pve-gpu1", "playbooks/site.yml", *args],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_check_mode_reports_every_drifted_control_as_a_change_and_writes_nothing(seed_lab):
    disk, sys_before = seed_lab.disk("pve-gpu1"), seed_lab.snapshot("pve-gpu1")
    run = playbook(seed_lab, "--check", "--diff")
    assert run.returncode == 0, run.stdout[-3000:]
    changed_tasks = re.findall(r"^changed: \[pve-gpu1\]", run.stdout, re.M)
    names = changed_controls(run.stdout, "pve-gpu1")
    drifted = {c for c, s in SEED_EXPECTED.items() if s == "drift"}
    assert drifted <= names, f"not reported as changed: {drifted - names}"
    assert not names - drifted, "only drifted controls report a change"
    recap = re.search(r"pve-gpu1\s+: ok=\d+\s+changed=(\d+)", run.stdout)
    assert recap and int(recap.group(1)) >= len(drifted) and len(changed_tasks) >= len(drifted)
    assert "+kernel.numa_balancing = 0" in run.stdout and "/proc/sys/kernel/numa_balancing: 0" in run.stdout
    assert seed_lab.disk("pve-gpu1") == disk and seed_lab.snapshot("pve-gpu1") == sys_before


def test_list_tags_lists_every_control_and_a_tag_runs_that_control_alone(make_lab):
    from conftest import SEED_HOST

    from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG

    listed = playbook_at(None, "--list-tags")
    assert listed.returncode == 0, listed.stderr
    tags = set(re.findall(r"[a-z]+\.[a-z0-9_]+", listed.stdout.split("TASK TAGS:")[-1]))
    assert {c.id for c in CATALOG} <= tags, {c.id for c in CATALOG} - tags
    lab = make_lab(SEED_HOST)
    before = lab.out("pve-gpu1", "cat /etc/kernel/cmdline")
    run = playbook(lab, "--tags", "pcie.mrrs")
    assert run.returncode == 0, run.stdout[-3000:]
    fixed = changed_controls(run.stdout, "pve-gpu1")
    assert fixed == {"pcie.mrrs"}, fixed
    assert int(lab.out("pve-gpu1", "setpci -s 01:00.0 CAP_EXP+8.w"), 16) >> 12 & 7 == 5, "MaxReadReq 4096"
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/numa_balancing") == "1", "no other control touched"
    assert lab.out("pve-gpu1", "cat /etc/kernel/cmdline") == before


def playbook_at(lab, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(COLLECTION / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    inv = ["-i", str(lab.inventory)] if lab else ["-i", "localhost,"]
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), *inv,
                           str(COLLECTION / "playbooks/site.yml"), *args],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
