"""What the lab's libcuda.so.1 times each operation by: a model of a lab host's data paths,
computed from the host's state whenever the library reads it (/run/gpuhost-lab/cuda-model).

The model exists to test gpuhost's bookkeeping (which path, which limit, which fix moved
what); its figures are labelled ``modelled`` wherever they appear, and no test takes one as
evidence that a fix helps a real host. Each rule names where its shape comes from; where no
public measurement fixes a number, the docstring says it is assumed.

Rules (the seed's GPUs over Gen5 x16 at a 256-byte payload anchor the shares: its copy limit
is 57.6 GB/s):
1. A host copy runs at the link's copy limit (limits.pcie_copy_limit: negotiated generation
   and width, the GPU's Max Payload Size) times the share the rtx6kpro wiki measured on the
   seed's GPUs (host-to-GPU 55.08, GPU-to-host 56.39 GB/s). MaxReadReq has no effect: the same
   wiki found 128, 512 and 4096 made no difference, and no measurement says otherwise.
2. A pinned buffer on another NUMA node than the GPU (its pages come from the node of the
   thread that allocated it: the kernel's default local allocation) is copied across the
   socket link: 0.91 of the local rate,
   the wiki's cross-socket over same-socket P2P writes on dual Turin, the seed's CPUs (~51 of
   ~55-56 GB/s; no public host-copy pair on that platform; older hardware lost far more:
   gearshifft#82, a P100 with 0.31 of its local H2D from the remote node).
3. GPUs below one switch share its upstream link: while their copies overlap they split that
   link's copy limit (a switch forwards all of its downstream ports' traffic through its one
   upstream port). The library does the splitting in virtual time.
4. The driver gives peer access where nvidia-smi topo -p2p says OK both ways; elsewhere it
   stages a peer copy through host memory (CUDA Programming Guide, peer-to-peer memory
   copy): 42.5 of 57.6 GB/s and 14 us (an RTX 5090 pair with P2P disabled,
   aikitoria/open-gpu-kernel-modules#9: 42.47/42.54 GB/s, 14.44/14.37 us). A direct peer
   copy runs at 55.5 GB/s of 57.6 (the wiki: "~55-56" on one socket), 0.91 of that across
   sockets (~51); 0.4 us a copy (the wiki's p2pBandwidthLatencyTest: 0.36-0.45). Two things
   the driver does not see:
   - ACS request/completion redirect on a switch port below which both GPUs sit sends their
     peer traffic up to the root complex and back (PCIe Base Specification, ACS P2P
     Request/Completion Redirect): half the rate and 1 us more a copy (assumed; NCCL's
     troubleshooting guide names "a significant performance loss or even a hang");
   - a translating IOMMU: peer access is still granted, but the platform drops the writes
     (the CUDA Programming Guide, "IOMMU on Linux": peer copies are not supported on bare
     metal with the IOMMU on; the write faults in dmesg and the copy reports success). The
     library's copy takes its time and leaves the destination as it was.
5. A kernel launch costs the calling CPU 3 us at full clock (NVIDIA's forum: a null kernel's
   launch overhead is "about 3 microseconds with recent hardware"), scaled by the clock its
   governor holds during a burst of launches (Documentation/admin-guide/pm/cpufreq.rst:
   performance runs at scaling_max_freq, powersave at scaling_min_freq, the dynamic governors
   start a burst between the two: half-way, assumed, as is the 0.5 us more from another node).
6. Waiting for completion (a synchronize) costs 4 us, plus 2 % of the exit latency of the
   deepest idle state the waiting CPU may enter (Documentation/admin-guide/pm/cpuidle.rst:
   the state's exit latency, /sys/.../cpuidle/stateN/latency; disabled states are not
   entered). Both assumed: the driver mostly spins while it waits (cuCtxCreate's
   CU_CTX_SCHED_AUTO spins while a process has no more contexts than CPUs), and the 2 % stands
   for the waits in which the thread yields and its CPU sleeps.
7. A copy inside the GPU's memory runs at 0.8 of the datasheet memory bandwidth (the wiki's
   RTX PRO 6000: 1375.60-1489.91 of 1792 GB/s, read plus written), 500 GB/s for a GPU not in
   limits' table.
8. Every figure carries 1 % noise, seeded by the host's name and the measuring process.
"""
from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from ansible_collections.gpuhost.stack.plugins.module_utils import limits

from . import configspace

if TYPE_CHECKING:
    from .machine import Machine

ANCHOR = limits.pcie_copy_limit(5, 16, 256)["gbs"]
H2D_SHARE, D2H_SHARE = 55.08 / ANCHOR, 56.39 / ANCHOR               # rule 1
REMOTE_COPY = 51 / 55.5                                             # rule 2
PEER_SHARE, PEER_CROSS_SOCKET = 55.5 / ANCHOR, 51 / 55.5            # rule 4
STAGED_SHARE = 42.5 / ANCHOR
PEER_LATENCY_US, HOST_STAGED_LATENCY_US = 0.4, 14.0
ACS_REDIRECT_SHARE, ACS_REDIRECT_EXTRA_US = 0.5, 1.0
LAUNCH_US, LAUNCH_REMOTE_EXTRA_US = 3.0, 0.5                        # rule 5
SYNC_US, SLEEP_SHARE = 4.0, 0.02                                    # rule 6
GPU_MEMORY_SHARE, UNKNOWN_GPU_MEMORY_GBS = 0.8, 500.0               # rule 7
ACS_REDIRECT = 0x0C                                                 # ACS control: ReqRedir | CmpltRedir


def _copy_limit(m: Machine, bdf: str) -> float:
    """A link under load: the width it trained to (a downtrained width stays), the speed both
    ends support (an idle GPU's link runs slower and retrains to full speed under load: the
    reason pcie.link does not count a low speed alone)."""
    dev = m.spec.device(bdf)
    if dev.link_sta is None or dev.link_cap is None:
        return 16.0
    up = m.spec.device(dev.parent) if dev.parent else None
    gen = min(dev.link_cap.gen, up.link_cap.gen) if up is not None and up.link_cap else dev.link_cap.gen
    width = dev.link_sta.width
    payload = configspace.mps(m.config[bdf][0]) or 256
    lim = limits.pcie_copy_limit(gen, width, payload)
    return lim["gbs"] if lim else limits.pcie_link_gbs(gen, width)


def _chain(m: Machine, bdf: str) -> list[str]:
    """The bridges above a device, nearest first."""
    out, dev = [], m.spec.device(bdf)
    while dev.parent:
        out.append(dev.parent)
        dev = m.spec.device(dev.parent)
    return out


def _redirecting(m: Machine, a: str, b: str) -> bool:
    """Whether peer traffic between two GPUs below one switch is redirected upstream: ACS
    request or completion redirect on a downstream port either GPU's requests enter. GPUs
    that meet only at the root complex (or not at all) send their traffic up anyway."""
    ca, cb = _chain(m, a), _chain(m, b)
    common = next((x for x in ca if x in cb), None)
    if common is None or m.spec.device(common).type == "root_port":
        return False
    for bdf in ca[:ca.index(common)] + cb[:cb.index(common)]:
        dev = m.spec.device(bdf)
        if dev.type == "switch_down":
            ctrl = configspace.acs_ctrl(m.config[bdf][0])
            if ctrl is not None and ctrl & ACS_REDIRECT:
                return True
    return False


def _launch_us(m: Machine, cpu: int) -> float:
    c = m.spec.cpu
    if m.driver is None or not c.max_khz:
        return LAUNCH_US
    top = m.max_freq.get(cpu, c.max_khz) or c.max_khz
    gov = m.governor.get(cpu)
    khz = top if gov == "performance" else c.min_khz if gov == "powersave" else (c.min_khz + top) / 2
    return LAUNCH_US * c.max_khz / max(khz, 1)


def _sync_us(m: Machine, cpu: int) -> float:
    lat = [s.latency_us for s in m.spec.cpu.cstates]
    enabled = [lat[i] for i in range(len(m.boot.cstate_names))
               if i < len(lat) and not m.idle_disabled.get((cpu, i), False)]
    return SYNC_US + SLEEP_SHARE * (max(enabled) if enabled else 0)


def model_text(m: Machine) -> str:
    """The model file the lab's libcuda.so.1 reads (see libcuda.c load_model)."""
    view = m.nvidia_view(None)
    lines = ["# gpuhost lab CUDA model: every figure it gives is modelled",
             f"seed {zlib.crc32(m.spec.hostname.encode()) or 1}", "noise 0.01",
             "driver " + _driver_version(view)]
    if not view["module"]:
        return "\n".join(lines) + "\n"          # the driver is not loaded: cuInit finds no device
    nodes: dict[int, list[int]] = {}
    for t in m.cpus:
        nodes.setdefault(t.node, []).append(t.cpu)
    for n, cpus in sorted(nodes.items()):
        lines.append(f"node {n} " + ",".join(map(str, cpus)))
    shares: dict[str, int] = {}
    gpus = view["gpus"]
    for g in gpus:
        bdf = g["bdf"]
        dev = m.spec.device(bdf)
        link = _copy_limit(m, bdf)
        up = next((x for x in _chain(m, bdf) if m.spec.device(x).type == "switch_up"), None)
        share = -1
        if up is not None:
            share = shares.setdefault(up, len(shares))
            lines.append(f"share {share} {_copy_limit(m, up) * H2D_SHARE:.3f}")
        node = dev.numa_node
        local = [c for c in nodes.get(node, [])] or [t.cpu for t in m.cpus]
        cpu = local[0]
        mem = (limits.gpu_limits(g["name"]) or {}).get("memory_gbs") or UNKNOWN_GPU_MEMORY_GBS
        lines.append(
            f"gpu {g['index']} {bdf} node={node} share={share} mem_mib={g['memory_mib']}"
            f" h2d_local={link * H2D_SHARE:.3f} h2d_remote={link * H2D_SHARE * REMOTE_COPY:.3f}"
            f" d2h_local={link * D2H_SHARE:.3f} d2h_remote={link * D2H_SHARE * REMOTE_COPY:.3f}"
            f" mem={mem * GPU_MEMORY_SHARE:.3f}"
            f" launch_local={_launch_us(m, cpu):.3f} launch_remote={_launch_us(m, cpu) + LAUNCH_REMOTE_EXTRA_US:.3f}"
            f" sync_local={_sync_us(m, cpu):.3f} sync_remote={_sync_us(m, cpu):.3f}")
        lines.append(f"name {g['index']} {g['name']}")
        fail = m._gpu_spec(bdf).cuda_fail
        if fail:
            lines.append(f"fail {g['index']} {fail}")
    status: dict[tuple[int, int], bool] = {}
    for p in view["p2p"]:
        i, j = p["pair"]
        status[(i, j)] = status[(j, i)] = p["read"] == "OK" and p["write"] == "OK"
    for a in gpus:
        for b in gpus:
            if a is b:
                continue
            i, j = a["index"], b["index"]
            ok = status.get((i, j), True)
            drops = ok and m.boot.iommu == "translated"
            redirected = ok and _redirecting(m, a["bdf"], b["bdf"])
            slower = min(_copy_limit(m, a["bdf"]), _copy_limit(m, b["bdf"]))
            cross = m.spec.device(a["bdf"]).numa_node != m.spec.device(b["bdf"]).numa_node
            peer = slower * PEER_SHARE * (PEER_CROSS_SOCKET if cross else 1)
            staged = slower * STAGED_SHARE
            latency = PEER_LATENCY_US
            if redirected:
                peer, latency = peer * ACS_REDIRECT_SHARE, latency + ACS_REDIRECT_EXTRA_US
            lines.append(f"peer {i} {j} {int(ok)} {peer:.3f} {latency} {staged:.3f} {HOST_STAGED_LATENCY_US} {int(drops)}")
    return "\n".join(lines) + "\n"


def _driver_version(view: dict) -> str:
    """cuDriverGetVersion's number: 1000 x major + 10 x minor of the CUDA version the driver
    supports (nvidia-smi's "CUDA Version")."""
    major, _, minor = (view.get("cuda_version") or "12.8").partition(".")
    try:
        return str(int(major) * 1000 + int(minor or 0) * 10)
    except ValueError:
        return "12080"
