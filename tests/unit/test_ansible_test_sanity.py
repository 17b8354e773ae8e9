"""The collection passes ansible-test sanity: validate-modules (every module's documentation
against its argument spec), the import tests (module_utils and plugins import where Ansible
loads them), compile, yamllint, ansible-doc, the changelog and the rest ansible-test runs.
pylint runs in `make sanity`; it adds a quarter of a minute here and lints the same files."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ansible_test_sanity_passes_on_the_collection():
    sys.path.insert(0, str(ROOT / "tools"))
    from ansible_test_sanity import SUITE
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "ansible_test_sanity.py"), "--offline", *SUITE],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    ran = [line for line in res.stdout.splitlines() if line.startswith("Running sanity test")]
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    for name in ("validate-modules", "import", "compile", "yamllint", "ansible-doc", "changelog"):
        assert any(f'"{name}"' in line for line in ran), (name, ran)
