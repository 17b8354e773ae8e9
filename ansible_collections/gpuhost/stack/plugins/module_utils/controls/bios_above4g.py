"""bios.above4g: Above 4G decoding is on in the firmware.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.above4g",
    title="Above 4G decoding is on in the firmware",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=("Without 64-bit MMIO above 4 GiB a GPU's framebuffer aperture stays small (pcie.bar1)"),
    references=("AMD Instinct System Acceptance: BIOS Settings (Above 4G decoding)",),
    passes=("the BMC's above-4G attribute at `gpuhost_bios_above4g` (on)"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot"),
    params=(param("above4g", "on", ('on', 'off'), "above 4G decoding",
                  'AMD Instinct System Acceptance, BIOS Settings: Above 4G decoding Enabled (GPU large BAR support)'),),
)


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "above4g", "above 4G decoding")
