"""The lab's kernel model: what a simulated boot derives from the spec plus the disk.

``boot_state`` reads the host's disk (its merged overlay root) the way firmware, the
boot loader and early userspace would, and returns everything volatile the next boot
will have. Nothing here writes; the caller applies the result. The rules are those of
``contracts/hostspec.md``, numbered as there.
"""
from __future__ import annotations

import re
import shlex
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .shims import shimlib
from .shims.shimlib import version_key
from .spec import HostSpec

# what the hosts' proxmox-boot-tool and update-grub write, relative to a host's root
ESP_ENTRIES = shimlib.ESP_ENTRIES.lstrip("/")
GRUB_CFG = shimlib.GRUB_CFG.lstrip("/")
PIN_FILE = shimlib.PIN.lstrip("/")
NEXT_BOOT_PIN_FILE = shimlib.NEXT_PIN.lstrip("/")
UNIT_WANTS = "etc/systemd/system/multi-user.target.wants"

SERVER_PM_PROFILES = (4, 5, 7)
ACPI_GOVERNORS = ["conservative", "ondemand", "userspace", "powersave", "performance", "schedutil"]
EPP_GOVERNORS = ["performance", "powersave"]
EPP_CHOICES = ["default", "performance", "balance_performance", "balance_power", "power"]


def release_at_least(release: str, minimum: str) -> bool:
    nums = [int(x) for x in re.findall(r"\d+", release)[:3]]
    want = [int(x) for x in minimum.split(".")]
    return nums[: len(want)] >= want


def parse_cmdline(cmdline: str) -> dict[str, str]:
    """Kernel parameters as name -> value ('' for flags); the last one given wins."""
    params: dict[str, str] = {}
    for word in shlex.split(cmdline):
        name, _, value = word.partition("=")
        params[name] = value
    return params


@dataclass
class BootState:
    release: str
    cmdline: str                       # what the loader holds, without BOOT_IMAGE
    params: dict[str, str]
    cpufreq_driver: str | None         # amd-pstate-epp | amd-pstate | intel_pstate | acpi-cpufreq | None
    amd_pstate_status: str | None      # active | passive | guided | None (not loaded)
    governor: str | None
    cstate_names: list[str]            # the idle states the driver offers this boot
    iommu: str                         # off | pt | translated
    thp: str
    nvidia_loaded: bool
    sysctl: dict[str, str]             # live values after sysctl.d (step 10)
    units: list[str]                   # ExecStart lines of enabled units, in order (step 10)
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    consumed_next_boot_pin: bool = False

    @property
    def proc_cmdline(self) -> str:
        return f"BOOT_IMAGE=/boot/vmlinuz-{self.release} {self.cmdline}".rstrip()


def installed_kernels(root: Path) -> list[str]:
    return shimlib.installed_kernels(str(root))


def _read(root: Path, rel: str) -> str | None:
    try:
        return (root / rel).read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None


def choose_kernel(root: Path) -> tuple[str | None, bool]:
    """Rule 1: a one-time pin, else the pin, else the newest installed."""
    installed = installed_kernels(root)
    for rel_path, once in ((NEXT_BOOT_PIN_FILE, True), (PIN_FILE, False)):
        pin = (_read(root, rel_path) or "").strip()
        if pin and pin in installed:
            return pin, once
    return (installed[-1] if installed else None), False


def loader_cmdline(root: Path, loader: str, release: str) -> str:
    """Rule 2: what the boot loader holds, not what its source file says now."""
    if loader == "grub":
        cfg = _read(root, GRUB_CFG) or ""
        lines = re.findall(r"^\s*linux\s+/boot/vmlinuz-(\S+)\s*(.*)$", cfg, re.M)
        for rel, args in lines:
            if rel == release:
                return args.strip()
        return lines[0][1].strip() if lines else ""
    entries = root / ESP_ENTRIES
    files = sorted(entries.glob("*.conf"), key=lambda p: p.stat().st_mtime) if entries.is_dir() else []
    chosen = next((f for f in files if f.name == f"proxmox-{release}.conf"), files[-1] if files else None)
    if chosen is None:
        return ""
    m = re.search(r"^options\s+(.*)$", chosen.read_text(), re.M)
    return m.group(1).strip() if m else ""


def cpufreq_for(spec: HostSpec, release: str, params: dict[str, str]) -> tuple[str | None, str | None]:
    """Rule 3: (scaling driver, amd_pstate status) for this boot."""
    fw = spec.firmware
    if fw.virtualized:
        return None, None
    if fw.vendor_cpu == "GenuineIntel":
        if fw.hwp and params.get("intel_pstate") != "disable":
            return "intel_pstate", None
        return "acpi-cpufreq", None
    mode = params.get("amd_pstate")
    if fw.cppc and mode == "active":
        return "amd-pstate-epp", "active"
    if fw.cppc and mode in ("passive", "guided"):
        return "amd-pstate", mode
    if mode is None and fw.cppc:
        by_default = (release_at_least(release, "6.5") and fw.acpi_pm_profile not in SERVER_PM_PROFILES) or (
            release_at_least(release, "6.13") and fw.cpu_family >= 26
        )
        if by_default:
            return "amd-pstate-epp", "active"
    return "acpi-cpufreq", None


def governors_for(driver: str | None) -> list[str]:
    if driver in ("amd-pstate-epp", "intel_pstate"):
        return list(EPP_GOVERNORS)
    if driver is None:
        return []
    return list(ACPI_GOVERNORS)


def default_governor(spec: HostSpec, driver: str | None, params: dict[str, str]) -> str | None:
    offered = governors_for(driver)
    if not offered:
        return None
    wanted = params.get("cpufreq.default_governor")
    if wanted in offered:
        return wanted
    if spec.cpu.governor_default in offered:
        return spec.cpu.governor_default
    return "powersave"


def _cstate_number(name: str) -> int | None:
    m = re.match(r"^C(\d+)", name)
    return int(m.group(1)) if m else None


def cstates_for(spec: HostSpec, params: dict[str, str]) -> list[str]:
    """Rule 4: the states the idle driver registers this boot."""
    if spec.cpu.cpuidle_driver == "none":
        return []
    param = "processor.max_cstate" if spec.cpu.cpuidle_driver == "acpi_idle" else "intel_idle.max_cstate"
    limit = params.get(param)
    names = [c.name for c in spec.cpu.cstates]
    if limit is None or not limit.isdigit():
        return names
    cap = int(limit)
    return [n for n in names if (_cstate_number(n) is None) or _cstate_number(n) <= max(cap, 1)]


def iommu_for(spec: HostSpec, params: dict[str, str]) -> str:
    """Rule 6."""
    if not spec.firmware.iommu:
        return "off"
    if params.get("iommu") == "pt":
        return "pt"
    if params.get("amd_iommu") == "off" or params.get("intel_iommu") == "off":
        return "off"
    return "translated"


def nvidia_loaded(spec: HostSpec, root: Path, release: str, first_release: str) -> bool:
    """Rule 9: a dkms-built module exists for a new kernel only if its headers were installed."""
    if spec.nvidia is None:
        return False
    if not spec.nvidia.dkms or release == first_release:
        return True
    return (root / f"usr/src/linux-headers-{release}").is_dir()


SYSCTL_LINE = re.compile(r"^\s*-?\s*([\w./-]+)\s*=\s*(.*?)\s*$")


def sysctl_after_boot(spec: HostSpec, root: Path, params: dict[str, str]) -> dict[str, str]:
    """Rules 5 and 10: defaults, the command line, then /etc/sysctl.d in lexical order."""
    values = {k: str(v) for k, v in spec.sysctl_default.items()}
    if "kernel.numa_balancing" in values and params.get("numa_balancing") == "disable":
        values["kernel.numa_balancing"] = "0"
    sysctl_d = root / "etc/sysctl.d"
    files = sorted(sysctl_d.glob("*.conf"), key=lambda p: p.name) if sysctl_d.is_dir() else []
    for conf in files:
        for line in conf.read_text(errors="replace").splitlines():
            if line.lstrip().startswith(("#", ";")):
                continue
            m = SYSCTL_LINE.match(line)
            if m:
                key = m.group(1).replace("/", ".")
                if key in values:          # only what the model owns; the rest is the real kernel's
                    values[key] = m.group(2)
    return values


def enabled_units(root: Path) -> list[str]:
    """Rule 10: ExecStart= lines of units enabled in multi-user.target.wants, in order."""
    wants = root / UNIT_WANTS
    if not wants.is_dir():
        return []
    commands: list[str] = []
    for link in sorted(wants.iterdir(), key=lambda p: p.name):
        unit = _resolve_unit(root, link)
        if unit is None:
            continue
        for line in unit.read_text(errors="replace").splitlines():
            m = re.match(r"^\s*ExecStart\s*=\s*(.+?)\s*$", line)
            if m:
                commands.append(m.group(1).lstrip("-@:+!"))
    return commands


def _resolve_unit(root: Path, link: Path) -> Path | None:
    """Follow a wants/ link inside the host's root, never out of it."""
    for _ in range(8):
        if not link.is_symlink():
            return link if link.is_file() else None
        target = link.readlink()
        link = root / str(target).lstrip("/") if target.is_absolute() else link.parent / target
    return None


def boot_state(spec: HostSpec, root: Path) -> BootState:
    release, once = choose_kernel(root)
    if release is None:
        raise RuntimeError(f"{spec.hostname}: no kernel in /boot, the host cannot boot")
    cmdline = loader_cmdline(root, spec.boot.loader, release)
    params = parse_cmdline(cmdline)
    driver, status = cpufreq_for(spec, release, params)
    first = spec.kernel.pinned or sorted(spec.kernel.installed, key=version_key)[-1]
    return BootState(
        release=release,
        cmdline=cmdline,
        params=params,
        cpufreq_driver=driver,
        amd_pstate_status=status,
        governor=default_governor(spec, driver, params),
        cstate_names=cstates_for(spec, params),
        iommu=iommu_for(spec, params),
        thp=params.get("transparent_hugepage") if params.get("transparent_hugepage") in ("always", "madvise", "never") else spec.thp_default,
        nvidia_loaded=nvidia_loaded(spec, root, release, first),
        sysctl=sysctl_after_boot(spec, root, params),
        units=enabled_units(root),
        consumed_next_boot_pin=once,
    )
