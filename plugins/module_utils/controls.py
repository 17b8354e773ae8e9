"""The control catalog and the one place each control's facts are judged.

``evaluate`` takes a host's facts (the ``gpuhost_facts`` module's output) and the
inventory settings, and returns one finding per control: its status, what was observed
and expected, and, where the fix can repair it, the exact change the role makes (a
kernel parameter, a command, a file with its content). The roles act on ``fix``; the
audit is the same play in check mode, so the judgement exists once, here.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import shlex
from dataclasses import dataclass, field

from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf
from ansible_collections.gpuhost.stack.plugins.module_utils.probe import OWNED_UNITS

STATUSES = ("pass", "drift", "manual", "pending_reboot", "na", "waived", "error")
FAILING = ("drift", "manual", "pending_reboot")


@dataclass(frozen=True)
class Control:
    id: str
    title: str
    role: str
    fixable: bool
    reboot: str                      # "no" | "if cmdline" | "yes" | "container" | "-"
    rationale: str
    references: tuple[str, ...] = ()


CATALOG: tuple[Control, ...] = (
    Control("cpu.driver", "CPU frequency driver is amd-pstate-epp (AMD) or intel_pstate (Intel)", "cpu", True, "if cmdline",
            "acpi-cpufreq cannot use CPPC's fine-grained performance levels; the seed host ran at 3.4% of its "
            "theoretical speed partly on it", ("Documentation/admin-guide/pm/amd-pstate.rst",)),
    Control("cpu.governor", "Every cpufreq policy runs the performance governor (and EPP performance)", "cpu", True, "no",
            "Power-saving governors add ramp-up latency to every host-side kernel launch",
            ("Documentation/admin-guide/pm/cpufreq.rst",)),
    Control("cpu.cstates", "No enabled idle state exits slower than gpuhost_cstate_max_latency_us", "cpu", True, "if cmdline",
            "Deep C-states (hundreds of microseconds to wake) stall the CPU threads that feed the GPUs",
            ("Documentation/admin-guide/pm/cpuidle.rst", "kernel-parameters.txt: processor.max_cstate",
             "drivers/idle/intel_idle.c: max_cstate")),
    Control("numa.balancing", "Automatic NUMA balancing is off, live and at boot", "numa", True, "no",
            "NUMA balancing unmaps pages to sample accesses, adding faults to pinned inference processes",
            ("Documentation/admin-guide/sysctl/kernel.rst: numa_balancing", "sysctl.d(5)")),
    Control("pcie.mrrs", "Every NVIDIA GPU function has PCIe Max_Read_Request_Size 4096", "pcie", True, "no",
            "A 512-byte MaxReadReq splits DMA reads into many small requests (the seed host's biggest find)",
            ("PCIe Base Spec: Device Control", "setpci(8)")),
    Control("pcie.link", "Every GPU link runs at the width of both ends on a path that supports its speed", "pcie", False, "-",
            "A GPU trained at x8, or behind a slower bridge, halves host-device bandwidth",
            ("PCIe Base Spec: Link Capabilities/Status",)),
    Control("pcie.acs", "No ACS redirect on the downstream ports of switches with a GPU below (n/a where devices go to VMs)",
            "pcie", True, "if cmdline",
            "ACS request/completion redirect forces GPU peer-to-peer and GPUDirect traffic up to the root complex; "
            "with an IOMMU the kernel sets it at every boot, so it is cleared with pci=disable_acs_redir=",
            ("PCIe Base Spec: ACS Control", "kernel-parameters.txt: pci=disable_acs_redir", "drivers/pci/pci.c: pci_std_enable_acs")),
    Control("iommu.mode", "The IOMMU is off or gives the host's GPUs, NICs and NVMe drives identity domains", "iommu", True, "yes",
            "A translating IOMMU adds a page-table walk to every DMA of host-owned devices",
            ("pve-docs: qm-pci-passthrough", "kernel-parameters.txt: iommu=pt, iommu.passthrough")),
    Control("kernel.version", "The running kernel is at least the minimum", "kernel", True, "yes",
            "Old kernels lack amd_pstate defaults for Zen 5 and scheduler fixes the GPUs' feeding threads need; "
            "the new kernel comes from the distribution's series metapackage in the flavour running now (so it keeps "
            "getting updates), and a kernel without an NVIDIA module built for it is never booted nor left as the "
            "boot loader's default",
            ("pve-docs: system-booting", "proxmox-kernel-helper: proxmox-boot-tool kernel pin", "dkms(8)",
             "grub-mkconfig: util/grub.d/00_header.in, 10_linux.in")),
    Control("kernel.reboot_pending", "The kernel and command line the boot loader will start next are the running ones",
            "kernel", False, "-",
            "A fix that waits for a reboot has not taken effect yet", ("pve-docs: system-booting", "proxmox-boot-tool")),
    Control("nvidia.driver", "The NVIDIA kernel module supports every GPU and matches its userspace", "nvidia", False, "-",
            "A module older than the GPU's minimum, or an NVML mismatch, leaves GPUs unusable",
            ("CUDA Toolkit release notes: minimum driver versions",)),
    Control("nvidia.persistence", "Persistence mode is on for every GPU, live and at boot", "nvidia", True, "no",
            "Without persistence the driver tears GPU state down between clients and re-initialises it on the next",
            ("NVIDIA driver persistence documentation", "nvidia-persistenced(1)", "systemd.unit(5): drop-ins")),
    Control("lxc.gpu_passthrough", "Containers can use the GPUs they are given: current majors, control nodes", "lxc", True, "container",
            "A stale nvidia-uvm major or a missing nvidia-uvm-tools node breaks CUDA inside the container; an allow is "
            "stale only when /proc/devices gives its module another major, a devN: is added only for a node that "
            "exists, and which GPUs a container gets is the operator's choice and never changed",
            ("pct.conf(5)", "pve-container: src/PVE/LXC.pm (devN)", "Documentation/admin-guide/devices.txt")),
    Control("storage.scheduler", "Every non-rotational disk uses the none I/O scheduler", "storage", True, "no",
            "NVMe devices have their own queues; a software scheduler only adds latency to model loading",
            ("Documentation/block/blk-mq.rst",)),
)
BY_ID = {c.id: c for c in CATALOG}
HOST_LEVEL = {c.id for c in CATALOG} - {"nvidia.driver"}

# compute capability -> minimum Linux driver: that of the first CUDA release supporting the
# architecture (CUDA release notes, "Toolkit Driver Version"): 7.0 Volta CUDA 9.0, 7.5 Turing
# 10.0, 8.0 A100 11.0 GA, 8.6 11.1 GA, 8.9 Ada and 9.0 Hopper 11.8, 10.0 Blackwell 12.8 GA;
# 12.0 (RTX PRO 6000 Blackwell) is the contract's figure, CUDA 12.8 Update 1.
MIN_DRIVER = {"12.0": "570.124.06", "10.0": "570.26", "9.0": "520.61.05", "8.9": "520.61.05",
              "8.6": "455.23", "8.0": "450.51.05", "7.5": "410.48", "7.0": "384.81"}
LOADER_OWN = ("BOOT_IMAGE", "root", "ro", "rw", "initrd", "rootflags", "boot")
ACS_REDIRECT = {0x04: "ReqRedir", 0x08: "CmpltRedir", 0x20: "EgressCtrl"}


# ---- small helpers -------------------------------------------------------------------------
def vkey(version: str | None) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", version or ""))


def at_least(version: str | None, minimum: str) -> bool:
    have, want = vkey(version), vkey(minimum)
    return have[: len(want)] >= want if have else False


def kernel_args(cmdline: str) -> list[tuple[str, str | None]]:
    """The words of a kernel command line as the kernel splits them (kernel/params.c
    next_arg): whitespace outside double quotes separates; a double quote toggles quoting
    and is dropped where it opens the word or the value and where it ends it; a backslash
    is an ordinary character (systemd-boot's initrd=\\EFI\\... keeps it); an unclosed quote
    runs to the end of the line. Never raises: a line is what the kernel got."""
    out: list[tuple[str, str | None]] = []
    i, n = 0, len(cmdline)
    while i < n:
        while i < n and cmdline[i].isspace():
            i += 1
        if i >= n:
            break
        quoted = cmdline[i] == '"'
        if quoted:
            i += 1
        start, in_quote, equals = i, quoted, -1
        while i < n and (in_quote or not cmdline[i].isspace()):
            if equals < 0 and cmdline[i] == "=":
                equals = i
            if cmdline[i] == '"':
                in_quote = not in_quote
            i += 1
        word = cmdline[start:i]
        if equals < 0:
            name, value = (word[:-1] if quoted and word.endswith('"') else word), None
        else:
            name, value = cmdline[start:equals], cmdline[equals + 1:i]
            if value.startswith('"'):
                value = value[1:]
                if value.endswith('"'):
                    value = value[:-1]
            elif quoted and value.endswith('"'):
                value = value[:-1]
        out.append((name, value))
    return out


def params(cmdline: str | None) -> dict[str, str] | None:
    """Kernel parameters as name -> value ('' for a flag); the last one given wins."""
    if cmdline is None:
        return None
    return {name: value or "" for name, value in kernel_args(cmdline)}


def _comparable(p: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in p.items() if k not in LOADER_OWN}


# A PCI function's address as sysfs names it (domain:bus:device.function, lower-case hex):
# a value that is anything else never goes into a command or a unit.
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def sh(*words: str) -> str:
    """A shell command line whose every word is quoted: no value from an inventory or a host
    is ever read by a shell as anything but one word."""
    return shlex.join(str(w) for w in words)


def setpci(d: dict, register: str) -> str:
    """setpci selecting by address AND vendor:device (a renumbered bus writes nothing to a stranger)."""
    return sh("setpci", "-s", d["bdf"], "-d", f"{d['vendor']:04x}:{d['device']:04x}", register)


def pci_change(d: dict, register: str, value: int, mask: int) -> dict:
    """A PCI register change for gpuhost.stack.runtime: bits *mask* of *register* set to
    *value*, on the function at this address only if it still has this vendor:device."""
    return {"pci": d["bdf"], "device": f"{d['vendor']:04x}:{d['device']:04x}", "register": register,
            "value": f"{value:04x}", "mask": f"{mask:04x}"}


def strange_addresses(devices: list[dict]) -> list[str]:
    return [repr(d.get("bdf")) for d in devices if not PCI_ADDRESS.match(str(d.get("bdf")))]


def content_sha256(text: str | None) -> str:
    """A file's text as the file module compares it (read with surrogateescape); "absent" for none."""
    import hashlib
    return "absent" if text is None else hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def watched(name: str) -> str:
    """*name*, a unit a fix installs or enables, checked against what the probe reads back
    (probe.OWNED_UNITS): one it never read would drift for ever, so a miss fails here, at
    import or on the first judgement, not on a host."""
    if name not in OWNED_UNITS:
        raise ValueError(f"{name} is not in probe.OWNED_UNITS: the audit would never read it back")
    return name


def unit(name: str, description: str, commands: list[str]) -> dict:
    """A oneshot unit that re-applies a runtime setting at every boot."""
    watched(name)
    execs = "".join(f"ExecStart={c}\n" for c in commands)
    content = (f"# Managed by gpuhost ({name}); re-applies a runtime setting the kernel forgets at boot.\n"
               f"[Unit]\nDescription=gpuhost: {description}\nAfter=sysinit.target\n\n"
               f"[Service]\nType=oneshot\nRemainAfterExit=yes\n{execs}\n[Install]\nWantedBy=multi-user.target\n")
    return {"name": name, "content": content}


def unit_ok(facts: dict, u: dict) -> bool:
    have = ((facts.get("units") or {}).get(u["name"]) or {})
    return have.get("content") == u["content"] and bool(have.get("enabled"))


def unit_current_or_absent(facts: dict, u: dict) -> bool:
    """For registers and queues that firmware or the kernel set at every boot: a good live
    value with no gpuhost unit is what boot gives; a gpuhost unit must match what is wanted."""
    have = ((facts.get("units") or {}).get(u["name"]) or {})
    return have.get("content") is None or unit_ok(facts, u)


@dataclass
class Finding:
    control: str
    status: str
    observed: object = None
    expected: object = None
    message: str = ""
    reboot_required: bool = False
    changed: bool = False
    fix: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"control": self.control, "status": self.status, "observed": self.observed,
                "expected": self.expected, "reboot_required": self.reboot_required,
                "message": self.message, "changed": self.changed, "fix": self.fix}


def na(cid: str, why: str) -> Finding:
    return Finding(cid, "na", message=why)


def error(cid: str, why: str) -> Finding:
    return Finding(cid, "error", message=why)


class Host:
    """One host's facts with the derived values several controls share."""

    def __init__(self, facts: dict, settings: dict):
        self.f = facts
        self.s = settings
        self.errors = facts.get("errors") or {}
        self.boot = facts.get("boot") or {}
        self.live = params((self.boot.get("cmdline") or "")) or {}
        self.persisted = params(self.boot.get("persisted_cmdline"))
        self.container = (facts.get("container") or {}).get("kind")
        pci = facts.get("pci") or []
        self.pci = {d["bdf"]: d for d in pci}
        self.gpus = [d for d in pci if d.get("vendor") == 0x10DE and ((d.get("class") or 0) >> 16) == 0x03]

    def section(self, name: str):
        return self.f.get(name)

    def path_up(self, bdf: str) -> list[dict]:
        out, cur = [], self.pci.get(bdf)
        while cur and cur.get("parent") and cur["parent"] in self.pci:
            cur = self.pci[cur["parent"]]
            out.append(cur)
        return out


# ---- the controls --------------------------------------------------------------------------
SERVER_PROFILES = (4, 5, 7)            # ACPI FADT preferred PM profile: enterprise/SOHO/performance server
NR_PM_PROFILES = 9                     # include/acpi/actbl.h: profiles 0..8; above counts as undefined
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


def kernel_upgrade(h: Host) -> str | None:
    """The kernel series kernel.version's fix will install and boot, if it will."""
    minimum = kernel_minimum(h)
    if minimum is None or "kernel.version" in (h.s.get("controls_skip") or []) or \
            at_least(h.boot.get("default_kernel"), minimum):
        return None
    return minimum


def cpu_driver(h: Host) -> Finding:
    cid = "cpu.driver"
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
                           "enable CPPC in the BIOS")
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
        fix: dict = {}
        if not persisted_ok:
            fix["cmdline_set"] = {"amd_pstate": "active"}
        runtime = status is not None and at_least(running, "6.4")     # any mode writable at runtime from 6.4
        if not live_ok and runtime:
            fix["runtime"] = [{"path": "/sys/devices/system/cpu/amd_pstate/status", "value": "active"}]
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
                       reboot_required=not live_ok and not runtime, fix=fix)
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
                       reboot_required=True, fix={"cmdline_remove": ["intel_pstate"]})
    return na(cid, f"no control for CPU vendor {cpu['vendor']}")


# Where the governor is already performance the EPP drivers report EPP performance and
# refuse other writes; kernels with dynamic EPP refuse manual EPP writes altogether: write
# EPP only where it is not performance yet, and never fail on it.
GOVERNOR_COMMAND = ("/bin/sh -c 'for p in /sys/devices/system/cpu/cpufreq/policy*; do echo performance > $p/scaling_governor; "
                    "if [ -e $p/energy_performance_preference ] && [ \"$(cat $p/energy_performance_preference)\" != performance ]; "
                    "then echo performance > $p/energy_performance_preference || true; fi; done'")
def governor_changes(policies: list[dict]) -> list[dict]:
    """performance on each policy; EPP performance where it exists and differs (a driver
    that refuses EPP writes, intel_pstate with HWP off, is not an error)."""
    out = []
    for p in policies:
        base = f"/sys/devices/system/cpu/cpufreq/policy{p['id']}"
        out.append({"path": f"{base}/scaling_governor", "value": "performance"})
        if p.get("epp", "performance") != "performance":
            out.append({"path": f"{base}/energy_performance_preference", "value": "performance", "refused_ok": True})
    return out


GOVERNOR_UNIT = unit("gpuhost-cpu-governor.service", "cpu.governor: performance on every cpufreq policy", [GOVERNOR_COMMAND])
SETPOLICY = ("amd-pstate-epp", "intel_pstate")


def cpu_governor(h: Host) -> Finding:
    cid = "cpu.governor"
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
    fix = {"unit": GOVERNOR_UNIT, "runtime": governor_changes(bad)}
    msg = (f"{len(bad)} of {len(cf['policies'])} policies do not run performance" if bad
           else "performance now, but nothing sets it at boot")
    return Finding(cid, "drift", observed, expected, msg, fix=fix)


def cstate_command(max_latency: int) -> str:
    return ("/bin/sh -c 'for s in /sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*; do "
            f"if [ \"$(cat $s/latency)\" -gt {max_latency} ]; then echo 1 > $s/disable; fi; done'")


def cstate_unit(max_latency: int) -> dict:
    return unit("gpuhost-cpu-cstates.service", f"cpu.cstates: disable idle states above {max_latency} us",
                [cstate_command(max_latency)])


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


def cpu_cstates(h: Host) -> Finding:
    cid = "cpu.cstates"
    ci = h.section("cpuidle")
    if ci is None:
        return error(cid, h.errors.get("cpuidle", "cannot read cpuidle"))
    if not ci["states"]:
        return na(cid, f"no idle states to limit (cpuidle driver {ci.get('driver') or 'none'})")
    limit = int(h.s.get("cstate_max_latency_us", 10))
    deep = [s for s in ci["states"] if s["latency_us"] > limit]
    live_bad = [s for s in deep if s["disabled"] < s["cpus"]]
    u = cstate_unit(limit)
    observed = ", ".join(f"{s['name']} {s['latency_us']}us{' (disabled)' if s['disabled'] == s['cpus'] else ''}"
                         for s in ci["states"])
    expected = f"no enabled state above {limit} us"
    persisted_ok = not deep or unit_ok(h.f, u) or capped_at_boot(ci.get("driver"), h.persisted or {}, deep)
    if not live_bad and persisted_ok:
        return Finding(cid, "pass", observed, expected, "no deep idle state is enabled")
    fix = {"unit": u, "runtime": [{"glob": f"/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state{s['index']}/disable",
                                   "value": "1"} for s in live_bad]}
    msg = (", ".join(f"{s['name']} ({s['latency_us']} us) enabled on {s['cpus'] - s['disabled']} CPUs" for s in live_bad)
           if live_bad else "deep states are disabled now, but nothing disables them at boot")
    return Finding(cid, "drift", observed, expected, msg, fix=fix)


def _cnum(name: str) -> int | None:
    m = re.match(r"^C(\d+)", name or "")
    return int(m.group(1)) if m else None


NUMA_DROPIN = {"path": "/etc/sysctl.d/99-gpuhost-numa-balancing.conf",
               "content": "# Managed by gpuhost (numa.balancing)\nkernel.numa_balancing = 0\n"}
NUMA_DROPIN_NAME = NUMA_DROPIN["path"].rsplit("/", 1)[1]
VENDOR_SYSCTL_DIRS = ("/usr/lib/sysctl.d/", "/lib/sysctl.d/", "/usr/local/lib/sysctl.d/", "/run/sysctl.d/")


def comment_out(text: str, lines: set[int], why: str) -> str:
    """*text* with the given 1-based lines commented out; every other byte kept."""
    out = []
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        out.append(f"# {why}: {line}" if n in lines else line)
    return "".join(out)


def later_numa_settings(sysctl: dict) -> list[dict]:
    """Assignments of kernel.numa_balancing that systemd-sysctl applies after gpuhost's
    drop-in (by file name; /etc/sysctl.conf last) and that set it to anything but 0."""
    return [a for a in sysctl.get("assignments") or [] if a["key"] == "kernel.numa_balancing"
            and a["name"] > NUMA_DROPIN_NAME and a["path"] != NUMA_DROPIN["path"] and a["value"] != "0"]


def numa_balancing(h: Host) -> Finding:
    cid = "numa.balancing"
    numa, sysctl = h.section("numa"), h.section("sysctl")
    if numa is None or sysctl is None:
        return error(cid, h.errors.get("sysctl") or h.errors.get("numa") or "cannot read NUMA state")
    if numa["nodes"] <= 1:
        return na(cid, "one NUMA node: nothing to balance")
    live = sysctl["live"].get("kernel.numa_balancing")
    if live is None:
        return na(cid, "the kernel has no NUMA balancing (kernel.numa_balancing absent)")
    # the next boot: numa_balancing=disable gives 0, then systemd-sysctl's last assignment wins
    persisted = sysctl["persisted"].get("kernel.numa_balancing")
    by_cmdline = (h.persisted or {}).get("numa_balancing") == "disable"
    next_value = persisted if persisted is not None else ("0" if by_cmdline else None)
    persisted_ok = next_value == "0"
    if live == "0" and persisted_ok:
        return Finding(cid, "pass", live, "0", "NUMA balancing is off, live and at boot")
    fix: dict = {}
    if not persisted_ok:
        have = [a for a in sysctl.get("assignments") or [] if a["path"] == NUMA_DROPIN["path"]]
        if not have or sysctl.get("contents", {}).get(NUMA_DROPIN["path"]) != NUMA_DROPIN["content"]:
            fix["file"] = NUMA_DROPIN
        files: dict[str, dict] = {}
        unreadable = sorted({a["real_path"] for a in later_numa_settings(sysctl)
                             if "\ufffd" in sysctl["contents"].get(a["real_path"], "")})
        if unreadable:
            return Finding(cid, "manual", live, "0",
                           f"{', '.join(unreadable)} sets kernel.numa_balancing after gpuhost's drop-in and has bytes "
                           "that are not UTF-8: gpuhost does not edit it; set it to 0 there by hand")
        for a in later_numa_settings(sysctl):
            src = a["real_path"]
            # a vendor file is shadowed by one of the same name in /etc/sysctl.d, never edited
            dest = f"/etc/sysctl.d/{a['name']}" if src.startswith(VENDOR_SYSCTL_DIRS) else src
            entry = files.setdefault(dest, {"path": dest, "text": sysctl["contents"][src], "lines": set(),
                                            # what the judgement read there: the write refuses a file
                                            # that changed since (a line added meanwhile is never lost)
                                            "expect": sysctl["contents"][src] if dest == src else None})
            entry["lines"].add(a["line"])
        fix["files"] = [{"path": e["path"], "content": comment_out(e["text"], e["lines"],
                                                                      "disabled by gpuhost (numa.balancing)"),
                         "expect_sha256": content_sha256(e["expect"])}
                        for e in files.values()]
        if not fix["files"]:
            del fix["files"]
    if live != "0":
        fix["runtime"] = [{"path": "/proc/sys/kernel/numa_balancing", "value": "0"}]
    src = sysctl["sources"].get("kernel.numa_balancing")
    msg = f"kernel.numa_balancing is {live}"
    if not persisted_ok:
        msg += f" and the next boot sets {next_value or 'the kernel default'}" + (f" ({src})" if src else "")
        if by_cmdline and persisted is not None:
            msg += ", over numa_balancing=disable on the command line"
        if any(a["key"] == "kernel.numa_balancing" for a in sysctl.get("sysctl_conf_unapplied") or []):
            # systemd-sysctl reads only sysctl.d; Debian 13 ships no 99-sysctl.conf link to it
            msg += "; /etc/sysctl.conf sets it, but nothing applies that file at boot here (no /etc/sysctl.d/99-sysctl.conf)"
    return Finding(cid, "drift", live, "0", msg, fix=fix)


def _host_owned_kind(d: dict) -> str | None:
    cls = d.get("class") or 0
    if cls >> 8 == 0x0108:
        return "NVMe"
    if d.get("vendor") == 0x10DE and cls >> 16 == 0x03:
        return "GPU"
    return "NIC" if cls >> 16 == 0x02 else None


def iommu_mode(h: Host) -> Finding:
    cid = "iommu.mode"
    io = h.section("iommu")
    if io is None:
        return error(cid, h.errors.get("iommu", "cannot read the IOMMU"))
    if not io["units"] and not io["groups"]:
        return Finding(cid, "pass", "off", "off or passthrough", "the IOMMU is off")
    # judged: the host's own GPUs, NICs and NVMe drives; devices for VMs (vfio-pci) and
    # untrusted ones (always a DMA domain, drivers/iommu/iommu.c) are not
    judged = [d for d in h.f.get("pci") or [] if _host_owned_kind(d) and d.get("driver") != "vfio-pci"
              and not d.get("removable")]
    if any(d.get("iommu_group_type") for d in judged):
        translated = [d for d in judged if d.get("iommu_group_type") not in ("identity", None)]
    else:
        translated = [] if io["group_types"] == ["identity"] else judged or [{"bdf": "groups"}]
    live = "passthrough" if not translated else "translated"
    if not judged and any("iommu_group_type" in d for d in h.f.get("pci") or []):
        return Finding(cid, "pass", "no host-owned device", "off or passthrough",
                       "no GPU, NIC or NVMe drive the host drives itself (the rest goes to VMs or is untrusted)")
    if h.persisted is None:
        return error(cid, no_persisted(h))
    arch = (h.section("os") or {}).get("machine") or "x86_64"
    x86 = arch in ("x86_64", "i686", "i386")

    def passthrough(p: dict) -> bool:
        # kernel-parameters.txt: iommu.passthrough=1 everywhere; iommu=pt on x86 only
        if "iommu.passthrough" in p:
            return p["iommu.passthrough"] in ("1", "y", "on")
        return x86 and p.get("iommu") == "pt"

    persisted_ok = passthrough(h.persisted)
    where = ", ".join(f"{d['bdf']} ({d.get('iommu_group_type')})" for d in translated[:4] if "iommu_group_type" in d)
    if live == "passthrough" and persisted_ok:
        return Finding(cid, "pass", live, "passthrough", f"identity domains for {len(judged)} host-owned devices")
    if persisted_ok and passthrough(h.live):
        return Finding(cid, "manual", live, "passthrough",
                       f"passthrough is on the running command line but {where or 'the IOMMU groups'} still translate: "
                       "check the kernel log (a driver or the firmware forcing DMA domains)")
    if persisted_ok:
        return Finding(cid, "pending_reboot", live, "passthrough", "passthrough is persisted; it takes effect at the next boot", True)
    param = {"iommu": "pt"} if x86 else {"iommu.passthrough": "1"}
    name = next(iter(param))
    return Finding(cid, "drift", live, "passthrough",
                   f"the IOMMU translates host DMA{' (' + where + ')' if where else ''}; add {name}={param[name]} "
                   "to the kernel command line", reboot_required=True, fix={"cmdline_set": param})


def kernel_minimum(h: Host) -> str | None:
    if h.s.get("kernel_min_version"):
        return str(h.s["kernel_min_version"])
    pve = (h.section("os") or {}).get("proxmox_ve")
    if pve and vkey(pve)[:1] in ((8,), (9,)):
        # PVE 8's opt-in and PVE 9's first kernel; a PVE 9 host still booting a pinned 6.8 is behind
        return "6.14"
    return None


# <version>[-<abi>][+<debian tag>][-bpo<N>]-<flavour>: PVE 8's opt-in kernels are backports
# named 6.14.8-2-bpo12-pve (pve-kernel's bookworm backports), Debian's 6.12.12+bpo-amd64;
# a backport tag is not part of the flavour.
# (Debian's backports before 6.6 put the tag in the ABI: 6.5.0-0.deb12.4-amd64)
FLAVOR_RE = re.compile(r"^\d+(?:\.\d+)*(?:-\d+(?:\.[0-9a-z]+)*)?(?:\+[a-z0-9.~]+)?(?:-bpo\d+)?-([a-z][a-z0-9-]*)$")


def kernel_flavor(release: str | None) -> str | None:
    """The flavour a release was built as (Debian -amd64, -cloud-amd64, -rt-amd64; Ubuntu
    -generic, -aws, -lowlatency; Proxmox -pve, also for its -bpo12-pve backports): the new
    kernel must be the same one."""
    m = FLAVOR_RE.match(release or "")
    return m.group(1) if m else None


def drives_gpus_now(h: Host) -> bool:
    nv = h.section("nvidia") or {}
    return bool(nv.get("module")) and bool(h.gpus)


def module_missing_for(h: Host, release: str | None) -> bool:
    """The NVIDIA module is loaded now but no nvidia.ko exists for *release*: booting it
    leaves the GPUs without a driver (only the module file proves a dkms build worked)."""
    built = h.boot.get("nvidia_module_for") or {}
    return bool(release) and drives_gpus_now(h) and release in built and not built[release]


def next_kernel_without_module(h: Host) -> str | None:
    """The kernel the boot loader starts next, when it is another one and has no NVIDIA
    module while this host drives its GPUs: booting it loses them."""
    nxt, running = h.boot.get("default_kernel"), h.boot.get("running_kernel")
    return nxt if nxt and nxt != running and module_missing_for(h, nxt) else None


KERNEL_SERIES = re.compile(r"^\d+(\.\d+){0,2}$")


def kernel_version(h: Host) -> Finding:
    cid = "kernel.version"
    minimum = kernel_minimum(h)
    running = h.boot.get("running_kernel")
    if minimum is not None and not KERNEL_SERIES.match(minimum):
        # the CLI's inventory check refuses it first; a playbook that skips the check still
        # never hands it to apt or a shell
        return error(cid, f"gpuhost_kernel_min_version is not a kernel version like \"6.14\": {minimum!r}")
    if running is None:
        return error(cid, "cannot read the running kernel") if minimum else \
            na(cid, "no minimum kernel set (gpuhost_kernel_min_version) and not Proxmox VE 8 or 9")
    default = h.boot.get("default_kernel")
    pin = pin_fix(h, running)
    want = f">= {minimum}" if minimum else "a kernel with the NVIDIA module boots next"
    if next_kernel_without_module(h):
        # never left as any boot loader's default, whatever installed it (an unattended update
        # whose dkms build failed too): whoever reboots next would lose the GPUs
        once = " once (a one-time boot)" if h.boot.get("boot_once") else ""
        if pin is None:
            return Finding(cid, "manual", running, want,
                           f"{default} boots next{once} but the NVIDIA driver is not built for it (no nvidia.ko in "
                           f"/lib/modules/{default}), and gpuhost cannot pin {running} here (no GRUB entry id for it): "
                           "make the running kernel the boot loader's default, then install a driver that supports "
                           f"{default}")
        return Finding(cid, "drift", running, want,
                       f"{default} boots next{once} but the NVIDIA driver is not built for it (no nvidia.ko in "
                       f"/lib/modules/{default}): pin the running kernel {running}, which has it", fix={"pin": pin})
    if minimum is None:
        return na(cid, "no minimum kernel set (gpuhost_kernel_min_version) and not Proxmox VE 8 or 9")
    if at_least(running, minimum):
        return Finding(cid, "pass", running, f">= {minimum}", f"running {running}")
    flavor = kernel_flavor(running)
    candidates = [k for k in h.boot.get("installed_kernels") or [] if at_least(k, minimum) and kernel_flavor(k) == flavor]
    unbuilt = [k for k in candidates if module_missing_for(h, k)]
    if unbuilt:
        return Finding(cid, "manual", running, f">= {minimum}",
                       f"{unbuilt[-1]} is installed but the NVIDIA driver did not build for it (no nvidia.ko in "
                       f"/lib/modules/{unbuilt[-1]}); {running} stays the kernel that boots"
                       + (" (pinned)" if h.boot.get("permanent_pin") == running or pin_is_grub_default(h, running) else "")
                       + f": install a driver that supports {unbuilt[-1]}, then boot it")
    if at_least(default, minimum):
        return Finding(cid, "pending_reboot", running, f">= {minimum}", f"{default} is installed and boots next", True)
    imageless = {k: owners for k, owners in (h.boot.get("kernels_without_image") or {}).items()
                 if at_least(k, minimum) and kernel_flavor(k) == flavor}
    if imageless:
        # installing the series again changes nothing (apt has it): the fix would run for ever
        k = sorted(imageless, key=vkey)[-1]
        package = " or ".join(imageless[k]) or "the package that owns /lib/modules/" + k
        return Finding(cid, "manual", running, f">= {minimum}",
                       f"{k} is installed (/lib/modules/{k}) but /boot/vmlinuz-{k} is missing, so no boot loader can "
                       f"start it: check that /boot is mounted, then `apt install --reinstall {package}` "
                       "(and run gpuhost fix again)")
    headers = bool(h.boot.get("nvidia_dkms"))
    fix = {"series": minimum, "headers": headers, "flavor": flavor, "running": running,
           "check_nvidia_module": drives_gpus_now(h), "pin": pin,
           # a pin of an older kernel (the operator's, or gpuhost's own GRUB pin from a build that
           # failed before): lifted once the new kernel proves it has the module
           "unpin": (bool(h.boot.get("permanent_pin")) and not at_least(h.boot.get("permanent_pin"), minimum))
           or bool(h.boot.get("gpuhost_grub_pin"))}
    chosen = series_packages(h, minimum, flavor, headers)
    if chosen is None:
        return Finding(cid, "manual", running, f">= {minimum}",
                       f"gpuhost knows no kernel metapackage for {running} on this distribution: install a {minimum} "
                       "kernel series of the same flavour")
    packages, release = chosen
    fix["packages"] = packages
    if release:
        fix["default_release"] = release
    msg = f"kernel {running} is older than {minimum}; install " + " ".join(packages)
    if headers:
        msg += " (with headers: the NVIDIA driver is built by dkms)"
    return Finding(cid, "drift", running, f">= {minimum}", msg, reboot_required=True, fix=fix)


def series_packages(h: Host, series: str, flavor: str | None, headers: bool) -> tuple[list[str], str | None] | None:
    """(the distribution's metapackages that follow a kernel series in the flavour the host
    runs, the apt release to take them from): never one ABI-versioned image, which gets no
    updates (and on Ubuntu comes without linux-modules-extra, most NIC and storage drivers).
    Proxmox VE: proxmox-kernel-X.Y (+ proxmox-headers-X.Y). Debian: the backports'
    linux-image-<flavour> (+ linux-headers-<flavour>) from <codename>-backports, where newer
    series come from. Ubuntu: the HWE series linux-<flavour>-hwe-<release> (image, modules
    and headers). The fix then checks that the series installed is at least the minimum."""
    os_ = h.section("os") or {}
    if os_.get("proxmox_ve"):
        return [f"proxmox-kernel-{series}"] + ([f"proxmox-headers-{series}"] if headers else []), None
    if flavor is None:
        return None
    if os_.get("id") == "ubuntu":
        if flavor not in UBUNTU_HWE_FLAVORS or not os_.get("version_id"):
            return None
        return [f"linux-{flavor}-hwe-{os_['version_id']}"], None
    if os_.get("id") == "debian" and os_.get("codename"):
        return ([f"linux-image-{flavor}"] + ([f"linux-headers-{flavor}"] if headers else []),
                f"{os_['codename']}-backports")
    return None


# Ubuntu's HWE metapackages exist for these flavours (linux-meta-hwe-*: linux-generic-hwe-24.04,
# linux-lowlatency-hwe-24.04...); cloud flavours follow their own kernels
UBUNTU_HWE_FLAVORS = ("generic", "lowlatency")


def pin_is_grub_default(h: Host, release: str) -> bool:
    ids = h.boot.get("grub_entries") or {}
    return bool(release in ids and h.boot.get("grub_default") == ids[release])


def pin_fix(h: Host, release: str | None) -> dict | None:
    """How to make *release* the boot loader's default: proxmox-boot-tool kernel pin on
    Proxmox VE (on hosts without ESPs it sets GRUB_DEFAULT itself and runs update-grub), a
    GRUB_DEFAULT drop-in naming the entry by id elsewhere; None where neither can."""
    if not release:
        return None
    entry = (h.boot.get("grub_entries") or {}).get(release)
    if h.boot.get("loader") in ("systemd-boot", "grub-esp") or (
            (h.section("os") or {}).get("proxmox_ve") and (entry is None or ">" in entry)):
        # proxmox-boot-tool's pin on a host without ESPs writes gnulinux-advanced-<id>>...: right
        # only with GRUB's submenu (GRUB_DISABLE_SUBMENU=true breaks it; gpuhost's own pin then)
        return {"release": release, "tool": "proxmox-boot-tool"}
    if h.boot.get("loader") == "grub" and entry:
        return {"release": release, "tool": "grub", "grub_default": entry}
    return None


def not_applied_by_this_boot(h: Host, next_kernel: str | None, cmdline_differs: bool) -> list[str]:
    """What made a difference before the running boot started (/proc/stat btime) and still
    makes it: the next kernel's image, or the command-line sources when none of them
    changed since. That boot should have applied it and did not."""
    btime, mtimes = h.boot.get("boot_time"), h.boot.get("mtimes") or {}
    if not btime:
        return []
    old = {p for p, t in mtimes.items() if t < btime - 5}
    stale = []
    if next_kernel and f"/boot/vmlinuz-{next_kernel}" in old:
        stale.append(f"/boot/vmlinuz-{next_kernel}")
    sources = [p for p in mtimes if not p.startswith("/boot/vmlinuz-")]
    if cmdline_differs and sources and all(p in old for p in sources):
        stale += sorted(sources)
    return stale


# parameters boot loaders add themselves: Ubuntu's GRUB adds vt.handoff=7 with `splash`
# (/etc/grub.d/10_linux); never in a config file, so never a difference
ADDED_BY_LOADER = ("vt.handoff",)


def no_persisted(h: Host) -> str:
    """Why the command line the next boot gets is not known: the probe's reason (a GRUB value
    over two lines, a file that cannot be read safely, naming file and line) when it has one."""
    why = h.errors.get("boot")
    return f"cannot tell the persisted kernel command line: {why}" if why else \
        "cannot tell the persisted kernel command line (no GRUB or proxmox-boot-tool config)"


def kernel_reboot_pending(h: Host) -> Finding:
    cid = "kernel.reboot_pending"
    if h.errors.get("boot"):
        return error(cid, no_persisted(h))      # the boot section could not be read: never "na"
    if h.boot.get("loader") is None:
        return na(cid, "no boot loader gpuhost manages (GRUB or proxmox-boot-tool) on this machine")
    if h.persisted is None:
        return error(cid, no_persisted(h))
    unfinished = unfinished_refresh(h)
    if unfinished:
        return Finding(cid, "manual", h.boot.get("running_kernel"), "a boot loader that holds what its files say",
                       unfinished)
    live = {k: v for k, v in _comparable(h.live).items() if k not in ADDED_BY_LOADER}
    persisted = _comparable(h.persisted)
    diffs = [f"{k}={persisted[k]}" if persisted[k] else k for k in persisted if live.get(k) != persisted[k]]
    diffs += [f"-{k}" for k in live if k not in persisted]
    running, default = h.boot.get("running_kernel"), h.boot.get("default_kernel")
    observed = {"kernel": running, "cmdline": " ".join(f"{k}={v}" if v else k for k, v in live.items())}
    expected = {"kernel": default, "cmdline": " ".join(f"{k}={v}" if v else k for k, v in persisted.items())}
    if next_kernel_without_module(h):
        return Finding(cid, "manual", observed, expected,
                       f"the next boot runs {default}, for which the NVIDIA driver is not built: make {running} the "
                       "boot loader's default (kernel.version's fix pins it) or install a driver for it before rebooting")
    once = bool(h.boot.get("boot_once"))
    why = []
    if default and running != default:
        why.append(f"the next boot runs {default}" + (" once (a one-time boot: grub-reboot or kernel pin --next-boot)"
                                                       if once else ""))
    if diffs:
        why.append("the next boot's command line differs: " + " ".join(diffs))
    if why:
        # a one-time boot of another kernel was chosen on purpose after this boot: not stale
        stale = not_applied_by_this_boot(h, default if default and running != default and not once else None,
                                         bool(diffs))
        if stale:
            # no fix loop: the boot that should have applied it did not
            return Finding(cid, "manual", observed, expected,
                           "; ".join(why) + f", but {', '.join(stale)} changed before this boot and the boot did not "
                           "apply it: the boot loader does not read it, or its ESPs were not refreshed "
                           "(proxmox-boot-tool refresh / update-grub); a reboot will not help")
        return Finding(cid, "pending_reboot", observed, expected, "; ".join(why) + " (reboot to apply)", True)
    return Finding(cid, "pass", observed, expected, "the running kernel and command line are what the next boot has")


OPEN_ONLY = "the open kernel modules"


def nvidia_driver(h: Host) -> Finding:
    cid = "nvidia.driver"
    nv = h.section("nvidia")
    if nv is None:
        return error(cid, h.errors.get("nvidia", "cannot read the NVIDIA driver"))
    if nv["module"] is None and nv["smi"] is None and not h.gpus:
        return na(cid, "no NVIDIA driver or GPU")
    if h.gpus and all(g.get("driver") == "vfio-pci" for g in h.gpus):
        return na(cid, f"every NVIDIA GPU ({len(h.gpus)}) is bound to vfio-pci for VMs: their driver runs in the guests")
    if nv["module"] is None:
        return Finding(cid, "manual", nv.get("smi_error") or "no kernel module", "a loaded NVIDIA kernel module",
                       f"the NVIDIA kernel module is not loaded (kernel {h.boot.get('running_kernel')}: "
                       "was it built for this kernel? dkms needs the kernel's headers)")
    if nv["smi"] is None:
        return Finding(cid, "manual", f"module {nv['module']}, no nvidia-smi", "userspace == module",
                       "the NVIDIA userspace (nvidia-smi, NVML) is not installed")
    if nv.get("no_devices"):
        host_gpus = [g for g in h.gpus if g.get("driver") != "vfio-pci"]
        if nv.get("flavor") == "proprietary" and host_gpus:
            return Finding(cid, "manual", f"proprietary module {nv['module']}: no devices", "a driver that drives every GPU",
                           f"nvidia-smi finds no devices although {len(host_gpus)} NVIDIA GPUs are on the bus: the "
                           f"proprietary kernel module does not drive Grace Hopper or Blackwell GPUs; install {OPEN_ONLY}")
        return Finding(cid, "manual", "No devices were found", "GPUs the driver drives",
                       f"nvidia-smi: No devices were found (module {nv['module']}); check the GPUs' driver binding "
                       "and the kernel log")
    if nv.get("userspace") != nv["module"]:
        return Finding(cid, "manual", f"userspace {nv.get('userspace')}, module {nv['module']}", "userspace == module",
                       f"userspace {nv.get('userspace')} does not match kernel module {nv['module']} "
                       "(NVML: Driver/library version mismatch); install the matching driver")
    if nv.get("flavor") == "proprietary":
        listed = {g["bdf"] for g in nv["gpus"]}
        unlisted = [g["bdf"] for g in h.gpus if g["bdf"] not in listed and g.get("driver") != "vfio-pci"]
        if unlisted:
            return Finding(cid, "manual", f"proprietary module {nv['module']}", "a driver that drives every GPU",
                           f"{', '.join(unlisted)} are on the bus but not driven by the proprietary kernel module "
                           f"(Grace Hopper and Blackwell need {OPEN_ONLY}); install {OPEN_ONLY}")
    minimum = h.s.get("nvidia_min_driver")
    why = "gpuhost_nvidia_min_driver"
    if not minimum:
        caps = sorted({g["compute_cap"] for g in nv["gpus"] if g.get("compute_cap")}, key=vkey)
        needs = [(MIN_DRIVER.get(c), c) for c in caps if MIN_DRIVER.get(c)]
        if needs:
            minimum, cap = max(needs, key=lambda x: vkey(x[0]))
            why = f"compute capability {cap}"
    if minimum and not at_least(nv["module"], minimum):
        return Finding(cid, "manual", nv["module"], f">= {minimum}",
                       f"driver {nv['module']} is older than {minimum}, the minimum for {why}; upgrade the driver")
    return Finding(cid, "pass", nv["module"], f">= {minimum}" if minimum else "userspace == module",
                   f"driver {nv['module']}, userspace matches")


PERSISTENCED = watched("nvidia-persistenced.service")
# only where no vendor unit exists (a driver from NVIDIA's .run installer without its
# init scripts): persistence is the daemon's default since 370.23
PERSISTENCED_UNIT = {"name": PERSISTENCED, "content": (
    "# Managed by gpuhost (nvidia.persistence): persistence mode on for every GPU at boot.\n"
    "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n\n"
    "[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode\n"
    "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n[Install]\nWantedBy=multi-user.target\n")}
# drop-ins apply by file name: sort after the usual override.conf
PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/zz-gpuhost-persistence.conf"


def persistenced_dropin(exec_start: str) -> dict:
    cmd = " ".join(w for w in exec_start.split() if w != "--no-persistence-mode")
    return {"path": PERSISTENCED_DROPIN, "content": (
        "# Managed by gpuhost (nvidia.persistence): the vendor unit's daemon, with persistence on (its default)\n"
        f"[Service]\nExecStart=\nExecStart={cmd}\n")}


def nvidia_persistence(h: Host) -> Finding:
    cid = "nvidia.persistence"
    nv = h.section("nvidia")
    if nv is None:
        return error(cid, h.errors.get("nvidia", "cannot read the NVIDIA driver"))
    if not nv["gpus"]:
        return na(cid, "no GPU that the NVIDIA driver reports" + (f" ({nv['smi_error']})" if nv.get("smi_error") else ""))
    off = [g["bdf"] for g in nv["gpus"] if not g["persistence"]]
    u = (h.f.get("units") or {}).get(PERSISTENCED) or {}
    ours = (u.get("content") or "").startswith("# Managed by gpuhost")
    vendor = u.get("content") is not None and not ours
    execs = [e for e in (u.get("exec_start") or []) if e]
    starts = bool(u.get("enabled")) or bool(u.get("started_by_udev"))
    flag_ok = bool(execs) and not any("--no-persistence-mode" in e for e in execs)
    persisted_ok = starts and flag_ok
    how = ("vendor unit" if vendor else "gpuhost's unit" if ours else "no unit") + \
          ("" if starts else ", not started at boot") + ("" if flag_ok or not execs else ", --no-persistence-mode")
    observed = f"{len(nv['gpus']) - len(off)}/{len(nv['gpus'])} on; {how}"
    expected = "on for every GPU, live and at boot"
    if not off and persisted_ok:
        return Finding(cid, "pass", observed, expected, f"nvidia-persistenced starts at boot ({how})")
    fix: dict = {"runtime": [{"persistence": True}] if off else []}
    if not persisted_ok:
        if vendor:
            # the vendor unit stays as the package ships it: a drop-in and an enable link
            if not flag_ok and execs:
                fix["file"] = persistenced_dropin(execs[-1])
            if not starts:
                if not u.get("installable"):
                    return Finding(cid, "manual", observed, expected,
                                   f"{u.get('path')} has no [Install] section and no udev rule starts it: "
                                   "start it from the driver's udev rule or a unit of your own")
                fix["enable"] = [PERSISTENCED]
            fix["daemon_reload"] = True
        else:
            fix["unit"] = PERSISTENCED_UNIT
    msg = (f"persistence mode is off on {len(off)} GPUs" if off else "on now, but nothing turns it on at boot") + \
          ("" if persisted_ok else f" ({how})")
    return Finding(cid, "drift", observed, expected, msg, fix=fix)


MRRS_4096 = "CAP_EXP+8.w=5000:7000"      # Device Control bits 14:12 = 101b: 4096 bytes


def mrrs_unit(targets: list[dict]) -> dict:
    """Re-applied at boot on the devices judged, each matched by address AND vendor:device
    (setpci's -s and -d both select: a renumbered bus writes nothing to a stranger)."""
    # every address matched PCI_ADDRESS: nothing in these lines is quoting or a specifier to systemd
    return unit("gpuhost-pcie-mrrs.service", "pcie.mrrs: MaxReadReq 4096 on GPU functions",
                [f"-/usr/bin/{setpci(d, MRRS_4096)}" for d in targets])


def dead_gpus(h: Host, devices: list[dict]) -> str | None:
    """The functions among *devices* that do not answer (config space all ones: a GPU fallen
    off the bus, Xid 79), named with the link state of the port above them: a dead device
    has no register to fix."""
    dead = [d for d in devices if d.get("dead")]
    if not dead:
        return None
    parts = []
    for d in dead:
        up = h.path_up(d["bdf"])
        port = up[0] if up else None
        if port and port.get("link_sta"):
            sta = port["link_sta"]
            link = f"port {port['bdf']} link x{sta['width']} Gen{sta['gen']}" if sta.get("width") else \
                f"port {port['bdf']} link down"
        else:
            link = f"port {port['bdf']}" if port else "no port found"
        parts.append(f"{d['bdf']} ({link})")
    return ("does not answer (config space reads all ones: fallen off the bus, Xid 79): " + ", ".join(parts)
            + "; reset or reseat it, check power and the kernel log; nothing to set on a device that does not answer")


def pcie_mrrs(h: Host) -> Finding:
    cid = "pcie.mrrs"
    extra = [b.lower() for b in (h.s.get("pcie_mrrs_devices") or [])]
    targets = [d for d in h.f.get("pci") or [] if (d in h.gpus or d["bdf"] in extra) and d.get("driver") != "vfio-pci"]
    if not targets:
        return na(cid, "no NVIDIA GPU function the host drives")
    strange = strange_addresses(targets)
    if strange:
        return error(cid, f"the host names a PCI function {', '.join(strange)}: not an address gpuhost puts in a command")
    unreadable = [d["bdf"] for d in targets if d.get("config_error")]
    if unreadable:
        return error(cid, f"cannot read config space of {', '.join(unreadable)}: {targets[0].get('config_error')}")
    dead = dead_gpus(h, targets)
    if dead:
        return error(cid, dead)
    bad = [d for d in targets if d.get("mrrs") != 4096]
    u = mrrs_unit(targets)
    observed = ", ".join(sorted({str(d.get("mrrs")) for d in targets})) + " bytes"
    if not bad and unit_current_or_absent(h.f, u):
        return Finding(cid, "pass", observed, "4096 bytes", f"MaxReadReq 4096 on {len(targets)} functions")
    fix = {"unit": u, "runtime": [pci_change(d, "CAP_EXP+8.w", 0x5000, 0x7000) for d in bad]}
    msg = (f"MaxReadReq {', '.join(sorted({str(d.get('mrrs')) for d in bad}))} on " + ", ".join(d["bdf"] for d in bad)
           if bad else "gpuhost's boot unit does not cover every GPU function")
    return Finding(cid, "drift", observed, "4096 bytes", msg, fix=fix)


SPEED = {1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}


def pcie_link(h: Host) -> Finding:
    cid = "pcie.link"
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


ACS_UNIT = watched("gpuhost-pcie-acs.service")     # gpuhost < 0.2 re-applied ACS with a boot unit
ACS_REDIRECT_BITS = 0x2C
PORT_DOWNSTREAM, PORT_UPSTREAM = 6, 5     # PCIe capability: Device/Port Type


def vm_passthrough(h: Host) -> list[str]:
    """Evidence that this host passes devices to VMs: ACS isolation is then what VFIO's
    IOMMU groups rest on (pve-docs qm-pci-passthrough)."""
    why = [f"vfio-pci on {d['bdf']}" for d in h.f.get("pci") or [] if d.get("driver") == "vfio-pci"][:3]
    vms = ((h.section("vms") or {}).get("hostpci")) or {}
    if vms:
        why.append("hostpci in VM " + ", ".join(sorted(vms, key=lambda v: int(v) if v.isdigit() else 0)))
    for name, p in (("running", h.live), ("persisted", h.persisted or {})):
        if p.get("vfio-pci.ids"):
            why.append(f"vfio-pci.ids= on the {name} command line")
            break
    return why


def acs_ports(h: Host) -> list[dict]:
    """The downstream ports of every PCIe switch with a GPU below it, all of them (a NIC or
    NVMe drive beside the GPUs is a GPUDirect peer: drivers/pci/p2pdma.c checks both
    paths). Root ports are not judged: peers under different root ports go through the
    host bridge anyway."""
    switches = set()
    for gpu in h.gpus:
        for b in h.path_up(gpu["bdf"]):
            if b.get("port_type") == PORT_UPSTREAM:
                switches.add(b["bdf"])
    return sorted((d for d in h.f.get("pci") or [] if d.get("port_type") == PORT_DOWNSTREAM and d.get("parent") in switches),
                  key=lambda d: d["bdf"])


def disable_acs_redir_value(ports: list[dict]) -> str:
    """Devices for pci=disable_acs_redir= by vendor:device ("pci:<vendor>:<device>",
    kernel-parameters.txt): names every port of that switch model whatever its bus number
    after a renumbering, and needs no ';' for a single model."""
    ids = sorted({f"pci:{p['vendor']:04x}:{p['device']:04x}" for p in ports})
    return ";".join(ids)


def pci_param_with(persisted: dict, value: str | None) -> str | None:
    """The pci= parameter with disable_acs_redir= set to *value* (None: taken out) and its
    other comma-separated options kept."""
    opts = [o for o in (persisted.get("pci") or "").split(",") if o and not o.startswith("disable_acs_redir=")]
    if value:
        opts.append(f"disable_acs_redir={value}")
    return ",".join(opts) or None


def persisted_acs_redir(persisted: dict) -> str | None:
    for o in (persisted.get("pci") or "").split(","):
        if o.startswith("disable_acs_redir="):
            return o[len("disable_acs_redir="):]
    return None


def pcie_acs(h: Host) -> Finding:
    cid = "pcie.acs"
    if not h.gpus:
        return na(cid, "no NVIDIA GPU function")
    persisted = h.persisted or {}
    ours_unit = ((h.f.get("units") or {}).get(ACS_UNIT) or {}).get("content") is not None
    vm = vm_passthrough(h)
    if vm:
        leftovers: dict = {}
        if ours_unit:
            leftovers["remove_unit"] = ACS_UNIT
        if persisted_acs_redir(persisted) is not None:
            new = pci_param_with(persisted, None)
            leftovers.update({"cmdline_set": {"pci": new}} if new else {"cmdline_remove": ["pci"]})
        if leftovers:
            return Finding(cid, "drift", "ACS cleared for a VM host", "ACS isolation kept",
                           "this host passes devices to VMs (" + "; ".join(vm) + "): take out what clears ACS",
                           reboot_required="cmdline_set" in leftovers or "cmdline_remove" in leftovers, fix=leftovers)
        return na(cid, "this host passes devices to VMs (" + "; ".join(vm) + "): ACS isolation stays")
    ports = acs_ports(h)
    if not ports:
        return Finding(cid, "pass", "no PCIe switch above the GPUs", "no ACS redirect on switch ports",
                       "GPUs sit on root ports; peer traffic goes through the host bridge")
    unreadable = [p["bdf"] for p in ports if p.get("config_error") or (p.get("config_size") or 4096) <= 256]
    if unreadable:
        return error(cid, f"cannot read the ACS capability of {', '.join(unreadable)}: only 256 bytes of config "
                          "space (no extended config access); ACS is unknown, not absent")
    acs = [p for p in ports if p.get("acs_ctrl") is not None]
    bad = [p for p in acs if p["acs_ctrl"] & ACS_REDIRECT_BITS]
    # the kernel sets ReqRedir and CmpltRedir on every ACS port at boot when an IOMMU is on
    # (pci_std_enable_acs); pci=disable_acs_redir= clears them before IOMMU groups form
    redirectable = [p for p in acs if (p.get("acs_caps") or 0) & ACS_REDIRECT_BITS]
    iommu = h.section("iommu") or {}
    iommu_on = bool(iommu.get("units") or iommu.get("groups"))
    # with the IOMMU off the kernel leaves ACS as firmware set it: a clean port stays clean
    want = disable_acs_redir_value(redirectable) if redirectable and (iommu_on or bad) else None
    have = persisted_acs_redir(persisted)
    covered = want is None or (have is not None and set(want.split(";")) <= set(have.split(";")))
    if not bad and covered and not ours_unit:
        return Finding(cid, "pass", "no redirect", "no ACS redirect on switch ports",
                       f"{len(ports)} switch ports clear" + (f", kept by pci=disable_acs_redir={have}" if have else ""))
    fix: dict = {}
    if not covered:
        merged = ";".join(sorted(set(want.split(";")) | set((have or "").split(";")) - {""}))
        fix["cmdline_set"] = {"pci": pci_param_with(persisted, merged)}
    if ours_unit:
        fix["remove_unit"] = ACS_UNIT
    if bad:
        strange = strange_addresses(bad)
        if strange:
            return error(cid, f"the host names a PCI function {', '.join(strange)}: not an address gpuhost puts in a command")
        fix["runtime"] = [pci_change(p, "ECAP_ACS+6.w", 0, ACS_REDIRECT_BITS) for p in bad]
    observed = "; ".join(f"{p['bdf']} " + "+".join(n for bit, n in ACS_REDIRECT.items() if p["acs_ctrl"] & bit) for p in bad)
    msg = ("ACS redirect sends GPU peer traffic up to the root complex" if bad
           else "clear now, but the next boot sets ACS redirect again")
    if not covered:
        msg += f"; persist pci=disable_acs_redir={want}"
    return Finding(cid, "drift", observed or "clear now, not at boot", "no ACS redirect on switch ports", msg,
                   reboot_required=False, fix=fix)


def lxc_gpu_passthrough(h: Host) -> Finding:
    cid = "lxc.gpu_passthrough"
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
                   fix={"lxc": files, "lxc_devices": {str(k): v for k, v in devices.items() if v.startswith("nvidia")},
                        "lxc_dev_nodes": nv.get("dev_nodes")})


# By property, never by name: at boot every non-rotational disk that offers `none` gets it,
# so a disk renamed or gone (nvme0n1 <-> nvme1n1) never has the wrong queue written.
SCHED_COMMAND = ("/bin/sh -c 'for q in /sys/block/*/queue; do [ \"$(cat $q/rotational)\" = 0 ] || continue; "
                 "grep -qw none $q/scheduler && echo none > $q/scheduler || true; done'")
SCHED_UNIT = unit("gpuhost-storage-scheduler.service", "storage.scheduler: none on non-rotational disks", [SCHED_COMMAND])


def storage_scheduler(h: Host) -> Finding:
    cid = "storage.scheduler"
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
    fix = {"unit": u, "runtime": [{"path": "/sys/block/" + b["name"] + "/queue/scheduler", "value": "none",
                                   "selected": True} for b in bad]}
    msg = ", ".join(f"{b['name']} uses {b['scheduler']}" for b in bad) or "gpuhost's boot unit does not cover every disk"
    return Finding(cid, "drift", observed, "none", msg, fix=fix)


EVALUATORS = {
    "cpu.driver": cpu_driver, "cpu.governor": cpu_governor, "cpu.cstates": cpu_cstates,
    "numa.balancing": numa_balancing, "pcie.mrrs": pcie_mrrs, "pcie.link": pcie_link, "pcie.acs": pcie_acs,
    "iommu.mode": iommu_mode, "kernel.version": kernel_version, "kernel.reboot_pending": kernel_reboot_pending,
    "nvidia.driver": nvidia_driver, "nvidia.persistence": nvidia_persistence,
    "lxc.gpu_passthrough": lxc_gpu_passthrough, "storage.scheduler": storage_scheduler,
}
assert set(EVALUATORS) == set(BY_ID)


def plain(value):
    """Plain Python containers and scalars (Ansible 2.19 hands plugins tagged ones)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    for kind in (bool, int, float):         # bool first: it is an int too
        if isinstance(value, kind):
            return kind(value)
    return value


def unfinished_refresh(h: Host) -> str | None:
    """A boot-loader refresh gpuhost started and never saw finish (a power loss, or a
    refresh that failed even after the files were restored): what boots next is what some
    targets hold (one ESP may have the new line, another the old), not what the files say."""
    j = h.boot.get("unfinished_refresh")
    if not j:
        return None
    return (f"a boot-loader refresh gpuhost started at {j.get('since', '?')} did not finish (power loss, or "
            f"`{j.get('refresh', 'the refresh')}` failed): the boot loader may hold `{j.get('after', '?')}` or "
            f"`{j.get('before', '?')}` on each of its targets; before any reboot run `{j.get('refresh', 'the refresh')}` "
            "and then remove /var/lib/gpuhost/boot-refresh.json (gpuhost fix does both when a control that edits the "
            "command line drifts)")


def reboot_blocked(h: Host) -> str | None:
    """Why no reboot may happen now, whatever control waits for one: the kernel the boot
    loader starts next has no NVIDIA module while this host drives its GPUs with it, or
    what the boot loader holds is not known (an unfinished refresh)."""
    unfinished = unfinished_refresh(h)
    if unfinished:
        return unfinished
    nxt = next_kernel_without_module(h)
    if nxt:
        return (f"the next boot would start {nxt}, which has no NVIDIA module (no nvidia.ko in /lib/modules/{nxt}): "
                "a reboot would leave the GPUs without a driver")
    return None


def reboot_signature(finding: Finding | dict) -> str:
    """What a pending_reboot finding waits for: the same signature after gpuhost's reboot
    means that boot did not apply it."""
    f = finding.as_dict() if isinstance(finding, Finding) else finding
    return json.dumps([f.get("control"), f.get("expected"), f.get("message")], sort_keys=True, default=str)


def reboot_record(findings: dict[str, dict], boot_id: str | None, when: str, epoch: int | None = None) -> dict:
    """What gpuhost's reboot play writes on the host just before it reboots it."""
    return {"boot_id": boot_id, "time": when, "epoch": epoch,
            "findings": {cid: reboot_signature(f) for cid, f in findings.items() if f.get("status") == "pending_reboot"}}


# the boot gpuhost's reboot brings up starts within this long of the record (a reboot waits
# at most gpuhost_reboot_timeout, 600 s by default); a later boot is somebody else's
REBOOT_WINDOW_S = 3600


def rebooted_by_gpuhost(h: Host, last: dict) -> bool:
    """The running boot is the one gpuhost's last reboot brought up (not the boot it was
    written in, not a boot weeks later)."""
    if not last.get("boot_id") or last.get("boot_id") == h.boot.get("boot_id"):
        return False
    epoch, btime = last.get("epoch"), h.boot.get("boot_time")
    if isinstance(epoch, (int, float)) and btime:
        return epoch - 60 <= btime <= epoch + REBOOT_WINDOW_S
    return True


def hold_reboot(h: Host, finding: Finding) -> None:
    """Never harm a host, never loop: a pending_reboot that a reboot must not serve (the
    next kernel has no GPU driver) or that gpuhost's last reboot already failed to clear
    becomes manual, with the reason, so no roll-out reboots for it."""
    blocked = reboot_blocked(h)
    if blocked:
        finding.status, finding.reboot_required = "manual", False
        finding.message = f"{finding.message}; not rebooted: {blocked}"
        return
    last = h.boot.get("last_reboot") or {}
    sig = (last.get("findings") or {}).get(finding.control)
    if sig and rebooted_by_gpuhost(h, last) and sig == reboot_signature(finding):
        finding.status, finding.reboot_required = "manual", False
        finding.message = (f"{finding.message}; gpuhost rebooted this host for this at {last.get('time', '?')} and that "
                           "boot did not apply it: a second reboot will not help (check the boot loader, firmware and "
                           "kernel log)")


def respect_masks(h: Host, finding: Finding) -> None:
    """A unit the fix would install that the administrator masked (systemctl mask: a link to
    /dev/null in /etc/systemd/system, systemd.unit(5)) is their decision: the finding is
    manual, never a fix that would unmask, replace or enable it."""
    name = ((finding.fix or {}).get("unit") or {}).get("name") if isinstance(finding.fix, dict) else None
    have = (h.f.get("units") or {}).get(name) or {} if name else {}
    if have.get("masked"):
        finding.status, finding.fix = "manual", {}
        finding.message = (f"{finding.message}; {name} is masked ({have['path']} -> /dev/null), the administrator's "
                           f"decision: gpuhost does not unmask it (`systemctl unmask {name}` lets gpuhost fix it)")


def evaluate(facts: dict, settings: dict) -> dict[str, dict]:
    """One finding per control, in catalog order, as plain dicts."""
    facts, settings = plain(facts), plain(settings)
    h = Host(facts, settings)
    selected = settings.get("controls") or [c.id for c in CATALOG]
    skip = set(settings.get("controls_skip") or [])
    # a waiver's `expires` is a UTC date, so every controller (and AWX, whatever its zone)
    # agrees on the day it ends: it holds through that day
    today = settings.get("today") or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    waivers = {w["control"]: w for w in settings.get("waivers") or []}
    out: dict[str, dict] = {}
    for control in CATALOG:
        cid = control.id
        if cid not in selected:
            continue
        if cid in skip:
            finding = na(cid, "left out by gpuhost_controls_skip")
        elif h.container and cid in HOST_LEVEL:
            parent = settings.get("container_host")
            finding = na(cid, f"host-level control: this runs inside a {h.container} container; audit its host"
                              + (f" {parent}" if parent else ""))
        else:
            try:
                finding = EVALUATORS[cid](h)
            except Exception as exc:  # a judgement that cannot be made is an error, never a guess
                finding = error(cid, f"{type(exc).__name__}: {exc}")
        if finding.status == "pending_reboot":
            hold_reboot(h, finding)
        if finding.status == "drift":
            respect_masks(h, finding)
        w = waivers.get(cid)
        if w and finding.status in FAILING + ("error",):
            if str(w.get("expires", "9999-12-31")) >= today:
                finding.message = f"waived until {w['expires']}: {w['reason']} (finding: {finding.message})"
                finding.status = "waived"
                finding.fix = {}
        out[cid] = finding.as_dict()
    return out


def markdown() -> str:
    """The controls reference (docs/controls.md), made from the catalog."""
    out = ["# gpuhost controls", "", "Generated from `plugins/module_utils/controls.py` (`gpuhost controls --markdown`).", ""]
    for c in CATALOG:
        out += [f"## `{c.id}`", "", c.title + ".", "", f"- Why: {c.rationale}.",
                f"- Role: `{c.role}`; fix: {'yes' if c.fixable else 'none (a person acts)'}; reboot: {c.reboot}."]
        if c.references:
            out.append("- References: " + "; ".join(c.references) + ".")
        out.append("")
    return "\n".join(out)

