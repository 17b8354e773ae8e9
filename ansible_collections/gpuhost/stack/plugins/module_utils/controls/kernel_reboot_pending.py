"""kernel.reboot_pending: The kernel and command line the boot loader will start next are the running ones.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.kargs import _comparable, ADDED_BY_LOADER
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.kernels import next_kernel_without_module, no_persisted, unfinished_refresh
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na

CONTROL = Control(
    id="kernel.reboot_pending",
    title="The kernel and command line the boot loader will start next are the running ones",
    role="kernel",
    fixable=False,
    reboot="-",
    rationale="A fix that waits for a reboot has not taken effect yet",
    references=("pve-docs: system-booting", "proxmox-boot-tool"),
    passes=("the kernel and command line the boot loader will start next (systemd-boot, GRUB resolved as GRUB does: "
            "grub-reboot's `next_entry` once, `GRUB_DEFAULT` or the saved entry; or GRUB on proxmox-boot-tool ESPs; "
            "pins; `/etc/kernel/cmdline`'s first line) are the running ones; `vt.handoff` is the loader's own"),
    repair="reboot, when allowed; never into a kernel without the NVIDIA module (manual)",
    facts=("boot", "nvidia", "pci"),
)


def not_applied_by_this_boot(h: Host, next_kernel: str | None, cmdline_differs: bool) -> list[str]:
    """What made a difference before the running boot started (/proc/stat btime) and still
    makes it: the next kernel's image, or the command-line sources when none of them
    changed since. That boot should have applied it and did not."""
    btime, mtimes = h.boot.get("boot_time"), h.boot.get("mtimes") or {}
    if not btime:
        return []
    old = {p for p, t in mtimes.items() if t < btime - 5}
    stale = []
    if next_kernel and f"/boot/vmlinuz-{next_kernel}" in old:
        stale.append(f"/boot/vmlinuz-{next_kernel}")
    sources = [p for p in mtimes if not p.startswith("/boot/vmlinuz-")]
    if cmdline_differs and sources and all(p in old for p in sources):
        stale += sorted(sources)
    return stale


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    if h.errors.get("boot"):
        return error(cid, no_persisted(h))      # the boot section could not be read: never "na"
    if h.boot.get("loader") is None:
        return na(cid, "no boot loader gpuhost manages (GRUB or proxmox-boot-tool) on this machine")
    if h.persisted is None:
        return error(cid, no_persisted(h))
    unfinished = unfinished_refresh(h)
    if unfinished:
        return Finding(cid, "manual", h.boot.get("running_kernel"), "a boot loader that holds what its files say",
                       unfinished)
    live = {k: v for k, v in _comparable(h.live).items() if k not in ADDED_BY_LOADER}
    persisted = _comparable(h.persisted)
    diffs = [f"{k}={persisted[k]}" if persisted[k] else k for k in persisted if live.get(k) != persisted[k]]
    diffs += [f"-{k}" for k in live if k not in persisted]
    running, default = h.boot.get("running_kernel"), h.boot.get("default_kernel")
    observed = {"kernel": running, "cmdline": " ".join(f"{k}={v}" if v else k for k, v in live.items())}
    expected = {"kernel": default, "cmdline": " ".join(f"{k}={v}" if v else k for k, v in persisted.items())}
    if next_kernel_without_module(h):
        return Finding(cid, "manual", observed, expected,
                       f"the next boot runs {default}, for which the NVIDIA driver is not built: make {running} the "
                       "boot loader's default (kernel.version's fix pins it) or install a driver for it before rebooting")
    once = bool(h.boot.get("boot_once"))
    # this boot was itself a one-time boot (kernel pin --next-boot), and proxmox-boot-cleanup
    # has since set the boot loader back: the next boot runs the default, on purpose
    rolled_back = bool(h.boot.get("next_boot_pin_consumed")) and not once and default and running != default
    why = []
    if default and running != default:
        why.append(f"the next boot runs {default}" + (" once (a one-time boot: grub-reboot or kernel pin --next-boot)"
                                                      if once else "") + (
            f" ({running} ran this boot once: proxmox-boot-tool kernel pin --next-boot, which "
            "proxmox-boot-cleanup.service undid at this boot)" if rolled_back else ""))
    if diffs:
        why.append("the next boot's command line differs: " + " ".join(diffs))
    if rolled_back:
        # the operator chose this kernel for one boot (a rollback, a trial): when to go back to
        # the default is theirs, so gpuhost says so and never reboots for it
        return Finding(cid, "manual", observed, expected,
                       "; ".join(why) + ": reboot when you choose to go back to it (or `proxmox-boot-tool kernel pin "
                       f"{running}` to keep this one); gpuhost does not reboot for a kernel chosen for one boot")
    if why:
        # a one-time boot of another kernel was chosen on purpose after this boot: not stale
        stale = not_applied_by_this_boot(h, default if default and running != default and not once
                                         and not rolled_back else None, bool(diffs))
        if stale:
            # no fix loop: the boot that should have applied it did not
            return Finding(cid, "manual", observed, expected,
                           "; ".join(why) + f", but {', '.join(stale)} changed before this boot and the boot did not "
                           "apply it: the boot loader does not read it, or its ESPs were not refreshed "
                           "(proxmox-boot-tool refresh / update-grub); a reboot will not help")
        return Finding(cid, "pending_reboot", observed, expected, "; ".join(why) + " (reboot to apply)", True)
    return Finding(cid, "pass", observed, expected, "the running kernel and command line are what the next boot has")
