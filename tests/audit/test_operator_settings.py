"""The operator's Ansible settings are kept: -u/-b/--private-key/-e/--forks, and their own
ansible.cfg; gpuhost's safety settings (host keys checked, nothing on the host's disk) stay."""
from __future__ import annotations

import configparser
import shutil

import yaml

from conftest import SEED_HOST, gpuhost
from gpuhost.ansiblecfg import merged_config


def as_operator(lab, tmp_path):
    """The lab's inventory without its root login: who connects comes from the command line
    or the operator's ansible.cfg, as in a fleet reached as a sudo user."""
    inv = yaml.safe_load(lab.inventory.read_text())
    del inv["all"]["vars"]["ansible_user"]
    key = inv["all"]["vars"].pop("ansible_ssh_private_key_file")
    path = tmp_path / "operator-inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path, key


def test_a_sudo_user_with_become_audits_and_fixes_like_root(make_lab, tmp_path):
    lab = make_lab(SEED_HOST)
    inv, key = as_operator(lab, tmp_path)
    controls = "numa.balancing,pcie.mrrs"
    plain = gpuhost("audit", "-i", str(inv), "-u", "ops", "--private-key", key, "--controls", controls)
    assert plain.rc == 3 and plain.status("pve-gpu1")["pcie.mrrs"] == "error", "config space needs root"
    audit = gpuhost("audit", "-i", str(inv), "-u", "ops", "-b", "--private-key", key, "--controls", controls)
    assert audit.rc == 2 and audit.status("pve-gpu1") == {"numa.balancing": "drift", "pcie.mrrs": "drift"}, audit.stderr
    fix = gpuhost("fix", "-i", str(inv), "-u", "ops", "-b", "--private-key", key, "--controls", controls, "--yes",
                  "-e", "gpuhost_lock_timeout=60", "--forks", "4")
    assert fix.rc == 0 and fix.changed("pve-gpu1") == {"numa.balancing", "pcie.mrrs"}, fix.stderr
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/numa_balancing") == "0"
    assert lab.out("pve-gpu1", "stat -c %U /etc/sysctl.d/99-gpuhost-numa-balancing.conf") == "root"


def test_the_operators_ansible_cfg_is_honoured(make_lab, tmp_path):
    lab = make_lab(SEED_HOST)
    inv, key = as_operator(lab, tmp_path)
    work = tmp_path / "ops-repo"
    work.mkdir()
    shutil.copy(key, work / "fleet_key")
    (work / "fleet_key").chmod(0o600)
    (work / "ansible.cfg").write_text("[defaults]\nremote_user = ops\nprivate_key_file = fleet_key\n"
                                      "host_key_checking = False\nforks = 7\n[privilege_escalation]\nbecome = True\n")
    run = gpuhost("audit", "-i", str(inv), "--controls", "pcie.mrrs", cwd=work)
    assert run.rc == 2 and run.status("pve-gpu1") == {"pcie.mrrs": "drift"}, run.stderr
    merged = configparser.ConfigParser(interpolation=None)
    import os
    old = os.getcwd()
    os.chdir(work)
    try:
        merged.read(merged_config(tmp_path))
    finally:
        os.chdir(old)
    assert merged["defaults"]["remote_user"] == "ops" and merged["defaults"]["forks"] == "7"
    assert merged["defaults"]["private_key_file"] == str(work / "fleet_key"), "relative to the operator's file"
    assert merged["privilege_escalation"]["become"] == "True"
    assert merged["defaults"]["host_key_checking"] == "True", "host keys are always checked"
    assert merged["defaults"]["remote_tmp"] == "/tmp/.ansible-${USER}", "an audit leaves nothing on a host's disk"


def ansible_decides_hosts(cwd, env) -> set[str]:
    """The hosts ansible-inventory lists in *cwd* with *env*: what Ansible itself would work on."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    run = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "--list"], cwd=cwd,
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    return set(json.loads(run.stdout)["_meta"]["hostvars"])


def test_without_i_the_inventory_ansible_would_use_and_a_host_list_with_i(make_lab, tmp_path):
    """No -i: $ANSIBLE_INVENTORY, else the operator's ansible.cfg's inventory (what
    ansible-inventory lists there), before this machine; -i a,b, is a host list, as Ansible takes it."""
    import os
    import subprocess
    import sys

    from conftest import SPECS

    lab = make_lab(SPECS / "switch-host.yml")         # a small host: the inventory is what is tested
    work = tmp_path / "ops"
    work.mkdir()
    (work / "fleet.yml").write_text(lab.inventory.read_text())
    (work / "ansible.cfg").write_text("[defaults]\ninventory = fleet.yml\n")
    want = ansible_decides_hosts(work, {})
    assert want == {"switch-host"}
    from_cfg = gpuhost("audit", "--controls", "pcie.acs", cwd=work)
    assert from_cfg.rc == 2 and set(from_cfg.report["hosts"]) == want, from_cfg.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"ANSIBLE_INVENTORY": str(lab.inventory)}
    assert ansible_decides_hosts(elsewhere, env) == {"switch-host"}
    proc = subprocess.run([sys.executable, "-m", "gpuhost.cli", "audit", "--controls", "pcie.acs", "--json", "r.json"],
                          cwd=elsewhere, env={**os.environ, **env}, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    import json
    assert proc.returncode == 2 and set(json.loads((elsewhere / "r.json").read_text())["hosts"]) == {"switch-host"}, proc.stderr

    # a host list: taken, tried, and an address nothing answers on is unreachable, not bad input
    listed = gpuhost("audit", "-i", "127.0.1.250,", "--controls", "pcie.mrrs", "--task-timeout", "30")
    assert listed.rc == 3 and list(listed.report["hosts"]) == ["127.0.1.250"], listed.stderr
    assert listed.report["hosts"]["127.0.1.250"]["reachable"] is False
    missing = gpuhost("audit", "-i", str(tmp_path / "no-such.yml"))
    assert missing.rc == 1 and missing.stderr.strip() == f"error: -i: no inventory at {tmp_path / 'no-such.yml'}"
