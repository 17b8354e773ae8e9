"""cpu.boost: Frequency boost is on and no cpufreq policy is capped below the hardware's maximum.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of, RuntimeWrite
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import unit, unit_current_or_absent, Write

CONTROL = Control(
    id="cpu.boost",
    title="Frequency boost is on and no cpufreq policy is capped below the hardware's maximum",
    role="cpu",
    fixable=True,
    reboot="no",
    rationale=("The host threads that feed the GPUs (tokenizer, scheduler, kernel launches, the Python around them) "
               "run single-threaded bursts: without boost, or under a scaling_max_freq cap a tuning profile or power "
               "script left behind, each runs at base clock, often 30-40 % below the boost clock"),
    references=("Documentation/admin-guide/pm/cpufreq.rst (boost, scaling_max_freq, cpuinfo_max_freq)",
                "Documentation/admin-guide/pm/intel_pstate.rst (no_turbo)",
                "Documentation/admin-guide/pm/amd-pstate.rst (boost)"),
    passes=("boost on (`cpufreq/boost` 1 where it exists, every policy's `boost` 1 where it exists, intel_pstate "
            "`no_turbo` 0) and every policy's `scaling_max_freq` at its `cpuinfo_max_freq`, live and at boot; n/a "
            "without cpufreq; acpi-cpufreq offering no boost switch (the firmware turned boost off) is manual"),
    repair=("sysfs writes (boost on, each capped policy's `scaling_max_freq` to its `cpuinfo_max_freq`) and a boot "
            "unit that does the same; a write the driver refuses (boost off in the firmware) fails the fix, naming it"),
    facts=("cpufreq", "units"),
    units=("gpuhost-cpu-boost.service",),
)

CPUFREQ = "/sys/devices/system/cpu/cpufreq"
# A scaling_max_freq request at FREQ_QOS_MAX_DEFAULT_VALUE (S32_MAX) is the same as no user
# cap: freq_qos_update_request takes any value >= 0 and cpufreq_set_policy clamps the policy's
# max to cpuinfo_max_freq through the driver's verify (drivers/cpufreq/cpufreq.c, store_one;
# kernel/power/qos.c; before 5.4 the same clamp in cpufreq_set_policy). Written at boot it
# lifts any cap to whatever the hardware's maximum is then, also after a driver raises
# cpuinfo_max_freq as boost comes on (amd-pstate), so nothing is read at boot.
NO_CAP = "2147483647"
# At boot: boost on where a switch exists (the global one first: it sets every policy), then
# each policy's cap lifted. Files that do not exist are left alone (tmpfiles' `w`).
BOOST_WRITES = (Write(f"{CPUFREQ}/boost", "1"),
                Write("/sys/devices/system/cpu/intel_pstate/no_turbo", "0"),
                Write(f"{CPUFREQ}/policy*/boost", "1"),
                Write(f"{CPUFREQ}/policy*/scaling_max_freq", NO_CAP))
BOOST_UNIT = unit(CONTROL.units[0], "cpu.boost: frequency boost on, no cpufreq cap", BOOST_WRITES)


def _ids(policies: list[dict]) -> str:
    ids = [p["id"] for p in policies]
    shown = ",".join(str(i) for i in ids[:8])
    return shown + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")


def boost_changes(cf: dict, off: list[dict], capped: list[dict]) -> list[RuntimeWrite]:
    """Boost on (the global switch first: it sets every policy), then the caps lifted."""
    out = []
    if cf.get("boost") == 0:
        out.append(RuntimeWrite("1", path=f"{CPUFREQ}/boost"))
    if cf.get("no_turbo") == 1:
        out.append(RuntimeWrite("0", path="/sys/devices/system/cpu/intel_pstate/no_turbo"))
    if cf.get("boost") != 0:    # else the global switch turns them on
        out += [RuntimeWrite("1", path=f"{CPUFREQ}/policy{p['id']}/boost") for p in off]
    out += [RuntimeWrite(str(p["cpuinfo_max_khz"]), path=f"{CPUFREQ}/policy{p['id']}/scaling_max_freq") for p in capped]
    return out


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    cf = h.section("cpufreq")
    if cf is None:
        return error(cid, h.errors.get("cpufreq", "cannot read cpufreq"))
    policies = cf["policies"]
    if not policies:
        return na(cid, "no cpufreq: the kernel has no frequency scaling here")
    off = [p for p in policies if p.get("boost") == 0]
    capped = [p for p in policies if p.get("max_khz") and p.get("cpuinfo_max_khz")
              and p["max_khz"] < p["cpuinfo_max_khz"]]
    switches = [k for k in ("boost", "no_turbo") if cf.get(k) is not None] or (["policy"] if any(
        "boost" in p for p in policies) else [])
    boost_off = cf.get("boost") == 0 or cf.get("no_turbo") == 1 or bool(off)
    observed = ("boost " + ("off" if boost_off else "on" if switches else "no switch")
                + (f", {len(capped)} policies capped" if capped else ""))
    expected = "boost on, scaling_max_freq = cpuinfo_max_freq"
    caps = (", ".join(f"policy{p['id']} at {p['max_khz']} of {p['cpuinfo_max_khz']} kHz" for p in capped[:4])
            + (f" and {len(capped) - 4} more" if len(capped) > 4 else ""))
    if not switches and cf.get("driver") == "acpi-cpufreq":
        # acpi-cpufreq sets up boost wherever the CPU reports it (CPB, IDA); firmware that turns
        # Turbo off hides IDA, so no switch means the firmware's setting or a CPU without boost
        return Finding(cid, "manual", observed, expected,
                       "acpi-cpufreq offers no boost switch: the firmware turned boost off (Core Performance Boost, "
                       "Turbo Boost) or the CPU has none; turn it on in the firmware (bios.boost judges it through the BMC)"
                       + (f"; also capped: {caps}" if capped else ""))
    if not boost_off and not capped and unit_current_or_absent(h.f, BOOST_UNIT):
        how = "boost on" if switches else f"no boost switch under {cf.get('driver')} (boost is the firmware's)"
        return Finding(cid, "pass", observed, expected, f"{how}, all {len(policies)} policies at their maximum")
    if not boost_off and not capped:
        return Finding(cid, "drift", observed, expected, "boost is on, but gpuhost's boot unit is not current",
                       fix=fix_of(BOOST_UNIT))
    parts = []
    if cf.get("boost") == 0:
        parts.append("cpufreq/boost is 0")
    if cf.get("no_turbo") == 1:
        parts.append("intel_pstate/no_turbo is 1 (a write the driver refuses means the firmware turned Turbo off)")
    if off and cf.get("boost") != 0:
        parts.append(f"boost is off on policies {_ids(off)}")
    if capped:
        parts.append("capped below the hardware's maximum: " + caps)
    return Finding(cid, "drift", observed, expected, "; ".join(parts), fix=fix_of(BOOST_UNIT, *boost_changes(cf, off, capped)))
