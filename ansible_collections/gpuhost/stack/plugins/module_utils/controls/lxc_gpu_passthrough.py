"""lxc.gpu_passthrough: Containers can use the GPUs they are given: current majors, control nodes.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of, LxcRepair
from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host, na, Param

CONTROL = Control(
    id="lxc.gpu_passthrough",
    title="Containers can use the GPUs they are given: current majors, control nodes",
    role="lxc",
    fixable=True,
    reboot="container",
    rationale=("A stale nvidia-uvm major or a missing nvidia-uvm-tools node breaks CUDA inside the container; an "
               "allow is stale only when /proc/devices gives its module another major, a devN: is added only for a "
               "node that exists, and which GPUs a container gets is the operator's choice and never changed"),
    references=("pct.conf(5)", "pve-container: src/PVE/LXC.pm (devN)", "Documentation/admin-guide/devices.txt"),
    passes=("each container can use the GPUs it is given (`lxc.mount.entry` by target, or `devN:` in both forms): "
            "current cgroup2 majors (or `allow: a`; cgroup v1 keys count for nothing; a trailing `# comment` is "
            "fine), control nodes; an allow is stale only when `/proc/devices` gives its module another major "
            "(while nvidia-uvm is not loaded: manual), nvidia-caps only where the container uses MIG"),
    repair=("edits the main section of `/etc/pve/lxc/<vmid>.conf` in the syntax it uses (copy in "
            "`/var/backups/gpuhost`); never adds a `/dev/nvidiaN`, nor a `devN:` for a node the host lacks; restart "
            "the container"),
    facts=("lxc", "nvidia"),
    params=(Param("gpuhost_lxc_restart", "bool", False, "lxc_restart",
                  "Restart a running container after gpuhost changed its config (GPU passthrough, CPU set); else "
                  "the finding says to."),),
    role_tasks="lxc_restart.yml",
)


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    lxc = h.section("lxc")
    if lxc is None:
        return na(cid, "not a Proxmox VE host (no /etc/pve/lxc)")
    nv = h.section("nvidia") or {}
    devices = {int(k): v for k, v in (nv.get("char_devices") or {}).items()}
    if not lxcconf.nvidia_majors(devices):
        return na(cid, "the NVIDIA driver is not loaded: no device majors to pass through")
    broken, files, manual = [], [], []
    given = 0
    for vmid, text in sorted((lxc.get("configs") or {}).items(), key=lambda kv: int(kv[0])):
        pt = lxcconf.inspect(vmid, text or "")
        if not pt.gives_gpus:
            continue
        given += 1
        probs = lxcconf.problems(pt, devices)
        blocked = lxcconf.blockers(pt, devices, nv.get("dev_nodes"))
        if not probs and not blocked:
            continue
        if blocked:             # never delete an allow or add a devN: it cannot prove right
            manual.append(f"{vmid}: " + "; ".join(blocked) + (" (" + ", ".join(probs) + ")" if probs else ""))
            continue
        if "\ufffd" in (text or ""):
            # read as UTF-8 with replacement: an edit computed from it would change those bytes
            manual.append(f"{vmid}: " + ", ".join(probs) + " (the config has bytes that are not UTF-8: gpuhost does "
                          "not edit it)")
            continue
        if not lxcconf.repairable(pt):
            manual.append(f"{vmid}: given no /dev/nvidiaN (" + ", ".join(probs) + "); which GPUs it gets is yours to say")
            continue
        fixed = lxcconf.repair(text, devices)
        if lxcconf.problems(lxcconf.inspect(vmid, fixed), devices):   # a fix that cannot reach pass is not attempted
            manual.append(f"{vmid}: " + ", ".join(probs) + " (gpuhost cannot repair this config)")
            continue
        unreadable = lxcconf.reads_back(text, fixed)
        if unreadable:                 # validated as pve-container reads it, before a byte is written
            manual.append(f"{vmid}: " + ", ".join(probs) + f" (the repair was refused: {unreadable})")
            continue
        broken.append(f"{vmid}: " + ", ".join(probs))
        # the repair is computed again on the host, under Proxmox's config lock, from what the
        # file holds then: a line added since this audit is never lost
        files.append({"path": f"/etc/pve/lxc/{vmid}.conf", "vmid": vmid, "preview": fixed})
    if not given:
        return na(cid, "no container is given GPUs")
    expected = "the GPUs each container is given usable: current majors, control nodes"
    if not broken and not manual:
        return Finding(cid, "pass", f"{given} containers with GPUs", expected,
                       f"{given} containers pass their GPUs through correctly")
    if not broken:
        return Finding(cid, "manual", "; ".join(manual), expected, "; ".join(manual))
    msg = "container " + ", ".join(f["vmid"] for f in files) + " needs its passthrough fixed, then a restart"
    if manual:
        msg += "; and by hand: " + "; ".join(manual)
    return Finding(cid, "drift", "; ".join(broken + manual), expected, msg,
                   fix=fix_of(LxcRepair(tuple(files), {str(k): v for k, v in devices.items() if v.startswith("nvidia")},
                                        nv.get("dev_nodes"))))
