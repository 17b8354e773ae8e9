# -*- coding: utf-8 -*-
"""Read everything a GPU host can tell about its system stack, in one pass.

Runs on the managed host under its own Python 3 with the standard library only, so the
facts module ships it as module_utils; unit tests import it directly. Nothing here
writes. Every section is read independently: what cannot be read is reported in
``errors`` with the reason, never guessed. One module per part of the host (boot, cpu,
sysctl, devices, proxmox, units) and per file format (shellvars, grubcfg, pciconfig).
"""
from __future__ import absolute_import, division, print_function

import glob
import os
import re
import subprocess

from ansible_collections.gpuhost.stack.plugins.module_utils.probe.attribute import read_attribute
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.boot import REFRESH_JOURNAL, BootProbe  # noqa: F401
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.cpu import CpuProbe
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.cuda import CudaProbe
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.devices import SMI_FIELDS, DevicesProbe
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.packages import PackagesProbe
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.grubcfg import grub_default_kernel, grub_entry_ids, grub_menu, grubenv_values, version_key  # noqa: F401
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.pciconfig import parse_config  # noqa: F401
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.proxmox import ProxmoxProbe
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.shellvars import GRUB_VARS, ShellValueError, read_shell_assignments, shell_scan  # noqa: F401
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.sysctl import SysctlProbe
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.units import UnitsProbe
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.fabric import FabricProbe
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.zfs import ZfsProbe
# what the controls declare they need read back (made from their declarations)
from ansible_collections.gpuhost.stack.plugins.module_utils.watchlist import OWNED_UNITS, WATCHED_SYSCTLS  # noqa: F401

__metaclass__ = type
__all__ = ["Probe", "REFRESH_JOURNAL", "GRUB_VARS", "ShellValueError", "read_shell_assignments", "shell_scan",
           "grub_default_kernel", "grub_entry_ids", "grub_menu", "grubenv_values", "version_key", "parse_config",
           "OWNED_UNITS", "WATCHED_SYSCTLS", "start_process", "read_attribute"]


class Probe(BootProbe, CpuProbe, CudaProbe, DevicesProbe, FabricProbe, PackagesProbe, ProxmoxProbe, SysctlProbe, UnitsProbe, ZfsProbe):
    """Reads under *root* ('/' on a real host; a directory tree in unit tests)."""

    def __init__(self, root="/", run=None, cuda_paths=(), start=None):
        self.root = root.rstrip("/") or ""
        self.extra_cuda_paths = tuple(cuda_paths or ())
        self.errors = {}
        self._run = run or _run
        # start(argv) -> a running subprocess.Popen: given (the facts module does), the slow
        # tools are started before the file reads and collected where a section asks for them
        self._start = start
        self._started = {}

    # ---- small readers ---------------------------------------------------------------
    def p(self, path):
        return self.root + path

    def read(self, path, default=None):
        try:
            if path.startswith("/sys/"):
                return read_attribute(self.p(path)).decode("utf-8", "replace")
            with open(self.p(path), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except (IOError, OSError):
            return default

    def read1(self, path, default=None):
        text = self.read(path)
        return text.strip() if text is not None else default

    def glob(self, pattern):
        return sorted(glob.glob(self.p(pattern)))

    def conf_files(self, dirs, pattern="*.conf"):
        """Configuration files as sysctl.d(5), modprobe.d(5), modules-load.d(5) and udev read
        them: by file name across *dirs*, a name in an earlier directory shadowing the same name
        in a later one; [(name, path relative to the root)] in name order."""
        found = {}
        for d in dirs:
            for path in self.glob(d + "/" + pattern):
                found.setdefault(os.path.basename(path), self.rel(path))
        return [(name, found[name]) for name in sorted(found)]

    def rel(self, path):
        return path[len(self.root):] if self.root and path.startswith(self.root) else path

    def command(self, argv):
        """(rc, stdout, stderr) of a tool: the run started early for these very arguments, else a run now."""
        proc = self._started.pop(tuple(argv), None)
        if proc is None:
            return self._run(argv)
        out, err = proc.communicate()
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def _start_early(self):
        """nvidia-smi's per-GPU query and its two P2P reads, started before the file reads: on
        a GPU host each call takes from a tenth of a second to seconds (NVML opens every GPU,
        each initialised anew without persistence mode), and they do not depend on each other
        or on anything read here. Each is read-only; probe_nvidia asks for the same arguments."""
        smi = self.nvidia_smi()
        if self._start is None or smi is None:
            return
        runs = [self.smi_query(smi, SMI_FIELDS)]
        if len(self.glob("/proc/driver/nvidia/gpus/*")) >= 2:
            runs += [self.smi_p2p(smi, mode) for mode in ("r", "w")]
        for argv in runs:
            try:
                self._started[tuple(argv)] = self._start(argv)
            except OSError:
                pass        # asked again, and reported, where the section runs it

    def _reap_early(self):
        """A run started early that no section asked for (the query failed, fewer GPUs answered)."""
        for proc in self._started.values():
            try:
                proc.kill()
            except OSError:
                pass
            proc.communicate()
        self._started = {}

    def section(self, name, fn):
        try:
            return fn()
        except Exception as exc:  # reported, not raised: other sections still count
            self.errors[name] = "%s: %s" % (type(exc).__name__, exc)
            return None

    # ---- sections --------------------------------------------------------------------
    def gather(self):
        facts = {}
        self._start_early()
        try:
            self._gather_sections(facts)
        finally:
            self._reap_early()
        facts["errors"] = self.errors
        facts["is_root"] = os.geteuid() == 0
        return facts

    def _gather_sections(self, facts):
        for name in ("os", "container", "cpu", "cpufreq", "cpuidle", "numa", "sysctl", "boot",
                     "iommu", "pci", "lockdown", "nvidia", "kernel_log", "lxc", "uvm_boot", "vms", "block",
                     "scheduler_rules", "units", "apt", "zfs", "fabricmanager", "cuda"):
            facts[name] = self.section(name, getattr(self, "probe_" + name))

    def probe_os(self):
        info = {}
        for line in (self.read("/etc/os-release") or self.read("/usr/lib/os-release") or "").splitlines():
            m = re.match(r'^([A-Z_]+)=("?)(.*)\2$', line.strip())
            if m:
                info[m.group(1)] = m.group(3)
        pve = None
        if os.path.exists(self.p("/usr/bin/pveversion")):
            # pveversion prints PVE::pvecfg::version(), which pve-manager's build writes into
            # pvecfg.pm as a literal ("sub version { return '8.2.4'; }"): read it, not run Perl
            m = re.search(r"sub\s+version\s*\{\s*return\s+'(\d+[.\d]*)",
                          self.read("/usr/share/perl5/PVE/pvecfg.pm") or "")
            if not m:
                out = self.command([self.p("/usr/bin/pveversion")])
                m = re.search(r"pve-manager/(\d+[.\d]*)", out[1] or "")
            pve = m.group(1) if m else None
        hostname = self.read1("/proc/sys/kernel/hostname") or self.read1("/etc/hostname")
        return {"id": info.get("ID"), "version_id": info.get("VERSION_ID"), "pretty_name": info.get("PRETTY_NAME"),
                "codename": info.get("VERSION_CODENAME"),
                "machine": os.uname()[4],
                "proxmox_ve": pve, "hostname": hostname}

    def probe_container(self):
        env = self.read("/proc/1/environ")
        kind = None
        if env is None:
            if os.geteuid() != 0:
                kind = None  # unreadable without root; the markers below still tell
        else:
            for var in env.split("\0"):
                if var.startswith("container="):
                    kind = var.split("=", 1)[1]
        if kind is None:
            kind = self.read1("/run/systemd/container") or self.read1("/run/host/container-manager")
        if kind is None and os.path.exists(self.p("/.dockerenv")):
            kind = "docker"
        return {"kind": kind, "in_container": bool(kind)}


def start_process(argv):
    """A tool started in the C locale (its output as the parsers read it), its output piped."""
    env = dict(os.environ, LC_ALL="C")
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)


def _run(argv):
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate()
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    except OSError as exc:
        return 127, "", str(exc)
