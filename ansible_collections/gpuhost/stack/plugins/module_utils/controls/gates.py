"""The gates every finding passes after its judgement: no reboot into a kernel without the
GPU driver, no second reboot for the same finding, no unit the administrator masked.
"""
from __future__ import annotations

import fnmatch
import json
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.kernels import next_kernel_without_module, unfinished_refresh
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Finding, Host


def reboot_blocked(h: Host) -> str | None:
    """Why no reboot may happen now, whatever control waits for one: the kernel the boot
    loader starts next has no NVIDIA module while this host drives its GPUs with it, or
    what the boot loader holds is not known (an unfinished refresh)."""
    unfinished = unfinished_refresh(h)
    if unfinished:
        return unfinished
    nxt = next_kernel_without_module(h)
    if nxt:
        return (f"the next boot would start {nxt}, which has no NVIDIA module (no nvidia.ko in /lib/modules/{nxt}): "
                "a reboot would leave the GPUs without a driver")
    return None


def reboot_signature(finding: Finding | dict) -> str:
    """What a pending_reboot finding waits for: the same signature after gpuhost's reboot
    means that boot did not apply it."""
    f = finding.as_dict() if isinstance(finding, Finding) else finding
    return json.dumps([f.get("control"), f.get("expected"), f.get("message")], sort_keys=True, default=str)


def reboot_record(findings: dict[str, dict], boot_id: str | None, when: str, epoch: int | None = None) -> dict:
    """What gpuhost's reboot play writes on the host just before it reboots it."""
    return {"boot_id": boot_id, "time": when, "epoch": epoch,
            "findings": {cid: reboot_signature(f) for cid, f in findings.items() if f.get("status") == "pending_reboot"}}


# the boot gpuhost's reboot brings up starts within this long of the record (a reboot waits
# at most gpuhost_reboot_timeout, 600 s by default); a later boot is somebody else's
REBOOT_WINDOW_S = 3600


def rebooted_by_gpuhost(h: Host, last: dict) -> bool:
    """The running boot is the one gpuhost's last reboot brought up (not the boot it was
    written in, not a boot weeks later)."""
    if not last.get("boot_id") or last.get("boot_id") == h.boot.get("boot_id"):
        return False
    epoch, btime = last.get("epoch"), h.boot.get("boot_time")
    if isinstance(epoch, (int, float)) and btime:
        return epoch - 60 <= btime <= epoch + REBOOT_WINDOW_S
    return True


def hold_reboot(h: Host, finding: Finding) -> None:
    """Never harm a host, never loop: a pending_reboot that a reboot must not serve (the
    next kernel has no GPU driver) or that gpuhost's last reboot already failed to clear
    becomes manual, with the reason, so no roll-out reboots for it."""
    blocked = reboot_blocked(h)
    if blocked:
        finding.status, finding.reboot_required = "manual", False
        finding.message = f"{finding.message}; not rebooted: {blocked}"
        return
    last = h.boot.get("last_reboot") or {}
    sig = (last.get("findings") or {}).get(finding.control)
    if sig and rebooted_by_gpuhost(h, last) and sig == reboot_signature(finding):
        finding.status, finding.reboot_required = "manual", False
        # a BIOS value still pending after the reset: the firmware kept it (a Dell's configuration
        # job that did not run, a value the firmware refuses), which no further reset changes
        where = ("the BMC's configuration jobs and event log, and the BIOS setup" if finding.control.startswith("bios.")
                 else "the boot loader, firmware and kernel log")
        finding.message = (f"{finding.message}; gpuhost rebooted this host for this at {last.get('time', '?')} and that "
                           f"boot did not apply it: a second reboot will not help (check {where})")


def respect_masks(h: Host, finding: Finding) -> None:
    """A unit the fix would install that the administrator masked (systemctl mask: a link to
    /dev/null in /etc/systemd/system, systemd.unit(5)) is their decision: the finding is
    manual, never a fix that would unmask, replace or enable it."""
    fix = finding.fix if isinstance(finding.fix, dict) else {}
    # the unit it would install, and the vendor units it would enable (systemctl enable refuses a masked one)
    names = [n for n in [(fix.get("unit") or {}).get("name")] + list(fix.get("enable") or []) if n]
    units = h.f.get("units") or {}
    name = next((n for n in names if (units.get(n) or {}).get("masked")), None)
    if name:
        finding.status, finding.fix = "manual", {}
        finding.message = (f"{finding.message}; {name} is masked ({units[name]['path']} -> /dev/null), the administrator's "
                           f"decision: gpuhost does not unmask it (`systemctl unmask {name}` lets gpuhost fix it)")


def respect_refusals(h: Host, finding: Finding) -> None:
    """A fix whose runtime write the kernel refused at gpuhost's last fix in this boot would fail
    the same way at every run (intel_pstate refuses no_turbo 0 while the firmware has Turbo off):
    the finding is manual, naming the refusal, until a boot, when it is tried again."""
    fix = finding.fix if isinstance(finding.fix, dict) else {}
    refused = (h.boot.get("refused_writes") or {}) if isinstance(h.boot, dict) else {}
    hit = []
    for c in fix.get("runtime") or []:
        if not isinstance(c, dict) or c.get("kind") != "sysfs":
            continue
        # a change by glob (each policy's file) was refused for one of the files it matched
        paths = [c["path"]] if c.get("path") else [p for p in refused if c.get("glob") and fnmatch.fnmatch(p, c["glob"])]
        hit += [(p, refused[p]) for p in paths if p in refused and str(c.get("value")) == refused[p]["value"]]
    if hit:
        path, why = hit[0]
        finding.status, finding.fix, finding.reboot_required = "manual", {}, False
        finding.message = (f"{finding.message}; the kernel refused {why['value']} for {path} at gpuhost's fix in this "
                           f"boot ({why['error']}): what it depends on (a firmware setting, the driver) must change "
                           "first; gpuhost tries again after the next boot, or once /var/lib/gpuhost/refused-writes.json "
                           "is removed")
