"""ansible-lint's production profile reports nothing on the collection (the skips in
.ansible-lint each say why)."""
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_ansible_lint_production_profile_is_clean():
    # the checkout's top holds ansible_collections/gpuhost/stack: the roles' gpuhost.stack.* names resolve there
    env = dict(os.environ, NO_COLOR="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT))
    res = subprocess.run([str(Path(sys.executable).parent / "ansible-lint"), "--profile", "production", "--offline"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
