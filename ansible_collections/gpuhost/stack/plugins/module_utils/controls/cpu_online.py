"""cpu.online: Every CPU the host has is online.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host

CONTROL = Control(
    id="cpu.online",
    title="Every CPU the host has is online",
    role="cpu",
    fixable=False,
    reboot="-",
    rationale=("A CPU the kernel did not bring up is lost to the threads that feed the GPUs and to the "
               "containers pinned to it; iommu=off on a host of more than 255 CPUs loses every CPU whose APIC ID "
               "needs x2APIC"),
    references=("Documentation/ABI/testing/sysfs-devices-system-cpu: offline, present, smt/control",
                "kernel-parameters.txt: maxcpus=, nr_cpus=, iommu=", "drivers/base/cpu.c: print_cpus_offline",
                "arch/x86: x2APIC needs interrupt remapping (the IOMMU)"),
    passes=("no present CPU offline (`/sys/devices/system/cpu/offline` less the firmware's hotplug slots, which are "
            "not present), except SMT siblings the operator turned off (`smt/control` off or forceoff); manual naming "
            "the CPUs and the cause the host shows (`maxcpus=`, or `iommu=off` with more than 255 CPUs), and where "
            "`nr_cpus=N` caps the kernel at exactly the N CPUs it knows (the rest are listed nowhere)"),
    repair="manual: drop the command-line limit, keep the IOMMU on (iommu=pt), or bring CPUs online by hand",
    facts=("cpu", "boot"),
)


def _cpus(cpus: list[int]) -> str:
    """0-3,8 as the kernel writes CPU lists."""
    out, start, prev = [], None, None
    for c in sorted(cpus) + [None]:
        if start is not None and (c is None or c != prev + 1):
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if c is not None and start is None:
            start = c
        prev = c
    return ",".join(out)


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    cpu = h.section("cpu")
    if cpu is None:
        return error(cid, h.errors.get("cpu", "cannot read the CPUs"))
    offline = cpu.get("offline")
    if offline is None:
        return error(cid, "cannot read /sys/devices/system/cpu/offline")
    # `offline` is possible minus online (drivers/base/cpu.c print_cpus_offline): it lists the
    # firmware's hotplug slots, possible CPUs that are not present (ACPI MADT entries with the
    # enabled bit clear), which no boot can bring up. Only a present CPU that is offline is lost.
    present = cpu.get("present_cpus")
    slots = []
    if present:
        slots = [c for c in offline if c not in set(present)]
        offline = [c for c in offline if c in set(present)]
    total = len(present) if present else max(cpu.get("present") or 0, max(offline) + 1 if offline else 0)
    observed = f"{len(offline)} of {total} CPUs offline" + (f" ({_cpus(offline)})" if offline else "") + (
        f"; {len(slots)} hotplug slots (possible, not present)" if slots else "")
    # nr_cpus=N caps nr_cpu_ids: a CPU past N is not even possible, so `offline` and `present`
    # do not list it (print_cpus_offline shows CPUs past nr_cpu_ids only where the architecture
    # sets total_cpus, which x86 does not). Where the kernel knows exactly N, the cap decides
    limit = str(h.live.get("nr_cpus") or "")
    if limit.isdigit() and cpu.get("possible") and cpu["possible"] >= int(limit) and not offline:
        return Finding(cid, "manual", f"nr_cpus={limit}, {cpu['possible']} CPUs known to the kernel", "every CPU online",
                       f"nr_cpus={limit} on the kernel command line caps this kernel at {limit} CPUs and it knows "
                       f"{cpu['possible']}: any CPU the host has past them is ignored at boot and listed nowhere in "
                       "/sys; drop nr_cpus= unless the host has no more CPUs")
    if not offline:
        return Finding(cid, "pass", observed, "every CPU online", f"{total} CPUs online")
    if cpu.get("smt_control") in ("off", "forceoff"):
        # the kernel takes every SMT sibling offline when SMT is turned off: the operator's choice
        return Finding(cid, "pass", observed, "every CPU online",
                       f"{len(offline)} SMT siblings offline: SMT is turned off (smt/control {cpu['smt_control']})")
    live = h.live
    causes = []
    for key in ("maxcpus", "nr_cpus"):
        if key in live:
            causes.append(f"{key}={live[key]} on the kernel command line")
    switch = next((f"{k}=off" for k in ("iommu", "amd_iommu", "intel_iommu") if live.get(k) == "off"), None)
    if total > 255 and switch:
        causes.append(f"{switch} with {total} CPUs: no interrupt remapping, so no x2APIC for APIC IDs of 255 and "
                      "more (use iommu=pt)")
    why = "; ".join(causes) if causes else "the host shows no cause (firmware, or CPUs taken offline by hand)"
    which = f"CPUs {_cpus(offline)} are" if len(offline) > 1 else f"CPU {offline[0]} is"
    return Finding(cid, "manual", observed, "every CPU online", f"{which} offline: {why}")
