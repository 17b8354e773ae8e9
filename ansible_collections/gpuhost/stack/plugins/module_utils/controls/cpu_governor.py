"""cpu.governor: Every cpufreq policy runs the performance governor (and EPP performance).
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of, RuntimeWrite
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.acpi import NR_PM_PROFILES, SERVER_PROFILES
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import unit, unit_ok, Write

CONTROL = Control(
    id="cpu.governor",
    title="Every cpufreq policy runs the performance governor (and EPP performance)",
    role="cpu",
    fixable=True,
    reboot="no",
    rationale="Power-saving governors add ramp-up latency to every host-side kernel launch",
    references=("Documentation/admin-guide/pm/cpufreq.rst",),
    passes=("every policy `performance` (EPP `performance` where it exists), live and at boot (a setpolicy driver "
            "that lacks the kernel's default governor keeps its init's policy: amd-pstate-epp performance on server "
            "and undefined PM profiles, intel_pstate always powersave)"),
    repair="sysfs write + boot unit (EPP written only where needed, never failing on kernels that refuse it)",
    facts=("cpufreq", "cpu", "boot", "units"),
    units=("gpuhost-cpu-governor.service",),
)


# At boot: performance on every policy, then EPP performance where the file exists. Under the
# performance policy the EPP drivers report EPP performance and refuse any other value; kernels
# with dynamic EPP refuse manual EPP writes altogether: the EPP write may fail.
GOVERNOR_WRITES = (Write("/sys/devices/system/cpu/cpufreq/policy*/scaling_governor", "performance"),
                   Write("/sys/devices/system/cpu/cpufreq/policy*/energy_performance_preference", "performance",
                         refused_ok=True))


def governor_changes(policies: list[dict]) -> list[RuntimeWrite]:
    """performance on each policy; EPP performance where it exists and differs (a driver
    that refuses EPP writes, intel_pstate with HWP off, is not an error)."""
    out = []
    for p in policies:
        base = f"/sys/devices/system/cpu/cpufreq/policy{p['id']}"
        out.append(RuntimeWrite("performance", path=f"{base}/scaling_governor"))
        if p.get("epp", "performance") != "performance":
            out.append(RuntimeWrite("performance", path=f"{base}/energy_performance_preference", refused_ok=True))
    return out


GOVERNOR_UNIT = unit("gpuhost-cpu-governor.service", "cpu.governor: performance on every cpufreq policy", GOVERNOR_WRITES)
SETPOLICY = ("amd-pstate-epp", "intel_pstate")


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    cf = h.section("cpufreq")
    if cf is None:
        return error(cid, h.errors.get("cpufreq", "cannot read cpufreq"))
    if not cf["policies"]:
        return na(cid, "no cpufreq: the kernel has no frequency scaling here")
    bad = [p for p in cf["policies"] if p["governor"] != "performance" or p.get("epp", "performance") != "performance"]
    govs = sorted({p["governor"] for p in cf["policies"]})
    epps = sorted({p["epp"] for p in cf["policies"] if "epp" in p})
    observed = ",".join(govs) + (f" (EPP {','.join(epps)})" if epps else "")
    expected = "performance" + (" (EPP performance)" if epps else "")
    kernel_default = (h.boot.get("default_governor") or {}).get(h.boot.get("default_kernel") or "")
    offered = cf.get("governors") or []
    cmdline_gov = (h.persisted or {}).get("cpufreq.default_governor")
    boot_gov = cmdline_gov if cmdline_gov in offered else kernel_default
    profile = ((h.section("cpu") or {}).get("pm_profile"))
    if boot_gov not in offered and cf["driver"] in SETPOLICY:
        # a setpolicy driver without the kernel's default governor keeps the policy its init
        # set (drivers/cpufreq/cpufreq.c cpufreq_init_policy): amd-pstate-epp performance on
        # server and undefined PM profiles; intel_pstate always powersave ("a valid fallback
        # value", intel_pstate_cpu_init)
        undefined = profile == 0 or (profile or 0) >= NR_PM_PROFILES
        boot_gov = "performance" if cf["driver"] == "amd-pstate-epp" and (undefined or profile in SERVER_PROFILES) \
            else "powersave"
    persisted_ok = unit_ok(h.f, GOVERNOR_UNIT) or boot_gov == "performance"
    if not bad and persisted_ok:
        return Finding(cid, "pass", observed, expected, f"all {len(cf['policies'])} policies run performance")
    fix = fix_of(GOVERNOR_UNIT, *governor_changes(bad))
    msg = (f"{len(bad)} of {len(cf['policies'])} policies do not run performance" if bad
           else "performance now, but nothing sets it at boot")
    return Finding(cid, "drift", observed, expected, msg, fix=fix)
