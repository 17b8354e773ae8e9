"""`gpuhost verify`: its limit and its bad input."""
from __future__ import annotations

import subprocess
import sys

from conftest import ci_stdin

# (the seed failing verify before the fix and passing it after: tests/audit/test_seed.py's
# SeedFix, around the README's quick start in test_readme, on the same lab as the fix)


def verify(*args: str) -> subprocess.CompletedProcess:
    with ci_stdin() as stdin:
        return subprocess.run([sys.executable, "-m", "gpuhost.cli", "verify", *args], stdin=stdin,
                              capture_output=True, text=True, timeout=600)


def test_verify_limit_and_bad_inventory(seed_lab, tmp_path):
    res = verify("-i", str(seed_lab.inventory), "--limit", "llm-two")
    # issue 16: a control that does not apply is skipped with the reason, never a vacuous pass
    assert res.returncode == 0 and "2 passed, 37 skipped" in res.stdout, res.stdout[-2000:]
    # the inventory's parameters are the oracle's too: the seed's deep idle states are fine
    # for a host allowed 100000 us (a host set to 1000 us failed verify before)
    from conftest import inventory_with
    lenient = inventory_with(seed_lab, {"pve-gpu1": {"gpuhost_cstate_max_latency_us": 100000}})
    strict = verify("-i", str(seed_lab.inventory), "--limit", "pve-gpu1")
    loose = verify("-i", str(lenient), "--limit", "pve-gpu1")
    assert "FAILED" in strict.stdout and "test_cpu_cstates" in strict.stdout, strict.stdout[-2000:]
    assert "test_cpu_cstates" not in loose.stdout.split("short test summary")[-1], loose.stdout[-2000:]
    res = verify("-i", str(tmp_path / "none.yml"))
    assert res.returncode == 1 and res.stderr == f"error: -i: no inventory at {tmp_path / 'none.yml'}\n"


def test_verify_agrees_with_the_judgement_on_every_host_of_the_specs(make_lab, tmp_path):
    """Issue 16: the oracle (tests/verify, its own reads through testinfra) and the judgement
    agree on every control of every host in tests/specs/: pass is passed, na is skipped
    with its reason, a failing status (drift, manual, pending_reboot, error) is failed."""
    import re
    import xml.etree.ElementTree as ET

    from conftest import SPECS, gpuhost

    lab = make_lab(*sorted(SPECS.glob("*.yml")), *sorted((SPECS / "matrix").glob("*.yml")))
    audit = gpuhost("audit", "-i", str(lab.inventory))
    assert audit.report is not None, audit.stderr[-2000:]
    junit = tmp_path / "verify.xml"
    res = verify("-i", str(lab.inventory), "--junit", str(junit))
    assert res.returncode in (0, 2), res.stdout[-2000:]
    oracle = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        control, host = re.match(r"test_(\w+)\[ansible://(.+)\]", case.get("name")).groups()
        oracle[host, control] = ("failed" if case.find("failure") is not None or case.find("error") is not None
                                 else "skipped" if case.find("skipped") is not None else "passed")
    want = {"pass": "passed", "na": "skipped", "waived": "skipped",
            "drift": "failed", "manual": "failed", "pending_reboot": "failed", "error": "failed"}
    hosts = audit.report["hosts"]
    assert len(hosts) >= 19
    disagree = [(host, f["control"], f["status"], oracle.get((host, f["control"].replace(".", "_"))))
                for host, h in sorted(hosts.items()) for f in h["findings"]
                if oracle.get((host, f["control"].replace(".", "_"))) != want[f["status"]]]
    assert disagree == [], disagree
    # both sides judged something: every status is there
    statuses = {f["status"] for h in hosts.values() for f in h["findings"]}
    assert {"pass", "na", "drift", "manual"} <= statuses
