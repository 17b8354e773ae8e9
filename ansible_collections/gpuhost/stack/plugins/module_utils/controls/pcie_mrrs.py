"""pcie.mrrs: Every NVIDIA GPU function has PCIe Max_Read_Request_Size 4096.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na, Param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.pci import (config_writes_refused, dead_gpus, pci_change, setpci_args,
                                                                                 strange_addresses)
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import Run, unit, unit_current_or_absent

CONTROL = Control(
    id="pcie.mrrs",
    title="Every NVIDIA GPU function has PCIe Max_Read_Request_Size 4096",
    role="pcie",
    fixable=True,
    reboot="no",
    rationale="A 512-byte MaxReadReq splits DMA reads into many small requests (the seed host's biggest find)",
    references=("PCIe Base Spec: Device Control", "setpci(8)",
                "drivers/pci/pci-sysfs.c: config writes refused under lockdown (LOCKDOWN_PCI_ACCESS)"),
    passes=("MaxReadReq 4096 on every NVIDIA GPU function the host drives; a GPU whose config space reads all ones "
            "(fallen off the bus) is an error naming it and its port, never a register to set; under kernel lockdown "
            "(Secure Boot) config writes are refused: manual, a firmware setting"),
    repair="`setpci -s BDF -d VENDOR:DEVICE CAP_EXP+8.w=5000:7000` + boot unit (never writes a renumbered stranger)",
    facts=("pci", "lockdown", "units"),
    units=("gpuhost-pcie-mrrs.service",),
    params=(Param("gpuhost_pcie_mrrs_devices", "list", [], "pcie_mrrs_devices",
                  "PCI addresses besides the GPUs that pcie.mrrs also sets to 4096 (NICs, NVMe).", elements="str"),),
)


MRRS_4096 = "CAP_EXP+8.w=5000:7000"      # Device Control bits 14:12 = 101b: 4096 bytes


def mrrs_unit(targets: list[dict]) -> dict:
    """Re-applied at boot on the devices judged, each matched by address AND vendor:device
    (setpci's -s and -d both select: a renumbered bus writes nothing to a stranger)."""
    return unit("gpuhost-pcie-mrrs.service", "pcie.mrrs: MaxReadReq 4096 on GPU functions",
                [Run(("/usr/bin/setpci", *setpci_args(d, MRRS_4096)), failure_ok=True) for d in targets])


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    extra = [b.lower() for b in (h.s.get("pcie_mrrs_devices") or [])]
    targets = [d for d in h.f.get("pci") or [] if (d in h.gpus or d["bdf"] in extra) and d.get("driver") != "vfio-pci"]
    if not targets:
        return na(cid, "no NVIDIA GPU function the host drives")
    strange = strange_addresses(targets)
    if strange:
        return error(cid, f"the host names a PCI function {', '.join(strange)}: not an address gpuhost puts in a command")
    unreadable = [d["bdf"] for d in targets if d.get("config_error")]
    if unreadable:
        return error(cid, f"cannot read config space of {', '.join(unreadable)}: {targets[0].get('config_error')}")
    dead = dead_gpus(h, targets)
    if dead:
        return error(cid, dead)
    bad = [d for d in targets if d.get("mrrs") != 4096]
    u = mrrs_unit(targets)
    observed = ", ".join(sorted({str(d.get("mrrs")) for d in targets})) + " bytes"
    locked = config_writes_refused(h)
    if locked and bad:
        # setpci now and the boot unit would both fail with EPERM: what firmware sets is what stays
        return Finding(cid, "manual", observed, "4096 bytes",
                       f"MaxReadReq {', '.join(sorted({str(d.get('mrrs')) for d in bad}))} on "
                       + ", ".join(d["bdf"] for d in bad) + f": kernel lockdown ({locked}, Secure Boot) refuses PCI "
                       "config writes from user space; set Max Read Request in the firmware's PCIe settings")
    if locked:
        return Finding(cid, "pass", observed, "4096 bytes",
                       f"MaxReadReq 4096 on {len(targets)} functions, as firmware set it (kernel lockdown: no unit can write it)")
    if not bad and unit_current_or_absent(h.f, u):
        return Finding(cid, "pass", observed, "4096 bytes", f"MaxReadReq 4096 on {len(targets)} functions")
    fix = fix_of(u, *(pci_change(d, "CAP_EXP+8.w", 0x5000, 0x7000) for d in bad))
    msg = (f"MaxReadReq {', '.join(sorted({str(d.get('mrrs')) for d in bad}))} on " + ", ".join(d["bdf"] for d in bad)
           if bad else "gpuhost's boot unit does not cover every GPU function")
    return Finding(cid, "drift", observed, "4096 bytes", msg, fix=fix)
