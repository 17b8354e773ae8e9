"""lxc.cpuset: Each container given GPUs runs on a fixed CPU set that covers its GPUs' NUMA nodes.

pve-container (src/PVE/LXC.pm, update_lxc_config) gives a container with `cores: N` and no
raw `lxc.cgroup2.cpuset.cpus` N of the host's CPUs chosen at random at every start, and
pve-manager's pvestatd (rebalance_lxc_containers) moves them while it runs: across sockets and
away from the GPUs, different after every restart. A raw cpuset key stops both.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of, LxcCpuset, LxcRestart
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, flag, Host, na
from ansible_collections.gpuhost.stack.plugins.module_utils.cpulist import parse_cpulist

CONTROL = Control(
    id="lxc.cpuset",
    title="Each container given GPUs runs on a fixed CPU set that covers its GPUs' NUMA nodes",
    role="lxc",
    fixable=True,
    reboot="container",
    rationale=("With `cores: N` alone Proxmox picks N CPUs at random at every container start and pvestatd moves "
               "them while it runs: across sockets, away from the GPUs, different after each restart, so "
               "benchmarks do not repeat and host memory traffic crosses the socket link"),
    references=("pve-container: src/PVE/LXC.pm (update_lxc_config)", "pve-manager: PVE/Service/pvestatd.pm "
                "(rebalance_lxc_containers)", "pct.conf(5)", "Documentation/admin-guide/cgroup-v2.rst (cpuset)"),
    passes=("each container given GPUs has an explicit `lxc.cgroup2.cpuset.cpus` with CPUs of every NUMA node its "
            "GPUs are on (and runs on it), or no `cores:` limit below the host's CPUs; a set that leaves out a GPU's "
            "node is the operator's choice: manual"),
    repair=("writes `lxc.cgroup2.cpuset.cpus` into the main section: N CPUs as whole cores from its GPUs' nodes, in "
            "proportion to its GPUs on each, lowest IDs first (copy in `/var/backups/gpuhost`); restarts the "
            "container where `gpuhost_lxc_restart` allows it"),
    facts=("lxc", "nvidia", "pci"),
)


def cpulist(cpus) -> str:
    """CPU numbers in the kernel's list format (0-23,64-87)."""
    out, run = [], []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def spread(cpus: str, topo: dict) -> str:
    """A CPU set said by where it is: "96 CPUs, 49 on node 0 and 47 on node 1" (the list itself
    is long and different at every start)."""
    have = set(parse_cpulist(cpus))
    nodes = sorted((int(k), len(have & set(parse_cpulist(v)))) for k, v in (topo.get("nodes") or {}).items())
    parts = [f"{n} on node {k}" for k, n in nodes if n]
    if len(parts) < 2 and len(have) <= 8:
        return cpus
    return f"{len(have)} CPUs, " + " and ".join(parts)


def gpu_nodes(pt: lxcconf.Passthrough, nv: dict, pci: dict) -> tuple[dict[int, int], list[str]]:
    """{NUMA node: how many of the container's GPUs are on it}, and what is unknown: each
    /dev/nvidiaN is the GPU whose Device Minor is N (/proc/driver/nvidia/gpus/*/information)."""
    minors = nv.get("minors") or {}
    per_node: dict[int, int] = {}
    unknown = []
    for node in pt.gpu_nodes:
        bdf = minors.get(node[len("dev/nvidia"):])
        numa = (pci.get(bdf) or {}).get("numa_node", -1) if bdf else None
        if bdf is None:
            unknown.append(f"/{node} is no GPU the driver lists")
        elif numa is None or numa < 0:
            unknown.append(f"the NUMA node of {bdf} (/{node}) is unknown (see numa.gpu_affinity)")
        else:
            per_node[numa] = per_node.get(numa, 0) + 1
    return per_node, unknown


def choose(n: int, per_node: dict[int, int], topo: dict) -> list[int] | None:
    """N CPUs as whole cores (SMT siblings together) from the GPUs' nodes, the cores shared out
    in proportion to the GPUs on each node (largest remainder), lowest CPU IDs first; None where
    the GPUs' nodes have fewer cores than that."""
    node_cpus = {int(k): set(parse_cpulist(v)) for k, v in (topo.get("nodes") or {}).items()}
    cores = sorted((sorted(g) for g in topo.get("cores") or []), key=lambda g: g[0])
    by_node = {node: [g for g in cores if g[0] in node_cpus.get(node, ())] for node in per_node}
    width = max((len(g) for g in cores), default=1)
    want = -(-n // width)                                   # whole cores: ceil(n / threads per core)
    gpus = sum(per_node.values())
    share = {node: want * g // gpus for node, g in per_node.items()}
    rest = sorted(per_node, key=lambda node: (-(want * per_node[node] % gpus), node))
    for node in rest[:want - sum(share.values())]:
        share[node] += 1
    # a node with fewer cores than its share gives the rest to the other GPU nodes
    spill = sum(max(0, share[node] - len(by_node[node])) for node in share)
    share = {node: min(share[node], len(by_node[node])) for node in share}
    for node in sorted(share):
        extra = min(spill, len(by_node[node]) - share[node])
        share[node] += extra
        spill -= extra
    if spill:
        return None
    return sorted(c for node in sorted(share) for g in by_node[node][:share[node]] for c in g)


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    lxc = h.section("lxc")
    if lxc is None:
        return na(cid, "not a Proxmox VE host (no /etc/pve/lxc)")
    nv = h.section("nvidia")
    if nv is None:
        return error(cid, h.errors.get("nvidia", "cannot read the nvidia facts"))
    topo = lxc.get("topology") or {}
    online = set(parse_cpulist(topo.get("online") or ""))
    running = lxc.get("cpusets") or {}
    restart_ok = flag(h.s.get("lxc_restart"), False)
    edits, restarts, drift, manual, good = [], [], [], [], []
    for vmid, text in sorted((lxc.get("configs") or {}).items(), key=lambda kv: int(kv[0])):
        pt = lxcconf.inspect(vmid, text or "")
        if not pt.gives_gpus:
            continue
        cpuset, cores = lxcconf.cpu_request(text or "")
        per_node, unknown = gpu_nodes(pt, nv, h.pci)
        if cpuset is not None:
            cpus = set(parse_cpulist(cpuset))
            node_cpus = {int(k): set(parse_cpulist(v)) for k, v in (topo.get("nodes") or {}).items()}
            left_out = sorted(n for n in per_node if not cpus & node_cpus.get(n, set()))
            if left_out:
                manual.append(f"{vmid}: its CPU set {cpuset} has no CPU of NUMA node "
                              f"{', '.join(map(str, left_out))}, where its GPUs are (your choice to keep)")
                continue
            live = running.get(vmid)
            if live is not None and set(parse_cpulist(live)) != cpus & online:
                drift.append(f"{vmid}: runs on CPUs {live}, not its config's {cpuset} (a restart applies it)")
                restarts.append(vmid)
                continue
            good.append(f"{vmid}: CPUs {cpuset}")
            continue
        if cores is None or cores >= len(online):
            good.append(f"{vmid}: every CPU (no cores limit below the host's {len(online)})")
            continue
        now = f", now {spread(running[vmid], topo)}" if vmid in running else ""
        if not pt.gpu_nodes:
            manual.append(f"{vmid}: cores: {cores} picks CPUs at random{now}; it is given no /dev/nvidiaN, so which "
                          "NUMA nodes its GPUs are on is unknown: set lxc.cgroup2.cpuset.cpus yourself")
            continue
        if unknown:
            manual.append(f"{vmid}: cores: {cores} picks CPUs at random{now}; " + "; ".join(unknown))
            continue
        chosen = choose(cores, per_node, topo)
        if chosen is None:
            manual.append(f"{vmid}: cores: {cores} is more whole cores than NUMA node "
                          f"{', '.join(map(str, sorted(per_node)))} of its GPUs have")
            continue
        cpus = cpulist(chosen)
        drift.append(f"{vmid}: cores: {cores} picks CPUs at random at every start{now}; gets {cpus} "
                     f"(NUMA node {', '.join(map(str, sorted(per_node)))} of its GPUs)")
        edits.append({"path": f"/etc/pve/lxc/{vmid}.conf", "vmid": vmid, "cpus": cpus})
        if vmid in running:
            restarts.append(vmid)
    if not (edits or restarts or drift or manual or good):
        return na(cid, "no container is given GPUs")
    expected = "a fixed CPU set with CPUs of each NUMA node its GPUs are on"
    if not drift and not manual:
        return Finding(cid, "pass", "; ".join(good), expected, f"{len(good)} containers with GPUs run on fixed CPU sets")
    if not restart_ok and restarts:
        # the config alone is fixed here; the restart is the operator's (or gpuhost_lxc_restart's)
        for vmid in restarts:
            if not any(e["vmid"] == vmid for e in edits):
                manual.append(f"{vmid}: restart it to run on its CPU set (gpuhost_lxc_restart lets gpuhost do it)")
        drift = [d for d in drift if d.split(":")[0] in {e["vmid"] for e in edits}]
        restarts = []
    if not drift:
        return Finding(cid, "manual", "; ".join(manual), expected, "; ".join(manual))
    kinds = []
    if edits:
        kinds.append(LxcCpuset(tuple(edits)))
    if restarts:
        kinds.append(LxcRestart(tuple(restarts)))
    msg = "; ".join(drift)
    if edits and not restart_ok and any(e["vmid"] in running for e in edits):
        msg += "; then restart it (gpuhost_lxc_restart lets gpuhost do it)"
    if manual:
        msg += "; and by hand: " + "; ".join(manual)
    return Finding(cid, "drift", "; ".join(drift + manual), expected, msg, fix=fix_of(*kinds))
