"""The firmware dimension on a lab host with a BMC (tests/specs/pve-gpu1-bmc.yml: the seed host
with CPPC off, boost off and NPS4 in its BIOS, its BMC a Lenovo XCC over HTTPS from the lab's
CA): the audit finds the three from the BMC, the Linux-side controls point to them, the BMC
sees only GETs, no report or log holds the password, and each BMC fault is one finding naming
the BMC while the rest of the host is judged. The fix writes the BIOS once, one reboot applies
it with the OS's changes and both sides agree after it; a value the firmware ignores or an
attribute a firmware update renames is a finding naming the BMC, never a second reboot."""
from __future__ import annotations

import json
import os
import subprocess

import yaml

from conftest import SPECS, gpuhost, inventory_with

HOST = "pve-gpu1-bmc"
SECRET = "lab-bmc-secret"        # the spec's BMC password (src/gpuhost/lab/spec.py BmcSpec)


def bmc_log(lab) -> list[str]:
    return (lab.dir / "hosts" / HOST / "bmc.log").read_text().splitlines()


def test_the_audit_finds_cppc_boost_and_nps4_from_the_bmc_sends_no_write_and_never_shows_the_password(make_lab, tmp_path):
    lab = make_lab(SPECS / "pve-gpu1-bmc.yml")
    reports = {form: tmp_path / f"report.{form}" for form in ("html", "junit", "prom")}
    run = gpuhost("audit", "-i", str(lab.inventory), "--html", str(reports["html"]), "--junit", str(reports["junit"]),
                  "--prom", str(reports["prom"]), "--json", str(tmp_path / "report.json"))
    assert run.rc == 2 and run.report is not None, run.stderr[-2000:]
    got = run.status(HOST)
    assert {c: got[c] for c in ("bios.cppc", "bios.boost", "bios.nps")} == {"bios.cppc": "drift", "bios.boost": "drift",
                                                                         "bios.nps": "drift"}
    assert "Processors_CPPC is Disabled, Enabled wanted" in run.finding(HOST, "bios.cppc")["message"]
    assert "Memory_NUMANodesperSocket is NPS4, NPS1 wanted" in run.finding(HOST, "bios.nps")["message"]
    assert "fix writes Memory_NUMANodesperSocket=NPS1 for the next reset" in run.finding(HOST, "bios.nps")["message"]
    assert {got[c] for c in ("bios.smt", "bios.iommu", "bios.cstates", "bios.above4g", "bios.profile")} == {"pass"}
    # the Linux side names the firmware setting that causes it
    assert "bios.cppc" in run.finding(HOST, "cpu.driver")["message"]
    assert "bios.boost" in run.finding(HOST, "cpu.boost")["message"]
    # every report form names the BMC the finding came from
    for form, path in reports.items():
        assert "127.0.1." in path.read_text() or form == "prom", form
    # Ansible's check mode through the bios role: the write it would make, said with its
    # diff, and still GETs only
    import sys
    from pathlib import Path

    from conftest import ROOT
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {"ANSIBLE_NOCOLOR": "1"}
    check = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(lab.inventory), "--limit", HOST,
                            "playbooks/site.yml", "--check", "--diff", "--tags", "bios.cppc,bios.nps"],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert check.returncode == 0, check.stdout[-3000:]
    assert "+Memory_NUMANodesperSocket=NPS1" in check.stdout and "+Processors_CPPC=Enabled" in check.stdout, check.stdout[-3000:]
    assert "Processors_CorePerformanceBoost" not in check.stdout.split("Write the staged BIOS values in one request")[-1]
    # what the BMC saw: GETs, nothing else
    seen = bmc_log(lab)
    assert seen and {line.split()[0] for line in seen} == {"GET"}, seen
    # the password: in no report, no output, no log the lab or the run left
    texts = [run.stdout, run.stderr, (tmp_path / "report.json").read_text()] + [p.read_text() for p in reports.values()]
    texts += [p.read_text(errors="replace") for p in lab.dir.rglob("*.log")]
    assert not [t for t in texts if SECRET in t]


def test_each_bmc_fault_is_one_error_naming_the_bmc_and_a_vaulted_password_works(make_lab, tmp_path):
    lab = make_lab(SPECS / "pve-gpu1-bmc.yml")
    import yaml
    address = yaml.safe_load(lab.inventory.read_text())["all"]["hosts"][HOST]["gpuhost_bmc_address"]
    other_ca = tmp_path / "other-ca"
    from gpuhost.lab.bmc import make_ca
    make_ca(other_ca)
    cases = {
        "the BMC refused the credentials (HTTP 401)": {"gpuhost_bmc_password": "not-the-password"},
        "its TLS certificate is not trusted": {"gpuhost_bmc_ca": str(other_ca / "ca.crt")},
        "unreachable": {"gpuhost_bmc_address": "127.0.1.255", "gpuhost_bmc_timeout": 3},
    }
    for says, extra in cases.items():
        run = gpuhost("audit", "-i", str(inventory_with(lab, {HOST: extra})), "--controls", "bios.smt,bios.nps,cpu.driver")
        assert run.report is not None, run.stderr[-2000:]
        for cid in ("bios.smt", "bios.nps"):
            f = run.finding(HOST, cid)
            assert f["status"] == "error" and says in f["message"] and "BMC 127.0.1." in f["message"], (says, f)
        assert run.status(HOST)["cpu.driver"] == "manual", "the host itself is judged all the same"
        assert SECRET not in run.stdout + run.stderr and "not-the-password" not in run.stdout + run.stderr
    # the operator's opt-out of TLS verification is named in every finding it touches
    run = gpuhost("audit", "-i", str(inventory_with(lab, {HOST: {"gpuhost_bmc_validate_certs": False,
                                                                "gpuhost_bmc_ca": ""}})), "--controls", "bios.smt")
    assert "its certificate not verified" in run.finding(HOST, "bios.smt")["observed"], run.stderr[-2000:]
    assert {line.split()[0] for line in bmc_log(lab)} == {"GET"}
    assert address.startswith("127.0.1.")
    # and the password may come from a vault, as an operator keeps it
    (tmp_path / "vault-pass").write_text("a vault password\n")
    venv_bin = os.path.dirname(__import__("sys").executable)
    enc = subprocess.run([os.path.join(venv_bin, "ansible-vault"), "encrypt_string", "--vault-password-file",
                          str(tmp_path / "vault-pass"), SECRET], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert enc.returncode == 0, enc.stderr
    enc = enc.stdout
    inv = lab.inventory.read_text().replace(f"gpuhost_bmc_password: {SECRET}", "gpuhost_bmc_password: " + enc.strip()
                                            .replace("\n", "\n    "))
    assert SECRET not in inv and "!vault" in inv
    yaml.safe_load(inv.replace("!vault", ""))      # still a YAML mapping
    (tmp_path / "inv.yml").write_text(inv)
    env = {**os.environ, "ANSIBLE_VAULT_PASSWORD_FILE": str(tmp_path / "vault-pass")}
    res = subprocess.run([__import__("sys").executable, "-m", "gpuhost.cli", "audit", "-i", str(tmp_path / "inv.yml"),
                          "--controls", "bios.cppc"], capture_output=True, text=True, env=env, timeout=300,
                         stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert "bios.cppc  drift" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    assert SECRET not in res.stdout + res.stderr


def writes(lab) -> list[str]:
    return [line for line in bmc_log(lab) if not line.startswith("GET ")]


def test_one_fix_writes_the_bios_once_and_one_reboot_applies_it_with_the_os_changes(make_lab):
    lab = make_lab(SPECS / "pve-gpu1-bmc.yml")
    boots = lab.status(HOST)["boots"]
    run = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--reboot", "if-needed")
    assert run.report is not None and not run.report["hosts"][HOST].get("error"), run.stderr[-3000:]
    # the three BIOS values in one request to the settings object, for the next reset
    assert writes(lab) == ["PATCH /redfish/v1/Systems/1/Bios/Settings"]
    assert lab.status(HOST)["boots"] == boots + 1, "exactly one reboot, for the BIOS and the OS together"
    got = run.status(HOST)
    assert {c: got[c] for c in ("bios.cppc", "bios.boost", "bios.nps", "cpu.driver", "cpu.boost", "iommu.mode",
                                "kernel.version")} == dict.fromkeys(("bios.cppc", "bios.boost", "bios.nps", "cpu.driver",
                                                                     "cpu.boost", "iommu.mode", "kernel.version"), "pass")
    assert {"bios.cppc", "bios.boost", "bios.nps", "iommu.mode", "kernel.version"} <= run.changed(HOST)
    # both sides: the BMC's current values, and Linux as the firmware now makes it
    assert "Processors_CPPC=Enabled" in run.finding(HOST, "bios.cppc")["message"]
    assert lab.out(HOST, "cat /sys/devices/system/cpu/cpufreq/policy0/scaling_driver") == "amd-pstate-epp"
    assert lab.out(HOST, "ls -d /sys/devices/system/cpu/cpu0/acpi_cppc") == "/sys/devices/system/cpu/cpu0/acpi_cppc"
    assert lab.out(HOST, "ls -d /sys/devices/system/node/node[0-9]*").split() == ["/sys/devices/system/node/node0",
                                                                                "/sys/devices/system/node/node1"]
    assert "iommu=pt" in lab.out(HOST, "cat /proc/cmdline")
    assert lab.out(HOST, "cat /proc/sys/kernel/osrelease") == "6.14.11-4-pve"
    # every control passes after the one reboot, the container's CPU set too: chosen under NPS4's
    # eight nodes, it holds CPUs of both of NPS1's
    assert {c: s for c, s in got.items() if s not in ("pass", "na")} == {}, got
    # the testinfra oracle (tests/verify, its own reads of the BMC and of Linux) agrees: the
    # whole host passes, the bios controls and the Linux controls they cause among them
    import sys
    import xml.etree.ElementTree as ET
    from pathlib import Path

    from conftest import ci_stdin
    junit = Path(lab.dir) / "verify.xml"
    with ci_stdin() as stdin:
        verified = subprocess.run([sys.executable, "-m", "gpuhost.cli", "verify", "-i", str(lab.inventory), "--junit",
                                   str(junit)], stdin=stdin, capture_output=True, text=True, timeout=600)
    assert verified.returncode == 0, verified.stdout[-3000:]
    passed = {case.get("name").split("[")[0] for case in ET.parse(junit).getroot().iter("testcase")
              if not list(case)}
    assert {"test_bios_cppc", "test_bios_boost", "test_bios_nps", "test_cpu_driver", "test_cpu_boost"} <= passed, passed
    # a second fix writes nothing to the BMC, changes nothing and reboots nothing
    again = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--reboot", "if-needed")
    assert again.report is not None, again.stderr[-2000:]
    assert writes(lab) == ["PATCH /redfish/v1/Systems/1/Bios/Settings"] and lab.status(HOST)["boots"] == boots + 1
    assert again.changed(HOST) == set() and "nothing to fix" in again.stderr
    texts = [run.stdout, run.stderr, again.stdout, again.stderr, json.dumps(run.report), json.dumps(again.report)]
    texts += [p.read_text(errors="replace") for p in lab.dir.rglob("*.log")]
    assert not [t for t in texts if SECRET in t]


def test_a_value_the_firmware_ignores_or_a_renamed_attribute_is_named_and_never_a_second_reboot(make_lab, tmp_path):
    spec = yaml.safe_load((SPECS / "pve-gpu1-bmc.yml").read_text())
    # the firmware keeps boost's pending value, and a firmware update at the reset renames
    # CPPC's attribute (its pending value gone with the old name)
    spec["bmc"]["ignores"] = ["Processors_CorePerformanceBoost"]
    spec["bmc"]["renames_at_reset"] = {"Processors_CPPC": "Processors_CPPCControl"}
    path = tmp_path / "pve-gpu1-bmc.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    lab = make_lab(path)
    boots = lab.status(HOST)["boots"]
    only = "bios.cppc,bios.boost,bios.nps,cpu.driver"
    run = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--reboot", "if-needed", "--controls", only)
    assert run.report is not None, run.stderr[-2000:]
    assert writes(lab) == ["PATCH /redfish/v1/Systems/1/Bios/Settings"] and lab.status(HOST)["boots"] == boots + 1
    got = run.status(HOST)
    assert got["bios.nps"] == "pass"
    boost = run.finding(HOST, "bios.boost")
    assert boost["status"] == "manual" and "that boot did not apply it: a second reboot will not help" in boost["message"]
    assert "BMC 127.0.1." in boost["message"] and "configuration jobs" in boost["message"], boost
    cppc = run.finding(HOST, "bios.cppc")
    assert cppc["status"] == "manual" and "renamed by a firmware update?" in cppc["message"], cppc
    assert "no longer has the attribute gpuhost wrote (Processors_CPPC=Enabled) before its reboot" in cppc["message"]
    assert "Linux sees CPPC off" in cppc["message"] and "BMC 127.0.1." in cppc["message"]
    assert "did not come back healthy after the reboot" in run.report["hosts"][HOST]["error"]
    # the next fix: nothing written, no reboot for what the firmware did not apply
    again = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--reboot", "if-needed", "--controls", only)
    assert again.report is not None, again.stderr[-2000:]
    assert again.status(HOST)["bios.boost"] == "manual" and again.status(HOST)["bios.cppc"] == "manual"
    assert writes(lab) == ["PATCH /redfish/v1/Systems/1/Bios/Settings"] and lab.status(HOST)["boots"] == boots + 1
