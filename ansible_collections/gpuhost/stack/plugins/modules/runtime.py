#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: set the live kernel and device state a gpuhost fix wants, as data."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: runtime
short_description: Set sysfs/procfs values, PCI config registers, GPU persistence, power limits and modes, reporting only real changes
description:
  - Each change is data, never a shell string, naming its I(kind) and holding exactly that kind's
    fields (module_utils/changes.py, the check the controller's fix makes too); a malformed change
    fails the task before anything is written. Each is read first and written only where it
    differs, so C(changed) and the diff are true in check mode too (which writes nothing).
  - "A file change (kind C(sysfs)): I(path) (or I(glob), every match), I(value); I(selected) compares the
    bracketed choice of a list file such as C(queue/scheduler); I(refused_ok) lets the kernel
    refuse the write (an EPP the driver rejects) without failing."
  - "A PCI register (kind C(pci_register)): I(pci) (address), I(device) (vendor:device, so a renumbered bus writes
    nothing to a stranger), I(register) (setpci's name, like C(CAP_EXP+8.w)), I(value) and
    I(mask) in hex; read and written with setpci(8), as argv."
  - "GPU persistence (kind C(persistence)) turns it on with C(nvidia-smi -pm 1) where
    C(nvidia-smi --query-gpu=persistence_mode) shows a GPU with it off."
  - "A GPU mode (kind C(gpu_mode)): I(gpu), I(gpu_mode) (compute, mig or ecc) and I(value) (Default,
    Exclusive_Process, Prohibited; Enabled, Disabled), set with C(nvidia-smi -c), C(-mig) or C(-e)
    where it differs and read back (MIG and ECC as their pending value)."
  - "A GPU power limit (kind C(power_limit)): I(gpu) (the bus id as nvidia-smi prints it) and I(power_limit_w), set
    with C(nvidia-smi -i <gpu> -pl <W>) where C(power.limit) differs, and read back: a driver
    that drops it (no persistence mode) fails the change."
options:
  changes: {description: "The changes, in order", type: list, elements: dict, required: true}
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Set MaxReadReq 4096 on a GPU function | pcie.mrrs
  gpuhost.stack.runtime:
    changes:
      - {kind: pci_register, pci: "0000:01:00.0", device: "10de:2bb5", register: CAP_EXP+8.w, value: "5000", mask: "7000"}
      - {kind: sysfs, path: /proc/sys/kernel/numa_balancing, value: "0"}
"""

RETURN = r"""
changed_items: {description: what was (or in check mode would be) changed, returned: always, type: list}
"""

import errno
import glob
import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.stack.plugins.module_utils import changes
from ansible_collections.gpuhost.stack.plugins.module_utils.write import safe_dir
from ansible_collections.gpuhost.stack.plugins.module_utils.bootid import boot_id

BRACKETED = re.compile(r"\[([^\]]+)\]")


def read_file(path, selected):
    with open(path) as f:
        text = f.read().strip()
    if selected:
        m = BRACKETED.search(text)
        return m.group(1) if m else text
    return text


def file_changes(module, change):
    paths = sorted(glob.glob(change["glob"])) if change.get("glob") else [change["path"]]
    if not paths:
        module.fail_json(msg="no file matches %s" % change["glob"])
    value = str(change["value"])
    out = []
    for path in paths:
        try:
            now = read_file(path, change.get("selected"))
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot read %s: %s" % (path, exc))
        if now == value:
            continue
        if not module.check_mode:
            try:
                with open(path, "w") as f:
                    f.write(value + "\n")
            except (IOError, OSError) as exc:
                if change.get("refused_ok"):
                    continue            # the kernel's no is the answer (a driver that rejects the value)
                if exc.errno in (errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP):
                    # the driver said no (intel_pstate's EPERM for no_turbo when the firmware
                    # turned Turbo off): remembered for this boot, so the next audit says so
                    # instead of a fix that fails the same way at every run
                    remember_refusal(path, value, exc)
                module.fail_json(msg="cannot write %s to %s: %s" % (value, path, exc))
        out.append(("%s: %s" % (path, now), "%s: %s" % (path, value)))
    return out


REFUSALS = "/var/lib/gpuhost/refused-writes.json"


def remember_refusal(path, value, exc):
    """Record that the kernel refused *value* for *path* in this boot (the probe reads it back,
    trusted only as root's and no one else's to write): best effort, never a second failure."""
    try:
        safe_dir(os.path.dirname(REFUSALS))
        try:
            with open(REFUSALS) as f:
                known = json.load(f)
        except (IOError, OSError, ValueError):
            known = {}
        bid = boot_id()
        known = dict((k, v) for k, v in (known.items() if isinstance(known, dict) else [])
                     if isinstance(v, dict) and v.get("boot_id") == bid)
        known[path] = {"value": value, "error": exc.strerror or str(exc), "boot_id": bid,
                       "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        tmp = REFUSALS + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(known, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, REFUSALS)
    except (IOError, OSError):
        pass


def setpci(module, argv):
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg="`%s` exited %d: %s" % (" ".join(argv), rc, (err or out).strip()))
    return out.strip(), err.strip()


def pci_change(module, change):
    base = ["setpci", "-s", change["pci"], "-d", change["device"]]
    now = setpci(module, base + [change["register"]])[0]
    if not re.match(r"^[0-9a-fA-F]+$", now):
        module.fail_json(msg="no PCI function %s with ID %s (setpci read %r)" % (change["pci"], change["device"], now))
    value, mask = int(change["value"], 16), int(change["mask"], 16)
    if int(now, 16) & mask == value & mask:
        return []
    if not module.check_mode:
        write = base + ["%s=%s:%s" % (change["register"], change["value"], change["mask"])]
        said = setpci(module, write)[1]
        # setpci exits 0 when the kernel refuses the write (pcilib warns "sysfs_write: write
        # failed", as under lockdown's EPERM): the register read back is the only proof
        back = setpci(module, base + [change["register"]])[0]
        if not re.match(r"^[0-9a-fA-F]+$", back) or int(back, 16) & mask != value & mask:
            module.fail_json(msg="`%s` did not take: %s %s reads %s%s" % (
                " ".join(write), change["pci"], change["register"], back, (" (" + said + ")") if said else ""))
    after = (int(now, 16) & ~mask) | (value & mask)
    where = "%s %s" % (change["pci"], change["register"])
    return [("%s: %s" % (where, now), "%s: %04x" % (where, after))]


def persistence_change(module):
    argv = ["nvidia-smi", "--query-gpu=pci.bus_id,persistence_mode", "--format=csv,noheader"]
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg="`%s` exited %d: %s" % (" ".join(argv), rc, (err or out).strip()))
    off = [l.split(",")[0].strip() for l in out.splitlines() if l.strip().endswith("Disabled")]
    if not off:
        return []
    if not module.check_mode:
        rc, out, err = module.run_command(["nvidia-smi", "-pm", "1"])
        if rc != 0:
            module.fail_json(msg="`nvidia-smi -pm 1` exited %d: %s" % (rc, (err or out).strip()))
    return [("persistence mode off: %s" % ", ".join(off), "persistence mode on: %s" % ", ".join(off))]


def power_limit_now(module, gpu):
    argv = ["nvidia-smi", "-i", gpu, "--query-gpu=power.limit", "--format=csv,noheader,nounits"]
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg="`%s` exited %d: %s" % (" ".join(argv), rc, (err or out).strip()))
    try:
        return float(out.strip())
    except ValueError:
        module.fail_json(msg="GPU %s reports no power limit (%s)" % (gpu, out.strip()))


def power_limit_change(module, change):
    gpu, watts = change["gpu"], int(change["power_limit_w"])
    if not re.match(r"^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$", gpu):
        module.fail_json(msg="not a GPU bus id: %r" % (gpu,))
    now = power_limit_now(module, gpu)
    if abs(now - watts) < 0.5:
        return []
    if not module.check_mode:
        argv = ["nvidia-smi", "-i", gpu, "-pl", str(watts)]
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg="`%s` exited %d: %s" % (" ".join(argv), rc, (err or out).strip()))
        back = power_limit_now(module, gpu)
        if abs(back - watts) >= 0.5:
            # nvidia-smi says "was set" and warns when the driver forgets it as it exits
            module.fail_json(msg="`%s` did not take: power.limit reads %.2f W (%s)" % (
                " ".join(argv), back, " ".join(out.split())))
    return [("%s power limit: %.2f W" % (gpu, now), "%s power limit: %d.00 W" % (gpu, watts))]


# the query field that reads a mode back, and how nvidia-smi sets it
GPU_MODES = {"compute": ("compute_mode", "-c"), "mig": ("mig.mode.pending", "-mig"), "ecc": ("ecc.mode.pending", "-e")}
MODE_ARGS = {"Default": "DEFAULT", "Exclusive_Process": "EXCLUSIVE_PROCESS", "Prohibited": "PROHIBITED",
             "Enabled": "1", "Disabled": "0"}


def gpu_mode_now(module, gpu, field):
    argv = ["nvidia-smi", "-i", gpu, "--query-gpu=" + field, "--format=csv,noheader"]
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg="`%s` exited %d: %s" % (" ".join(argv), rc, (err or out).strip()))
    return out.strip()


def gpu_mode_change(module, change):
    gpu, mode, value = change["gpu"], change.get("gpu_mode"), change.get("value")
    if not re.match(r"^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$", gpu):
        module.fail_json(msg="not a GPU bus id: %r" % (gpu,))
    if mode not in GPU_MODES or value not in MODE_ARGS or (mode == "compute") != (value not in ("Enabled", "Disabled")):
        module.fail_json(msg="not a GPU mode gpuhost sets: %s %r" % (mode, value))
    field, flag = GPU_MODES[mode]
    now = gpu_mode_now(module, gpu, field)
    if now == value:
        return []
    if not module.check_mode:
        argv = ["nvidia-smi", "-i", gpu, flag, MODE_ARGS[value]]
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg="`%s` exited %d: %s" % (" ".join(argv), rc, (err or out).strip()))
        back = gpu_mode_now(module, gpu, field)
        if back != value:
            # nvidia-smi treats a GPU that does not support the mode as a warning and exits 0
            module.fail_json(msg="`%s` did not take: %s reads %s (%s)" % (" ".join(argv), field, back, " ".join(out.split())))
    return [("%s %s: %s" % (gpu, field, now), "%s %s: %s" % (gpu, field, value))]


def main():
    module = AnsibleModule(argument_spec=dict(changes=dict(type="list", elements="dict", required=True)),
                           supports_check_mode=True)
    done = []
    apply = {"sysfs": file_changes, "pci_register": pci_change, "persistence": lambda m, c: persistence_change(m),
             "gpu_mode": gpu_mode_change, "power_limit": power_limit_change}
    try:
        kinds = [changes.check(c) for c in module.params["changes"]]
    except ValueError as exc:
        module.fail_json(msg=str(exc))      # nothing is changed when any change is malformed
    for kind, change in zip(kinds, module.params["changes"]):
        done += apply[kind](module, change)
    module.exit_json(changed=bool(done), changed_items=[after for dummy, after in done],
                     diff=dict(before_header="live state", after_header="live state",
                               before="".join(b + "\n" for b, dummy in done), after="".join(a + "\n" for dummy, a in done)))


if __name__ == "__main__":
    main()
