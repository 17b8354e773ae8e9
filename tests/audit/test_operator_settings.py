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
