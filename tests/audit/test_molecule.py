"""molecule's default scenario: destroy, create, check, converge, idempotence, verify, destroy."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_molecule_default_scenario_passes():
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", ANSIBLE_NOCOLOR="1",
               NO_COLOR="1", PY_COLORS="0")
    res = subprocess.run([str(Path(sys.executable).parent / "molecule"), "test"], cwd=ROOT, env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    for step in ("check", "converge", "idempotence", "verify"):
        assert f"{step}: Executed: Successful" in out, step
    assert "28 passed" in out
