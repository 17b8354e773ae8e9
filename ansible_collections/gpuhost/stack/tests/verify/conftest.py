"""`gpuhost verify`: the desired state of every control, read directly on each host.

These tests do their own reads (sysfs, procfs, lspci, nvidia-smi, the files on disk)
through pytest-testinfra; they share nothing with the roles' facts module or judgement,
so they are a second opinion on what the roles report. Run them with
`gpuhost verify -i INVENTORY`, or as molecule's verify step.
"""
from __future__ import annotations

import base64
import json
import re
import shlex

import pytest


# Run on the host by Reads.prefetch: each command as sshd runs one (the user's login shell,
# `-c`), its exit status and both streams kept apart, all of them in one SSH round trip.
# Only the standard library of the host's own python3; commands arrive as base64 JSON, so no
# quoting of theirs meets a shell on the way.
BATCH = """
import base64, json, os, pwd, subprocess, sys
shell = sys.argv[2] if len(sys.argv) > 2 else pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"
out = []
for command in json.loads(base64.b64decode(sys.argv[1])):
    p = subprocess.run([shell, "-c", command], stdin=subprocess.DEVNULL, capture_output=True)
    out.append([p.returncode, base64.b64encode(p.stdout).decode(), base64.b64encode(p.stderr).decode()])
print(json.dumps(out))
"""


class Reads:
    """A host's reads, each made once for the whole verify run: the oracle only reads and the
    host does not change while it does, so a command or file several tests ask for is one
    SSH round trip a worker, not one a test. The reads every host's tests make come in one
    round trip (``prefetch``) when its View is made. Everything else is testinfra's host as
    it is."""

    def __init__(self, host, memo: dict):
        self._host = host
        self._memo = memo

    def run(self, command: str):
        if command not in self._memo:
            self._memo[command] = self._host.run(command)
        return self._memo[command]

    def check_output(self, command: str) -> str:
        """testinfra's check_output, from the read made once."""
        out = self.run(command)
        assert out.rc == 0, f"Unexpected exit code {out.rc} for {out}"
        return out.stdout.rstrip("\r\n")

    def exists(self, command: str) -> bool:
        """Whether *command* is on the PATH (POSIX `command -v`, as testinfra's exists)."""
        return self.run(f"command -v {shlex.quote(command)}").rc == 0

    def file(self, path: str) -> "ReadFile":
        return ReadFile(self, path)

    def prefetch(self, commands) -> None:
        """Run every command not read yet in one SSH round trip, as if each had been run on its
        own. Where the batch itself fails (no python3 on the host), nothing is kept and
        each read is made alone when a test asks for it, as before."""
        todo = [c for c in dict.fromkeys(commands) if c not in self._memo]
        if not todo:
            return
        arg = base64.b64encode(json.dumps(todo).encode()).decode()
        backend = self._host.backend
        # testinfra runs a local command with /bin/sh (subprocess's shell), a remote one
        # with the login shell sshd starts
        shell = " /bin/sh" if backend.NAME == "local" else ""
        res = self._host.run(f"python3 -c {shlex.quote(BATCH)} {arg}{shell}")
        try:
            results = json.loads(res.stdout) if res.rc == 0 else None
        except ValueError:
            results = None
        if not isinstance(results, list) or len(results) != len(todo):
            return
        for command, (rc, out, err) in zip(todo, results):
            self._memo[command] = backend.result(rc, backend.encode(command), base64.b64decode(out), base64.b64decode(err))

    def __getattr__(self, name: str):
        return getattr(self._host, name)


class ReadFile:
    """The two things the tests read of a file, as testinfra's File reads them (`test -e`,
    `cat --`), each once a run."""

    def __init__(self, reads: Reads, path: str):
        self._reads, self.path = reads, path

    @property
    def exists(self) -> bool:
        return self._reads.run(f"test -e {shlex.quote(self.path)}").rc == 0

    @property
    def content_string(self) -> str:
        out = self._reads.run(f"cat -- {shlex.quote(self.path)}")
        if out.rc != 0:
            raise RuntimeError(f"Unexpected output {out}")
        return out.stdout


CPU = "/sys/devices/system/cpu"

# The reads the tests make on nearly every host, written exactly as the tests (and File:
# `test -e`, `cat --`; exists: `command -v`) write them: View fetches them in a round trip or
# two (the 27 hosts of tests/specs: 1,723 SSH commands before, 574 with these). A read not
# listed is a round trip of its own when a test asks; a listed one no test asks for costs its
# run on the host.
# tests/unit/test_verify_reads.py checks that each is a read some test makes.
EVERY_HOST = (
    # View's own
    "cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'",
    "test -e /run/systemd/container",
    "cat -- /proc/cmdline",
    "command -v pveversion",
    "lspci -D -d 10de: -n 2>/dev/null",
    # the controls a container has too: the driver, its packages
    "command -v nvidia-smi",
    "nvidia-smi --query-gpu=driver_version --format=csv,noheader",
    "cat -- /proc/driver/nvidia/version",
    "command -v dpkg-query",
    "dpkg-query -W -f='${Package} ${Status}\\n'",
)
# on a host (not a container), whose host-level controls read these
HOST_LEVEL = (
    "test -e /etc/pve/lxc",
    "cat -- /sys/devices/system/cpu/offline",
    "cat -- /sys/devices/system/cpu/present",
    "cat -- /sys/devices/system/cpu/possible",
    "cat -- /proc/sys/kernel/osrelease",
    "ls /sys/class/iommu 2>/dev/null",
    "ls /sys/block",
    "ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null",
    "cat /sys/module/zfs/parameters/zfs_arc_max 2>/dev/null",
    "lspci -D -vv",
    "for d in /sys/bus/pci/devices/*; do echo \"${d##*/} $(readlink $d/driver 2>/dev/null)\"; done",
    "for d in /sys/bus/pci/devices/*; do [ \"$(cat $d/vendor)\" = 0x10de ] && "
    "case \"$(cat $d/class)\" in 0x0680*) echo ${d##*/};; esac; done; true",
    "ls /sys/bus/pci/drivers/vfio-pci 2>/dev/null | grep -c :",
    "ls /etc/pve/qemu-server/*.conf 2>/dev/null",
    # the CPU's
    "grep -m1 ^vendor_id /proc/cpuinfo",
    "grep -m1 ^flags /proc/cpuinfo",
    f"cat {CPU}/smt/control 2>/dev/null",
    f"cat {CPU}/cpufreq/policy*/scaling_governor 2>/dev/null",
    f"cat {CPU}/cpufreq/policy*/scaling_driver 2>/dev/null",
    f"ls -d {CPU}/cpufreq/policy[0-9]* 2>/dev/null",
    f"ls -d {CPU}/cpu0/cpuidle/state[0-9]* 2>/dev/null",
    f"grep -H . {CPU}/cpu[0-9]*/cpuidle/state[0-9]*/latency {CPU}/cpu[0-9]*/cpuidle/state[0-9]*/disable",
    f"for p in {CPU}/cpufreq/policy[0-9]*; do echo $(cat $p/scaling_max_freq) $(cat $p/cpuinfo_max_freq)"
    f" $(cat $p/boost 2>/dev/null || echo -); done",
    f"cat {CPU}/cpufreq/boost 2>/dev/null; cat {CPU}/intel_pstate/no_turbo 2>/dev/null | sed 's/^/no_turbo=/'",
    # the GPUs' (nvidia-smi answers "command not found" where there is none)
    "nvidia-smi -L",
    "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader",
    "nvidia-smi --query-gpu=pci.bus_id,power.limit,enforced.power.limit,power.default_limit,"
    "power.min_limit,power.max_limit,persistence_mode --format=csv,noheader,nounits",
    "nvidia-smi --query-gpu=pci.bus_id,memory.total --format=csv,noheader,nounits",
    "nvidia-smi --query-gpu=pci.bus_id,compute_mode,mig.mode.current,mig.mode.pending,"
    "ecc.mode.current,ecc.mode.pending --format=csv,noheader",
    "nvidia-smi --query-gpu=fabric.state,fabric.status --format=csv,noheader",
    "nvidia-smi --query-gpu=pci.bus_id,gpu_recovery_action,remapped_rows.pending,"
    "retired_pages.pending --format=csv,noheader",
)
# and for each GPU, once its address is known
EVERY_GPU = (
    "od -An -tx1 -N4 /sys/bus/pci/devices/{bdf}/config",
    "cat -- /sys/bus/pci/devices/{bdf}/numa_node",
)


class View:
    """What a test needs to know about the host before judging it."""

    def __init__(self, host):
        self._memo: dict = {}
        host = self.host = Reads(host, self._memo)
        host.prefetch(EVERY_HOST)
        env = host.run("cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'").stdout
        self.container = bool(re.search(r"^container=", env, re.M)) or host.file("/run/systemd/container").exists
        self.cmdline = host.file("/proc/cmdline").content_string.split()
        self.params = {p.split("=", 1)[0]: (p.split("=", 1)[1] if "=" in p else "") for p in self.cmdline}
        self.proxmox = host.exists("pveversion")
        gpus = host.run("lspci -D -d 10de: -n 2>/dev/null").stdout.splitlines()
        self.gpus = [l.split()[0] for l in gpus if re.search(r" 03(00|02): ", l)]
        if not self.container:
            host.prefetch([*HOST_LEVEL, *(c.format(bdf=b) for b in self.gpus for c in EVERY_GPU)])

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
