"""storage.scheduler: Every non-rotational disk uses the none I/O scheduler.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import FileContent, fix_of, RuntimeWrite, UnitRemoval
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na

CONTROL = Control(
    id="storage.scheduler",
    title="Every non-rotational disk uses the none I/O scheduler",
    role="storage",
    fixable=True,
    reboot="no",
    rationale="NVMe devices have their own queues; a software scheduler only adds latency to model loading",
    references=("Documentation/block/blk-mq.rst", "udev(7): ATTR{}"),
    passes="`none` on every non-rotational disk",
    repair=("sysfs write + a udev rule that sets it as each disk appears (by property, never by disk name); a "
            "later rule that sets another scheduler is manual, naming it"),
    facts=("block", "scheduler_rules", "units"),
    units=("gpuhost-storage-scheduler.service",),
)


# By property, never by name: udev sets none on every non-rotational disk that offers it as
# the disk appears (at every boot's coldplug and at hotplug), so a disk renamed or gone
# (nvme0n1 <-> nvme1n1) never has the wrong queue written. udev(7): ATTR{} matches and writes
# a file below the device's sysfs directory; a partition has no queue/ and never matches.
# Named to sort after the distribution's rules: udev applies rules files in name order, and
# the last write of a disk's scheduler is the one that stays.
RULE = FileContent("/etc/udev/rules.d/99-gpuhost-storage-scheduler.rules", (
    "# Managed by gpuhost (storage.scheduler): the none I/O scheduler on every non-rotational disk that offers it,\n"
    "# as udev sees each disk appear (boot and hotplug)\n"
    'ACTION=="add|change", SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", ATTR{queue/rotational}=="0", '
    'ATTR{queue/scheduler}=="*none*", ATTR{queue/scheduler}="none"\n'))
RULE_NAME = RULE.path.rsplit("/", 1)[1]
OLD_UNIT = CONTROL.units[0]     # gpuhost < 0.3 re-applied the scheduler with a boot unit (a shell loop)


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    block, rules = h.section("block"), h.section("scheduler_rules")
    if block is None or rules is None:
        return error(cid, h.errors.get("block") or h.errors.get("scheduler_rules") or "cannot read block devices")
    ssd = [b for b in block if not b["rotational"] and "none" in b["schedulers"]]
    if not ssd:
        return na(cid, "no non-rotational disk with a selectable scheduler")
    bad = [b for b in ssd if b["scheduler"] != "none"]
    observed = ", ".join(f"{b['name']}={b['scheduler']}" for b in ssd)
    ours = next((r for r in rules if r["name"] == RULE_NAME), None)
    old_unit = ((h.f.get("units") or {}).get(OLD_UNIT) or {}).get("content") is not None
    # a rule udev applies after gpuhost's that sets another scheduler (not one for rotational
    # disks only) undoes the fix at every boot: the operator's or the distribution's to change
    later = [r for r in rules if r["name"] > RULE_NAME and r["scheduler"] != "none" and not r["rotational_only"]]
    if bad and later:
        return Finding(cid, "manual", observed, "none",
                       "; ".join(f"{r['path']} sets {r['scheduler']} after gpuhost's rule" for r in later)
                       + ": udev applies it at every boot, undoing a fix; change or remove that rule")
    rule_ok = ours is None or ours.get("content") == RULE.content
    if not bad and rule_ok and not old_unit:
        return Finding(cid, "pass", observed, "none", f"{len(ssd)} disks use none")
    kinds = [RULE] + ([UnitRemoval(OLD_UNIT)] if old_unit else [])
    kinds += [RuntimeWrite("none", path="/sys/block/" + b["name"] + "/queue/scheduler", selected=True) for b in bad]
    earlier = [r for r in rules if r["name"] < RULE_NAME and r["scheduler"] != "none" and not r["rotational_only"]]
    msg = ", ".join(f"{b['name']} uses {b['scheduler']}" for b in bad)
    if bad and earlier:
        msg += " (" + "; ".join(f"{r['path']} sets {r['scheduler']}" for r in earlier) + ")"
    if not msg:
        msg = ("gpuhost's udev rule is not what it writes" if not rule_ok else
               f"an older gpuhost's boot unit {OLD_UNIT} runs a shell loop at boot: replaced by a udev rule")
    return Finding(cid, "drift", observed, "none", msg, fix=fix_of(*kinds))
