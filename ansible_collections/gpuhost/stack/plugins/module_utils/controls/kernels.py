"""What several controls need to know of the kernels: the minimum, the one that boots next and
whether it has the NVIDIA module, how to pin one, and why the next command line is unknown.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import KernelPin
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Host
from ansible_collections.gpuhost.stack.plugins.module_utils.versions import at_least, vkey


def kernel_minimum(h: Host) -> str | None:
    if h.s.get("kernel_min_version"):
        return str(h.s["kernel_min_version"])
    pve = (h.section("os") or {}).get("proxmox_ve")
    if pve and vkey(pve)[:1] in ((8,), (9,)):
        # PVE 8's opt-in and PVE 9's first kernel; a PVE 9 host still booting a pinned 6.8 is behind
        return "6.14"
    return None


def kernel_upgrade(h: Host) -> str | None:
    """The kernel series kernel.version's fix will install and boot, if it will."""
    minimum = kernel_minimum(h)
    if minimum is None or "kernel.version" in (h.s.get("controls_skip") or []) or \
            at_least(h.boot.get("default_kernel"), minimum):
        return None
    return minimum


def drives_gpus_now(h: Host) -> bool:
    nv = h.section("nvidia") or {}
    return bool(nv.get("module")) and bool(h.gpus)


def module_missing_for(h: Host, release: str | None) -> bool:
    """The NVIDIA module is loaded now but no nvidia.ko exists for *release*: booting it
    leaves the GPUs without a driver (only the module file proves a dkms build worked)."""
    built = h.boot.get("nvidia_module_for") or {}
    return bool(release) and drives_gpus_now(h) and release in built and not built[release]


def next_kernel_without_module(h: Host) -> str | None:
    """The kernel the boot loader starts next, when it is another one and has no NVIDIA
    module while this host drives its GPUs: booting it loses them."""
    nxt, running = h.boot.get("default_kernel"), h.boot.get("running_kernel")
    return nxt if nxt and nxt != running and module_missing_for(h, nxt) else None


def pin_is_grub_default(h: Host, release: str) -> bool:
    ids = h.boot.get("grub_entries") or {}
    return bool(release in ids and h.boot.get("grub_default") == ids[release])


def pin_fix(h: Host, release: str | None) -> KernelPin | None:
    """How to make *release* the boot loader's default: proxmox-boot-tool kernel pin on
    Proxmox VE (on hosts without ESPs it sets GRUB_DEFAULT itself and runs update-grub), a
    GRUB_DEFAULT drop-in naming the entry by id elsewhere; None where neither can."""
    if not release:
        return None
    entry = (h.boot.get("grub_entries") or {}).get(release)
    if h.boot.get("loader") in ("systemd-boot", "grub-esp") or (
            (h.section("os") or {}).get("proxmox_ve") and (entry is None or ">" in entry)):
        # proxmox-boot-tool's pin on a host without ESPs writes gnulinux-advanced-<id>>...: right
        # only with GRUB's submenu (GRUB_DISABLE_SUBMENU=true breaks it; gpuhost's own pin then)
        return KernelPin(release, "proxmox-boot-tool")
    if h.boot.get("loader") == "grub" and entry:
        return KernelPin(release, "grub", entry)
    return None


def no_persisted(h: Host) -> str:
    """Why the command line the next boot gets is not known: the probe's reason (a GRUB value
    over two lines, a file that cannot be read safely, naming file and line) when it has one."""
    why = h.errors.get("boot")
    return f"cannot tell the persisted kernel command line: {why}" if why else \
        "cannot tell the persisted kernel command line (no GRUB or proxmox-boot-tool config)"


def unfinished_refresh(h: Host) -> str | None:
    """A boot-loader refresh gpuhost started and never saw finish (a power loss, or a
    refresh that failed even after the files were restored): what boots next is what some
    targets hold (one ESP may have the new line, another the old), not what the files say."""
    j = h.boot.get("unfinished_refresh")
    if not j:
        return None
    return (f"a boot-loader refresh gpuhost started at {j.get('since', '?')} did not finish (power loss, or "
            f"`{j.get('refresh', 'the refresh')}` failed): the boot loader may hold `{j.get('after', '?')}` or "
            f"`{j.get('before', '?')}` on each of its targets; before any reboot run `{j.get('refresh', 'the refresh')}` "
            "and then remove /var/lib/gpuhost/boot-refresh.json (gpuhost fix does both when a control that edits the "
            "command line drifts)")
