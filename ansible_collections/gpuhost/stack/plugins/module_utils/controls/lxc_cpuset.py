"""lxc.cpuset: Each container given GPUs runs on a fixed CPU set that covers its GPUs' NUMA nodes.

pve-container (src/PVE/LXC.pm, update_lxc_config) gives a container with `cores: N` and no
raw `lxc.cgroup2.cpuset.cpus` N of the host's CPUs chosen at random at every start, and
pve-manager's pvestatd (rebalance_lxc_containers) moves them while it runs: across sockets and
away from the GPUs, different after every restart. A raw cpuset key stops both, for good:
rebalance_lxc_containers skips a container whose config has `lxc.cgroup2.cpuset.cpus`. So a
set gpuhost writes must share no CPU with the set another GPU container holds or is given in
the same run (nothing will ever move them apart again), and on a host whose CPUs are all on
one NUMA node there is nothing to gain: any N CPUs are as near the GPUs as any other.
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
               "benchmarks do not repeat and host memory traffic crosses the socket link; a fixed set is never "
               "rebalanced again, so two serving containers must not be given the same CPUs"),
    references=("pve-container: src/PVE/LXC.pm (update_lxc_config)", "pve-manager: PVE/Service/pvestatd.pm "
                "(rebalance_lxc_containers)", "pct.conf(5)", "Documentation/admin-guide/cgroup-v2.rst (cpuset)"),
    passes=("each container given GPUs has an explicit `lxc.cgroup2.cpuset.cpus` with CPUs of every NUMA node its "
            "GPUs are on (and runs on it), sharing no CPU with another GPU container's set, or no `cores:` limit "
            "below the host's CPUs, or the host's CPUs are all on one NUMA node; a set that leaves out a GPU's node "
            "or overlaps another GPU container's is the operator's choice: manual"),
    repair=("writes `lxc.cgroup2.cpuset.cpus` into the main section: N CPUs as whole cores from its GPUs' nodes, in "
            "proportion to its GPUs on each, none held by another GPU container's set or given to one in the same "
            "run, lowest IDs first with each node's first core last (copy in `/var/backups/gpuhost`); restarts the "
            "container where `gpuhost_lxc_restart` allows it; containers that cannot all fit apart: manual"),
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


def node_cores(topo: dict) -> dict[int, list[list[int]]]:
    """{NUMA node: its cores (SMT siblings together), the node's first core last}: the host's
    own work (unbound kernel threads, IRQs not given an affinity, the services Proxmox runs)
    starts on a node's lowest CPUs, so a container takes them only when nothing else is left."""
    node_cpus = {int(k): set(parse_cpulist(v)) for k, v in (topo.get("nodes") or {}).items()}
    cores = sorted((sorted(g) for g in topo.get("cores") or []), key=lambda g: g[0])
    out = {}
    for node, cpus in node_cpus.items():
        mine = [g for g in cores if g[0] in cpus]
        out[node] = mine[1:] + mine[:1]
    return out


def choose(n: int, per_node: dict[int, int], topo: dict, taken: frozenset[int] = frozenset()) -> list[int] | None:
    """N CPUs as whole cores (SMT siblings together) from the GPUs' nodes, none of them in
    *taken* (the sets other GPU containers hold or are given in this run), the cores shared out
    in proportion to the GPUs on each node (largest remainder), lowest CPU IDs first and each
    node's first core last; None where the GPUs' nodes have fewer free cores than that."""
    cores = [sorted(g) for g in topo.get("cores") or []]
    by_node = {node: [g for g in node_cores(topo).get(node, []) if not taken & set(g)] for node in per_node}
    width = max((len(g) for g in cores), default=1)
    want = -(-n // width)                                   # whole cores: ceil(n / threads per core)
    gpus = sum(per_node.values())
    share = {node: want * g // gpus for node, g in per_node.items()}
    rest = sorted(per_node, key=lambda node: (-(want * per_node[node] % gpus), node))
    for node in rest[:want - sum(share.values())]:
        share[node] += 1
    # a node with fewer free cores than its share gives the rest to the other GPU nodes
    spill = sum(max(0, share[node] - len(by_node[node])) for node in share)
    share = {node: min(share[node], len(by_node[node])) for node in share}
    for node in sorted(share):
        extra = min(spill, len(by_node[node]) - share[node])
        share[node] += extra
        spill -= extra
    if spill:
        return None
    return sorted(c for node in sorted(share) for g in by_node[node][:share[node]] for c in g)


def holders(cpus: set[int], held: dict[str, set[int]], but: str) -> list[str]:
    """The other GPU containers whose sets share a CPU with *cpus*, as "130 (CPUs 0-3)"."""
    return [f"{vmid} (CPUs {cpulist(mine & cpus)})" for vmid, mine in sorted(held.items(), key=lambda kv: int(kv[0]))
            if vmid != but and mine & cpus]


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
    node_cpus = {int(k): set(parse_cpulist(v)) for k, v in (topo.get("nodes") or {}).items()}
    one_node = sum(1 for cpus in node_cpus.values() if cpus) <= 1
    wanted = []                                 # (vmid, passthrough, raw set, cores) of each container given GPUs
    for vmid, text in sorted((lxc.get("configs") or {}).items(), key=lambda kv: int(kv[0])):
        pt = lxcconf.inspect(vmid, text or "")
        if pt.gives_gpus:
            wanted.append((vmid, pt) + lxcconf.cpu_request(text or ""))
    # the CPUs each GPU container holds for good (its raw set) or is given in this run
    held = {vmid: set(parse_cpulist(cpuset)) for vmid, dummy, cpuset, dummy in wanted if cpuset is not None}
    edits, restarts, drift, manual, good = [], [], [], [], []
    for vmid, pt, cpuset, cores in wanted:
        per_node, unknown = gpu_nodes(pt, nv, h.pci)
        if cpuset is not None:
            cpus = held[vmid]
            left_out = sorted(n for n in per_node if not cpus & node_cpus.get(n, set()))
            if left_out:
                manual.append(f"{vmid}: its CPU set {cpuset} has no CPU of NUMA node "
                              f"{', '.join(map(str, left_out))}, where its GPUs are (your choice to keep)")
                continue
            # each pair said once, at the second of the two
            shared = holders(cpus, {v: c for v, c in held.items() if int(v) < int(vmid)}, vmid)
            if shared:
                manual.append(f"{vmid}: its CPU set {cpuset} shares CPUs with {', '.join(shared)}: pvestatd never "
                              "moves a fixed set, so both serve from the same CPUs; give one of them other CPUs "
                              "(or remove its lxc.cgroup2.cpuset.cpus and let gpuhost choose one apart)")
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
        if one_node:
            good.append(f"{vmid}: cores: {cores} on a host whose CPUs are all on one NUMA node (any {cores} are as "
                        "near its GPUs; pvestatd keeps balancing them)")
            continue
        now = f", now {spread(running[vmid], topo)}" if vmid in running else ""
        if not pt.gpu_nodes:
            manual.append(f"{vmid}: cores: {cores} picks CPUs at random{now}; it is given no /dev/nvidiaN, so which "
                          "NUMA nodes its GPUs are on is unknown: set lxc.cgroup2.cpuset.cpus yourself")
            continue
        if unknown:
            manual.append(f"{vmid}: cores: {cores} picks CPUs at random{now}; " + "; ".join(unknown))
            continue
        nodes = ", ".join(map(str, sorted(per_node)))
        taken = frozenset(c for v, mine in held.items() if v != vmid for c in mine)
        chosen = choose(cores, per_node, topo, taken)
        if chosen is None:
            if choose(cores, per_node, topo) is None:
                manual.append(f"{vmid}: cores: {cores} is more whole cores than NUMA node {nodes} of its GPUs have")
            else:
                gpu_cpus = set().union(*(node_cpus.get(n, set()) for n in per_node))
                manual.append(f"{vmid}: cores: {cores} does not fit on NUMA node {nodes} of its GPUs apart from "
                              f"{', '.join(holders(gpu_cpus, held, vmid))}: containers that share CPUs would "
                              "keep them for good; lower cores or move a container's GPUs, then run gpuhost again")
            continue
        held[vmid] = set(chosen)
        cpus = cpulist(chosen)
        drift.append(f"{vmid}: cores: {cores} picks CPUs at random at every start{now}; gets {cpus} "
                     f"(NUMA node {nodes} of its GPUs)")
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
