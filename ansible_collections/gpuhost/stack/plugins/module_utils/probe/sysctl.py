# -*- coding: utf-8 -*-
"""The sysctls the controls watch, live and as systemd-sysctl sets them at boot.
"""
from __future__ import absolute_import, division, print_function

import os
import re

# what the controls declare they need read back (made from their declarations)
from ansible_collections.gpuhost.stack.plugins.module_utils.watchlist import WATCHED_SYSCTLS

__metaclass__ = type

SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")


class SysctlProbe:
    """Probe sections: probe_sysctl (a part of probe.Probe)."""

    def probe_sysctl(self):
        """As systemd-sysctl applies them (sysctl.d(5)): *.conf in the four directories by
        file name, a name in an earlier directory shadowing the same name later, the last
        assignment winning; /etc/sysctl.conf only through Debian's 99-sysctl.conf link."""
        live = {}
        for key in WATCHED_SYSCTLS:
            live[key] = self.read1("/proc/sys/" + key.replace(".", "/"))
        # systemd-sysctl never reads /etc/sysctl.conf itself (src/sysctl/sysctl.c): Debian <= 12
        # and Ubuntu reach it through the /etc/sysctl.d/99-sysctl.conf link their systemd ships,
        # Debian 13 (PVE 9) has no link, and then the file does nothing at boot
        ordered = self.conf_files(SYSCTL_DIRS)          # /etc wins over /usr/lib
        persisted, sources, assignments, contents = {}, {}, [], {}
        for name, rel in ordered:
            real = self.rel(os.path.realpath(self.p(rel)))
            text = self.read(rel) or ""
            for n, line in enumerate(text.splitlines(), 1):
                line = line.strip()
                if not line or line[0] in "#;":
                    continue
                m = re.match(r"^-?\s*([\w./-]+)\s*=\s*(.*)$", line)
                if m and m.group(1).replace("/", ".") in WATCHED_SYSCTLS:
                    key = m.group(1).replace("/", ".")
                    persisted[key] = m.group(2).strip()
                    sources[key] = rel if rel == real else "%s -> %s" % (rel, real)
                    assignments.append({"key": key, "value": m.group(2).strip(), "name": name, "path": rel,
                                        "real_path": real, "line": n})
                    contents[real] = text
        # what /etc/sysctl.conf sets that no boot applies (no 99-sysctl.conf link: Debian 13)
        unapplied = []
        if "99-sysctl.conf" not in dict(ordered):
            for line in (self.read("/etc/sysctl.conf") or "").splitlines():
                m = re.match(r"^\s*-?\s*([\w./-]+)\s*=\s*(.*)$", line)
                if m and not line.lstrip().startswith(("#", ";")) and m.group(1).replace("/", ".") in WATCHED_SYSCTLS:
                    unapplied.append({"key": m.group(1).replace("/", "."), "value": m.group(2).strip()})
        return {"live": live, "persisted": persisted, "sources": sources, "assignments": assignments,
                "contents": contents, "sysctl_conf_unapplied": unapplied}
