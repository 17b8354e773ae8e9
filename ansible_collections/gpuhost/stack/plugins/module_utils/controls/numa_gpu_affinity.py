"""numa.gpu_affinity: On a multi-node host the kernel knows every GPU's NUMA node.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na

CONTROL = Control(
    id="numa.gpu_affinity",
    title="On a multi-node host the kernel knows every GPU's NUMA node",
    role="numa",
    fixable=False,
    reboot="-",
    rationale=("A GPU with no NUMA node (numa_node -1) gets its DMA buffers and its host threads from any node: "
               "placement tools (nvidia-smi topo, NCCL, numactl by local_cpulist) cannot keep it on its socket"),
    references=("Documentation/ABI/testing/sysfs-bus-pci: numa_node (-1 when the node is unknown; from ACPI _PXM)",
                "ACPI: SRAT and _PXM"),
    passes="on a host with more than one NUMA node, every host-driven NVIDIA GPU has a `numa_node` >= 0; na on one node",
    repair="manual: the firmware's SRAT/_PXM for the GPUs' root ports, or its NUMA-per-socket (NPS) setting",
    facts=("pci", "numa"),
)


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    # the GPUs the host drives: one passed to a VM (vfio-pci) is the guest's to place
    gpus = [g for g in h.gpus if g.get("driver") != "vfio-pci"]
    if not gpus:
        return na(cid, "no NVIDIA GPU the host drives")
    numa = h.section("numa")
    if numa is None:
        return error(cid, h.errors.get("numa", "cannot read the NUMA nodes"))
    nodes = numa.get("nodes") or 1
    if nodes < 2:
        return na(cid, "one NUMA node: every GPU is local to it")
    # sysfs gives -1 for a device whose node the firmware did not name; no reading counts the same
    unknown = [g["bdf"] for g in gpus if g.get("numa_node") is None or g["numa_node"] < 0]
    if unknown:
        return Finding(cid, "manual", f"numa_node -1 on {', '.join(unknown)}", f"a node (0..{nodes - 1}) for every GPU",
                       f"the kernel does not know the NUMA node of {', '.join(unknown)} ({nodes} nodes): the firmware "
                       "gives none (ACPI _PXM/SRAT); check its NUMA-per-socket (NPS) and ACPI SRAT settings")
    where = ", ".join(f"{g['bdf']} node {g['numa_node']}" for g in gpus)
    return Finding(cid, "pass", where, f"a node (0..{nodes - 1}) for every GPU", f"{len(gpus)} GPUs on known nodes of {nodes}")
