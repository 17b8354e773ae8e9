# -*- coding: utf-8 -*-
"""NVIDIA Fabric Manager on the host: whether its unit and daemon are installed, and what
systemd says of it now.
"""
from __future__ import absolute_import, division, print_function

import os

__metaclass__ = type

FM_UNIT = "nvidia-fabricmanager.service"
# systemd.unit(5)'s system unit load path, the administrator's first
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
             "/usr/lib/systemd/system", "/lib/systemd/system")


class FabricProbe:
    """Probe section: probe_fabricmanager (a part of probe.Probe)."""

    def probe_fabricmanager(self):
        unit = None
        for d in UNIT_DIRS:
            if os.path.exists(self.p(d + "/" + FM_UNIT)):
                unit = d + "/" + FM_UNIT
                break
        # its packages are in the apt section (driver_packages: the version must be the driver's)
        out = {"unit_file": unit, "binary": os.path.exists(self.p("/usr/bin/nv-fabricmanager")), "active": None}
        if unit is None:
            return out
        # systemctl is-active: active, activating, inactive, failed... (systemctl(1)); a read of
        # the manager's state, as `systemctl status` shows it, and nothing started
        for cand in ("/usr/bin/systemctl", "/bin/systemctl"):
            if os.path.exists(self.p(cand)):
                rc, text, err = self._run([self.p(cand), "is-active", FM_UNIT])
                state = text.strip().splitlines()[0] if text.strip() else ""
                out["active"] = state if state.isalpha() else None
                break
        return out
