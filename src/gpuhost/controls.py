"""The control catalog and the one place each control's facts are judged.

``evaluate`` takes a host's facts (the ``gpuhost_facts`` module's output) and the
inventory settings, and returns one finding per control: its status, what was observed
and expected, and, where the fix can repair it, the exact change the role makes (a
kernel parameter, a command, a file with its content). The roles act on ``fix``; the
audit is the same play in check mode, so the judgement exists once, here.
"""
from __future__ import annotations

import datetime as _dt
import re
import shlex
from dataclasses import dataclass, field

from . import lxcconf

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
    Control("cpu.driver", "CPU frequency driver is amd-pstate-epp (AMD) or intel_pstate (Intel)", "gpuhost_cpu", True, "if cmdline",
            "acpi-cpufreq cannot use CPPC's fine-grained performance levels; the seed host ran at 3.4% of its "
            "theoretical speed partly on it", ("Documentation/admin-guide/pm/amd-pstate.rst",)),
    Control("cpu.governor", "Every cpufreq policy runs the performance governor (and EPP performance)", "gpuhost_cpu", True, "no",
            "Power-saving governors add ramp-up latency to every host-side kernel launch",
            ("Documentation/admin-guide/pm/cpufreq.rst",)),
    Control("cpu.cstates", "No enabled idle state exits slower than gpuhost_cstate_max_latency_us", "gpuhost_cpu", True, "if cmdline",
            "Deep C-states (hundreds of microseconds to wake) stall the CPU threads that feed the GPUs",
            ("Documentation/admin-guide/pm/cpuidle.rst", "kernel-parameters.txt: processor.max_cstate")),
    Control("numa.balancing", "Automatic NUMA balancing is off, live and at boot", "gpuhost_numa", True, "no",
            "NUMA balancing unmaps pages to sample accesses, adding faults to pinned inference processes",
            ("Documentation/admin-guide/sysctl/kernel.rst: numa_balancing",)),
    Control("pcie.mrrs", "Every NVIDIA GPU function has PCIe Max_Read_Request_Size 4096", "gpuhost_pcie", True, "no",
            "A 512-byte MaxReadReq splits DMA reads into many small requests (the seed host's biggest find)",
            ("PCIe Base Spec: Device Control", "setpci(8)")),
    Control("pcie.link", "Every GPU link runs at the width of both ends on a path that supports its speed", "gpuhost_pcie", False, "-",
            "A GPU trained at x8, or behind a slower bridge, halves host-device bandwidth",
            ("PCIe Base Spec: Link Capabilities/Status",)),
    Control("pcie.acs", "No ACS redirect on switch ports above GPUs (unless devices are passed to VMs)", "gpuhost_pcie", True, "no",
            "ACS request/completion redirect forces GPU peer-to-peer traffic up to the root complex",
            ("PCIe Base Spec: ACS Control",)),
    Control("iommu.mode", "The IOMMU is off or in passthrough mode", "gpuhost_iommu", True, "yes",
            "A translating IOMMU adds a page-table walk to every DMA of host-owned devices",
            ("pve-docs: qm-pci-passthrough", "kernel-parameters.txt: iommu=pt")),
    Control("kernel.version", "The running kernel is at least the minimum", "gpuhost_kernel", True, "yes",
            "Old kernels lack amd_pstate defaults for Zen 5 and scheduler fixes the GPUs' feeding threads need",
            ("pve-docs: system-booting",)),
    Control("kernel.reboot_pending", "The persisted command line and default kernel are the running ones", "gpuhost_kernel", False, "-",
            "A fix that waits for a reboot has not taken effect yet", ()),
    Control("nvidia.driver", "The NVIDIA kernel module supports every GPU and matches its userspace", "gpuhost_nvidia", False, "-",
            "A module older than the GPU's minimum, or an NVML mismatch, leaves GPUs unusable",
            ("CUDA Toolkit release notes: minimum driver versions",)),
    Control("nvidia.persistence", "Persistence mode is on for every GPU, live and at boot", "gpuhost_nvidia", True, "no",
            "Without persistence the driver tears GPU state down between clients and re-initialises it on the next",
            ("NVIDIA driver persistence documentation",)),
    Control("lxc.gpu_passthrough", "Containers given GPUs allow the current device majors and mount every node", "gpuhost_lxc", True, "container",
            "A stale nvidia-uvm major or a missing nvidia-uvm-tools/nvidia-caps node breaks CUDA inside the container",
            ("pct.conf(5)",)),
    Control("storage.scheduler", "Every non-rotational disk uses the none I/O scheduler", "gpuhost_storage", True, "no",
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


def params(cmdline: str | None) -> dict[str, str] | None:
    if cmdline is None:
        return None
    out: dict[str, str] = {}
    for word in shlex.split(cmdline):
        name, _, value = word.partition("=")
        out[name] = value
    return out


def _comparable(p: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in p.items() if k not in LOADER_OWN}


def unit(name: str, description: str, commands: list[str]) -> dict:
    """A oneshot unit that re-applies a runtime setting at every boot."""
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
def cpu_driver(h: Host) -> Finding:
    cid = "cpu.driver"
    cpu, cf = h.section("cpu"), h.section("cpufreq")
    if cpu is None or cf is None:
        return error(cid, h.errors.get("cpu") or h.errors.get("cpufreq") or "cannot read the CPU")
    if not cf["policies"]:
        return na(cid, "no cpufreq: the kernel has no frequency scaling here (a virtual machine)")
    driver, status = cf["driver"], cf.get("amd_pstate_status")
    if cpu["vendor"] == "AuthenticAMD":
        if not cpu["cppc"]:
            return Finding(cid, "manual", driver, "amd-pstate-epp",
                           "CPPC is disabled in firmware, so amd_pstate cannot load: enable CPPC in the BIOS")
        live_ok = driver == "amd-pstate-epp" and status == "active"
        if h.persisted is None:
            return error(cid, "cannot tell the persisted kernel command line (no GRUB or proxmox-boot-tool config)")
        mode = h.persisted.get("amd_pstate")
        default = h.boot.get("default_kernel")
        by_default = (at_least(default, "6.13") and cpu["family"] >= 26) or (
            at_least(default, "6.5") and cpu.get("pm_profile") not in (4, 5, 7))
        persisted_ok = mode == "active" or (mode is None and by_default)
        fix: dict = {}
        if not persisted_ok:
            fix["cmdline_set"] = {"amd_pstate": "active"}
        if not live_ok and status is not None:
            fix["commands"] = ["echo active > /sys/devices/system/cpu/amd_pstate/status"]
        if live_ok and persisted_ok:
            return Finding(cid, "pass", driver, "amd-pstate-epp", "amd_pstate in active (EPP) mode")
        if not live_ok and persisted_ok and status is None:
            return Finding(cid, "pending_reboot", driver, "amd-pstate-epp",
                           "amd_pstate=active is on the persisted command line; it takes effect at the next boot",
                           reboot_required=True)
        if status is None:
            msg = "amd_pstate is not loaded; add amd_pstate=active to the kernel command line"
        elif not live_ok:
            msg = f"amd_pstate runs in {status} mode; switch it to active (EPP)"
        else:
            msg = "amd_pstate is active now but the next boot would not load it; persist amd_pstate=active"
        return Finding(cid, "drift", driver, "amd-pstate-epp", msg, reboot_required=status is None, fix=fix)
    if cpu["vendor"] == "GenuineIntel":
        if not cpu["hwp"]:
            return Finding(cid, "manual", driver, "intel_pstate", "HWP is off in firmware: enable it in the BIOS")
        if h.persisted is None:
            return error(cid, "cannot tell the persisted kernel command line")
        live_ok = driver == "intel_pstate"
        persisted_ok = h.persisted.get("intel_pstate") not in ("disable", "passive")
        if live_ok and persisted_ok:
            return Finding(cid, "pass", driver, "intel_pstate", "intel_pstate in active mode")
        if persisted_ok:
            return Finding(cid, "pending_reboot", driver, "intel_pstate", "takes effect at the next boot", True)
        return Finding(cid, "drift", driver, "intel_pstate", "intel_pstate is disabled on the command line; remove intel_pstate=",
                       reboot_required=True, fix={"cmdline_remove": ["intel_pstate"]})
    return na(cid, f"no control for CPU vendor {cpu['vendor']}")


GOVERNOR_COMMAND = ("/bin/sh -c 'for p in /sys/devices/system/cpu/cpufreq/policy*; do echo performance > $p/scaling_governor; "
                    "if [ -e $p/energy_performance_preference ]; then echo performance > $p/energy_performance_preference; fi; done'")
GOVERNOR_UNIT = unit("gpuhost-cpu-governor.service", "cpu.governor: performance on every cpufreq policy", [GOVERNOR_COMMAND])


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
    offered = all("performance" in p["governors"] for p in cf["policies"])
    persisted_ok = (unit_ok(h.f, GOVERNOR_UNIT) or (h.persisted or {}).get("cpufreq.default_governor") == "performance"
                    or (kernel_default == "performance" and offered))
    if not bad and persisted_ok:
        return Finding(cid, "pass", observed, expected, f"all {len(cf['policies'])} policies run performance")
    fix = {"unit": GOVERNOR_UNIT, "commands": [GOVERNOR_COMMAND] if bad else []}
    msg = (f"{len(bad)} of {len(cf['policies'])} policies do not run performance" if bad
           else "performance now, but nothing sets it at boot")
    return Finding(cid, "drift", observed, expected, msg, fix=fix)


def cstate_command(max_latency: int) -> str:
    return ("/bin/sh -c 'for s in /sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*; do "
            f"if [ \"$(cat $s/latency)\" -gt {max_latency} ]; then echo 1 > $s/disable; fi; done'")


def cstate_unit(max_latency: int) -> dict:
    return unit("gpuhost-cpu-cstates.service", f"cpu.cstates: disable idle states above {max_latency} us",
                [cstate_command(max_latency)])


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
    cap_param = "processor.max_cstate" if ci.get("driver") == "acpi_idle" else "intel_idle.max_cstate"
    cap = (h.persisted or {}).get(cap_param)
    capped = cap is not None and cap.isdigit() and all(
        _cnum(s["name"]) is not None and _cnum(s["name"]) > max(int(cap), 1) for s in deep)
    persisted_ok = not deep or unit_ok(h.f, u) or capped
    if not live_bad and persisted_ok:
        return Finding(cid, "pass", observed, expected, "no deep idle state is enabled")
    fix = {"unit": u, "commands": [cstate_command(limit)] if live_bad else []}
    msg = (", ".join(f"{s['name']} ({s['latency_us']} us) enabled on {s['cpus'] - s['disabled']} CPUs" for s in live_bad)
           if live_bad else "deep states are disabled now, but nothing disables them at boot")
    return Finding(cid, "drift", observed, expected, msg, fix=fix)


def _cnum(name: str) -> int | None:
    m = re.match(r"^C(\d+)", name or "")
    return int(m.group(1)) if m else None


NUMA_DROPIN = {"path": "/etc/sysctl.d/99-gpuhost-numa-balancing.conf",
               "content": "# Managed by gpuhost (numa.balancing)\nkernel.numa_balancing = 0\n"}


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
    persisted = sysctl["persisted"].get("kernel.numa_balancing")
    by_cmdline = (h.persisted or {}).get("numa_balancing") == "disable"
    persisted_ok = by_cmdline or persisted == "0"
    if live == "0" and persisted_ok:
        return Finding(cid, "pass", live, "0", "NUMA balancing is off")
    fix: dict = {}
    if not persisted_ok:
        fix["file"] = NUMA_DROPIN
    if live != "0":
        fix["commands"] = ["sysctl -q -w kernel.numa_balancing=0"]
    src = sysctl["sources"].get("kernel.numa_balancing")
    msg = ("kernel.numa_balancing is %s" % live) + ("" if persisted_ok else
                                                     f" and the next boot sets {persisted or 'the kernel default'}"
                                                     + (f" ({src})" if src else ""))
    return Finding(cid, "drift", live, "0", msg, fix=fix)


def iommu_mode(h: Host) -> Finding:
    cid = "iommu.mode"
    io = h.section("iommu")
    if io is None:
        return error(cid, h.errors.get("iommu", "cannot read the IOMMU"))
    if not io["units"] and not io["groups"]:
        return Finding(cid, "pass", "off", "off or passthrough", "the IOMMU is off")
    live = "passthrough" if io["group_types"] == ["identity"] else "translated"
    if h.persisted is None:
        return error(cid, "cannot tell the persisted kernel command line")
    persisted_ok = h.persisted.get("iommu") == "pt"
    if live == "passthrough" and persisted_ok:
        return Finding(cid, "pass", live, "passthrough", "iommu=pt")
    if persisted_ok:
        return Finding(cid, "pending_reboot", live, "passthrough", "iommu=pt is persisted; it takes effect at the next boot", True)
    return Finding(cid, "drift", live, "passthrough", "the IOMMU translates host DMA; add iommu=pt to the kernel command line",
                   reboot_required=True, fix={"cmdline_set": {"iommu": "pt"}})


def kernel_minimum(h: Host) -> str | None:
    if h.s.get("kernel_min_version"):
        return str(h.s["kernel_min_version"])
    pve = (h.section("os") or {}).get("proxmox_ve")
    if pve and vkey(pve)[:1] == (8,):
        return "6.14"
    return None


def kernel_version(h: Host) -> Finding:
    cid = "kernel.version"
    minimum = kernel_minimum(h)
    running = h.boot.get("running_kernel")
    if minimum is None:
        return na(cid, "no minimum kernel set (gpuhost_kernel_min_version) and not Proxmox VE 8")
    if running is None:
        return error(cid, "cannot read the running kernel")
    if at_least(running, minimum):
        return Finding(cid, "pass", running, f">= {minimum}", f"running {running}")
    default = h.boot.get("default_kernel")
    if at_least(default, minimum):
        return Finding(cid, "pending_reboot", running, f">= {minimum}", f"{default} is installed and boots next", True)
    is_pve = bool((h.section("os") or {}).get("proxmox_ve"))
    fix = {"series": minimum, "proxmox": is_pve, "headers": bool(h.boot.get("nvidia_dkms")),
           "unpin": bool(h.boot.get("pinned_kernel")) and not at_least(h.boot.get("pinned_kernel"), minimum)}
    if is_pve:
        fix["packages"] = [f"proxmox-kernel-{minimum}"] + ([f"proxmox-headers-{minimum}"] if fix["headers"] else [])
    msg = f"kernel {running} is older than {minimum}; install the {minimum} series"
    if fix["headers"]:
        msg += " with its headers (the NVIDIA driver is built by dkms)"
    return Finding(cid, "drift", running, f">= {minimum}", msg, reboot_required=True, fix=fix)


def kernel_reboot_pending(h: Host) -> Finding:
    cid = "kernel.reboot_pending"
    if h.boot.get("loader") is None:
        return na(cid, "no boot loader gpuhost manages (GRUB or proxmox-boot-tool) on this machine")
    if h.persisted is None:
        return error(cid, h.errors.get("boot", "cannot read the persisted command line"))
    live, persisted = _comparable(h.live), _comparable(h.persisted)
    diffs = [f"{k}={persisted[k]}" if persisted[k] else k for k in persisted if live.get(k) != persisted[k]]
    diffs += [f"-{k}" for k in live if k not in persisted]
    running, default = h.boot.get("running_kernel"), h.boot.get("default_kernel")
    observed = {"kernel": running, "cmdline": " ".join(f"{k}={v}" if v else k for k, v in live.items())}
    expected = {"kernel": default, "cmdline": " ".join(f"{k}={v}" if v else k for k, v in persisted.items())}
    why = []
    if default and running != default:
        why.append(f"the next boot runs {default}")
    if diffs:
        why.append("the next boot's command line differs: " + " ".join(diffs))
    if why:
        return Finding(cid, "pending_reboot", observed, expected, "; ".join(why) + " (reboot to apply)", True)
    return Finding(cid, "pass", observed, expected, "the running kernel and command line are what the next boot has")


def nvidia_driver(h: Host) -> Finding:
    cid = "nvidia.driver"
    nv = h.section("nvidia")
    if nv is None:
        return error(cid, h.errors.get("nvidia", "cannot read the NVIDIA driver"))
    if nv["module"] is None and nv["smi"] is None and not h.gpus:
        return na(cid, "no NVIDIA driver or GPU")
    if nv["module"] is None:
        return Finding(cid, "manual", nv.get("smi_error") or "no kernel module", "a loaded NVIDIA kernel module",
                       f"the NVIDIA kernel module is not loaded (kernel {h.boot.get('running_kernel')}: "
                       "were its headers installed for dkms?)")
    if nv["smi"] is None:
        return Finding(cid, "manual", f"module {nv['module']}, no nvidia-smi", "userspace == module",
                       "the NVIDIA userspace (nvidia-smi, NVML) is not installed")
    if nv.get("userspace") != nv["module"]:
        return Finding(cid, "manual", f"userspace {nv.get('userspace')}, module {nv['module']}", "userspace == module",
                       f"userspace {nv.get('userspace')} does not match kernel module {nv['module']} "
                       "(NVML: Driver/library version mismatch); install the matching driver")
    minimum = h.s.get("nvidia_min_driver")
    why = "gpuhost_nvidia_min_driver"
    if not minimum:
        caps = sorted({g["compute_cap"] for g in nv["gpus"]}, key=vkey)
        needs = [(MIN_DRIVER.get(c), c) for c in caps if MIN_DRIVER.get(c)]
        if needs:
            minimum, cap = max(needs, key=lambda x: vkey(x[0]))
            why = f"compute capability {cap}"
    if minimum and not at_least(nv["module"], minimum):
        return Finding(cid, "manual", nv["module"], f">= {minimum}",
                       f"driver {nv['module']} is older than {minimum}, the minimum for {why}; upgrade the driver")
    return Finding(cid, "pass", nv["module"], f">= {minimum}" if minimum else "userspace == module",
                   f"driver {nv['module']}, userspace matches")


PERSISTENCED_UNIT = {"name": "nvidia-persistenced.service", "content": (
    "# Managed by gpuhost (nvidia.persistence): persistence mode on for every GPU at boot.\n"
    "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n\n"
    "[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode\n"
    "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n[Install]\nWantedBy=multi-user.target\n")}


def nvidia_persistence(h: Host) -> Finding:
    cid = "nvidia.persistence"
    nv = h.section("nvidia")
    if nv is None:
        return error(cid, h.errors.get("nvidia", "cannot read the NVIDIA driver"))
    if not nv["gpus"]:
        return na(cid, "no GPU that the NVIDIA driver reports" + (f" ({nv['smi_error']})" if nv.get("smi_error") else ""))
    off = [g["bdf"] for g in nv["gpus"] if not g["persistence"]]
    units = h.f.get("units") or {}
    have = units.get(PERSISTENCED_UNIT["name"]) or {}
    persisted_ok = bool(have.get("enabled")) and "--persistence-mode" in (have.get("content") or "") and \
        "--no-persistence-mode" not in (have.get("content") or "")
    observed = f"{len(nv['gpus']) - len(off)}/{len(nv['gpus'])} on" + ("" if persisted_ok else ", not at boot")
    if not off and persisted_ok:
        return Finding(cid, "pass", observed, "on for every GPU, live and at boot", "nvidia-persistenced --persistence-mode")
    fix = {"unit": PERSISTENCED_UNIT if not persisted_ok else None, "commands": ["nvidia-smi -pm 1"] if off else []}
    msg = (f"persistence mode is off on {len(off)} GPUs" if off else "on now, but nothing turns it on at boot")
    return Finding(cid, "drift", observed, "on for every GPU, live and at boot", msg, fix=fix)


def mrrs_unit(bdfs: list[str]) -> dict:
    return unit("gpuhost-pcie-mrrs.service", "pcie.mrrs: MaxReadReq 4096 on GPU functions",
                [f"/usr/bin/setpci -s {b} CAP_EXP+8.w=5000:7000" for b in bdfs])


def pcie_mrrs(h: Host) -> Finding:
    cid = "pcie.mrrs"
    extra = [b.lower() for b in (h.s.get("pcie_mrrs_devices") or [])]
    targets = [d for d in h.f.get("pci") or [] if d in h.gpus or d["bdf"] in extra]
    if not targets:
        return na(cid, "no NVIDIA GPU function")
    unreadable = [d["bdf"] for d in targets if d.get("config_error")]
    if unreadable:
        return error(cid, f"cannot read config space of {', '.join(unreadable)}: {targets[0].get('config_error')}")
    bad = [d for d in targets if d.get("mrrs") != 4096]
    u = mrrs_unit([d["bdf"] for d in targets])
    observed = ", ".join(sorted({str(d.get("mrrs")) for d in targets})) + " bytes"
    if not bad and unit_current_or_absent(h.f, u):
        return Finding(cid, "pass", observed, "4096 bytes", f"MaxReadReq 4096 on {len(targets)} functions")
    fix = {"unit": u, "commands": [f"setpci -s {d['bdf']} CAP_EXP+8.w=5000:7000" for d in bad]}
    msg = (f"MaxReadReq {', '.join(sorted({str(d.get('mrrs')) for d in bad}))} on " + ", ".join(d["bdf"] for d in bad)
           if bad else "gpuhost's boot unit does not cover every GPU function")
    return Finding(cid, "drift", observed, "4096 bytes", msg, fix=fix)


SPEED = {1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}


def pcie_link(h: Host) -> Finding:
    cid = "pcie.link"
    if not h.gpus:
        return na(cid, "no NVIDIA GPU function")
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


def acs_unit(ports: list[dict]) -> dict:
    return unit("gpuhost-pcie-acs.service", "pcie.acs: no ACS redirect on switch ports above GPUs",
                [f"/usr/bin/setpci -s {p['bdf']} ECAP_ACS+6.w=0000:002c" for p in ports])


def pcie_acs(h: Host) -> Finding:
    cid = "pcie.acs"
    if not h.gpus:
        return na(cid, "no NVIDIA GPU function")
    vfio = [d["bdf"] for d in h.f.get("pci") or [] if d.get("driver") == "vfio-pci"]
    if vfio:
        return na(cid, f"this host passes devices to VMs (vfio-pci on {', '.join(vfio)}): ACS isolation stays")
    ports = {}
    for gpu in h.gpus:
        for b in h.path_up(gpu["bdf"]):
            if b.get("port_type") in (5, 6) and b.get("acs_ctrl") is not None:   # switch up/downstream ports
                ports[b["bdf"]] = b
    if any(p.get("config_error") for p in ports.values()):
        return error(cid, "cannot read switch port config space")
    bad = [p for p in ports.values() if p["acs_ctrl"] & 0x2C]
    u = acs_unit(sorted(ports.values(), key=lambda p: p["bdf"]))
    if not ports:
        return Finding(cid, "pass", "no PCIe switch above the GPUs", "no ACS redirect on switch ports",
                       "GPUs sit on root ports; peer traffic goes through the root complex")
    if not bad and unit_current_or_absent(h.f, u):
        return Finding(cid, "pass", "no redirect", "no ACS redirect on switch ports", f"{len(ports)} switch ports clear")
    observed = "; ".join(f"{p['bdf']} " + "+".join(n for bit, n in ACS_REDIRECT.items() if p["acs_ctrl"] & bit) for p in bad)
    fix = {"unit": u, "commands": [f"setpci -s {p['bdf']} ECAP_ACS+6.w=0000:002c" for p in bad]}
    return Finding(cid, "drift", observed or "clear now, not at boot", "no ACS redirect on switch ports",
                   "ACS redirect sends GPU peer traffic to the root complex" if bad
                   else "gpuhost's boot unit does not cover every switch port", fix=fix)


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
        if not probs:
            continue
        if not lxcconf.repairable(pt):
            manual.append(f"{vmid}: given no /dev/nvidiaN (" + ", ".join(probs) + "); which GPUs it gets is yours to say")
            continue
        fixed = lxcconf.repair(text, devices)
        if lxcconf.problems(lxcconf.inspect(vmid, fixed), devices):   # a fix that cannot reach pass is not attempted
            manual.append(f"{vmid}: " + ", ".join(probs) + " (gpuhost cannot repair this config)")
            continue
        broken.append(f"{vmid}: " + ", ".join(probs))
        files.append({"path": f"/etc/pve/lxc/{vmid}.conf", "content": fixed, "vmid": vmid})
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
    return Finding(cid, "drift", "; ".join(broken + manual), expected, msg, fix={"files": files})


def sched_unit(disks: list[str]) -> dict:
    return unit("gpuhost-storage-scheduler.service", "storage.scheduler: none on non-rotational disks",
                [f"/bin/sh -c 'echo none > /sys/block/{d}/queue/scheduler'" for d in disks])


def storage_scheduler(h: Host) -> Finding:
    cid = "storage.scheduler"
    block = h.section("block")
    if block is None:
        return error(cid, h.errors.get("block", "cannot read block devices"))
    ssd = [b for b in block if not b["rotational"] and "none" in b["schedulers"]]
    if not ssd:
        return na(cid, "no non-rotational disk with a selectable scheduler")
    bad = [b for b in ssd if b["scheduler"] != "none"]
    u = sched_unit([b["name"] for b in ssd])
    observed = ", ".join(f"{b['name']}={b['scheduler']}" for b in ssd)
    if not bad and unit_current_or_absent(h.f, u):
        return Finding(cid, "pass", observed, "none", f"{len(ssd)} disks use none")
    fix = {"unit": u, "commands": [f"echo none > /sys/block/{b['name']}/queue/scheduler" for b in bad]}
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


def evaluate(facts: dict, settings: dict) -> dict[str, dict]:
    """One finding per control, in catalog order, as plain dicts."""
    h = Host(facts, settings)
    selected = settings.get("controls") or [c.id for c in CATALOG]
    skip = set(settings.get("controls_skip") or [])
    today = settings.get("today") or _dt.date.today().isoformat()
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
    out = ["# gpuhost controls", "", "Generated from `src/gpuhost/controls.py` (`python -m gpuhost.controls`).", ""]
    for c in CATALOG:
        out += [f"## `{c.id}`", "", c.title + ".", "", f"- Why: {c.rationale}.",
                f"- Role: `{c.role}`; fix: {'yes' if c.fixable else 'none (a person acts)'}; reboot: {c.reboot}."]
        if c.references:
            out.append("- References: " + "; ".join(c.references) + ".")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(), end="")
