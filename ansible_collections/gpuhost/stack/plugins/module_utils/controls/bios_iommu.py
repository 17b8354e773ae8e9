"""bios.iommu: The IOMMU is on in the firmware.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.iommu",
    title="The IOMMU is on in the firmware",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=('GPU passthrough and isolation need the IOMMU; with the kernel in pass-through mode it costs host DMA nothing'),
    references=("AMD Instinct System Acceptance: BIOS Settings (IOMMU)", "Documentation/arch/x86/iommu.rst"),
    passes=("the BMC's IOMMU attribute at `gpuhost_bios_iommu` (on) and Linux's `/sys/class/iommu` agreeing"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot", "iommu"),
    params=(param("iommu", "on", ('on', 'off'), "IOMMU",
                  'AMD Instinct System Acceptance, BIOS Settings: IOMMU Enabled, required (the kernel then runs it in pass-through: iommu.mode)'),),
)


def linux(h: Host):
    """IOMMU units in /sys/class/iommu (sysfs-class-iommu): the firmware's tables found and
    the kernel using them; none says nothing (the kernel may be told to leave it off)."""
    units = (h.f.get("iommu") or {}).get("units")
    return ("on", f"{len(units)} IOMMU units in /sys/class/iommu") if units else None


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "iommu", "IOMMU", linux)
