"""health.gpu: Every NVIDIA GPU answers and reports nothing wrong (read-only, never fixed).
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na

CONTROL = Control(
    id="health.gpu",
    title="Every NVIDIA GPU answers and reports nothing wrong",
    role="health",
    fixable=False,
    reboot="-",
    kind="health",
    rationale=("A GPU that fell off the bus, waits for a reset or logged a critical Xid serves nothing however well "
               "the stack is set; its other findings (MaxReadReq, link) are symptoms, and a roll-out that reboots "
               "hosts must stop at one that comes back with it"),
    references=("NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors)",
                "NVIDIA GPU memory error management: row remapping, page retirement, recovery actions",
                "nvidia-smi --help-query-gpu: gpu_recovery_action, remapped_rows.pending, retired_pages.pending",
                "Documentation/ABI/testing/dev-kmsg", "Azure/azurehpc-health-checks: critical Xids"),
    passes=("every NVIDIA GPU's config space answers (not all ones), the driver asks for no recovery action and has "
            "no row remap or page retirement pending, and this boot's kernel log has no critical Xid (48 56 57 58 62 "
            "64 65 68 69 73 74 79 80 81 95 119 120) since the GPU was last reset (on a GPU in persistence mode, an "
            "Xid before its UUID line came again does not count; nor an Xid 95 once the driver, which asks for the "
            "reset it needs, asks for none); 63 and 92 count through the remap and retirement state they record; "
            "health findings stop a reboot roll-out"),
    repair="manual: never fixed; reset or drain the GPU as the driver asks, or replace it",
    facts=("pci", "nvidia", "kernel_log"),
)


# Xids that mean the GPU (or its memory, NVLink or firmware) needs a person, as Azure's
# HPC health checks list them, and 95 (an uncontained memory error: "the affected GPU must be
# reset before applications can restart", NVIDIA's Xid catalog). Application faults (13, 31,
# 43, ...) are left out, and so are 63 (a row remap or page retirement recorded) and 92 (a high
# single-bit error rate): what they leave behind is the pending remap or retirement the driver
# reports, judged below, not the line in the log
CRITICAL_XIDS = (48, 56, 57, 58, 62, 64, 65, 68, 69, 73, 74, 79, 80, 81, 95, 119, 120)
# the driver reports the recovery action each fault still needs (nvidia-smi --help-query-gpu
# gpu_recovery_action: "Action to take to clear fault that previously happened"); an
# uncontained error's is a GPU reset, so once it asks for none the reset was made
CLEARED_BY_RESET = (95,)


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    # every NVIDIA GPU function the host sees, driven or not: a dead one is still there
    gpus = [g for g in h.gpus if g.get("driver") != "vfio-pci"]
    if not gpus:
        return na(cid, "no NVIDIA GPU the host drives")
    problems: list[str] = []
    for g in gpus:
        if g.get("dead"):
            problems.append(f"{g['bdf']} does not answer (config space reads all ones: fallen off the bus)")
    nv = h.section("nvidia") or {}
    for g in nv.get("gpus") or []:
        health = g.get("health") or {}
        action = health.get("recovery_action")
        if action and action != "None":
            problems.append(f"{g['bdf']}: the driver asks for a recovery action: {action}")
        if health.get("remapped_rows_pending"):
            problems.append(f"{g['bdf']}: a memory row remap is pending (it takes effect at a GPU reset)")
        if health.get("retired_pages_pending"):
            problems.append(f"{g['bdf']}: a memory page retirement is pending (it takes effect at a GPU reset)")
    log = h.section("kernel_log")
    history: list[str] = []         # critical Xids a reset has answered since: said, not counted
    actions = {str(g.get("bdf", ""))[:-2]: (g.get("health") or {}).get("recovery_action") for g in nv.get("gpus") or []}
    # the driver makes a GPU's object anew (and logs its UUID line again before the next Xid)
    # at a reset or a driver reload, but also, without persistence mode, each time its last
    # client closes and the next opens: only a GPU kept in persistence mode says it was reset
    persistent = {str(g.get("bdf", ""))[:-2] for g in nv.get("gpus") or [] if g.get("persistence")}
    if log is not None:
        for x in log.get("xids") or []:
            if x["xid"] not in CRITICAL_XIDS:
                continue
            if x.get("since_reset") is False and x["pci"] in persistent:
                history.append(f"{x['pci']}: Xid {x['xid']} before the GPU's last reset")
                continue
            if x["xid"] in CLEARED_BY_RESET and actions.get(x["pci"]) == "None":
                history.append(f"{x['pci']}: Xid {x['xid']}, and the driver asks for no reset since")
                continue
            times = f" ({x['count']} times)" if x.get("count", 1) > 1 else ""
            problems.append(f"{x['pci']}: Xid {x['xid']} in this boot's kernel log{times}: {x.get('message', '')}")
    observed_ok = f"{len(gpus)} GPUs answer, no recovery action, no pending remap, no critical Xid" + (
        f" (not counted: {'; '.join(history)})" if history else "")
    if problems:
        return Finding(cid, "manual", "; ".join(problems), "every GPU healthy",
                       "; ".join(problems) + ": drain the GPU's work, then reset it (nvidia-smi -r) or reboot as the "
                       "driver asks; a GPU that keeps failing goes back to its vendor")
    if h.section("nvidia") is None:
        return error(cid, h.errors.get("nvidia", "cannot read the NVIDIA driver"))
    if not nv.get("gpus"):
        # what the driver would say of its GPUs is unknown, never taken as all clear; why it
        # says nothing is nvidia.driver's finding
        return na(cid, "the NVIDIA driver reports no GPU" + (f" ({nv['smi_error']})" if nv.get("smi_error") else "")
                  + ": they answer and this boot's log has no critical Xid, but their recovery actions and pending "
                  "remaps are unknown until it does (see nvidia.driver)")
    if log is None:
        return error(cid, "cannot read this boot's kernel log for Xids: " + h.errors.get("kernel_log", "unknown"))
    return Finding(cid, "pass", observed_ok, "every GPU healthy", f"{len(gpus)} GPUs healthy")
