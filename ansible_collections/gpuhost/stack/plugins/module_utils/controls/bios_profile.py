"""bios.profile: The firmware's system profile is its maximum-performance one.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.profile",
    title="The firmware's system profile is its maximum-performance one",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=("The vendor's power-saving profiles lower clocks and lock the settings under them"),
    references=("AMD Instinct System Acceptance: BIOS Settings (Power Management)",),
    passes=("the BMC's profile attribute at its maximum-performance value; Linux shows nothing of it"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot"),
    params=(param("profile", "performance", ('performance',), "system profile",
                  'AMD Instinct System Acceptance, BIOS Settings: Power Management Maximum Performance'),),
)


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "profile", "system profile")
