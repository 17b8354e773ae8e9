"""The operator's ansible.cfg, found as ansible-core finds it (config/manager.py
find_ini_config_file, run here in a process of its own with the same directory and
environment): $ANSIBLE_CONFIG naming a file or a directory, one that does not exist, a
working directory anyone may write to (its ansible.cfg is skipped), ~/.ansible.cfg."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhost import ansiblecfg

ANSIBLE_DECIDES = "from ansible.config.manager import find_ini_config_file as f; print(f() or '')"


def ansible_choice(cwd: Path, env: dict) -> str:
    run = subprocess.run([sys.executable, "-c", ANSIBLE_DECIDES], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


@pytest.mark.parametrize("case", ["env file", "env directory", "env missing", "cwd", "cwd world-writable", "home"])
def test_the_operator_config_is_the_one_ansible_core_reads(case, tmp_path, monkeypatch):
    home, cwd, conf = tmp_path / "home", tmp_path / "project", tmp_path / "conf"
    for d in (home, cwd, conf):
        d.mkdir()
        (d / ("ansible.cfg" if d != home else ".ansible.cfg")).write_text("[defaults]\nforks = 7\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {"HOME": str(home)}
    if case == "env file":
        env["ANSIBLE_CONFIG"] = str(conf / "ansible.cfg")
    elif case == "env directory":
        env["ANSIBLE_CONFIG"] = str(conf)
    elif case == "env missing":
        env["ANSIBLE_CONFIG"] = str(tmp_path / "nowhere.cfg")
    elif case == "cwd world-writable":
        cwd.chmod(0o777)
    elif case == "home":
        (cwd / "ansible.cfg").unlink()
    want = ansible_choice(cwd, env)
    for key in [k for k in os.environ if k.startswith("ANSIBLE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    if "ANSIBLE_CONFIG" in env:
        monkeypatch.setenv("ANSIBLE_CONFIG", env["ANSIBLE_CONFIG"])
    got = ansiblecfg.operator_config(cwd)
    assert str(got) == want, (case, got, want)
    expected = {"env file": conf / "ansible.cfg", "env directory": conf / "ansible.cfg", "env missing": cwd / "ansible.cfg",
                "cwd": cwd / "ansible.cfg", "cwd world-writable": home / ".ansible.cfg", "home": home / ".ansible.cfg"}[case]
    assert got == expected.resolve()


def test_the_inventory_ansible_would_use_without_i(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("ANSIBLE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ansiblecfg.inventory_sources(tmp_path) is None          # nothing names one: this machine
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = hosts/prod.yml, hosts/gpu.ini\n")
    assert ansiblecfg.inventory_sources(tmp_path) == [str(tmp_path / "hosts/prod.yml"), str(tmp_path / "hosts/gpu.ini")]
    monkeypatch.setenv("ANSIBLE_INVENTORY", "/srv/inv.yml")
    assert ansiblecfg.inventory_sources(tmp_path) == ["/srv/inv.yml"]
