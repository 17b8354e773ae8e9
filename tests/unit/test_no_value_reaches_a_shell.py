"""No value from a host or an inventory is ever read by a shell as more than one word.

The seed host is rendered, then its facts are given the hostile names a compromised or
strange host could report (a block device, a PCI address); every command the judgement
hands the fix is then run in a real /bin/sh whose tools are stubs, and a marker file that
any command substitution or separator would create must not appear.
"""
from __future__ import annotations

import copy
import os
import shlex
import subprocess
from pathlib import Path

import pytest

import scenarios
from conftest import SEED_HOST
from gpuhost import controls

HOSTILE = ["$(touch {m})", "`touch {m}`", "x;touch {m}", "x&&touch {m}", "x|touch {m}", "x\ntouch {m}",
           "' ; touch {m} ; '", "\" ; touch {m} ; \""]


@pytest.fixture(scope="module")
def seed_facts(tmp_path_factory):
    return scenarios.render(SEED_HOST, tmp_path_factory.mktemp("seed")).facts()


def run_in_sandbox(command: str, tmp: Path) -> subprocess.CompletedProcess:
    stubs = tmp / "bin"
    stubs.mkdir(exist_ok=True)
    for tool in ("setpci", "sysctl", "nvidia-smi", "systemctl"):
        (stubs / tool).write_text('#!/bin/sh\nprintf "%s\\n" "$@" >> "$STUB_LOG"\n')
        (stubs / tool).chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_LOG": str(tmp / "stub.log")}
    return subprocess.run(["/bin/sh", "-c", "set -e\n" + command], cwd=tmp, env=env, capture_output=True, text=True)


def commands(findings: dict) -> list[str]:
    return [c for f in findings.values() for c in ((f.get("fix") or {}).get("commands") or [])]


@pytest.mark.parametrize("shape", HOSTILE)
def test_a_hostile_block_device_name_stays_one_word(seed_facts, tmp_path, shape):
    marker = tmp_path / "pwned"
    name = shape.format(m=marker)
    facts = copy.deepcopy(seed_facts)
    facts["block"] = [{"name": name, "rotational": False, "schedulers": ["none", "mq-deadline"],
                       "scheduler": "mq-deadline"}]
    finding = controls.evaluate(facts, {"controls": ["storage.scheduler"]})["storage.scheduler"]
    assert finding["status"] == "drift"
    (cmd,) = finding["fix"]["commands"]
    assert shlex.split(cmd) == ["echo", "none", ">", f"/sys/block/{name}/queue/scheduler"]
    run_in_sandbox(cmd, tmp_path)
    assert not marker.exists(), f"{cmd!r} ran a command of the host's making"
    assert name not in finding["fix"]["unit"]["content"], "the boot unit selects disks by property, never by name"


@pytest.mark.parametrize("shape", HOSTILE)
def test_a_hostile_pci_address_never_reaches_a_command_or_a_unit(seed_facts, tmp_path, shape):
    marker = tmp_path / "pwned"
    bdf = shape.format(m=marker)
    facts = copy.deepcopy(seed_facts)
    gpu = next(d for d in facts["pci"] if d.get("vendor") == 0x10DE and d.get("class", 0) >> 16 == 0x03)
    gpu["bdf"] = bdf
    findings = controls.evaluate(facts, {})
    assert findings["pcie.mrrs"]["status"] == "error" and "not an address gpuhost puts in a command" in \
        findings["pcie.mrrs"]["message"]
    for cmd in commands(findings):
        run_in_sandbox(cmd, tmp_path)
    assert not marker.exists()
    for f in findings.values():
        assert bdf not in str((f.get("fix") or {}).get("unit") or ""), f["control"]


def test_every_command_of_the_seed_host_runs_as_its_words(seed_facts, tmp_path):
    """The real commands, in the sandbox: each tool gets exactly the words shlex reads."""
    findings = controls.evaluate(copy.deepcopy(seed_facts), {})
    cmds = commands(findings)
    assert any(c.startswith("setpci ") for c in cmds) and any(c.startswith("sysctl ") for c in cmds)
    for cmd in cmds:
        res = run_in_sandbox(cmd, tmp_path)
        assert res.returncode == 0 or "/sys/" in cmd, (cmd, res.stderr)


@pytest.mark.parametrize("value", ["6.14'; touch /tmp/x; '", "6.14$(id)", "6.14 linux-image-rt", "latest"])
def test_an_inventory_kernel_series_that_is_not_a_version_never_reaches_apt(seed_facts, value):
    finding = controls.evaluate(copy.deepcopy(seed_facts), {"kernel_min_version": value,
                                                            "controls": ["kernel.version"]})["kernel.version"]
    assert finding["status"] == "error" and "not a kernel version" in finding["message"]
    assert "fix" not in finding or not finding["fix"]
