"""bios.boost: Core performance boost is on in the firmware.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.boost",
    title="Core performance boost is on in the firmware",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=('Without boost every host thread runs at base clock, often 30-40 % below the boost clock'),
    references=("Documentation/admin-guide/pm/cpufreq.rst (Frequency Boost Support)", "AMD Instinct System Acceptance: BIOS Settings (Power "
                "Management: Maximum Performance)"),
    passes=("the BMC's boost attribute at `gpuhost_bios_boost` (on) and the cpufreq driver offering a boost switch"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot", "cpufreq"),
    params=(param("boost", "on", ('on', 'off'), "core performance boost",
                  'Documentation/admin-guide/pm/cpufreq.rst (Frequency Boost Support): boost off in the firmware leaves the driver no switch'),),
)


def linux(h: Host):
    """acpi-cpufreq offers a boost switch (cpufreq/boost) only where the CPU reports boost,
    which firmware that turns it off hides (cpufreq.rst: Frequency Boost Support; cpu.boost);
    whether it is on now is Linux's own. Other drivers keep the switch either way."""
    cf = h.f.get("cpufreq") or {}
    if not cf.get("policies") or cf.get("driver") != "acpi-cpufreq":
        return None
    offered = cf.get("boost") is not None or any(p.get("boost") is not None for p in cf["policies"])
    return ("on", f"{cf['driver']} offers a boost switch") if offered else ("off", f"{cf['driver']} offers no boost switch")


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "boost", "core performance boost", linux)
