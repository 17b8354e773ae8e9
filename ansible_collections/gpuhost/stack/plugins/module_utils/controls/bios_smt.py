"""bios.smt: Simultaneous multithreading is as gpuhost_bios_smt asks.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.smt",
    title="Simultaneous multithreading is as gpuhost_bios_smt asks",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=('The host threads that feed the GPUs (tokenizers, schedulers, the Python around them) are many and light: SMT doubles the '
               'threads they get'),
    references=("AMD Instinct System Acceptance: BIOS Settings (SMT control)", "Documentation/ABI/testing/sysfs-devices-system-cpu (smt/control)"),
    passes=("the BMC's SMT attribute at `gpuhost_bios_smt` (on) and Linux's `smt/control` agreeing (`notsupported`: off in the firmware)"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot", "cpu"),
    params=(param("smt", "on", ('on', 'off'), "SMT",
                  "AMD Instinct System Acceptance, BIOS Settings: SMT Auto where the primary application is not compute-bound, as a GPU "
                  "server's host side is"),),
)


def linux(h: Host):
    """smt/control (kernel/cpu.c): on, off or forceoff where the CPUs offer threads (the
    firmware's on); notsupported where they offer one a core (the firmware's off, or none)."""
    control = (h.f.get("cpu") or {}).get("smt_control")
    if control in ("on", "off", "forceoff"):
        return "on", f"smt/control {control}"
    if control == "notsupported":
        return "off", "smt/control notsupported"
    return None


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "smt", "SMT", linux)
