# -*- coding: utf-8 -*-
"""Proxmox VE's guests: container configs, and the PCI devices VMs are given.
"""
from __future__ import absolute_import, division, print_function

import os
import re

__metaclass__ = type

class ProxmoxProbe:
    """Probe sections: probe_lxc, probe_vms (a part of probe.Probe)."""

    def probe_lxc(self):
        confs = {}
        d = "/etc/pve/lxc"
        if not os.path.isdir(self.p(d)):
            return None
        for path in self.glob(d + "/*.conf"):
            vmid = os.path.basename(path)[:-5]
            if vmid.isdigit():
                confs[vmid] = self.read(self.rel(path))
        return {"configs": confs}

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
