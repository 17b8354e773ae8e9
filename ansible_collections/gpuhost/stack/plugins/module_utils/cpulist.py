# -*- coding: utf-8 -*-
"""The kernel's CPU list format (Documentation/admin-guide/cgroup-v2.rst, "cpuset.cpus";
lib/bitmap-str.c, bitmap_parselist), read on hosts by the probe and on the controller by
lxc.cpuset's judgement. A module of its own so that judging a host does not load the probe.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


def parse_cpulist(text):
    """The kernel's CPU list format (0-31,64-95) as CPU numbers; bounded by the kernel's
    own limit (NR_CPUS at most 8192)."""
    out = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, dummy, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError("not a CPU list: %r" % text[:80])
        out += range(int(lo), min(int(hi or lo), 8191) + 1)
    return out
