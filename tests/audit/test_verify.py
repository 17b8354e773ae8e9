"""`gpuhost verify`: its limit and its bad input."""
from __future__ import annotations

import subprocess
import sys

from conftest import ci_stdin

# (the seed failing verify before the fix and passing it after: tests/audit/test_seed.py,
# test_seed_fix_reboots_and_ends_with_every_control_passing, on the same lab as the fix)


def verify(*args: str) -> subprocess.CompletedProcess:
    with ci_stdin() as stdin:
        return subprocess.run([sys.executable, "-m", "gpuhost.cli", "verify", *args], stdin=stdin,
                              capture_output=True, text=True, timeout=600)


def test_verify_limit_and_bad_inventory(seed_lab, tmp_path):
    res = verify("-i", str(seed_lab.inventory), "--limit", "llm-two")
    # issue 16: a control that does not apply is skipped with the reason, never a vacuous pass
    assert res.returncode == 0 and "1 passed, 13 skipped" in res.stdout, res.stdout[-2000:]
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
