"""`gpuhost verify`: the desired state of every control, read directly on each host.

These tests do their own reads (sysfs, procfs, lspci, nvidia-smi, the files on disk)
through pytest-testinfra; they share nothing with the roles' facts module or judgement,
so they are a second opinion on what the roles report. Run them with
`gpuhost verify -i INVENTORY`, or as molecule's verify step.
"""
from __future__ import annotations

import re

import pytest


class Reads:
    """A host's reads, each made once for the whole verify run: the oracle only reads and the
    host does not change while it does, so a command or file several tests ask for is one
    SSH round trip a worker, not one a test (the seed host and its container: 144 SSH
    commands before, 133 after, with verify's two workers). Everything else is testinfra's
    host as it is."""

    def __init__(self, host, memo: dict):
        self._host = host
        self._memo = memo

    def _once(self, key: tuple, read):
        if key not in self._memo:
            self._memo[key] = read()
        return self._memo[key]

    def run(self, command: str):
        return self._once(("run", command), lambda: self._host.run(command))

    def exists(self, command: str) -> bool:
        return self._once(("exists", command), lambda: self._host.exists(command))

    def file(self, path: str) -> "ReadFile":
        return ReadFile(self, path)

    def __getattr__(self, name: str):
        return getattr(self._host, name)


class ReadFile:
    """The two things the tests read of a file, each once a run."""

    def __init__(self, reads: Reads, path: str):
        self._reads, self.path = reads, path

    @property
    def exists(self) -> bool:
        return self._reads._once(("file-exists", self.path), lambda: self._reads._host.file(self.path).exists)

    @property
    def content_string(self) -> str:
        return self._reads._once(("file-content", self.path), lambda: self._reads._host.file(self.path).content_string)


class View:
    """What a test needs to know about the host before judging it."""

    def __init__(self, host):
        self._memo: dict = {}
        host = self.host = Reads(host, self._memo)
        env = host.run("cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'").stdout
        self.container = bool(re.search(r"^container=", env, re.M)) or host.file("/run/systemd/container").exists
        self.cmdline = host.file("/proc/cmdline").content_string.split()
        self.params = {p.split("=", 1)[0]: (p.split("=", 1)[1] if "=" in p else "") for p in self.cmdline}
        self.proxmox = host.exists("pveversion")
        gpus = host.run("lspci -D -d 10de: -n 2>/dev/null").stdout.splitlines()
        self.gpus = [l.split()[0] for l in gpus if re.search(r" 03(00|02): ", l)]

    def read(self, path: str) -> str:
        return self.host.file(path).content_string.strip()

    def skip(self, why: str):
        """What does not apply is skipped, naming the host and the reason; never a pass."""
        pytest.skip(f"{self.name}: {why}")

    @property
    def name(self) -> str:
        backend = self.host.backend
        return str(getattr(backend, "host", None) or backend.get_hostname())

    def setting(self, name: str, default):
        """The inventory's value of a gpuhost parameter for this host (its default on this
        machine or without an inventory): a host set to 1000 us is judged against 1000 us."""
        try:
            value = self.host.ansible.get_variables().get(name, default)
        except Exception:       # not an Ansible-backed host (local://): the defaults
            return default
        if isinstance(default, int) and not isinstance(value, bool):
            try:
                return int(value)
            except (TypeError, ValueError):
                return default
        return value


# one View a host for the whole run: what it reads (is it a container, its command line,
# Proxmox, its GPUs) does not change while verify runs, and every read is an SSH round trip
_VIEWS: dict[str, View] = {}


@pytest.fixture
def view(host):
    backend = host.backend
    name = str(getattr(backend, "host", None) or backend.get_hostname())
    if name not in _VIEWS:
        _VIEWS[name] = View(host)
    cached = _VIEWS[name]
    cached.host = Reads(host, cached._memo)     # this test's connection; what was read once stays
    return cached


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (verify reads a fleet with a few workers) each host's tests go to
    one worker, so its View and its reads are made once, not once a worker (27 lab hosts on
    2 workers: 1,899 SSH commands before). xdist's loadscope scheduling, with the host (the
    test's parameter) as the scope: not xdist_group marks and --dist loadgroup, which stop
    grouping, silently, on pytest 9.2's structured node IDs (pytest-dev/pytest-xdist#1386)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByHost(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid.rsplit("[", 1)[-1]

    return ByHost(config, log)


def host_level(view: View) -> bool:
    """Host-level controls hold for the machine, not for a container on it."""
    return not view.container
