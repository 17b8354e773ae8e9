"""pcie.link: Every GPU link runs at the width of both ends on a path that supports its speed.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.pci import dead_gpus

CONTROL = Control(
    id="pcie.link",
    title="Every GPU link runs at the width of both ends on a path that supports its speed",
    role="pcie",
    fixable=False,
    reboot="-",
    rationale="A GPU trained at x8, or behind a slower bridge, halves host-device bandwidth",
    references=("PCIe Base Spec: Link Capabilities/Status",),
    passes="GPU links at the width of both ends, on a path that supports their speed (idle downshift is fine)",
    repair="manual: says which BDF and what was expected",
    facts=("pci",),
)


SPEED = {1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    if not h.gpus:
        return na(cid, "no NVIDIA GPU function")
    dead = dead_gpus(h, h.gpus)
    if dead:
        return error(cid, dead)
    problems, seen = [], 0
    for gpu in h.gpus:
        if gpu.get("config_error"):
            return error(cid, f"cannot read config space of {gpu['bdf']}: {gpu['config_error']}")
        if not gpu.get("link_cap"):
            continue
        seen += 1
        path = h.path_up(gpu["bdf"])
        port = path[0] if path else None
        cap_w = gpu["link_cap"]["width"]
        if port and port.get("link_cap"):
            cap_w = min(cap_w, port["link_cap"]["width"])
        if gpu["link_sta"]["width"] < cap_w:
            problems.append(f"{gpu['bdf']} runs x{gpu['link_sta']['width']}, both ends support x{cap_w}"
                            + (f" (port {port['bdf']})" if port else ""))
        slow = [b for b in path if b.get("link_cap") and b["link_cap"]["gen"] < gpu["link_cap"]["gen"]]
        if slow:
            problems.append(f"{gpu['bdf']} is Gen{gpu['link_cap']['gen']} but {slow[0]['bdf']} on its path supports only "
                            f"{SPEED.get(slow[0]['link_cap']['gen'])}")
    if not seen:
        return na(cid, "no GPU with a PCIe link (a virtual machine?)")
    if problems:
        return Finding(cid, "manual", "; ".join(problems), "full width, path at the GPU's speed",
                       "check the slot, riser and BIOS link settings: " + "; ".join(problems))
    return Finding(cid, "pass", f"{seen} GPU links at full width", "full width, path at the GPU's speed",
                   "idle speed downshift is not a fault")
