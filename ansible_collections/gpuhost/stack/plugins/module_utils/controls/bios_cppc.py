"""bios.cppc: The firmware offers CPPC, which amd-pstate needs.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.cppc",
    title="The firmware offers CPPC, which amd-pstate needs",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=('Without CPPC (ACPI _CPC) amd-pstate cannot load and the host runs acpi-cpufreq, whose few P-states and slow ramps the seed '
               'host showed'),
    references=("Documentation/admin-guide/pm/amd-pstate.rst (Processor Support)", "Documentation/admin-guide/acpi/cppc_sysfs.rst (acpi_cppc)"),
    passes=("the BMC's CPPC attribute at `gpuhost_bios_cppc` (on) and `cpu0/acpi_cppc` in sysfs agreeing"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot", "cpu"),
    params=(param("cppc", "on", ('on', 'off'), "CPPC",
                  "Documentation/admin-guide/pm/amd-pstate.rst: amd-pstate does not load without the firmware's _CPC"),),
)


def linux(h: Host):
    """cpu0/acpi_cppc exists only where the firmware gave _CPC (drivers/acpi/cppc_acpi.c)."""
    cpu = h.f.get("cpu") or {}
    if cpu.get("hypervisor") or "cppc" not in cpu:
        return None
    return ("on", "cpu0/acpi_cppc in sysfs") if cpu["cppc"] else ("off", "no cpu0/acpi_cppc in sysfs")


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "cppc", "CPPC", linux)
