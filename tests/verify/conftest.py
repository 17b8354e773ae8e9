"""`gpuhost verify`: the desired state of every control, read directly on each host.

These tests do their own reads (sysfs, procfs, lspci, nvidia-smi, the files on disk)
through pytest-testinfra; they share nothing with the roles' facts module or judgement,
so they are a second opinion on what the roles report. Run them with
`gpuhost verify -i INVENTORY`, or as molecule's verify step.
"""
from __future__ import annotations

import re

import pytest


class View:
    """What a test needs to know about the host before judging it."""

    def __init__(self, host):
        self.host = host
        env = host.run("cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'").stdout
        self.container = bool(re.search(r"^container=", env, re.M)) or host.file("/run/systemd/container").exists
        self.cmdline = host.file("/proc/cmdline").content_string.split()
        self.params = {p.split("=", 1)[0]: (p.split("=", 1)[1] if "=" in p else "") for p in self.cmdline}
        self.proxmox = host.exists("pveversion")
        gpus = host.run("lspci -D -d 10de: -n 2>/dev/null").stdout.splitlines()
        self.gpus = [l.split()[0] for l in gpus if re.search(r" 03(00|02): ", l)]

    def read(self, path: str) -> str:
        return self.host.file(path).content_string.strip()


@pytest.fixture
def view(host):
    return View(host)


def host_level(view: View) -> bool:
    """Host-level controls hold for the machine, not for a container on it."""
    return not view.container
