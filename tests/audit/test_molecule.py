"""molecule's default scenario: destroy, create, check, converge, idempotence, verify, destroy;
its check step reports every drifted control as a change."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from test_check_mode import changed_controls
from test_seed import SEED_EXPECTED


def test_molecule_default_scenario_passes():
    # by the README's command, `make molecule`, in an environment that has no venv on PATH
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "VIRTUAL_ENV"))}
    env.update(PATH="/usr/local/bin:/usr/bin:/bin", ANSIBLE_NOCOLOR="1", NO_COLOR="1", PY_COLORS="0",
               VENV=str(Path(sys.executable).parent.parent))
    # one stream: molecule's step lines (stderr) stay in order with ansible's output (stdout)
    res = subprocess.run(["make", "-s", "molecule"], cwd=ROOT, env=env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=900)
    out = res.stdout
    assert res.returncode == 0, out[-4000:]
    for step in ("check", "converge", "idempotence", "verify"):
        assert f"{step}: Executed: Successful" in out, step
    # the host's 19 judged controls pass (power limits: its GPUs report none); the container's 19 host-level ones are skipped
    assert "25 passed, 53 skipped" in out
    # the check step (converge in check mode, before converge) reports a change for every
    # drifted control of the seed host, and for nothing else; the container has none
    check = re.search(r"[> ]check\]?:? Executing(.*?)[> ]check\]?:? Executed", out, re.S)
    assert check, out[-4000:]
    assert changed_controls(check.group(1), "pve-gpu1") == {c for c, s in SEED_EXPECTED.items() if s == "drift"}
    assert changed_controls(check.group(1), "llm-two") == set()
