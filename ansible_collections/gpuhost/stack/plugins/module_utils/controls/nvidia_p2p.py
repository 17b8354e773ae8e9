"""nvidia.p2p: Every pair of GPUs can reach each other peer to peer.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na, Param

CONTROL = Control(
    id="nvidia.p2p",
    title="Every pair of GPUs can reach each other peer to peer",
    role="nvidia",
    fixable=False,
    reboot="-",
    rationale=("Without peer-to-peer, tensor-parallel all-reduce goes through host memory (NCCL falls back to SHM "
               "or sockets): the GPUs wait on each other at every layer; NCCL's troubleshooting guide asks for "
               "nvidia-smi topo -p2p first"),
    references=("nvidia-smi topo -p2p r|w and its legend", "NCCL troubleshooting: PCI P2P, ACS and the IOMMU"),
    passes=("every pair of host-driven GPUs reads `OK` in `nvidia-smi topo -p2p r` and `w` (necessary, not "
            "sufficient: only an active test such as nvbandwidth proves data moves); na with fewer than two GPUs "
            "or `gpuhost_nvidia_p2p: false`; else manual naming the pairs and the legend's reason"),
    repair=("manual: the ACS redirect on the switches between the GPUs (pcie.acs), the IOMMU mode (iommu.mode), "
            "the aperture size (pcie.bar1), the platform's or GPU's P2P support"),
    facts=("nvidia",),
    params=(Param("gpuhost_nvidia_p2p", "bool", True, "nvidia_p2p",
                  "Whether the GPUs must reach each other peer to peer (false: a host whose GPUs serve separate "
                  "models, or a platform without P2P)."),),
)


# the legend nvidia-smi prints under the matrix
LEGEND = {"CNS": "chipset not supported", "GNS": "GPU not supported", "TNS": "topology not supported",
          "NS": "not supported", "DR": "disabled by regkey", "U": "unknown"}


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    nv = h.section("nvidia")
    if nv is None:
        return error(cid, h.errors.get("nvidia", "cannot read the NVIDIA driver"))
    gpus = nv.get("gpus") or []
    if len(gpus) < 2:
        return na(cid, f"{len(gpus)} GPU{'' if len(gpus) == 1 else 's'} that the NVIDIA driver reports: no pair")
    if not h.s.get("nvidia_p2p", True):
        return na(cid, "gpuhost_nvidia_p2p is false: this host's GPUs need not reach each other")
    if nv.get("p2p_error") or not nv.get("p2p"):
        return error(cid, nv.get("p2p_error") or "nvidia-smi topo -p2p was not read")
    bdf = {g["index"]: g["bdf"] for g in gpus}
    bad: dict[tuple[int, int], dict[str, str]] = {}
    for mode, word in (("r", "read"), ("w", "write")):
        for i, j, code in nv["p2p"].get(mode) or []:
            if code != "OK":
                bad.setdefault((min(i, j), max(i, j)), {})[word] = code
    pairs = len(gpus) * (len(gpus) - 1) // 2
    observed = f"{pairs - len(bad)} of {pairs} pairs OK both ways"
    if not bad:
        return Finding(cid, "pass", observed, "every pair OK (read and write)",
                       f"all {pairs} pairs of {len(gpus)} GPUs report peer-to-peer OK, read and write (nvidia-smi's "
                       "view; only an active test such as nvbandwidth proves data moves)")
    named = []
    for (i, j), how in sorted(bad.items())[:8]:
        codes = ", ".join(f"{w} {c} ({LEGEND.get(c, c)})" for w, c in sorted(how.items()))
        named.append(f"GPU{i}-GPU{j} ({bdf.get(i, '?')}, {bdf.get(j, '?')}): {codes}")
    more = f"; and {len(bad) - 8} more pairs" if len(bad) > 8 else ""
    return Finding(cid, "manual", observed, "every pair OK (read and write)",
                   "; ".join(named) + more + ": their traffic goes through host memory; check the ACS redirect "
                   "between them (pcie.acs), the IOMMU mode (iommu.mode) and the aperture size (pcie.bar1); GNS: "
                   "the GPU model or driver offers no P2P")
