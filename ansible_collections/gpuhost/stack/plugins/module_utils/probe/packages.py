# -*- coding: utf-8 -*-
"""Debian packages and apt's configuration: what dpkg has installed (and held), and what
unattended-upgrades is told, read as apt itself reads its configuration.
"""
from __future__ import absolute_import, division, print_function

import os
import re

__metaclass__ = type

# The packages of an NVIDIA driver as Debian (nvidia-driver, libnvidia-ml1, libcuda1...),
# Ubuntu (nvidia-driver-550, libnvidia-compute-550, linux-modules-nvidia-550-generic...) and
# NVIDIA's CUDA repository (cuda-drivers, nvidia-open) name them: a newer one under the loaded
# module breaks NVML ("Driver/library version mismatch") until a reboot. Not the container
# toolkit's (nvidia-container-*, libnvidia-container*), nor Ubuntu's nvidia-prime switcher.
DRIVER_PACKAGE = re.compile(r"^(?!nvidia-(container|docker|prime)|libnvidia-container)"
                            r"(nvidia-|libnvidia-|libcuda1|libnvcuvid1|libnvoptix1|cuda-drivers|xserver-xorg-video-nvidia"
                            r"|firmware-nvidia-gsp|linux-(modules|objects|signatures)-nvidia-)")

# apt-config dump prints every item as `Name "value";` (lists as `Name:: "value";`)
APT_ITEM = re.compile(r'^(\S+) "(.*)";$')


def parse_dpkg_status(text, wanted=None):
    """Installed packages in dpkg's status file (deb-status(5)): name -> {version, hold}, for
    the names *wanted* accepts (all by default). A stanza counts where its Status' state is
    installed; its want is hold or not. The name is read first, so the rest of a stanza is
    parsed only for the packages asked for (a host has thousands)."""
    out = {}
    for stanza in text.split("\n\n"):
        m = re.search(r"^Package:\s*(\S+)", stanza, re.M)
        if not m or (wanted is not None and not wanted(m.group(1))):
            continue
        fields = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue                # a continuation line (Description, Conffiles)
            key, dummy, value = line.partition(":")
            fields[key.strip()] = value.strip()
        status = fields.get("Status", "").split()
        if len(status) == 3 and status[2] == "installed":
            out[m.group(1)] = {"version": fields.get("Version"), "hold": status[0] == "hold"}
    return out


def parse_apt_config(text):
    """apt-config dump as items: name -> value, and name -> [values] for lists (Name::)."""
    items, lists = {}, {}
    for line in text.splitlines():
        m = APT_ITEM.match(line.strip())
        if not m:
            continue
        name, value = m.group(1), m.group(2)
        if name.endswith("::"):
            lists.setdefault(name[:-2], []).append(value)
        else:
            items[name] = value
    return items, lists


class PackagesProbe:
    """Probe section: probe_apt (a part of probe.Probe)."""

    def probe_apt(self):
        status = self.read("/var/lib/dpkg/status")
        if status is None:
            return {"dpkg": False}
        # only what the controls read: the facts travel back to the controller
        installed = parse_dpkg_status(status, lambda n: n == "unattended-upgrades" or DRIVER_PACKAGE.match(n))
        drivers = dict((n, p) for n, p in installed.items() if DRIVER_PACKAGE.match(n))
        out = {"dpkg": True, "driver_packages": drivers,
               "unattended_upgrades": "unattended-upgrades" in installed, "config_error": None,
               "periodic_unattended_upgrade": None, "package_blacklist": []}
        if not out["unattended_upgrades"]:
            return out
        # apt's configuration as apt reads it (apt.conf, apt.conf.d in order, #clear, scopes):
        # apt-config prints it and runs nothing of it
        tool = next((t for t in ("/usr/bin/apt-config", "/bin/apt-config") if os.path.exists(self.p(t))), None)
        if tool is None:
            out["config_error"] = "unattended-upgrades is installed but apt-config is not"
            return out
        rc, text, err = self.command([self.p(tool), "dump"])
        if rc != 0:
            out["config_error"] = "apt-config dump: " + ((err or text).strip().splitlines() or ["exit %d" % rc])[0]
            return out
        items, lists = parse_apt_config(text)
        out["periodic_unattended_upgrade"] = items.get("APT::Periodic::Unattended-Upgrade")
        out["package_blacklist"] = lists.get("Unattended-Upgrade::Package-Blacklist", [])
        return out
