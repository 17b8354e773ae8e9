# -*- coding: utf-8 -*-
"""This boot's ID (random per boot: Documentation/admin-guide/sysctl/kernel.rst, random),
which gpuhost's records on a host and its runs on a controller carry: a record of another
boot is history."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


def boot_id():
    """The running kernel's boot ID, or "" where it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except (IOError, OSError):
        return ""
