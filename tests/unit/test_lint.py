"""ansible-lint's production profile reports nothing on what the checkout adds around the
collection (its playbooks/, molecule/, inventory/; the skips in .ansible-lint each say why),
run plain, as a clone has it: the checkout's ansible.cfg finds gpuhost.stack, nothing in the
environment does. The collection itself is linted as it ships, from its built tarball with
no config of the checkout's (tests/audit/test_awx_project.py)."""
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_ansible_lint_production_profile_is_clean():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(NO_COLOR="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    res = subprocess.run([str(Path(sys.executable).parent / "ansible-lint"), "--offline"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "Profile 'production' was required, and it passed." in res.stderr, res.stderr[-2000:]
