"""bios.cstates: Global C-state control is as gpuhost_bios_cstates asks.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.cstates",
    title="Global C-state control is as gpuhost_bios_cstates asks",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=('Turning C-states off in the firmware also takes the headroom boost needs; the deep states that slow a GPU host are disabled '
               'from Linux (cpu.cstates)'),
    references=("AMD Instinct System Acceptance: BIOS Settings (Global C-state control)",),
    passes=("the BMC's global C-state attribute at `gpuhost_bios_cstates` (on)"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot"),
    params=(param("cstates", "on", ('on', 'off'), "global C-states",
                  'AMD Instinct System Acceptance, BIOS Settings: Global C-state control Auto, not to be disabled (cpu.cstates disables the '
                  'deep states from Linux)'),),
)


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "cstates", "global C-states")
