#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: which kernel the boot loader starts, kept to one with the GPU driver."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kernel_boot
short_description: Keep the boot loader's default on a kernel the NVIDIA driver is built for
description:
  - With I(pin), makes I(pin.release) the kernel the boot loader starts by default, with
    C(proxmox-boot-tool kernel pin) on Proxmox VE (which on a host without ESPs sets
    GRUB_DEFAULT and runs update-grub itself; on ESP hosts a C(refresh) follows), or with a
    GRUB_DEFAULT drop-in naming the entry by id and C(update-grub) elsewhere. A one-time
    choice (C(kernel pin --next-boot), C(grub-reboot)) is dropped first. The result is read
    back as the boot loader reads it; a pin that does not take is a failure.
  - With I(after_install), looks at the newest installed kernel of I(flavor), which is what
    boots next. When the NVIDIA module was not built for it (no nvidia.ko under
    /lib/modules/RELEASE) the running kernel is pinned; when it was and I(unpin) is set,
    an older pin (the operator's, or gpuhost's own) is lifted. A kernel without the
    module is never left as the default.
  - Supports check mode (says what it would do).
options:
  pin:
    description: "C({release, tool: proxmox-boot-tool|grub, grub_default})"
    type: dict
  after_install:
    description: "C({series, flavor, running, unpin, check_nvidia_module, pin})"
    type: dict
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: kernel.version | keep booting the running kernel
  gpuhost.stack.kernel_boot:
    pin: {release: 6.8.12-4-pve, tool: proxmox-boot-tool}
"""

RETURN = r"""
release: {description: the kernel the boot loader starts now, returned: always, type: str}
action: {description: "pinned, unpinned or none", returned: always, type: str}
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.stack.plugins.module_utils.versions import at_least, kernel_flavor
from ansible_collections.gpuhost.stack.plugins.module_utils.probe import Probe, grub_default_kernel, version_key
from ansible_collections.gpuhost.stack.plugins.module_utils.write import backup, write_atomic

PIN_FILE = "/etc/kernel/proxmox-boot-pin"
NEXT_PIN = "/etc/kernel/next-boot-pin"
GRUBENV = "/boot/grub/grubenv"
UUIDS = "/etc/kernel/proxmox-boot-uuids"
# sourced after /etc/default/grub and the other grub.d files (grub-mkconfig reads grub.d/*.cfg
# in glob order): the pin wins, and it is gpuhost's own file, taken out again by unpin
GRUB_PIN = "/etc/default/grub.d/zz-gpuhost-kernel-pin.cfg"
GRUB_CFG = "/boot/grub/grub.cfg"


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def module_built(release):
    """Only a module file proves the next boot has GPUs (a dkms build can fail): read as the audit reads it."""
    return Probe("/").nvidia_module_built(release)


def newest_of_flavor(flavor):
    """The newest installed kernel of *flavor* (-amd64 is not -rt-amd64 nor -cloud-amd64;
    -bpo12-pve is -pve), whatever series the metapackage brought."""
    found = [os.path.basename(p)[len("vmlinuz-"):] for p in glob.glob("/boot/vmlinuz-*")]
    found = [r for r in found if not flavor or kernel_flavor(r) == flavor]
    return sorted(found, key=version_key)[-1] if found else None


def safe_backup(module, path):
    try:
        backup(path)
    except OSError as exc:
        module.fail_json(msg="nothing changed: %s" % exc)


def run(module, argv):
    rc, out, err = module.run_command(argv, data="", binary_data=True)
    if rc != 0:
        module.fail_json(msg="%s failed (exit %d): %s" % (" ".join(argv), rc, (err or out).strip().splitlines()[-1:]),
                         cmd=argv, rc=rc, stdout=out, stderr=err)
    return out


def grub_update(module):
    tool = module.get_bin_path("update-grub") or module.get_bin_path("grub-mkconfig")
    if tool is None:
        module.fail_json(msg="neither update-grub nor grub-mkconfig is installed")
    run(module, [tool] if tool.endswith("update-grub") else [tool, "-o", GRUB_CFG])


def grub_selects():
    return grub_default_kernel(read(GRUB_CFG), read(GRUBENV))[0]


def drop_one_time_choice(module):
    """A one-time boot chosen before (proxmox-boot-tool kernel pin --next-boot, grub-reboot)
    would still start the kernel being pinned away: it goes first."""
    changed = False
    if os.path.exists(NEXT_PIN) and module.get_bin_path("proxmox-boot-tool"):
        changed = True
        if not module.check_mode:
            run(module, ["proxmox-boot-tool", "kernel", "unpin", "--next-boot"])
    if grubenv_next_entry():
        changed = True
        if not module.check_mode:
            run(module, [module.get_bin_path("grub-editenv", required=True), GRUBENV, "unset", "next_entry"])
    return changed


def grubenv_next_entry():
    for line in (read(GRUBENV) or "").splitlines():
        if line.startswith("next_entry=") and line[len("next_entry="):]:
            return line[len("next_entry="):]
    return None


def pin(module, spec):
    release, tool = spec["release"], spec.get("tool")
    once = drop_one_time_choice(module)
    if tool == "proxmox-boot-tool":
        on_grub = not os.path.exists(UUIDS) and os.path.exists(GRUB_CFG)
        if (read(PIN_FILE) or "").strip() == release and (not on_grub or grub_selects() == release):
            if once and os.path.exists(UUIDS) and not module.check_mode:
                run(module, ["proxmox-boot-tool", "refresh"])
            return once
        if not module.check_mode:
            # without a terminal `kernel pin` does not refresh the ESPs itself: refresh after it.
            # Without ESPs it sets GRUB_DEFAULT and runs update-grub itself: read that back
            run(module, ["proxmox-boot-tool", "kernel", "pin", release])
            if os.path.exists(UUIDS):
                run(module, ["proxmox-boot-tool", "refresh"])
            elif os.path.exists(GRUB_CFG) and grub_selects() != release:
                module.fail_json(msg="proxmox-boot-tool kernel pin %s did not make it GRUB's default (grub.cfg "
                                     "selects %s)" % (release, grub_selects()))
        return True
    if tool == "grub":
        value = spec.get("grub_default") or ""
        if not re.match(r"^[A-Za-z0-9_.:>+~-]+$", value):
            module.fail_json(msg="not a GRUB entry id gpuhost writes into a GRUB setting: %r" % value)
        content = ("# Managed by gpuhost (kernel.version): boot %s, the kernel the NVIDIA driver is built for,\n"
                   "# until a driver is built for the newer one. Remove this file and run update-grub to undo.\n"
                   "GRUB_DEFAULT=\"%s\"\n" % (release, value))
        if read(GRUB_PIN) == content and grub_selects() == release:
            return once
        if not module.check_mode:
            if os.path.exists(GRUB_PIN):
                safe_backup(module, GRUB_PIN)
            write_atomic(module, GRUB_PIN, content, 0o644)
            grub_update(module)
            chosen = grub_selects()
            if chosen != release:
                module.fail_json(msg="pinned %s in %s but grub.cfg still selects %s" % (release, GRUB_PIN, chosen))
        return True
    module.fail_json(msg="no way to pin a kernel on this host (tool %r)" % tool)


def unpin(module):
    changed = False
    if os.path.exists(PIN_FILE) and module.get_bin_path("proxmox-boot-tool"):
        changed = True
        if not module.check_mode:
            run(module, ["proxmox-boot-tool", "kernel", "unpin"])
            if os.path.exists(UUIDS):
                run(module, ["proxmox-boot-tool", "refresh"])
    if os.path.exists(GRUB_PIN):
        changed = True
        if not module.check_mode:
            safe_backup(module, GRUB_PIN)
            os.unlink(GRUB_PIN)
            grub_update(module)
    return changed


def main():
    module = AnsibleModule(argument_spec=dict(pin=dict(type="dict"), after_install=dict(type="dict")),
                           mutually_exclusive=[("pin", "after_install")], required_one_of=[("pin", "after_install")],
                           supports_check_mode=True)
    p = module.params
    if p["pin"]:
        changed = pin(module, p["pin"])
        module.exit_json(changed=changed, action="pinned" if changed else "none", release=p["pin"]["release"])
    spec = p["after_install"]
    new = newest_of_flavor(spec.get("flavor"))
    if new is None or new == spec.get("running"):
        module.fail_json(msg="no new kernel%s is installed in /boot after the install" %
                         (" (-%s)" % spec["flavor"] if spec.get("flavor") else ""))
    # the newest kernel is checked first, whatever series it is: it is what boots next
    if spec.get("check_nvidia_module") and not module_built(new):
        if not spec.get("pin"):
            module.fail_json(msg="the NVIDIA module was not built for %s and gpuhost cannot pin %s here: make it the "
                                 "boot loader's default before any reboot" % (new, spec["running"]))
        changed = pin(module, spec["pin"])
        module.exit_json(changed=changed, action="pinned", release=spec["running"], new=new,
                         msg="no NVIDIA module for %s: %s stays the kernel that boots" % (new, spec["running"]))
    if not at_least(new, str(spec["series"])):
        module.fail_json(msg="the metapackage brought %s, older than %s: install a %s kernel series by hand"
                             % (new, spec["series"], spec["series"]))
    changed = unpin(module) if spec.get("unpin") else False
    module.exit_json(changed=changed, action="unpinned" if changed else "none", release=new, new=new)


if __name__ == "__main__":
    main()
