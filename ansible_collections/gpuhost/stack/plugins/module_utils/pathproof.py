# -*- coding: utf-8 -*-
"""Each measured path against its physical limit, and what bears on a path that falls short
(issue 38: "does this host now deliver what its hardware allows on every path inference
uses, and if not, which setting or which part is to blame?").

Input: the measure module's result, the host's facts (PCI links, GPUs) and the audit's
findings. Output: the report's ``proof`` section (docs/report-schema.md), one row a path:
the samples' median and spread, the limit with its formula and source, the share of the
limit, a verdict and the attribution. Runs on the controller.

Verdicts: "ok" at the threshold or above, "below" under it, "wrong data" for a peer copy
whose bytes did not arrive (however fast), "not judged" where a path has no physical limit
to hold it against (a latency), "error" where it could not be measured, "refused" for a GPU
in use.

Standard library only (Python 3.7+).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.stack.plugins.module_utils import limits, proof

# the controls whose state bears on a path, by path (attribution)
BEARING = {
    "host_to_gpu": ("pcie.link", "iommu.mode", "pcie.mrrs", "lxc.cpuset", "numa.gpu_affinity"),
    "gpu_to_host": ("pcie.link", "iommu.mode", "pcie.mrrs", "lxc.cpuset", "numa.gpu_affinity"),
    "host_to_all_gpus": ("pcie.link", "iommu.mode"),
    "launch": ("cpu.driver", "cpu.governor", "cpu.boost", "cpu.cstates"),
    "launch_sync": ("cpu.driver", "cpu.governor", "cpu.boost", "cpu.cstates"),
    "gpu_memory": ("nvidia.power_limit", "nvidia.persistence", "health.gpu"),
    "gpu_to_gpu": ("nvidia.p2p", "pcie.acs", "iommu.mode", "pcie.bar1", "pcie.link"),
    "gpu_to_gpu_latency": ("nvidia.p2p", "pcie.acs", "iommu.mode"),
}
HIGHER_IS_BETTER = {"us": False, "GB/s": True}
PAYLOADS = (128, 256, 512, 1024, 2048, 4096)
# A copy inside a GPU's memory never reaches the datasheet's peak: healthy GPUs measure 0.74 to
# 0.87 of it (cuda-samples' read+write count: an H100 SXM 2474.76-2514.71 of 3350 GB/s,
# NVIDIA/nccl#1264; an RTX PRO 6000 1375.60-1489.91 of 1792, the rtx6kpro wiki; an RTX 5090
# 1528.91-1553.23 of 1792, aikitoria/open-gpu-kernel-modules#9). Held at its own threshold.
MEMORY_THRESHOLD = 0.70
NOT_PASSING = ("drift", "manual", "error", "pending_reboot")
# controls judged per PCI device: they bear on a path only where their finding names one of the
# path's GPUs (a GPU's narrow link says nothing of two others' peer copies)
PER_DEVICE = ("pcie.link", "pcie.mrrs", "pcie.bar1")
SOFTWARE_SENTENCE = "the host delivers its hardware's limits; what remains is in the software"


def link_limit(facts, bdf):
    """The copy limit of a GPU's link: the generation and width both ends can negotiate
    (LnkCap of the GPU and of the port above it), at the GPU's Max Payload Size. Not the
    link as it runs at the moment of the audit: an idle NVIDIA GPU trains its link down to
    save power and back up under load, so LnkSta read idle says nothing of a copy's link."""
    pci = {d.get("bdf"): d for d in facts.get("pci") or []}
    dev = pci.get(bdf) or {}
    cap = dev.get("link_cap") or {}
    up = (pci.get(dev.get("parent")) or {}).get("link_cap") or {}
    gen, width = cap.get("gen"), cap.get("width")
    if up.get("gen") and gen:
        gen = min(gen, up["gen"])
    if up.get("width") and width:
        width = min(width, up["width"])
    payload = dev.get("mps")
    if payload not in PAYLOADS:
        payload = 128                       # the smallest: the register could not be read
    if not gen or not width or gen not in limits.LANE_MBPS:
        return None
    lim = limits.pcie_copy_limit(gen, width, payload)
    if lim is None:
        return None
    lim["gen"], lim["width"], lim["payload"] = gen, width, payload
    return lim


def shared_uplinks(facts, bdfs):
    """{switch upstream port: [GPUs below it]} for the GPUs in *bdfs* that share one."""
    pci = {d.get("bdf"): d for d in facts.get("pci") or []}
    below = {}
    for bdf in bdfs:
        dev, seen = pci.get(bdf) or {}, 0
        while dev.get("parent") and seen < 16:
            seen += 1
            dev = pci.get(dev["parent"]) or {}
            if dev.get("port_type") == 5:     # PCIe capability: Upstream Port of a Switch
                below.setdefault(dev.get("bdf"), []).append(bdf)
                break
    return {up: sorted(m) for up, m in below.items() if len(m) > 1}


def _limit_for(row, facts, gpu_names):
    path = row["path"]
    if path in ("host_to_gpu", "gpu_to_host"):
        lim = link_limit(facts, row["bus_id"])
        return lim and {"value": lim["gbs"], "unit": "GB/s", "formula": lim["formula"], "source": lim["source"]}
    if path == "gpu_to_gpu":
        a, b = link_limit(facts, row["bus_id"]), link_limit(facts, row.get("peer_bus_id"))
        if not a or not b:
            return None
        lim = a if a["gbs"] <= b["gbs"] else b
        return {"value": lim["gbs"], "unit": "GB/s", "formula": "the slower link: " + lim["formula"],
                "source": lim["source"]}
    if path == "host_to_all_gpus":
        each = [link_limit(facts, gpu_names[i][0]) for i in row.get("members") or [] if i in gpu_names]
        if not each or not all(each):
            return None
        return {"value": sum(x["gbs"] for x in each), "unit": "GB/s",
                "formula": "the sum of %d links' copy limits" % len(each), "source": each[0]["source"]}
    if path == "gpu_memory":
        name = gpu_names.get(row["gpu"], (None, None))[1]
        fig = limits.gpu_limits(name)
        if not fig or not fig.get("memory_gbs"):
            return None
        return {"value": float(fig["memory_gbs"]), "unit": "GB/s",
                "formula": "datasheet memory bandwidth of %s; a copy reads and writes each byte" % name,
                "source": fig["source"]}
    return None


def _attribution(row, findings, facts):
    """The findings and facts that bear on a path, worst first: controls not passing, and the
    placement facts the measurement itself shows."""
    out = []
    if row.get("numa") == "remote" and in_container(facts):
        out.append({"fact": "container CPU set", "why": "this container's CPU set includes CPUs on node %s, off the "
                    "GPU's node: its threads run there too (lxc.cpuset on its host)" % row.get("cpu_node")})
    elif row.get("numa") == "remote":
        out.append({"fact": "numa", "why": "the copy ran from a CPU on node %s, the GPU is on another node: what a "
                    "process placed off the GPU's node gets (numa.gpu_affinity, lxc.cpuset)" % row.get("cpu_node")})
    if row["path"] == "host_to_all_gpus":
        for up, members in sorted(shared_uplinks(facts, row.get("bus_ids") or []).items()):
            out.append({"fact": "shared link", "why": "%s share the upstream link of switch %s: their copies split "
                        "it" % (", ".join(members), up)})
    if row.get("delivered") is False:
        out.append({"fact": "lost data", "why": "a peer copy reported success and the bytes did not arrive: the "
                    "platform dropped the peer writes (a translating IOMMU does: see dmesg for DMAR or AMD-Vi faults)"})
    if row.get("via") == "host":
        out.append({"fact": "p2p", "why": "the driver gives no peer access between these GPUs: the copy is "
                    "staged through host memory"})
    gpus = [row.get("bus_id"), row.get("peer_bus_id")] + list(row.get("bus_ids") or [])
    below_one_switch = bool(row.get("peer_bus_id")) and bool(shared_uplinks(facts, [row.get("bus_id"), row["peer_bus_id"]]))
    for cid in BEARING.get(row["path"], ()):
        f = findings.get(cid) or {}
        text = "%s %s" % (f.get("observed") or "", f.get("message") or "")
        if cid in PER_DEVICE and not any(g and g in text for g in gpus):
            continue
        if cid == "pcie.acs" and not below_one_switch:
            continue        # ACS redirect turns back only the traffic of GPUs below one switch
        if cid == "nvidia.p2p" and row.get("via") != "host":
            continue
        if f.get("status") in NOT_PASSING:
            out.append({"control": cid, "status": f["status"], "why": f.get("observed") or f.get("message") or ""})
    return out


def in_container(facts):
    return bool((facts.get("container") or {}).get("in_container"))


def counts(row, facts):
    """Whether a path row counts toward the host's conclusion: a copy from a CPU off the GPU's
    node is a reference on a host (nothing need run there), and real inside a container whose
    CPU set holds that CPU (its threads run anywhere in the set)."""
    return row.get("numa") != "remote" or in_container(facts)


def judge(measurement, facts, findings, threshold=0.85, memory_threshold=MEMORY_THRESHOLD):
    """The proof section for one host. *threshold* holds the PCIe paths (host copies, pairs,
    all GPUs at once), *memory_threshold* a copy inside a GPU's memory."""
    how = "modelled" if measurement.get("method") == "modelled" else "measured"
    section = {"method": how, "threshold": threshold, "memory_threshold": memory_threshold, "paths": [],
               "gpus": measurement.get("gpus") or [], "in_container": in_container(facts),
               "cpus": measurement.get("cpus") or {}}
    for key in ("na", "error", "driver_version", "elapsed_s", "pinned_peak_bytes", "pinned_left_bytes", "out_of_time",
                "repeats", "bytes", "interrupted"):
        if key in measurement:
            section[key] = measurement[key]
    if "na" in measurement or "error" in measurement:
        section["conclusion"] = measurement.get("na") or measurement.get("error")
        return section
    gpu_names = {g["index"]: (g["bus_id"], g.get("name")) for g in section["gpus"]}
    for row in measurement.get("paths") or []:
        if row["path"] == "host_to_all_gpus":
            row["bus_ids"] = [gpu_names[i][0] for i in row.get("members") or [] if i in gpu_names]
    short = []
    for row in measurement.get("paths") or []:
        out = {k: v for k, v in row.items() if k != "samples"}
        out["method"] = how
        if "error" in row:
            out["verdict"] = "error"
            section["paths"].append(out)
            continue
        try:
            s = proof.summary([x for x in row["samples"] if x])
        except ValueError as exc:       # no usable sample: this path alone is an error
            out.update(verdict="error", error="no figure from the repeats: %s" % exc)
            section["paths"].append(out)
            continue
        out.update(samples=row["samples"], median=s["median"], min=s["min"], max=s["max"], spread=s["spread"])
        lim = _limit_for(row, facts, gpu_names)
        out["limit"] = lim
        if lim is None:
            out["verdict"] = "not judged"
        else:
            share, word = limits.verdict(s["median"], lim["value"],
                                         memory_threshold if row["path"] == "gpu_memory" else threshold)
            out["fraction"], out["verdict"] = share, word
        if row.get("delivered") is False:
            out["verdict"] = "wrong data"   # however fast: what arrived is not what was sent
        out["attribution"] = (_attribution(row, findings, facts)
                              if out["verdict"] in ("below", "not judged", "wrong data") else [])
        if out["verdict"] in ("below", "wrong data") and counts(row, facts):
            short.append(out)
        section["paths"].append(out)
    for g in section["gpus"]:
        if g.get("refused"):
            section["paths"].append({"path": "all", "gpu": g["index"], "bus_id": g["bus_id"], "method": how,
                                     "verdict": "refused", "error": "not measured: " + g["refused"]})
    judged = [p for p in section["paths"] if p["verdict"] in ("ok", "below", "wrong data") and counts(p, facts)]
    section["counted"] = len(judged)
    errors = [p for p in section["paths"] if p["verdict"] in ("error", "refused")]
    if short:
        parts = []
        lost = [p for p in short if p["verdict"] == "wrong data"]
        if lost:
            parts.append("peer copies lost their data: " + _shortfall(
                "gpu_to_gpu", lost, [p for p in judged if p["path"] == "gpu_to_gpu"]))
        slow = [p for p in short if p["verdict"] == "below"]
        kinds = sorted({p["path"] for p in slow})
        if kinds:
            parts.append("below %d%% of the limit: %s" % (round(threshold * 100), "; ".join(
                _shortfall(kind, [p for p in slow if p["path"] == kind], [p for p in judged if p["path"] == kind])
                + (" (below %d%%)" % round(memory_threshold * 100) if kind == "gpu_memory" else "")
                for kind in kinds)))
        section["conclusion"] = "; ".join(parts)
    elif judged and not errors:
        section["conclusion"] = SOFTWARE_SENTENCE
    elif judged:
        section["conclusion"] = "every path measured is within its limit; %d could not be measured" % len(errors)
    else:
        section["conclusion"] = "nothing was measured"
    return section


def _shortfall(kind, short, judged):
    """One kind of path that falls short: how many of how many, which (up to four), and how
    the pairs that fall short went (through the host: no peer access)."""
    names = [_where(p) for p in short]
    text = "%s %d of %d" % (kind, len(short), len(judged))
    if len(names) <= 4 and all(names):
        text += " (%s)" % ", ".join(names)
    staged = sum(1 for p in short if p.get("via") == "host")
    if staged:
        text += ", %s through the host" % ("all" if staged == len(short) else staged)
    return text


def _where(p):
    """The GPU or pair a path row is of: GPU2, GPU0-GPU1; empty for all GPUs at once."""
    if p.get("peer") is not None:
        return "GPU%s-GPU%s" % (p["gpu"], p["peer"])
    return "" if p.get("gpu") is None else "GPU%s" % p["gpu"]


def compare(before, after):
    """Before and after a fix, path by path (same path, GPU, peer and NUMA placement): the
    effect of each, as proof.effect gives it."""
    def key(p):
        return (p["path"], p.get("gpu"), p.get("peer"), p.get("numa"), tuple(p.get("members") or ()), p.get("bytes"))
    then = {key(p): p for p in before.get("paths") or [] if p.get("samples")}
    how = "modelled" if "modelled" in (before.get("method"), after.get("method")) else "measured"
    out = []
    for p in after.get("paths") or []:
        b = then.get(key(p))
        if not b or not p.get("samples"):
            continue
        try:
            e = proof.effect([x for x in b["samples"] if x], [x for x in p["samples"] if x],
                             HIGHER_IS_BETTER.get(p.get("unit"), True), how)
        except ValueError:
            continue                    # a run without a usable figure: nothing to compare
        verdict = e["verdict"]
        # what arrives counts before how fast it arrives
        if b.get("delivered") is False and p.get("delivered") is not False:
            verdict = "now delivers its data"
        elif b.get("delivered") is not False and p.get("delivered") is False:
            verdict = "now loses its data"
        out.append({"path": p["path"], "gpu": p.get("gpu"), "peer": p.get("peer"), "numa": p.get("numa"),
                    "unit": p.get("unit"), "before": e["before"]["median"], "after": e["after"]["median"],
                    "change": e["change"], "noise": e["noise"], "verdict": verdict, "method": how})
    return out
