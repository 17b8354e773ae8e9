# -*- coding: utf-8 -*-
"""NVIDIA Fabric Manager on the host: whether its unit is installed, and what systemd says of
it now.
"""
from __future__ import absolute_import, division, print_function

import os

# systemd.unit(5)'s system unit load path, the administrator's first: the one units.py reads units by
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.units import UNIT_DIRS

__metaclass__ = type

FM_UNIT = "nvidia-fabricmanager.service"


class FabricProbe:
    """Probe section: probe_fabricmanager (a part of probe.Probe)."""

    def probe_fabricmanager(self):
        unit = None
        for d in UNIT_DIRS:
            if os.path.exists(self.p(d + "/" + FM_UNIT)):
                unit = d + "/" + FM_UNIT
                break
        # its packages are in the apt section (driver_packages: the version must be the driver's)
        out = {"unit_file": unit, "active": None, "started_this_boot": None}
        if unit is None:
            return out
        # the manager's own state, read and nothing started
        out["active"], out["started_this_boot"] = self.unit_state(FM_UNIT)
        return out
