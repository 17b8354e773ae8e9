# -*- coding: utf-8 -*-
"""systemd units as systemd reads them: the first file in the unit path, drop-ins by name,
enable links, masks, and the udev rules that start a unit.
"""
from __future__ import absolute_import, division, print_function

import os
import re

# what the controls declare they need read back (made from their declarations)
from ansible_collections.gpuhost.stack.plugins.module_utils.watchlist import OWNED_UNITS

__metaclass__ = type

# udev(7): *.rules by name across these directories, a file in an earlier one (an empty one
# in /etc to turn a package's rule off) shadowing the same name in a later one
UDEV_DIRS = ("/etc/udev/rules.d", "/run/udev/rules.d", "/lib/udev/rules.d", "/usr/lib/udev/rules.d")
BOOT_DATA_DIR = "/etc/gpuhost/boot.d"
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system",
             "/usr/lib/systemd/system")


def _exec_starts(text, reset_marker=False):
    """ExecStart= values of a unit file's [Service] section; None for an empty ExecStart=
    (which resets the list) when reading a drop-in."""
    out, section = [], None
    for line in text.splitlines():
        t = line.strip()
        if t.startswith("["):
            section = t
            continue
        if section != "[Service]":
            continue
        m = re.match(r"^ExecStart\s*=\s*(.*)$", t)
        if m:
            if not m.group(1):
                out.append(None)
            else:
                out.append(m.group(1))
    if not reset_marker:
        cleaned = []
        for cmd in out:
            cleaned = [] if cmd is None else cleaned + [cmd]
        return cleaned
    return out


class UnitsProbe:
    """Probe sections: probe_units (a part of probe.Probe)."""

    def probe_units(self):
        units = {}
        for name in OWNED_UNITS:
            units[name] = self.effective_unit(name)
        return units

    def unit_state(self, name):
        """(ActiveState, whether it left inactive in this boot) of a unit, as systemd's manager
        says (systemctl show, org.freedesktop.systemd1(5): InactiveExitTimestampMonotonic is 0
        until the unit first leaves inactive in a boot); read, nothing started. (None, None)
        without systemctl."""
        for cand in ("/usr/bin/systemctl", "/bin/systemctl"):
            if os.path.exists(self.p(cand)):
                rc, text, err = self.command([self.p(cand), "show", "-p", "ActiveState",
                                              "-p", "InactiveExitTimestampMonotonic", name])
                props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
                state = props.get("ActiveState", "")
                since = props.get("InactiveExitTimestampMonotonic", "")
                return (state if state.isalpha() else None), (since != "0" if since.isdigit() else None)
        return None, None

    def udev_files(self):
        """The udev rules files udev reads (Probe.conf_files: a name in /etc shadowing the same
        name in /lib), [(name, path, text)] in name order, read once for the whole probe."""
        if getattr(self, "_udev_files", None) is None:
            self._udev_files = [(name, path, self.read(path) or "") for name, path in self.conf_files(UDEV_DIRS, "*.rules")]
        return self._udev_files

    def udev_rules(self):
        """The texts of the udev rules files, for the units asked about."""
        return [text for dummy, dummy2, text in self.udev_files()]

    def effective_unit(self, name):
        """A unit as systemd reads it (systemd.unit(5)): the first file of that name in the
        unit path, then drop-ins (<unit>.d/*.conf from every unit directory, by file name),
        where an empty ExecStart= resets the list; enabled by a .wants link, or started by
        a udev rule (Ubuntu's nvidia persistenced has no [Install], 71-nvidia.rules starts it)."""
        content, where, masked = None, None, False
        for d in UNIT_DIRS:
            path = d + "/" + name
            if os.path.islink(self.p(path)) and os.readlink(self.p(path)) == "/dev/null":
                content, where, masked = "", path, True      # `systemctl mask`: systemd.unit(5)
                break
            text = self.read(path)
            if text is not None:
                content, where = text, path
                break
        dropins = {}
        for d in reversed(UNIT_DIRS):
            for path in self.glob(d + "/" + name + ".d/*.conf"):
                dropins[os.path.basename(path)] = self.rel(path)
        execs = _exec_starts(content or "")
        dropin_texts = {}
        for base in sorted(dropins):
            text = self.read(dropins[base]) or ""
            dropin_texts[dropins[base]] = text
            more = _exec_starts(text, reset_marker=True)
            for cmd in more:
                execs = [] if cmd is None else execs + [cmd]
        enabled = any(os.path.lexists(self.p(d + "/multi-user.target.wants/" + name)) for d in UNIT_DIRS[:1])
        by_udev = any(re.search(r'SYSTEMD_WANTS\S*\s*[+:]?=\s*"?%s' % re.escape(name), text)
                      for text in self.udev_rules())
        # a gpuhost unit's data files (persist.Boot: /etc/gpuhost/boot.d/<unit>.conf, .2.conf, ...),
        # which its systemd-tmpfiles calls read
        data = {}
        if name.startswith("gpuhost-"):
            stem = name.rsplit(".", 1)[0]
            for path in self.glob(BOOT_DATA_DIR + "/" + stem + ".*conf"):
                rel = self.rel(path)
                if re.match(r"^%s(\.\d+)?\.conf$" % re.escape(stem), os.path.basename(rel)):
                    data[rel] = self.read(rel)
        return {"content": content, "path": where, "enabled": enabled, "dropins": dropin_texts, "masked": masked,
                "data": data,
                "exec_start": execs, "started_by_udev": by_udev,
                "installable": bool(re.search(r"^\s*\[Install\]", content or "", re.M))}
