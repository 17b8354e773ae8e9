"""bios.nps: The firmware makes the NUMA nodes per socket gpuhost_bios_nps asks for.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import BMC_PARAMS, judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.nps",
    title="The firmware makes the NUMA nodes per socket gpuhost_bios_nps asks for",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=("Each NUMA node per socket splits memory and the PCIe roots into smaller domains: a GPU's host copies and its serving "
               "process's memory cross them unless everything is pinned"),
    references=("AMD Instinct System Acceptance: BIOS Settings (NUMA nodes per socket)", "Documentation/ABI/stable/sysfs-devices-node "
                "(has_cpu, nodeX/cpulist)"),
    passes=("the BMC's NPS attribute at `gpuhost_bios_nps` (1), nothing else pending, and Linux's nodes with CPUs per package the same"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot", "numa"),
    params=(param("nps", "1", ('0', '1', '2', '4'), "NUMA nodes per socket",
                  'AMD Instinct System Acceptance, BIOS Settings: NUMA nodes per socket Auto (NPS1), other values not to be used'),
            *BMC_PARAMS),
)


def linux(h: Host):
    """Nodes with CPUs per package (sysfs-devices-node: has_cpu, nodeX/cpulist; topology/
    physical_package_id): 1, 2 or 4; 0 where one node spans the packages (NPS0)."""
    numa = h.f.get("numa") or {}
    nodes, packages = numa.get("cpu_nodes"), numa.get("packages")
    if not nodes or not packages:
        return None
    if nodes < packages:
        return "0", f"{nodes} node for {packages} packages"
    if nodes % packages:
        return None
    return str(nodes // packages), f"{nodes} nodes with CPUs on {packages} packages"


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "nps", "NUMA nodes per socket", linux)
