"""nvidia.driver_pinned: unattended-upgrades cannot replace the NVIDIA driver under the loaded module.
"""
from __future__ import annotations

import re

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import FileContent, fix_of
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na

CONTROL = Control(
    id="nvidia.driver_pinned",
    title="unattended-upgrades cannot replace the NVIDIA driver under the loaded module",
    role="nvidia",
    fixable=True,
    reboot="no",
    rationale=("unattended-upgrades installs a new driver's libraries while the old kernel module stays loaded: "
               "every CUDA program and nvidia-smi then fail with 'Failed to initialize NVML: Driver/library version "
               "mismatch' until a reboot nobody planned (Debian and Ubuntu ship driver updates in their security "
               "pockets, which unattended-upgrades follows by default)"),
    references=("unattended-upgrades: 50unattended-upgrades, Unattended-Upgrade::Package-Blacklist (Python regular "
                "expressions matched at the start of the package name)",
                "apt.conf(5), apt-config(8); deb-status(5): hold", "DeepOps: unattended-upgrades removed on DGX OS"),
    passes=("where unattended-upgrades runs (installed, `APT::Periodic::Unattended-Upgrade` not 0), every installed "
            "NVIDIA driver package is held or matched by `Unattended-Upgrade::Package-Blacklist`; on hosts and "
            "guests alike; n/a otherwise"),
    repair=("an apt.conf.d drop-in of gpuhost's that adds each installed driver package to "
            "`Unattended-Upgrade::Package-Blacklist` (the driver is then upgraded by a person, with a reboot)"),
    facts=("apt",),
    host_level=False,
)

DROP_IN = "/etc/apt/apt.conf.d/52gpuhost-nvidia-driver"


def blacklisted(name: str, patterns: list[str]) -> bool:
    """As unattended-upgrades reads its blacklist: each entry a Python regular expression
    matched at the start of the name (re.match); one that does not compile matches nothing."""
    for pattern in patterns:
        try:
            if re.match(pattern, name):
                return True
        except re.error:
            continue
    return False


def drop_in(names: list[str]) -> str:
    """gpuhost's drop-in: each package by its whole name ('+' and '.' escaped, '$' at the
    end), appended to the list 50unattended-upgrades starts (apt appends a list's items
    across files)."""
    entries = "".join('    "' + re.sub(r"([.+])", r"\\\1", n) + '$";\n' for n in names)
    return ("// Managed by gpuhost (nvidia.driver_pinned): unattended-upgrades leaves the NVIDIA driver's\n"
            "// packages alone; a new driver under the loaded module breaks NVML until a reboot.\n"
            "// Upgrade the driver yourself and reboot; gpuhost rewrites this list from what is installed.\n"
            f"Unattended-Upgrade::Package-Blacklist {{\n{entries}}};\n")


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    apt = h.section("apt")
    if apt is None:
        return error(cid, h.errors.get("apt", "cannot read dpkg's status"))
    if not apt.get("dpkg"):
        return na(cid, "no dpkg here (/var/lib/dpkg/status): not a Debian-family system")
    if not apt["unattended_upgrades"]:
        return na(cid, "unattended-upgrades is not installed")
    if apt.get("config_error"):
        return error(cid, apt["config_error"])
    periodic = apt.get("periodic_unattended_upgrade")
    if (periodic or "0").strip() in ("0", ""):
        return na(cid, "unattended-upgrades is installed but off (APT::Periodic::Unattended-Upgrade "
                       f"{periodic or 'unset'})")
    drivers = apt.get("driver_packages") or {}
    if not drivers:
        return na(cid, "no NVIDIA driver package is installed (a driver from NVIDIA's .run installer, or none): "
                       "apt does not upgrade it")
    blacklist = apt.get("package_blacklist") or []
    exposed = sorted(n for n, p in drivers.items() if not p.get("hold") and not blacklisted(n, blacklist))
    observed = f"{len(drivers) - len(exposed)} of {len(drivers)} driver packages held or blacklisted"
    expected = "every driver package held or blacklisted"
    if not exposed:
        return Finding(cid, "pass", observed, expected,
                       f"unattended-upgrades leaves all {len(drivers)} NVIDIA driver packages alone")
    shown = ", ".join(exposed[:6]) + (f" and {len(exposed) - 6} more" if len(exposed) > 6 else "")
    return Finding(cid, "drift", observed, expected,
                   f"unattended-upgrades may upgrade {shown} under the loaded module",
                   fix=fix_of(FileContent(DROP_IN, drop_in(sorted(drivers)))))
