"""storage.scheduler: Every non-rotational disk uses the none I/O scheduler.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of, RuntimeWrite
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import unit, unit_current_or_absent

CONTROL = Control(
    id="storage.scheduler",
    title="Every non-rotational disk uses the none I/O scheduler",
    role="storage",
    fixable=True,
    reboot="no",
    rationale="NVMe devices have their own queues; a software scheduler only adds latency to model loading",
    references=("Documentation/block/blk-mq.rst",),
    passes="`none` on every non-rotational disk",
    repair="sysfs write + boot unit (by property, never by disk name)",
    facts=("block", "units"),
    units=("gpuhost-storage-scheduler.service",),
)


# By property, never by name: at boot every non-rotational disk that offers `none` gets it,
# so a disk renamed or gone (nvme0n1 <-> nvme1n1) never has the wrong queue written.
SCHED_COMMAND = ("/bin/sh -c 'for q in /sys/block/*/queue; do [ \"$(cat $q/rotational)\" = 0 ] || continue; "
                 "grep -qw none $q/scheduler && echo none > $q/scheduler || true; done'")


SCHED_UNIT = unit("gpuhost-storage-scheduler.service", "storage.scheduler: none on non-rotational disks", [SCHED_COMMAND])


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    block = h.section("block")
    if block is None:
        return error(cid, h.errors.get("block", "cannot read block devices"))
    ssd = [b for b in block if not b["rotational"] and "none" in b["schedulers"]]
    if not ssd:
        return na(cid, "no non-rotational disk with a selectable scheduler")
    bad = [b for b in ssd if b["scheduler"] != "none"]
    u = SCHED_UNIT
    observed = ", ".join(f"{b['name']}={b['scheduler']}" for b in ssd)
    if not bad and unit_current_or_absent(h.f, u):
        return Finding(cid, "pass", observed, "none", f"{len(ssd)} disks use none")
    fix = fix_of(u, *(RuntimeWrite("none", path="/sys/block/" + b["name"] + "/queue/scheduler", selected=True)
                      for b in bad))
    msg = ", ".join(f"{b['name']} uses {b['scheduler']}" for b in bad) or "gpuhost's boot unit does not cover every disk"
    return Finding(cid, "drift", observed, "none", msg, fix=fix)
