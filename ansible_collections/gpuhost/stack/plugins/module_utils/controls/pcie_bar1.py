"""pcie.bar1: Every GPU's framebuffer aperture (BAR1) is as large as its firmware can make it.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na

CONTROL = Control(
    id="pcie.bar1",
    title="Every GPU's framebuffer aperture (BAR1) is as large as its firmware can make it",
    role="pcie",
    fixable=False,
    reboot="-",
    rationale=("Firmware that leaves Above 4G Decoding or Resizable BAR off gives the GPU a 256 MB window where its "
               "whole framebuffer fits: host and peer access to GPU memory (GPUDirect, P2P over PCIe, some "
               "driver paths) go through a keyhole"),
    references=("PCIe Base Specification: Resizable BAR Extended Capability",
                "include/uapi/linux/pci_regs.h: PCI_EXT_CAP_ID_REBAR, PCI_REBAR_CAP, PCI_REBAR_CTRL",
                "drivers/pci/pci-sysfs.c: resource", "nvidia-smi -q: BAR1 Memory Usage",
                "NVIDIA/open-gpu-kernel-modules: kernel-open/nvidia/nv-reg.h (NVreg_EnableResizableBar, default 0), "
                "kernel-open/nvidia/nv-pci.c (nv_resize_pcie_bars)"),
    passes=("every host-driven NVIDIA GPU's largest 64-bit prefetchable memory BAR (the framebuffer aperture: BAR 1, "
            "BAR 2 from Blackwell on) is at least its framebuffer memory, or the largest size its Resizable BAR "
            "capability offers; a GPU without that capability is not failed; one whose extended config space could "
            "not be read (256 bytes: no Resizable BAR capability to see) cannot be told: error; na on vfio-pci"),
    repair=("manual: in the firmware, Above 4G Decoding and Re-Size BAR Support on, then a cold boot; where the "
            "firmware has no such setting, the NVIDIA driver (530 and later) resizes BAR1 itself at load with "
            "`options nvidia NVreg_EnableResizableBar=1` (0 by default)"),
    facts=("pci", "nvidia"),
)


def _size(mib: int) -> str:
    return f"{mib >> 10} GiB" if mib >= 1024 and mib % 1024 == 0 else f"{mib} MiB"


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    gpus = [g for g in h.gpus if g.get("driver") != "vfio-pci"]
    if not gpus:
        return na(cid, "no NVIDIA GPU the host drives" + (" (one on vfio-pci is its VM's)" if h.gpus else ""))
    dead = [g["bdf"] for g in gpus if g.get("dead")]
    if dead:
        return error(cid, f"{', '.join(dead)} does not answer (config space all ones): its BARs cannot be read")
    unread = [g["bdf"] for g in gpus if g.get("config_error")]
    if unread:
        return error(cid, f"cannot read config space of {', '.join(unread)}: {gpus[0]['config_error']}")
    memory = {g["bdf"]: g.get("memory_mib") for g in ((h.section("nvidia") or {}).get("gpus") or [])}
    small, seen, untold = [], [], []
    for g in gpus:
        bars = [r for r in g.get("resources") or [] if r["prefetch"] and r["mem64"]]
        if not bars:
            return error(cid, f"{g['bdf']} shows no 64-bit prefetchable memory BAR (sysfs resource): cannot tell "
                              "its framebuffer aperture")
        aperture = max(bars, key=lambda r: r["mib"])
        offered = max((max(b["sizes_mib"]) for b in g.get("rebar") or []
                       if b["bar"] == aperture["index"] and b["sizes_mib"]), default=None)
        fb = memory.get(g["bdf"])
        seen.append(f"{g['bdf']} BAR{aperture['index']} {_size(aperture['mib'])}"
                    + (f" of {_size(fb)} memory" if fb else ""))
        if fb is not None and aperture["mib"] >= fb:
            continue
        if offered is None and 0 < (g.get("config_size") or 4096) <= 256:
            # only the first 256 bytes were read (no extended config space: the Resizable BAR
            # capability lies past 0x100, PCIe Base Specification), so "none" is unknown
            untold.append(f"{g['bdf']} BAR{aperture['index']} is {_size(aperture['mib'])}"
                          + (f" for {_size(fb)} of memory" if fb else "") + f", and only {g['config_size']} bytes "
                          "of its config space could be read: whether its Resizable BAR offers more cannot be told")
            continue
        if offered is None:
            if fb is None:
                return error(cid, f"{g['bdf']}: the driver does not report its memory and it has no Resizable BAR "
                                  "capability: cannot tell whether its aperture is whole")
            continue            # no large-BAR support: the size it has is the only one
        if aperture["mib"] >= offered:
            continue
        small.append(f"{g['bdf']} BAR{aperture['index']} is {_size(aperture['mib'])}"
                     + (f" for {_size(fb)} of memory" if fb else "") + f"; its Resizable BAR offers up to {_size(offered)}")
    observed = ", ".join(seen)
    if small:
        return Finding(cid, "manual", observed, "the whole framebuffer, or the largest size offered",
                       "; ".join(small + untold) + ": turn on Above 4G Decoding and Re-Size BAR Support in the "
                       "firmware (then a cold boot; bios.above4g and bios.rebar judge them through the BMC); where it "
                       "has no such setting, the NVIDIA driver (530 and later) "
                       "resizes BAR1 itself at load with `options nvidia NVreg_EnableResizableBar=1` (0 by default)")
    if untold:
        return error(cid, "; ".join(untold))
    return Finding(cid, "pass", observed, "the whole framebuffer, or the largest size offered",
                   f"{len(gpus)} GPUs map their whole framebuffer or the largest aperture offered")
