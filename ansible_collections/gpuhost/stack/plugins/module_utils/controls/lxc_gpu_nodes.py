"""lxc.gpu_nodes: CUDA's nodes exist for the containers now, and at every boot before they start.

nvidia-uvm registers its char major when it loads and makes no device, so udev never makes
/dev/nvidia-uvm (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia-uvm/uvm.c); nvidia-smi and
nvidia-persistenced do not load it. On the host CUDA makes the nodes itself through the setuid
nvidia-modprobe; inside a container it cannot, and CUDA fails until something on the host ran
`nvidia-modprobe -u -c0` (NVIDIA/enroot#106). Proxmox starts a container whose devN: node is
missing not at all, one with an optional bind mount of it without the node.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import FileContent, fix_of, UnitStart
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import Run, unit, unit_ok

CONTROL = Control(
    id="lxc.gpu_nodes",
    title="CUDA's nodes exist for the containers now, and at every boot before they start",
    role="lxc",
    fixable=True,
    reboot="no",
    rationale=("nvidia-uvm makes no /dev node when it loads and nothing of the driver's loads it at boot: until "
               "something runs nvidia-modprobe -u, CUDA fails in every container, and one given the node by devN: "
               "does not start at all"),
    references=("NVIDIA/nvidia-modprobe: nvidia-modprobe.c (-u, -c)", "NVIDIA/enroot#106",
                "modules-load.d(5)", "pve-container: src/PVE/LXC.pm (devN)"),
    passes=("where a container is given GPUs: nvidia-uvm loaded, `/dev/nvidia-uvm` and `-tools` on its current "
            "major, and at boot a udev rule or an enabled unit ordered before `pve-guests.service` runs "
            "`nvidia-modprobe -u`"),
    repair=("`nvidia-uvm` in `/etc/modules-load.d/`, a boot unit running `nvidia-modprobe -u -c0` before "
            "`pve-guests.service`, and that unit run now; no reboot, no container restart"),
    facts=("lxc", "nvidia", "uvm_boot", "units"),
    units=("gpuhost-nvidia-uvm.service",),
)

UNIT_NAME = CONTROL.units[0]
MODULES_FILE = "/etc/modules-load.d/gpuhost-nvidia-uvm.conf"
MODULES_TEXT = ("# Managed by gpuhost (lxc.gpu_nodes): nvidia-uvm at boot, for the containers given GPUs.\n"
                "nvidia-uvm\n")
NODES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def uvm_unit(tool: str):
    """nvidia-modprobe -u loads nvidia-uvm, -c0 makes its nodes 0 and 1 (and makes again one of
    the wrong number); before pve-guests.service, which starts the containers marked onboot."""
    return unit(UNIT_NAME, "lxc.gpu_nodes: nvidia-uvm and its nodes before the containers start",
                [Run((tool, "-u", "-c0"))], after="systemd-modules-load.service", before="pve-guests.service")


def live_problems(nv: dict) -> list[str]:
    major = (nv.get("majors") or {}).get("nvidia-uvm")
    if major is None:
        return ["nvidia-uvm is not loaded (no major in /proc/devices)"]
    have = nv.get("node_majors") or {}
    out = []
    for path in NODES:
        if path not in have:
            out.append(f"{path} is missing")
        elif have[path] is None:
            out.append(f"{path} is not a char device")
        elif have[path] != major:
            out.append(f"{path} has major {have[path]}, nvidia-uvm has {major}")
    return out


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    lxc = h.section("lxc")
    if lxc is None:
        return na(cid, "not a Proxmox VE host (no /etc/pve/lxc)")
    given = [vmid for vmid, text in sorted((lxc.get("configs") or {}).items(), key=lambda kv: int(kv[0]))
             if lxcconf.inspect(vmid, text or "").gives_gpus]
    if not given:
        return na(cid, "no container is given GPUs")
    nv = h.section("nvidia")
    boot = h.section("uvm_boot")
    if nv is None or boot is None:
        which = "nvidia" if nv is None else "uvm_boot"
        return error(cid, h.errors.get(which, f"cannot read the {which} facts"))
    if "nvidia" not in (nv.get("majors") or {}):
        return na(cid, "the NVIDIA driver is not loaded: nvidia-uvm loads only on it (see nvidia.driver)")
    tool = nv.get("modprobe_tool")
    ours = uvm_unit(tool or "/usr/bin/nvidia-modprobe")
    units = boot.get("units") or []
    listed = "nvidia_uvm" in (boot.get("modules_load") or {})
    creators = [r["path"] for r in boot.get("rules") or [] if listed or not r["waits_for_uvm"]]
    creators += [u["name"] for u in units if u["before_guests"]]
    idle = [r["path"] for r in boot.get("rules") or [] if r["path"] not in creators]
    late = [u["name"] for u in units if not u["before_guests"]]
    # gpuhost's unit as an older gpuhost (or a hand) left it: written again as this one has it
    stale = ((h.f.get("units") or {}).get(UNIT_NAME) or {}).get("content") is not None and not unit_ok(h.f, ours)
    live = live_problems(nv)
    who = ", ".join(given)
    expected = "nvidia-uvm and its nodes now, and made at boot before pve-guests.service"
    observed = "; ".join(live or ["nvidia-uvm and both nodes present"]) + "; at boot: " + (
        ", ".join(creators) if creators else "nothing runs nvidia-modprobe -u" + (
            f" before pve-guests.service ({', '.join(late)} runs it later)" if late else "") + (
            f" ({', '.join(idle)} waits for nvidia_uvm, which no modules-load.d file loads)" if idle else ""))
    if not live and creators and not stale:
        return Finding(cid, "pass", observed, expected,
                       f"CUDA's nodes are there for containers {who}, and {creators[0]} makes them at boot")
    if tool is None:
        return Finding(cid, "manual", observed, expected,
                       "nvidia-modprobe is not installed, and nothing else makes nvidia-uvm's nodes: install the "
                       "driver's nvidia-modprobe (NVIDIA's installer and Debian's nvidia-modprobe package ship it)")
    kinds = []
    if not listed:
        kinds.append(FileContent(MODULES_FILE, MODULES_TEXT))
    if live or not creators or stale:
        kinds.append(ours)
    if live:
        # run now as at boot; a restart, so a unit that ran this boot runs again
        kinds.append(UnitStart((UNIT_NAME,), restart=True))
    if live:
        msg = f"CUDA in containers {who} fails now: {live[0]}"
    elif not creators:
        msg = (f"CUDA in containers {who} fails after the next boot: nothing makes nvidia-uvm's nodes "
               "before pve-guests.service starts them")
    else:
        msg = f"gpuhost's {UNIT_NAME} is not the one this gpuhost installs: it is written again"
    return Finding(cid, "drift", observed, expected, msg, fix=fix_of(*kinds))
