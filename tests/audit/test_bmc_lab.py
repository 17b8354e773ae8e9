"""The firmware dimension on a lab host with a BMC (tests/specs/pve-gpu1-bmc.yml: the seed host
with CPPC off, boost off and NPS4 in its BIOS, its BMC a Lenovo XCC over HTTPS from the lab's
CA): the audit finds the three from the BMC, the Linux-side controls point to them, the BMC
sees only GETs, no report or log holds the password, and each BMC fault is one finding naming
the BMC while the rest of the host is judged."""
from __future__ import annotations

import os
import subprocess

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
    assert {c: got[c] for c in ("bios.cppc", "bios.boost", "bios.nps")} == {"bios.cppc": "manual", "bios.boost": "manual",
                                                                         "bios.nps": "manual"}
    assert "Processors_CPPC is Disabled, Enabled wanted" in run.finding(HOST, "bios.cppc")["message"]
    assert "Memory_NUMANodesperSocket is NPS4, NPS1 wanted" in run.finding(HOST, "bios.nps")["message"]
    assert {got[c] for c in ("bios.smt", "bios.iommu", "bios.cstates", "bios.above4g", "bios.profile")} == {"pass"}
    # the Linux side names the firmware setting that causes it
    assert "bios.cppc" in run.finding(HOST, "cpu.driver")["message"]
    assert "bios.boost" in run.finding(HOST, "cpu.boost")["message"]
    # every report form names the BMC the finding came from
    for form, path in reports.items():
        assert "127.0.1." in path.read_text() or form == "prom", form
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
    assert "bios.cppc  manual" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    assert SECRET not in res.stdout + res.stderr
