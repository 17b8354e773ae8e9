# -*- coding: utf-8 -*-
"""Proxmox VE's guests: container configs, and the PCI devices VMs are given.
"""
from __future__ import absolute_import, division, print_function

import os
import re

from ansible_collections.gpuhost.stack.plugins.module_utils.cpulist import parse_cpulist
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.units import UDEV_DIRS

__metaclass__ = type

# modules-load.d(5): *.conf by name across these directories, an earlier one's shadowing a
# later one's of the same name (Debian links /etc/modules-load.d/modules.conf to ../modules)
MODULES_LOAD_DIRS = ("/etc/modules-load.d", "/run/modules-load.d", "/usr/local/lib/modules-load.d",
                     "/lib/modules-load.d", "/usr/lib/modules-load.d")


def runs_uvm_modprobe(command):
    """A command that runs nvidia-modprobe with -u, which loads nvidia-uvm and, with -c,
    makes /dev/nvidia-uvm and -tools (NVIDIA/nvidia-modprobe nvidia-modprobe.c main)."""
    words = command.replace('"', " ").replace("'", " ").split()
    return any(w.endswith("nvidia-modprobe") for w in words) and any(
        w == "--unified-memory" or re.match(r"^-[a-z]*u", w) for w in words)


class ProxmoxProbe:
    """Probe sections: probe_lxc, probe_vms, probe_uvm_boot (a part of probe.Probe)."""

    def probe_lxc(self):
        confs = {}
        d = "/etc/pve/lxc"
        if not os.path.isdir(self.p(d)):
            return None
        for path in self.glob(d + "/*.conf"):
            vmid = os.path.basename(path)[:-5]
            if vmid.isdigit():
                confs[vmid] = self.read(self.rel(path))
        # a running container's CPU set as its cgroup has it (pve-container: lxc/<vmid> under
        # the cgroup2 root, /sys/fs/cgroup on a pure cgroup v2 host, /sys/fs/cgroup/unified on
        # hybrid): the set written there (LXC writes the config's raw key, pvestatd its own
        # choice), else, where none is written, the one it inherits (cgroup-v2.rst: an empty
        # cpuset.cpus uses the parent's)
        cpusets = {}
        for vmid in confs:
            for base in ("/sys/fs/cgroup/lxc/", "/sys/fs/cgroup/unified/lxc/"):
                written = self.read1(base + vmid + "/cpuset.cpus")
                effective = self.read1(base + vmid + "/cpuset.cpus.effective")
                if written or effective is not None:
                    cpusets[vmid] = written or effective
                    break
        return {"configs": confs, "cpusets": cpusets, "topology": self.cpu_topology() if confs else None}

    def cpu_topology(self):
        """Where each online CPU is: its NUMA node's CPU list and its core's SMT siblings
        (Documentation/ABI/stable/sysfs-devices-system-cpu: topology/thread_siblings_list)."""
        nodes = {}
        for path in self.glob("/sys/devices/system/node/node[0-9]*"):
            cpus = self.read1(self.rel(path) + "/cpulist")
            if cpus is not None:
                nodes[os.path.basename(path)[4:]] = cpus
        online = self.read1("/sys/devices/system/cpu/online") or ""
        cores, seen = [], set()
        for cpu in sorted(set(parse_cpulist(online))):
            if cpu in seen:
                continue
            siblings = self.read1("/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list" % cpu)
            group = sorted(set(parse_cpulist(siblings or str(cpu)))) or [cpu]
            seen.update(group)
            cores.append(group)
        return {"nodes": nodes, "online": online, "cores": cores}

    def probe_uvm_boot(self):
        """What makes nvidia-uvm and its /dev nodes at the next boot, on a Proxmox host (its
        containers need them before pve-guests.service starts them): the modules
        systemd-modules-load loads (modules-load.d(5)), udev rules that run nvidia-modprobe -u,
        and enabled units that run it. Read from files only; nothing is run."""
        if not os.path.isdir(self.p("/etc/pve/lxc")):
            return None
        modules = {}
        for dummy, path in self.conf_files(MODULES_LOAD_DIRS):
            for line in (self.read(path) or "").splitlines():
                word = line.strip()
                if word and word[0] not in "#;":
                    # the whole line names the module (modules-load.c); kmod reads - as _
                    modules.setdefault(word.replace("-", "_"), path)
        rules = []
        for dummy, path in self.conf_files(UDEV_DIRS, "*.rules"):
            for line in (self.read(path) or "").replace("\\\n", " ").splitlines():
                if not line.lstrip().startswith("#") and any(
                        runs_uvm_modprobe(cmd) for cmd in re.findall(r'RUN\+?="([^"]*)"', line)):
                    # a rule on KERNEL=="nvidia_uvm" fires only once something loads the module
                    rules.append({"path": path, "waits_for_uvm": bool(
                        re.search(r'(KERNEL|DEVPATH)=="[^"]*nvidia[_-]uvm', line))})
                    break
        units = []
        for link in self.glob("/etc/systemd/system/*.target.wants/*.service"):
            name = os.path.basename(link)
            text = None
            for d in ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
                      "/lib/systemd/system", "/usr/lib/systemd/system"):
                text = self.read(d + "/" + name)
                if text is not None:
                    break
            execs = re.findall(r"^\s*ExecStart\s*=\s*(.*)$", text or "", re.M)
            if any(runs_uvm_modprobe(cmd) for cmd in execs):
                before = " ".join(re.findall(r"^\s*Before\s*=\s*(.*)$", text or "", re.M)).split()
                units.append({"name": name, "before_guests": "pve-guests.service" in before})
        return {"modules_load": modules, "rules": rules, "units": sorted(units, key=lambda u: u["name"])}

    def probe_vms(self):
        """Proxmox VMs given PCI devices (hostpciN in their main section): vfio-pci binds
        them only when the VM starts, so the host passes devices on even while none is bound."""
        vms = {}
        for path in self.glob("/etc/pve/qemu-server/*.conf"):
            vmid = os.path.basename(path)[:-5]
            lines = []
            for line in (self.read(self.rel(path)) or "").splitlines():
                if line.startswith("["):
                    break
                if re.match(r"^hostpci\d+\s*:", line):
                    lines.append(line.strip())
            if lines:
                vms[vmid] = lines
        return {"hostpci": vms}
