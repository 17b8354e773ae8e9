"""pcie.acs: No ACS redirect on the downstream ports of switches with a GPU below (n/a where devices go to VMs).
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import CmdlineRemove, CmdlineSet, fix_of, UnitRemoval
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.pci import config_writes_refused, pci_change, strange_addresses

CONTROL = Control(
    id="pcie.acs",
    title="No ACS redirect on the downstream ports of switches with a GPU below (n/a where devices go to VMs)",
    role="pcie",
    fixable=True,
    reboot="if cmdline",
    rationale=("ACS request/completion redirect forces GPU peer-to-peer and GPUDirect traffic up to the root "
               "complex; with an IOMMU the kernel sets it at every boot, so it is cleared with "
               "pci=disable_acs_redir="),
    references=("PCIe Base Spec: ACS Control", "kernel-parameters.txt: pci=disable_acs_redir", "drivers/pci/pci.c: pci_std_enable_acs",
                "drivers/pci/pci-sysfs.c: config writes refused under lockdown (LOCKDOWN_PCI_ACCESS)"),
    passes=("no ACS redirect on the downstream ports of a switch with a GPU below (NIC and NVMe ports included), "
            "now and at boot; na on VM hosts (`hostpciN`, `vfio-pci.ids=`, vfio-pci bound), which keep nothing of "
            "gpuhost's that clears ACS; 256-byte config space: error"),
    repair="`pci=disable_acs_redir=pci:VENDOR:DEVICE` (other `pci=` options kept) + `setpci` now; under kernel lockdown the command line alone (reboot)",
    facts=("pci", "iommu", "vms", "boot", "units", "lockdown"),
    units=("gpuhost-pcie-acs.service",),
)


ACS_REDIRECT = {0x04: "ReqRedir", 0x08: "CmpltRedir", 0x20: "EgressCtrl"}
ACS_UNIT = CONTROL.units[0]     # gpuhost < 0.2 re-applied ACS with a boot unit
ACS_REDIRECT_BITS = 0x2C
PORT_DOWNSTREAM, PORT_UPSTREAM = 6, 5     # PCIe capability: Device/Port Type


def vm_passthrough(h: Host) -> list[str]:
    """Evidence that this host passes devices to VMs: ACS isolation is then what VFIO's
    IOMMU groups rest on (pve-docs qm-pci-passthrough)."""
    why = [f"vfio-pci on {d['bdf']}" for d in h.f.get("pci") or [] if d.get("driver") == "vfio-pci"][:3]
    vms = ((h.section("vms") or {}).get("hostpci")) or {}
    if vms:
        why.append("hostpci in VM " + ", ".join(sorted(vms, key=lambda v: int(v) if v.isdigit() else 0)))
    for name, p in (("running", h.live), ("persisted", h.persisted or {})):
        if p.get("vfio-pci.ids"):
            why.append(f"vfio-pci.ids= on the {name} command line")
            break
    return why


def acs_ports(h: Host) -> list[dict]:
    """The downstream ports of every PCIe switch with a GPU below it, all of them (a NIC or
    NVMe drive beside the GPUs is a GPUDirect peer: drivers/pci/p2pdma.c checks both
    paths). Root ports are not judged: peers under different root ports go through the
    host bridge anyway."""
    switches = set()
    for gpu in h.gpus:
        for b in h.path_up(gpu["bdf"]):
            if b.get("port_type") == PORT_UPSTREAM:
                switches.add(b["bdf"])
    return sorted((d for d in h.f.get("pci") or [] if d.get("port_type") == PORT_DOWNSTREAM and d.get("parent") in switches),
                  key=lambda d: d["bdf"])


def disable_acs_redir_value(ports: list[dict]) -> str:
    """Devices for pci=disable_acs_redir= by vendor:device ("pci:<vendor>:<device>",
    kernel-parameters.txt): names every port of that switch model whatever its bus number
    after a renumbering, and needs no ';' for a single model."""
    ids = sorted({f"pci:{p['vendor']:04x}:{p['device']:04x}" for p in ports})
    return ";".join(ids)


def pci_param_with(persisted: dict, value: str | None) -> str | None:
    """The pci= parameter with disable_acs_redir= set to *value* (None: taken out) and its
    other comma-separated options kept."""
    opts = [o for o in (persisted.get("pci") or "").split(",") if o and not o.startswith("disable_acs_redir=")]
    if value:
        opts.append(f"disable_acs_redir={value}")
    return ",".join(opts) or None


def persisted_acs_redir(persisted: dict) -> str | None:
    for o in (persisted.get("pci") or "").split(","):
        if o.startswith("disable_acs_redir="):
            return o[len("disable_acs_redir="):]
    return None


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    if not h.gpus:
        return na(cid, "no NVIDIA GPU function")
    persisted = h.persisted or {}
    ours_unit = ((h.f.get("units") or {}).get(ACS_UNIT) or {}).get("content") is not None
    vm = vm_passthrough(h)
    if vm:
        leftovers: list = []
        if ours_unit:
            leftovers.append(UnitRemoval(ACS_UNIT))
        if persisted_acs_redir(persisted) is not None:
            new = pci_param_with(persisted, None)
            leftovers.append(CmdlineSet({"pci": new}) if new else CmdlineRemove(("pci",)))
        if leftovers:
            return Finding(cid, "drift", "ACS cleared for a VM host", "ACS isolation kept",
                           "this host passes devices to VMs (" + "; ".join(vm) + "): take out what clears ACS",
                           reboot_required=any(isinstance(k, (CmdlineSet, CmdlineRemove)) for k in leftovers),
                           fix=fix_of(*leftovers))
        return na(cid, "this host passes devices to VMs (" + "; ".join(vm) + "): ACS isolation stays")
    ports = acs_ports(h)
    if not ports:
        return Finding(cid, "pass", "no PCIe switch above the GPUs", "no ACS redirect on switch ports",
                       "GPUs sit on root ports; peer traffic goes through the host bridge")
    unreadable = [p["bdf"] for p in ports if p.get("config_error") or (p.get("config_size") or 4096) <= 256]
    if unreadable:
        return error(cid, f"cannot read the ACS capability of {', '.join(unreadable)}: only 256 bytes of config "
                          "space (no extended config access); ACS is unknown, not absent")
    acs = [p for p in ports if p.get("acs_ctrl") is not None]
    bad = [p for p in acs if p["acs_ctrl"] & ACS_REDIRECT_BITS]
    # the kernel sets ReqRedir and CmpltRedir on every ACS port at boot when an IOMMU is on
    # (pci_std_enable_acs); pci=disable_acs_redir= clears them before IOMMU groups form
    redirectable = [p for p in acs if (p.get("acs_caps") or 0) & ACS_REDIRECT_BITS]
    iommu = h.section("iommu") or {}
    iommu_on = bool(iommu.get("units") or iommu.get("groups"))
    # with the IOMMU off the kernel leaves ACS as firmware set it: a clean port stays clean
    want = disable_acs_redir_value(redirectable) if redirectable and (iommu_on or bad) else None
    have = persisted_acs_redir(persisted)
    covered = want is None or (have is not None and set(want.split(";")) <= set(have.split(";")))
    if not bad and covered and not ours_unit:
        return Finding(cid, "pass", "no redirect", "no ACS redirect on switch ports",
                       f"{len(ports)} switch ports clear" + (f", kept by pci=disable_acs_redir={have}" if have else ""))
    kinds: list = []
    if not covered:
        merged = ";".join(sorted(set(want.split(";")) | set((have or "").split(";")) - {""}))
        kinds.append(CmdlineSet({"pci": pci_param_with(persisted, merged)}))
    if ours_unit:
        kinds.append(UnitRemoval(ACS_UNIT))
    # under kernel lockdown setpci is refused (EPERM): the command line alone clears the
    # redirect, at the next boot, before IOMMU groups form
    locked = config_writes_refused(h)
    if bad and not locked:
        strange = strange_addresses(bad)
        if strange:
            return error(cid, f"the host names a PCI function {', '.join(strange)}: not an address gpuhost puts in a command")
        kinds += [pci_change(p, "ECAP_ACS+6.w", 0, ACS_REDIRECT_BITS) for p in bad]
    observed = "; ".join(f"{p['bdf']} " + "+".join(n for bit, n in ACS_REDIRECT.items() if p["acs_ctrl"] & bit) for p in bad)
    msg = ("ACS redirect sends GPU peer traffic up to the root complex" if bad
           else "clear now, but the next boot sets ACS redirect again")
    if not covered:
        msg += f"; persist pci=disable_acs_redir={want}"
    if bad and locked:
        msg += (f"; kernel lockdown ({locked}, Secure Boot) refuses setpci, so the redirect clears at the next boot"
                if not covered else
                f"; pci=disable_acs_redir={have} is on the command line and kernel lockdown ({locked}, Secure Boot) "
                "refuses setpci: the next boot clears it")
        if not kinds:
            return Finding(cid, "pending_reboot", observed, "no ACS redirect on switch ports", msg, True)
    return Finding(cid, "drift", observed or "clear now, not at boot", "no ACS redirect on switch ports", msg,
                   reboot_required=bool(bad and locked), fix=fix_of(*kinds))
