"""iommu.mode: The IOMMU is off or gives the host's GPUs, NICs and NVMe drives identity domains.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import CmdlineSet, fix_of
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.kernels import no_persisted
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host

CONTROL = Control(
    id="iommu.mode",
    title="The IOMMU is off or gives the host's GPUs, NICs and NVMe drives identity domains",
    role="iommu",
    fixable=True,
    reboot="yes",
    rationale="A translating IOMMU adds a page-table walk to every DMA of host-owned devices",
    references=("pve-docs: qm-pci-passthrough", "kernel-parameters.txt: iommu=pt, iommu.passthrough"),
    passes=("IOMMU off, or identity domains for the host's own GPUs, NICs and NVMe drives (`iommu=pt`, or "
            "`iommu.passthrough=1`); untrusted devices not judged"),
    repair="`iommu=pt` (x86) / `iommu.passthrough=1` (reboot)",
    facts=("iommu", "pci", "boot", "os"),
)


def _host_owned_kind(d: dict) -> str | None:
    cls = d.get("class") or 0
    if cls >> 8 == 0x0108:
        return "NVMe"
    if d.get("vendor") == 0x10DE and cls >> 16 == 0x03:
        return "GPU"
    return "NIC" if cls >> 16 == 0x02 else None


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    io = h.section("iommu")
    if io is None:
        return error(cid, h.errors.get("iommu", "cannot read the IOMMU"))
    if not io["units"] and not io["groups"]:
        return Finding(cid, "pass", "off", "off or passthrough", "the IOMMU is off")
    # judged: the host's own GPUs, NICs and NVMe drives; devices for VMs (vfio-pci) and
    # untrusted ones (always a DMA domain, drivers/iommu/iommu.c) are not
    judged = [d for d in h.f.get("pci") or [] if _host_owned_kind(d) and d.get("driver") != "vfio-pci"
              and not d.get("removable")]
    if any(d.get("iommu_group_type") for d in judged):
        translated = [d for d in judged if d.get("iommu_group_type") not in ("identity", None)]
    else:
        translated = [] if io["group_types"] == ["identity"] else judged or [{"bdf": "groups"}]
    live = "passthrough" if not translated else "translated"
    if not judged and any("iommu_group_type" in d for d in h.f.get("pci") or []):
        return Finding(cid, "pass", "no host-owned device", "off or passthrough",
                       "no GPU, NIC or NVMe drive the host drives itself (the rest goes to VMs or is untrusted)")
    if h.persisted is None:
        return error(cid, no_persisted(h))
    arch = (h.section("os") or {}).get("machine") or "x86_64"
    x86 = arch in ("x86_64", "i686", "i386")

    def passthrough(p: dict) -> bool:
        # kernel-parameters.txt: iommu.passthrough=1 everywhere; iommu=pt on x86 only
        if "iommu.passthrough" in p:
            return p["iommu.passthrough"] in ("1", "y", "on")
        return x86 and p.get("iommu") == "pt"

    persisted_ok = passthrough(h.persisted)
    where = ", ".join(f"{d['bdf']} ({d.get('iommu_group_type')})" for d in translated[:4] if "iommu_group_type" in d)
    if live == "passthrough" and persisted_ok:
        return Finding(cid, "pass", live, "passthrough", f"identity domains for {len(judged)} host-owned devices")
    if persisted_ok and passthrough(h.live):
        return Finding(cid, "manual", live, "passthrough",
                       f"passthrough is on the running command line but {where or 'the IOMMU groups'} still translate: "
                       "check the kernel log (a driver or the firmware forcing DMA domains)")
    if persisted_ok:
        return Finding(cid, "pending_reboot", live, "passthrough", "passthrough is persisted; it takes effect at the next boot", True)
    param = {"iommu": "pt"} if x86 else {"iommu.passthrough": "1"}
    name = next(iter(param))
    return Finding(cid, "drift", live, "passthrough",
                   f"the IOMMU translates host DMA{' (' + where + ')' if where else ''}; add {name}={param[name]} "
                   "to the kernel command line", reboot_required=True, fix=fix_of(CmdlineSet(param)))
