#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: repair one Proxmox container config's GPU passthrough, under PVE's lock."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: lxc_config
short_description: Repair a container config's GPU passthrough lines, or set its CPU set, under Proxmox's config lock
description:
  - Takes the lock pve-container takes for a config change (an exclusive flock on
    /run/lock/lxc/pve-config-VMID.lock), reads /etc/pve/lxc/VMID.conf as it is now, and
    computes the repair from that text, so a line another tool added since the audit
    (C(pct set), the GUI) is kept.
  - Refuses a config that holds a C(lock) (a backup, migration or snapshot in progress), that
    is not UTF-8, or whose repair cannot be proven right now (a module whose major is
    unknown, a devN node that does not exist); the repair is checked as pve-container reads a
    config before a byte is written, then written atomically with a copy in the backup
    directory.
  - With I(cpuset), writes C(lxc.cgroup2.cpuset.cpus) after the main section's last line
    instead (the lines PVE keeps as raw LXC keys), and refuses a config that names another set
    now.
  - Supports check mode and diff.
options:
  vmid: {description: The container, type: int, required: true}
  devices: {description: "Char majors of the host now (major -> name, from /proc/devices); for the passthrough repair",
            type: dict}
  cpuset: {description: "The CPU set to write (kernel list format, 0-23,64-87) instead of the passthrough repair",
           type: str}
  dev_nodes: {description: The /dev/nvidia* nodes on the host now, type: list, elements: str}
  lock_timeout: {description: Seconds to wait for Proxmox's config lock, type: int, default: 60}
  backup_dir: {description: Where to keep a copy of the config before changing it, type: path,
               default: /var/backups/gpuhost}
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: lxc.gpu_passthrough | repair container 129
  gpuhost.stack.lxc_config:
    vmid: 129
    devices: {"195": nvidia, "508": nvidia-uvm}
"""

RETURN = r"""
backup_file: {description: the copy kept, returned: when changed, type: str}
"""

import fcntl
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf
from ansible_collections.gpuhost.stack.plugins.module_utils.write import backup, link_refusal, write_atomic

LOCK_DIR = "/run/lock/lxc"          # pve-container: PVE::LXC::Config->config_file_lock


def take_lock(module, vmid, timeout):
    if not os.path.isdir(LOCK_DIR):
        os.makedirs(LOCK_DIR, 0o755)
    fd = os.open(os.path.join(LOCK_DIR, "pve-config-%d.lock" % vmid), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except (IOError, OSError):
            if time.monotonic() > deadline:
                os.close(fd)
                module.fail_json(msg="container %d: Proxmox's config lock is held by another task for more than %d s: "
                                     "nothing changed" % (vmid, timeout))
            time.sleep(0.2)


def main():
    module = AnsibleModule(argument_spec=dict(
        vmid=dict(type="int", required=True), devices=dict(type="dict"), cpuset=dict(type="str"),
        dev_nodes=dict(type="list", elements="str"), lock_timeout=dict(type="int", default=60),
        backup_dir=dict(type="path", default="/var/backups/gpuhost")), required_one_of=[("devices", "cpuset")],
        mutually_exclusive=[("devices", "cpuset")], supports_check_mode=True)
    if module.params["cpuset"] is not None and not re.match(r"^\d+(-\d+)?(,\d+(-\d+)?)*$", module.params["cpuset"]):
        module.fail_json(msg="cpuset: not a CPU list: %r" % module.params["cpuset"][:80])
    p = module.params
    vmid = p["vmid"]
    path = "/etc/pve/lxc/%d.conf" % vmid
    refusal = link_refusal(path)
    if refusal:
        module.fail_json(msg=refusal)
    fd = take_lock(module, vmid, p["lock_timeout"])
    try:
        # read, judge and repair; just before the rename, the file is read again: one that
        # changed meanwhile (an editor that does not take PVE's lock) is judged again from
        # what it holds now, never overwritten with a repair of what it held before
        for dummy in range(3):
            raw = read_config(module, vmid, path)
            fixed, result = repaired(module, p, vmid, path, raw)
            if fixed is None:
                module.exit_json(changed=False, path=path)
            if module.check_mode:
                module.exit_json(**result)
            if read_config(module, vmid, path) != raw:
                continue
            try:
                result["backup_file"] = backup(path, p["backup_dir"])
            except OSError as exc:
                module.fail_json(msg="nothing changed: %s" % exc)
            write_atomic(module, path, fixed)
            module.exit_json(**result)
        module.fail_json(msg="container %d: %s kept changing while gpuhost repaired it: nothing changed" % (vmid, path))
    finally:
        os.close(fd)


# pmxcfs keeps each file of /etc/pve in memory and refuses a larger one with EFBIG (pve-cluster,
# src/pmxcfs/memdb.c memdb_write against MEMDB_MAX_FILE_SIZE: 1 MiB today, 128 KiB in old
# releases, where the write itself fails and says so): a repair that would pass it is not written
PMXCFS_MAX_FILE_SIZE = 1024 * 1024


def read_config(module, vmid, path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except (IOError, OSError) as exc:
        module.fail_json(msg="container %d: cannot read %s: %s" % (vmid, path, exc))


def repaired(module, p, vmid, path, raw):
    """(the repaired text, the result to return), or (None, None) when nothing needs changing."""
    devices = dict((int(k), str(v)) for k, v in (p["devices"] or {}).items())
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        module.fail_json(msg="%s has bytes that are not UTF-8 (at byte %d): gpuhost does not edit it" % (path, exc.start))
    main_lines, dummy = lxcconf.main_section(text)
    held = [l.split(":", 1)[1].strip() for l in main_lines if re.match(r"^lock\s*:", l)]
    if held:
        module.fail_json(msg="container %d is locked (%s: a backup, migration or snapshot in progress): "
                             "nothing changed; run the fix again when it is done" % (vmid, held[0]))
    if p["cpuset"] is not None:
        fixed = lxcconf.with_cpuset(text, p["cpuset"])
        if fixed is None:
            module.fail_json(msg="container %d: its config names another CPU set now (%s): nothing changed"
                                 % (vmid, lxcconf.cpu_request(text)[0]))
        return _result(module, vmid, path, text, fixed)
    pt = lxcconf.inspect(str(vmid), text)
    blocked = lxcconf.blockers(pt, devices, p["dev_nodes"])
    if blocked:
        module.fail_json(msg="container %d: %s" % (vmid, "; ".join(blocked)))
    fixed = lxcconf.repair(text, devices)
    if fixed == text:
        return None, None
    problem = lxcconf.reads_back(text, fixed) or (
        "still " + ", ".join(lxcconf.problems(lxcconf.inspect(str(vmid), fixed), devices))
        if lxcconf.problems(lxcconf.inspect(str(vmid), fixed), devices) else None)
    if not problem and len(fixed.encode("utf-8")) > PMXCFS_MAX_FILE_SIZE:
        problem = "the repaired file would be over pmxcfs's 1 MiB limit for a file in /etc/pve"
    if problem:
        module.fail_json(msg="container %d: the repair was refused (%s): nothing changed" % (vmid, problem))
    return fixed, dict(changed=True, path=path, diff=[dict(before_header=path, after_header=path, before=text,
                                                           after=fixed)])


def _result(module, vmid, path, text, fixed):
    """(the new text, the result) for the CPU set, checked as pve-container reads a config."""
    if fixed == text:
        return None, None
    problem = lxcconf.reads_back(text, fixed) or (
        "the file would be over pmxcfs's 1 MiB limit for a file in /etc/pve"
        if len(fixed.encode("utf-8")) > PMXCFS_MAX_FILE_SIZE else None)
    if problem:
        module.fail_json(msg="container %d: the CPU set was refused (%s): nothing changed" % (vmid, problem))
    return fixed, dict(changed=True, path=path, diff=[dict(before_header=path, after_header=path, before=text,
                                                           after=fixed)])


if __name__ == "__main__":
    main()
