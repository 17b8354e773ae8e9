"""cpu.cstates: No enabled idle state exits slower than gpuhost_cstate_max_latency_us.
"""
from __future__ import annotations

import re
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of, RuntimeWrite
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na, Param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import unit, unit_ok, Write

CONTROL = Control(
    id="cpu.cstates",
    title="No enabled idle state exits slower than gpuhost_cstate_max_latency_us",
    role="cpu",
    fixable=True,
    reboot="if cmdline",
    rationale="Deep C-states (hundreds of microseconds to wake) stall the CPU threads that feed the GPUs",
    references=("Documentation/admin-guide/pm/cpuidle.rst", "kernel-parameters.txt: processor.max_cstate",
                "drivers/idle/intel_idle.c: max_cstate"),
    passes=("no enabled idle state above `gpuhost_cstate_max_latency_us` (10); `processor.max_cstate=N` keeps "
            "C1..CN, `intel_idle.max_cstate=N` the first N table entries"),
    repair="disable in sysfs + boot unit",
    facts=("cpuidle", "boot", "units"),
    units=("gpuhost-cpu-cstates.service",),
    params=(Param("gpuhost_cstate_max_latency_us", "int", 10, "cstate_max_latency_us",
                  "Highest exit latency, in microseconds (0 to 100000), of an enabled CPU idle state.",
                  bounds=(0, 100000), what="a whole number of microseconds"),),
)


def cstate_unit(max_latency: int, deep: list[dict]) -> object:
    """Each state deeper than the limit disabled on every CPU at boot, by its index: the index
    is what sysfs names (cpuidle/stateN); a firmware or driver change that renumbers the table
    shows as a unit that no longer matches what the judgement reads, and is drift."""
    return unit("gpuhost-cpu-cstates.service", f"cpu.cstates: disable idle states above {max_latency} us",
                [Write(f"/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state{s['index']}/disable", "1")
                 for s in sorted(deep, key=lambda s: s["index"])])


def capped_at_boot(driver: str | None, persisted: dict, deep: list[dict]) -> bool:
    """Whether the persisted command line keeps every deep state from registering.
    processor.max_cstate=N keeps acpi_idle's C1..CN (0 counts as 1; names are C<_CST index>);
    intel_idle.max_cstate=N keeps the first N table entries after POLL (a count, not a
    C-number), and 0 hands the CPU over to acpi_idle (drivers/idle/intel_idle.c)."""
    if driver == "acpi_idle":
        cap = persisted.get("processor.max_cstate")
        return cap is not None and cap.isdigit() and all(
            _cnum(s["name"]) is not None and _cnum(s["name"]) > max(int(cap), 1) for s in deep)
    if driver == "intel_idle":
        cap = persisted.get("intel_idle.max_cstate")
        return cap is not None and cap.isdigit() and int(cap) > 0 and all(s["index"] > int(cap) for s in deep)
    return False


def _cnum(name: str) -> int | None:
    m = re.match(r"^C(\d+)", name or "")
    return int(m.group(1)) if m else None


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    ci = h.section("cpuidle")
    if ci is None:
        return error(cid, h.errors.get("cpuidle", "cannot read cpuidle"))
    if not ci["states"]:
        return na(cid, f"no idle states to limit (cpuidle driver {ci.get('driver') or 'none'})")
    limit = int(h.s.get("cstate_max_latency_us", 10))
    deep = [s for s in ci["states"] if s["latency_us"] > limit]
    live_bad = [s for s in deep if s["disabled"] < s["cpus"]]
    u = cstate_unit(limit, deep)
    observed = ", ".join(f"{s['name']} {s['latency_us']}us{' (disabled)' if s['disabled'] == s['cpus'] else ''}"
                         for s in ci["states"])
    expected = f"no enabled state above {limit} us"
    persisted_ok = not deep or unit_ok(h.f, u) or capped_at_boot(ci.get("driver"), h.persisted or {}, deep)
    if not live_bad and persisted_ok:
        return Finding(cid, "pass", observed, expected, "no deep idle state is enabled")
    fix = fix_of(u, *(RuntimeWrite("1", glob=f"/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state{s['index']}/disable")
                      for s in live_bad))
    msg = (", ".join(f"{s['name']} ({s['latency_us']} us) enabled on {s['cpus'] - s['disabled']} CPUs" for s in live_bad)
           if live_bad else "deep states are disabled now, but nothing disables them at boot")
    return Finding(cid, "drift", observed, expected, msg, fix=fix)
