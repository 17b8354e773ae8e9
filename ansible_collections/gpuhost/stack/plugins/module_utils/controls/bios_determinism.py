"""bios.determinism: The AMD determinism slider is as gpuhost_bios_determinism asks.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.determinism",
    title="The AMD determinism slider is as gpuhost_bios_determinism asks",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=('Power determinism lets each part run to its own power limit, the highest clocks it can hold'),
    references=("AMD Instinct System Acceptance: BIOS Settings (Determinism slider)",),
    passes=("the BMC's determinism attribute at `gpuhost_bios_determinism` (power); Linux shows nothing of it"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot"),
    params=(param("determinism", "power", ('power', 'performance'), "determinism slider",
                  'AMD Instinct System Acceptance, BIOS Settings: Determinism control Manual, slider Power'),),
)


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "determinism", "determinism slider")
