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
    assert res.returncode == 0 and "14 passed" in res.stdout
    res = verify("-i", str(tmp_path / "none.yml"))
    assert res.returncode == 1 and res.stderr == f"error: -i: no inventory at {tmp_path / 'none.yml'}\n"
