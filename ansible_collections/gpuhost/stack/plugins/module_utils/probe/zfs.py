# -*- coding: utf-8 -*-
"""The ZFS ARC next to the host's memory: the zfs module's limit live and as the next boot
sets it (modprobe.d, and the initramfs where the module loads from it).
"""
from __future__ import absolute_import, division, print_function

import os
import re

__metaclass__ = type

# modprobe.d(5): *.conf by name across these directories, a name in an earlier one shadowing
# the same name later; a module's `options` lines add up in that order, the last assignment
# of a parameter winning (the kernel parses them in order)
MODPROBE_DIRS = ("/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/lib/modprobe.d",
                 "/usr/lib/modprobe.d")


def options_in(text, module):
    """(parameter, value, first line, last line) of *module*'s options lines in a modprobe.d
    text. As kmod reads it (libkmod-config.c): a line ending in a backslash continues on the
    next, and only a line that starts with # is a comment (a # later on a line is passed on
    with the options, and the kernel ignores a parameter it does not know)."""
    out = []
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        start, line = n + 1, lines[n]
        while line.endswith("\\") and n + 1 < len(lines):      # a continued line
            n += 1
            line = line[:-1] + " " + lines[n]
        n += 1
        words = [] if line.startswith("#") else line.split()
        if len(words) >= 3 and words[0] == "options" and words[1].replace("-", "_") == module:
            for word in words[2:]:
                name, dummy, value = word.partition("=")
                out.append((name, value, start, n))
    return out


class ZfsProbe:
    """Probe section: probe_zfs (a part of probe.Probe)."""

    def probe_zfs(self):
        mem = re.search(r"^MemTotal:\s+(\d+) kB", self.read("/proc/meminfo") or "", re.M)
        param = self.read1("/sys/module/zfs/parameters/zfs_arc_max")
        out = {"loaded": param is not None, "mem_total": int(mem.group(1)) * 1024 if mem else None}
        if param is None:
            return out
        arcstats = self.read("/proc/spl/kstat/zfs/arcstats") or ""
        stat = dict((m.group(1), int(m.group(2))) for m in re.finditer(r"^(c_max|c_min)\s+\d+\s+(\d+)$", arcstats, re.M))
        arc_min = self.read1("/sys/module/zfs/parameters/zfs_arc_min")
        out.update({"arc_max": int(param) if param.isdigit() else None,
                    "arc_min": int(arc_min) if arc_min and arc_min.isdigit() else None,
                    # the limits in effect: a zfs_arc_max at or below the ARC's minimum is ignored
                    "c_max": stat.get("c_max"), "c_min": stat.get("c_min"),
                    "version": self.read1("/sys/module/zfs/version")})
        setting, where, arc_min_setting = None, None, None
        for name, rel in self.conf_files(MODPROBE_DIRS):
            for key, value, line, last in options_in(self.read(rel) or "", "zfs"):
                if key == "zfs_arc_max":
                    setting, where = value, {"path": rel, "line": line, "continued": last != line}
                elif key == "zfs_arc_min":
                    arc_min_setting = value
        out["persisted"] = setting
        out["persisted_min"] = arc_min_setting
        out["persisted_in"] = where
        if where:
            text = self.read(where["path"])
            out["persisted_text"] = text
            try:
                out["persisted_mtime"] = os.stat(self.p(where["path"])).st_mtime
            except OSError:
                out["persisted_mtime"] = None
        # the file the fix writes where none sets the limit: the PVE installer's
        out["zfs_conf"] = self.read("/etc/modprobe.d/zfs.conf")
        # when each kernel's initramfs was built: one older than the file that sets the limit
        # does not hold it (update-initramfs copies modprobe.d in)
        out["initrd_mtimes"] = {}
        for path in self.glob("/boot/initrd.img-*"):
            try:
                out["initrd_mtimes"][os.path.basename(path)[len("initrd.img-"):]] = os.stat(path).st_mtime
            except OSError:
                continue
        return out
