"""bios.rebar: Resizable BAR is as gpuhost_bios_rebar asks.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.rebar",
    title="Resizable BAR is as gpuhost_bios_rebar asks",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=('Resizable BAR lets a GPU whose firmware offers it map all its memory; data-center GPUs mostly ship a large BAR1'),
    references=("Documentation/ABI/testing/sysfs-bus-pci (resourceN_resize)",),
    passes=("left as it is by default; otherwise the BMC's Resizable BAR attribute at `gpuhost_bios_rebar`"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot"),
    params=(param("rebar", "keep", ('on', 'off'), "Resizable BAR",
                  'no GPU-server guide asks for it; pcie.bar1 judges the aperture the GPU gets'),),
)


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "rebar", "Resizable BAR")
