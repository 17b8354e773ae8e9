"""cpu.driver: CPU frequency driver is amd-pstate-epp (AMD) or intel_pstate (Intel).
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import CmdlineRemove, CmdlineSet, fix_of, RuntimeWrite
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.acpi import NR_PM_PROFILES, SERVER_PROFILES
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.kernels import kernel_upgrade, no_persisted
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na
from ansible_collections.gpuhost.stack.plugins.module_utils.versions import at_least

CONTROL = Control(
    id="cpu.driver",
    title="CPU frequency driver is amd-pstate-epp (AMD) or intel_pstate (Intel)",
    role="cpu",
    fixable=True,
    reboot="if cmdline",
    rationale=("acpi-cpufreq cannot use CPPC's fine-grained performance levels; the seed host ran at 3.4% of its "
               "theoretical speed partly on it"),
    references=("Documentation/admin-guide/pm/amd-pstate.rst",),
    passes=("AMD with firmware CPPC (`acpi_cppc/` in sysfs, not the cpuinfo flag): amd-pstate-epp (status active) "
            "now and on the kernel that boots next (kernel >= 6.3; no parameter: >= 6.5, not on an undefined PM "
            "profile, on server profiles only Zen 5 from 6.13, shared-memory CPPC (Rome, Milan, Threadripper) only "
            "from 6.11, and the kernel config's default mode); Intel with HWP: intel_pstate; VM: na; no `_CPC`, "
            "kernel < 6.3, or `amd_pstate=active` live but not loaded: manual with the reason"),
    repair="`amd_pstate/status` write where loaded (>= 6.4); `amd_pstate=active` on the command line (reboot)",
    facts=("cpu", "cpufreq", "boot", "os"),
)


# "cpufreq: amd-pstate: enable shared memory type CPPC by default": until then a CPU without
# the MSR interface got amd_pstate only from a parameter (knowledge.md, CPU frequency)
SHARED_MEMORY_DEFAULT_FROM = "6.11"
PSTATE_MODES = {"1": "disable", "2": "passive", "3": "active", "4": "guided"}   # CONFIG_X86_AMD_PSTATE_DEFAULT_MODE


def amd_pstate_mode_at_boot(release: str | None, param: str | None, cpu: dict, config_mode: str | None) -> str | None:
    """The amd_pstate mode a kernel boots in (drivers/cpufreq/amd-pstate.c amd_pstate_init;
    Documentation/admin-guide/pm/amd-pstate.rst), None where the driver does not load.
    `active` exists from 6.3 (6.1/6.2 ignore it), `guided` from 6.4; with no parameter the
    driver loads only from 6.5 (CONFIG_X86_AMD_PSTATE_DEFAULT_MODE, Kconfig default 3 =
    active), never on an undefined PM profile, on server profiles only for family >= 0x1A
    (from 6.13)."""
    if not cpu.get("cppc") or not release:
        return None
    if param in ("disable",):
        return None
    if param == "active":
        return "active" if at_least(release, "6.3") else None
    if param == "passive":
        return "passive" if at_least(release, "6.1") else None
    if param == "guided":
        return "guided" if at_least(release, "6.4") else None
    if not at_least(release, "6.5"):
        return None
    if not cpu.get("cppc_msr") and not at_least(release, SHARED_MEMORY_DEFAULT_FROM):
        # shared-memory CPPC (no cpuinfo `cppc`: Rome, Milan, Threadripper, Ryzen 3000/5000)
        # loads by default only from SHARED_MEMORY_DEFAULT_FROM; before, only with amd_pstate=
        return None
    profile = cpu.get("pm_profile")
    if profile == 0 or (profile or 0) >= NR_PM_PROFILES:
        return None         # amd_pstate_acpi_pm_profile_undefined
    if profile in SERVER_PROFILES and not (cpu.get("family", 0) >= 26 and at_least(release, "6.13")):
        return None
    return PSTATE_MODES.get(str(config_mode or "3"))


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    cpu, cf = h.section("cpu"), h.section("cpufreq")
    if cpu is None or cf is None:
        return error(cid, h.errors.get("cpu") or h.errors.get("cpufreq") or "cannot read the CPU")
    if not cf["policies"]:
        return na(cid, "no cpufreq: the kernel has no frequency scaling here (a virtual machine)")
    driver, status = cf["driver"], cf.get("amd_pstate_status")
    running, default = h.boot.get("running_kernel"), h.boot.get("default_kernel")
    if cpu["vendor"] == "AuthenticAMD":
        live_ok = driver == "amd-pstate-epp" and status == "active"     # the live driver first
        if not live_ok and not cpu["cppc"] and status is None:
            return Finding(cid, "manual", driver, "amd-pstate-epp",
                           "the firmware has no CPPC (_CPC): no acpi_cppc in sysfs, so amd_pstate cannot load; "
                           "enable CPPC in the BIOS (bios.cppc judges it through the BMC)")
        if h.persisted is None:
            return error(cid, no_persisted(h))
        param = h.persisted.get("amd_pstate")
        config_mode = (h.boot.get("amd_pstate_default_mode") or {}).get(default or "")
        upgrade = kernel_upgrade(h)
        if upgrade and not at_least(default, "6.3") and at_least(upgrade, "6.3"):
            default = upgrade + ".0"        # kernel.version's fix boots this series next
        next_mode = amd_pstate_mode_at_boot(default, param, cpu, config_mode)
        persisted_ok = next_mode == "active"
        if live_ok and persisted_ok:
            return Finding(cid, "pass", driver, "amd-pstate-epp", "amd_pstate in active (EPP) mode")
        if default and not at_least(default, "6.3"):
            return Finding(cid, "manual", driver, "amd-pstate-epp",
                           f"kernel {default} is older than 6.3, which has no amd_pstate active (EPP) mode: "
                           "upgrade the kernel (kernel.version)")
        live_param = h.live.get("amd_pstate")
        if not live_ok and status is None and live_param == "active" and running == default and persisted_ok:
            # the boot that should have loaded it did not: a reboot will not help (no fix loop)
            return Finding(cid, "manual", driver, "amd-pstate-epp",
                           f"amd_pstate=active is on the running command line of {running} but the driver did not "
                           "load: check that CPPC is enabled in the BIOS and the kernel log (amd_pstate)")
        kinds: list = []
        if not persisted_ok:
            kinds.append(CmdlineSet({"amd_pstate": "active"}))
        runtime = status is not None and at_least(running, "6.4")     # any mode writable at runtime from 6.4
        if not live_ok and runtime:
            kinds.append(RuntimeWrite("active", path="/sys/devices/system/cpu/amd_pstate/status"))
        if not live_ok and persisted_ok and not runtime:
            return Finding(cid, "pending_reboot", driver, "amd-pstate-epp",
                           f"the next boot ({default}) loads amd_pstate in active mode", reboot_required=True)
        if status is None:
            why = ("with no amd_pstate= the driver does not load on this kernel and PM profile"
                   if param is None else f"amd_pstate={param} is persisted")
            msg = f"amd_pstate is not loaded ({why}); add amd_pstate=active to the kernel command line"
        elif not live_ok:
            msg = f"amd_pstate runs in {status} mode; switch it to active (EPP)"
        else:
            msg = "amd_pstate is active now but the next boot would not load it in active mode; persist amd_pstate=active"
        return Finding(cid, "drift", driver, "amd-pstate-epp", msg,
                       reboot_required=not live_ok and not runtime, fix=fix_of(*kinds))
    if cpu["vendor"] == "GenuineIntel":
        if driver == "intel_pstate" and h.persisted is not None and \
                h.persisted.get("intel_pstate") not in ("disable", "passive", "no_hwp"):
            return Finding(cid, "pass", driver, "intel_pstate", "intel_pstate in active mode")
        if not cpu["hwp"]:
            # without HWP intel_pstate runs passive and scaling_driver reads intel_cpufreq (since 5.8)
            return Finding(cid, "manual", driver, "intel_pstate",
                           "HWP is off in firmware (intel_pstate cannot run in active mode): enable it in the BIOS")
        if h.persisted is None:
            return error(cid, no_persisted(h))
        persisted_ok = h.persisted.get("intel_pstate") not in ("disable", "passive", "no_hwp")
        if persisted_ok and h.live.get("intel_pstate") in ("disable", "passive", "no_hwp"):
            return Finding(cid, "pending_reboot", driver, "intel_pstate", "takes effect at the next boot", True)
        if persisted_ok:
            return Finding(cid, "manual", driver, "intel_pstate",
                           f"HWP is present but {driver} drives the CPUs: check the BIOS and the kernel log")
        return Finding(cid, "drift", driver, "intel_pstate", "intel_pstate is disabled on the command line; remove intel_pstate=",
                       reboot_required=True, fix=fix_of(CmdlineRemove(("intel_pstate",))))
    return na(cid, f"no control for CPU vendor {cpu['vendor']}")
