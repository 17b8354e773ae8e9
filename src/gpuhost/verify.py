"""gpuhost verify: the testinfra oracle (tests/verify in the collection) run on the hosts."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from .options import BadInput
from .runner import PROJECT


def run_verify(inventory: str | None, limit: str | None, junit: str | None = None) -> int:
    """Run the testinfra suite against the inventory's hosts (or this machine); pytest's exit code."""
    import subprocess

    if inventory and not Path(inventory).exists():
        raise BadInput(f"-i: no inventory at {inventory}")
    hosts = f"ansible://{limit or 'all'}" if inventory else "local://"
    args = [sys.executable, "-m", "pytest", str(PROJECT / "tests/verify"), "-p", "no:cacheprovider",
            "--rootdir", str(PROJECT / "tests/verify"), "-o", "addopts=", f"--hosts={hosts}", "-q", "-rfs"]
    if inventory:
        args.append(f"--ansible-inventory={Path(inventory).resolve()}")
    if junit:
        args.append(f"--junitxml={Path(junit).expanduser().resolve()}")
    import importlib.util
    if inventory and importlib.util.find_spec("xdist"):
        # hosts are read over SSH one test at a time: a few workers read a fleet in parallel,
        # each host's tests on one worker (tests/verify/conftest.py), so a host is read once
        args += ["-n", str(min(8, os.cpu_count() or 1))]
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"), ANSIBLE_HOST_KEY_CHECKING="True",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    # stdin is never read; a CI runner's non-blocking stdin would make every ansible CLI
    # that testinfra starts refuse to run ("Ansible requires blocking IO").
    rc = subprocess.run(args, env=env, cwd=PROJECT, stdin=subprocess.DEVNULL).returncode
    return {0: 0, 1: 2}.get(rc, 1 if rc in (4, 5) else 3)
