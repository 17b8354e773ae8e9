"""kernel.version: The running kernel is at least the minimum.
"""
from __future__ import annotations

import re
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of, KernelSeries
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.kernels import (
    drives_gpus_now, kernel_minimum, module_missing_for, next_kernel_without_module, pin_fix, pin_is_grub_default)
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na, Param
from ansible_collections.gpuhost.stack.plugins.module_utils.versions import at_least, kernel_flavor, vkey

CONTROL = Control(
    id="kernel.version",
    title="The running kernel is at least the minimum",
    role="kernel",
    fixable=True,
    reboot="yes",
    rationale=("Old kernels lack amd_pstate defaults for Zen 5 and scheduler fixes the GPUs' feeding threads need; "
               "the new kernel comes from the distribution's series metapackage in the flavour running now (so it "
               "keeps getting updates), and a kernel without an NVIDIA module built for it is never booted nor left "
               "as the boot loader's default"),
    references=("pve-docs: system-booting", "proxmox-kernel-helper: proxmox-boot-tool kernel pin", "dkms(8)",
                "grub-mkconfig: util/grub.d/00_header.in, 10_linux.in"),
    passes=("running kernel >= `gpuhost_kernel_min_version`, else 6.14 on Proxmox VE 8 and 9; flavours as the "
            "distribution names them (`6.14.8-2-bpo12-pve` is `pve`); a newer kernel the NVIDIA module did not "
            "build for: manual, the running kernel pinned"),
    repair=("install the series metapackage in the flavour running now (`proxmox-kernel-X.Y`; Debian backports' "
            "`linux-image-<flavour>`; Ubuntu `linux-generic-hwe-<release>`), with headers where dkms builds the "
            "driver, keep the old one; where the module did not build, pin the running kernel (`proxmox-boot-tool "
            "kernel pin`, or GRUB_DEFAULT by entry id); a kernel without the module that boots next is pinned away "
            "(reboot)"),
    facts=("boot", "os", "nvidia", "pci"),
    params=(Param("gpuhost_kernel_min_version", "str", "", "kernel_min_version",
                  'Minimum running kernel, like "6.14"; empty: 6.14 on Proxmox VE 8, else kernel.version is na.',
                  pattern=r"^\d+(\.\d+){0,2}$", what='a kernel version like "6.14"'),),
)


KERNEL_SERIES = re.compile(r"^\d+(\.\d+){0,2}$")


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    minimum = kernel_minimum(h)
    running = h.boot.get("running_kernel")
    if minimum is not None and not KERNEL_SERIES.match(minimum):
        # the CLI's inventory check refuses it first; a playbook that skips the check still
        # never hands it to apt or a shell
        return error(cid, f"gpuhost_kernel_min_version is not a kernel version like \"6.14\": {minimum!r}")
    if running is None:
        return error(cid, "cannot read the running kernel") if minimum else \
            na(cid, "no minimum kernel set (gpuhost_kernel_min_version) and not Proxmox VE 8 or 9")
    default = h.boot.get("default_kernel")
    pin = pin_fix(h, running)
    want = f">= {minimum}" if minimum else "a kernel with the NVIDIA module boots next"
    if next_kernel_without_module(h):
        # never left as any boot loader's default, whatever installed it (an unattended update
        # whose dkms build failed too): whoever reboots next would lose the GPUs
        once = " once (a one-time boot)" if h.boot.get("boot_once") else ""
        if pin is None:
            return Finding(cid, "manual", running, want,
                           f"{default} boots next{once} but the NVIDIA driver is not built for it (no nvidia.ko in "
                           f"/lib/modules/{default}), and gpuhost cannot pin {running} here (no GRUB entry id for it): "
                           "make the running kernel the boot loader's default, then install a driver that supports "
                           f"{default}")
        return Finding(cid, "drift", running, want,
                       f"{default} boots next{once} but the NVIDIA driver is not built for it (no nvidia.ko in "
                       f"/lib/modules/{default}): pin the running kernel {running}, which has it", fix=fix_of(pin))
    if minimum is None:
        return na(cid, "no minimum kernel set (gpuhost_kernel_min_version) and not Proxmox VE 8 or 9")
    if at_least(running, minimum):
        return Finding(cid, "pass", running, f">= {minimum}", f"running {running}")
    flavor = kernel_flavor(running)
    candidates = [k for k in h.boot.get("installed_kernels") or [] if at_least(k, minimum) and kernel_flavor(k) == flavor]
    unbuilt = [k for k in candidates if module_missing_for(h, k)]
    if unbuilt:
        return Finding(cid, "manual", running, f">= {minimum}",
                       f"{unbuilt[-1]} is installed but the NVIDIA driver did not build for it (no nvidia.ko in "
                       f"/lib/modules/{unbuilt[-1]}); {running} stays the kernel that boots"
                       + (" (pinned)" if h.boot.get("permanent_pin") == running or pin_is_grub_default(h, running) else "")
                       + f": install a driver that supports {unbuilt[-1]}, then boot it")
    if at_least(default, minimum):
        return Finding(cid, "pending_reboot", running, f">= {minimum}", f"{default} is installed and boots next", True)
    imageless = {k: owners for k, owners in (h.boot.get("kernels_without_image") or {}).items()
                 if at_least(k, minimum) and kernel_flavor(k) == flavor}
    if imageless:
        # installing the series again changes nothing (apt has it): the fix would run for ever
        k = sorted(imageless, key=vkey)[-1]
        package = " or ".join(imageless[k]) or "the package that owns /lib/modules/" + k
        return Finding(cid, "manual", running, f">= {minimum}",
                       f"{k} is installed (/lib/modules/{k}) but /boot/vmlinuz-{k} is missing, so no boot loader can "
                       f"start it: check that /boot is mounted, then `apt install --reinstall {package}` "
                       "(and run gpuhost fix again)")
    headers = bool(h.boot.get("nvidia_dkms"))
    # a pin of an older kernel (the operator's, or gpuhost's own GRUB pin from a build that
    # failed before): lifted once the new kernel proves it has the module
    unpin = (bool(h.boot.get("permanent_pin")) and not at_least(h.boot.get("permanent_pin"), minimum)) \
        or bool(h.boot.get("gpuhost_grub_pin"))
    built = [k for k in candidates if k not in unbuilt]
    if built and not unpin:
        # a kernel of the minimum is there and has the module, but the boot loader's own
        # default starts an older one (GRUB_DEFAULT=saved and grub-set-default, or an entry
        # named in GRUB_DEFAULT: the operator's choice, 00_header.in). Installing the series
        # again changes nothing and a reboot starts the same kernel: a person decides
        held = h.boot.get("grub_default")
        how = f" (GRUB_DEFAULT={held})" if held not in (None, "0") else ""
        return Finding(cid, "manual", running, f">= {minimum}",
                       f"{built[-1]} is installed with the NVIDIA module, but the boot loader's own default{how} "
                       f"starts {default}: make {built[-1]} its default (grub-set-default, or GRUB_DEFAULT=0 and "
                       "update-grub), then reboot; gpuhost installs nothing and does not reboot for it")
    chosen = series_packages(h, minimum, flavor, headers)
    if chosen is None:
        return Finding(cid, "manual", running, f">= {minimum}",
                       f"gpuhost knows no kernel metapackage for {running} on this distribution: install a {minimum} "
                       "kernel series of the same flavour")
    packages, release = chosen
    fix = fix_of(KernelSeries(minimum, tuple(packages), flavor, running, headers, drives_gpus_now(h), pin, unpin, release))
    msg = f"kernel {running} is older than {minimum}; install " + " ".join(packages)
    if headers:
        msg += " (with headers: the NVIDIA driver is built by dkms)"
    return Finding(cid, "drift", running, f">= {minimum}", msg, reboot_required=True, fix=fix)


def series_packages(h: Host, series: str, flavor: str | None, headers: bool) -> tuple[list[str], str | None] | None:
    """(the distribution's metapackages that follow a kernel series in the flavour the host
    runs, the apt release to take them from): never one ABI-versioned image, which gets no
    updates (and on Ubuntu comes without linux-modules-extra, most NIC and storage drivers).
    Proxmox VE: proxmox-kernel-X.Y (+ proxmox-headers-X.Y). Debian: the backports'
    linux-image-<flavour> (+ linux-headers-<flavour>) from <codename>-backports, where newer
    series come from. Ubuntu: the HWE series linux-<flavour>-hwe-<release> (image, modules
    and headers). The fix then checks that the series installed is at least the minimum."""
    os_ = h.section("os") or {}
    if os_.get("proxmox_ve"):
        return [f"proxmox-kernel-{series}"] + ([f"proxmox-headers-{series}"] if headers else []), None
    if flavor is None:
        return None
    if os_.get("id") == "ubuntu":
        if flavor not in UBUNTU_HWE_FLAVORS or not os_.get("version_id"):
            return None
        return [f"linux-{flavor}-hwe-{os_['version_id']}"], None
    if os_.get("id") == "debian" and os_.get("codename"):
        return ([f"linux-image-{flavor}"] + ([f"linux-headers-{flavor}"] if headers else []),
                f"{os_['codename']}-backports")
    return None


# Ubuntu's HWE metapackages exist for these flavours (linux-meta-hwe-*: linux-generic-hwe-24.04,
# linux-lowlatency-hwe-24.04...); cloud flavours follow their own kernels
UBUNTU_HWE_FLAVORS = ("generic", "lowlatency")
