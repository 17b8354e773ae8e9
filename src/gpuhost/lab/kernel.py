"""The lab's kernel model: what a simulated boot derives from the spec plus the disk.

``boot_state`` reads the host's disk (its merged overlay root) the way firmware, the
boot loader and early userspace would, and returns everything volatile the next boot
will have. Nothing here writes; the caller applies the result. The rules are those of
``contracts/hostspec.md``, numbered as there.
"""
from __future__ import annotations

import fnmatch
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .shims import shimlib
from .shims.shimlib import version_key  # noqa: F401  (the lab's kernel ordering, used by its callers)
from .spec import HostSpec

# what the hosts' proxmox-boot-tool and update-grub write, relative to a host's root
ESP_ENTRIES = shimlib.ESP_ENTRIES.lstrip("/")
ESP_LOADER_CONF = (shimlib.ESP + "/loader/loader.conf").lstrip("/")
ESP_GRUB_CFG = shimlib.ESP_GRUB_CFG.lstrip("/")
GRUB_CFG = shimlib.GRUB_CFG.lstrip("/")
PIN_FILE = shimlib.PIN.lstrip("/")
NEXT_BOOT_PIN_FILE = shimlib.NEXT_PIN.lstrip("/")
UNIT_WANTS = "etc/systemd/system/multi-user.target.wants"

SERVER_PM_PROFILES = (4, 5, 7)
NR_PM_PROFILES = 9                  # include/acpi/actbl.h: a profile above 8 counts as undefined
ACPI_GOVERNORS = ["conservative", "ondemand", "userspace", "powersave", "performance", "schedutil"]
EPP_GOVERNORS = ["performance", "powersave"]
EPP_CHOICES = ["default", "performance", "balance_performance", "balance_power", "power"]


def release_at_least(release: str, minimum: str) -> bool:
    nums = [int(x) for x in re.findall(r"\d+", release)[:3]]
    want = [int(x) for x in minimum.split(".")]
    return nums[: len(want)] >= want


def parse_cmdline(cmdline: str) -> dict[str, str]:
    """Kernel parameters as name -> value ('' for flags); the last one given wins. Split as
    the kernel splits its command line (kernel/params.c next_arg): whitespace outside double
    quotes, the quotes dropped around a word or a value, backslashes ordinary."""
    params: dict[str, str] = {}
    i, n = 0, len(cmdline)
    while i < n:
        while i < n and cmdline[i].isspace():
            i += 1
        if i >= n:
            break
        quoted = cmdline[i] == '"'
        i += quoted
        start, in_quote, equals = i, quoted, -1
        while i < n and (in_quote or not cmdline[i].isspace()):
            if equals < 0 and cmdline[i] == "=":
                equals = i
            if cmdline[i] == '"':
                in_quote = not in_quote
            i += 1
        if equals < 0:
            name, value = cmdline[start:i], ""
            if quoted and name.endswith('"'):
                name = name[:-1]
        else:
            name, value = cmdline[start:equals], cmdline[equals + 1:i]
            if value.startswith('"'):
                value = value[1:]
                if value.endswith('"'):
                    value = value[:-1]
            elif quoted and value.endswith('"'):
                value = value[:-1]
        params[name] = value
    return params


def grub_words(args: str) -> list[str]:
    """The words of a grub.cfg `linux` line as GRUB's script lexer makes them: quotes and
    backslashes removed, $variables expanded (none are set here: empty)."""
    words, cur, has, i, quote = [], [], False, 0, None
    while i < len(args):
        c = args[i]
        if quote == "'":
            if c == "'":
                quote = None
            else:
                cur.append(c)
        elif c == "\\" and i + 1 < len(args):
            i += 1
            cur.append(args[i])
            has = True
        elif quote == '"' and c == '"':
            quote = None
        elif quote is None and c in "'\"":
            quote, has = c, True
        elif c == "$" and quote != "'":
            m = re.match(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)", args[i:])
            if m:
                i += m.end()
                continue
            cur.append(c)
        elif quote is None and c in " \t":
            if cur or has:
                words.append("".join(cur))
            cur, has = [], False
        else:
            cur.append(c)
            has = True
        i += 1
    if cur or has:
        words.append("".join(cur))
    return words


def grub_loader_cmdline(words: list[str]) -> str:
    """What GRUB's `linux` passes the kernel after BOOT_IMAGE= (grub-core/lib/cmdline.c,
    grub_create_loader_cmdline): each word with \\, ' and " escaped by a backslash, a word
    with a space in double quotes, separated by single spaces."""
    out = []
    for w in words:
        esc = "".join("\\" + c if c in "\\'\"" else c for c in w)
        out.append(f'"{esc}"' if " " in w else esc)
    return " ".join(out)


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
    loader: str = "grub"
    cpuidle_driver: str | None = None   # None: the spec's
    offline: tuple[int, ...] = ()       # CPUs not brought up this boot
    cpu_limit: int | None = None        # nr_cpus=N: the CPUs past N do not exist for this boot
    zfs: dict = field(default_factory=dict)     # the zfs module's parameters as this boot set them
    uvm: str = "absent"                 # nvidia-uvm this boot: absent | loaded (its major) | nodes (and /dev nodes)
    containers: dict = field(default_factory=dict)   # vmid -> {request, devices}: what its config asks at start
    schedulers: dict = field(default_factory=dict)   # disk -> the I/O scheduler udev's rules left it at coldplug

    @property
    def proc_cmdline(self) -> str:
        """GRUB passes BOOT_IMAGE=; systemd-boot passes the entry's initrd= first."""
        if self.loader == "systemd-boot":
            return f"initrd=\\EFI\\proxmox\\{self.release}\\initrd.img-{self.release} {self.cmdline}".rstrip()
        return f"BOOT_IMAGE=/boot/vmlinuz-{self.release} {self.cmdline}".rstrip()


def installed_kernels(root: Path) -> list[str]:
    return shimlib.installed_kernels(str(root))


def _read(root: Path, rel: str) -> str | None:
    try:
        return (root / rel).read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _grub_cfg_path(loader: str) -> str:
    return ESP_GRUB_CFG if loader == "grub-esp" else GRUB_CFG


def choose_kernel(root: Path, loader: str = "systemd-boot") -> tuple[str | None, bool]:
    """Rule 1: what the boot loader's last write selected. proxmox-boot-tool's refresh
    writes a pin (a --next-boot one first) as the default; GRUB boots what its grub.cfg
    selects as GRUB resolves it (grub-reboot's next_entry once, GRUB_DEFAULT, the saved
    entry; 0 = newest). A one-time choice is consumed by the boot it selects."""
    installed = installed_kernels(root)
    chosen, once = None, False
    if loader == "systemd-boot":
        m = re.search(r"^default\s+proxmox-(\S+)\.conf", _read(root, ESP_LOADER_CONF) or "", re.M)
        chosen = m.group(1) if m else None
    else:
        node, once = shimlib.grub_entry(_read(root, _grub_cfg_path(loader)), _read(root, "boot/grub/grubenv"))
        chosen = node["release"] if node else None
    if chosen not in installed:
        chosen, once = (installed[-1] if installed else None), False
    once = once or (bool(chosen) and (_read(root, NEXT_BOOT_PIN_FILE) or "").strip() == chosen)
    return chosen, once


def loader_cmdline(root: Path, loader: str, release: str, os_id: str = "debian") -> str:
    """Rule 2: what the boot loader holds, not what its source file says now: GRUB's chosen
    entry's linux line as GRUB passes it (Ubuntu's grub.cfg adds vt.handoff=7 with
    `splash`), or the systemd-boot entry's options."""
    if loader in ("grub", "grub-esp"):
        cfg = _read(root, _grub_cfg_path(loader)) or ""
        chosen, _ = shimlib.grub_entry(cfg, _read(root, "boot/grub/grubenv"))
        node = chosen
        if node is None or node["release"] != release:
            flat: list[dict] = []
            stack = shimlib.grub_menu(cfg)
            while stack:
                e = stack.pop(0)
                flat.append(e)
                stack[:0] = e["kids"]
            # the release's own entry, else what GRUB starts by default
            node = next((e for e in flat if e["release"] == release and "recovery" not in (e["id"] or "")), chosen)
        if node is None:
            return ""
        words = grub_words(node["args"] or "")
        if os_id == "ubuntu" and "splash" in words:
            words.append("vt.handoff=7")
        return grub_loader_cmdline(words)
    entries = root / ESP_ENTRIES
    files = sorted(entries.glob("*.conf"), key=lambda p: p.stat().st_mtime) if entries.is_dir() else []
    chosen = next((f for f in files if f.name == f"proxmox-{release}.conf"), files[-1] if files else None)
    if chosen is None:
        return ""
    m = re.search(r"^options[ \t]+([^\n]*)$", chosen.read_text(), re.M)
    return m.group(1).strip() if m else ""


def cpufreq_for(spec: HostSpec, release: str, params: dict[str, str]) -> tuple[str | None, str | None]:
    """Rule 3: (scaling driver, amd_pstate status) for this boot."""
    fw = spec.firmware
    if fw.virtualized or spec.cpu.max_khz == 0:
        return None, None
    if fw.vendor_cpu == "GenuineIntel":
        # intel_pstate_init: active (setpolicy) mode needs HWP; without it, or with
        # intel_pstate=passive, it registers intel_cpufreq with the generic governors (5.8+)
        mode = params.get("intel_pstate")
        if mode == "disable":
            return "acpi-cpufreq", None
        if fw.hwp and mode not in ("passive", "no_hwp"):
            return "intel_pstate", None
        return "intel_cpufreq", None
    mode = params.get("amd_pstate")
    if fw.cppc and mode == "active" and release_at_least(release, "6.3"):
        return "amd-pstate-epp", "active"
    if fw.cppc and mode == "passive" and release_at_least(release, "6.1"):
        return "amd-pstate", mode
    if fw.cppc and mode == "guided" and release_at_least(release, "6.4"):
        return "amd-pstate", mode
    if mode is None and fw.cppc:
        # amd_pstate_init: never on an undefined profile (0, or >= NR_PM_PROFILES); on servers
        # only family >= 0x1A (6.13); shared-memory CPPC (no MSR interface) only from 6.11
        # ("cpufreq: amd-pstate: enable shared memory type CPPC by default", v6.11)
        undefined = fw.acpi_pm_profile == 0 or fw.acpi_pm_profile >= NR_PM_PROFILES
        by_default = release_at_least(release, "6.5") and not undefined and (
            fw.acpi_pm_profile not in SERVER_PM_PROFILES or (release_at_least(release, "6.13") and fw.cpu_family >= 26)) \
            and (fw.cppc_interface == "msr" or release_at_least(release, "6.11"))
        if by_default:
            return "amd-pstate-epp", "active"
    return "acpi-cpufreq", None


def boost_files(spec: HostSpec, driver: str | None, release: str) -> tuple[bool, bool]:
    """Which boost switches the scaling driver offers this boot: (cpufreq/boost,
    policyN/boost). The cpufreq core shows cpufreq/boost for a driver with a set_boost
    callback (cpufreq_boost_supported), and from 6.3 a boost file in every policy
    ("cpufreq: Support per-policy performance boost"). acpi-cpufreq sets one up only where the
    CPU reports boost (CPB, IDA: firmware that disables Turbo hides IDA); amd-pstate gained
    boost control in 6.11 (the core performance boost series; without firmware CPB its
    set_boost refuses, "Boost mode is not supported by this processor or SBIOS"). intel_pstate
    has intel_pstate/no_turbo instead (knowledge.md: Boost)."""
    if driver == "acpi-cpufreq":
        ok = spec.firmware.boost
    elif driver in ("amd-pstate", "amd-pstate-epp"):
        ok = release_at_least(release, "6.11")
    else:
        ok = False
    return ok, ok and release_at_least(release, "6.3")


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
    # a setpolicy driver without the default governor keeps its init's policy
    # (cpufreq_init_policy): amd-pstate-epp performance on server and undefined PM profiles;
    # intel_pstate always powersave ("a valid fallback value", intel_pstate_cpu_init)
    profile = spec.firmware.acpi_pm_profile
    if driver == "amd-pstate-epp" and (profile in (0,) + SERVER_PM_PROFILES or profile >= NR_PM_PROFILES):
        return "performance"
    return "powersave"


def _cstate_number(name: str) -> int | None:
    m = re.match(r"^C(\d+)", name)
    return int(m.group(1)) if m else None


def cstates_for(spec: HostSpec, params: dict[str, str]) -> tuple[str, list[str]]:
    """Rule 4: (the idle driver, the states it registers this boot). processor.max_cstate=N
    keeps acpi_idle's C1..CN (0 counts as 1); intel_idle.max_cstate=N keeps the first N
    table entries after POLL, and 0 hands the CPU to acpi_idle."""
    driver = spec.cpu.cpuidle_driver
    if driver == "none":
        return driver, []
    names = [c.name for c in spec.cpu.cstates]
    if driver == "intel_idle":
        limit = params.get("intel_idle.max_cstate")
        if limit is not None and limit.isdigit():
            if int(limit) == 0:
                driver = "acpi_idle"        # the firmware's _CST states, as acpi_idle numbers them
                names = ["POLL"] + [f"C{i}" for i in range(1, len([n for n in names if n != "POLL"]) + 1)]
            else:
                return driver, [n for i, n in enumerate(names) if n == "POLL" or i <= int(limit)]
    if driver == "acpi_idle":
        limit = params.get("processor.max_cstate")
        if limit is not None and limit.isdigit():
            cap = max(int(limit), 1)
            names = [n for n in names if (_cstate_number(n) is None) or _cstate_number(n) <= cap]
    return driver, names


X2APIC_LIMIT = 255


def cpu_limit(params: dict[str, str]) -> int | None:
    """nr_cpus=N: the kernel supports N CPUs (nr_cpu_ids); those past it are not possible, so
    not present and not listed in `offline` either (print_cpus_offline lists CPUs at or past
    nr_cpu_ids only where the architecture sets total_cpus, which x86 does not): they are
    listed nowhere in /sys (kernel-parameters.txt, nr_cpus=)."""
    value = params.get("nr_cpus")
    return max(int(value), 1) if value is not None and value.isdigit() else None


def offline_cpus(spec: HostSpec, params: dict[str, str]) -> tuple[int, ...]:
    """CPUs this boot does not bring up: the spec's; those past maxcpus=N (possible and present,
    never brought up: kernel-parameters.txt; drivers/base/cpu.c print_cpus_offline); and, with the
    IOMMU's interrupt remapping off (iommu=off, amd_iommu=off, intel_iommu=off) on a host of
    more than 255 CPUs, those past 255: no x2APIC without interrupt remapping, so an APIC ID
    of 255 or more is refused ("CPU 239 has invalid APIC ID ff" on a real 2x EPYC 9575F)."""
    n = spec.cpu.logical_cpus
    off = {c for c in spec.cpu.offline if 0 < c < n}
    value = params.get("maxcpus")
    if value is not None and value.isdigit():
        off |= set(range(max(int(value), 1), n))
    limit = cpu_limit(params)
    if limit is not None:
        off = {c for c in off if c < limit}
    if n > X2APIC_LIMIT and (params.get("iommu") == "off" or params.get("amd_iommu") == "off"
                             or params.get("intel_iommu") == "off"):
        off |= set(range(X2APIC_LIMIT, n))
    return tuple(sorted(off))


def iommu_for(spec: HostSpec, params: dict[str, str]) -> str:
    """Rule 6."""
    if not spec.firmware.iommu:
        return "off"
    if params.get("iommu.passthrough") in ("1", "y", "on") or (
            params.get("iommu") == "pt" and params.get("iommu.passthrough") not in ("0", "n", "off")):
        return "pt"
    if params.get("amd_iommu") == "off" or params.get("intel_iommu") == "off":
        return "off"
    return "translated"


def nvidia_module_files(root: Path, release: str) -> list[Path]:
    mods = root / f"lib/modules/{release}"
    return sorted(mods.rglob("nvidia.ko")) if mods.is_dir() else []


def nvidia_loaded(spec: HostSpec, root: Path, release: str) -> bool:
    """Rule 9: the driver loads only where its module exists for the kernel (dkms builds
    it at headers install, for series up to builds_up_to)."""
    if spec.nvidia is None:
        return False
    return bool(nvidia_module_files(root, release))


SYSCTL_LINE = re.compile(r"^\s*-?\s*([\w./-]+)\s*=\s*(.*?)\s*$")


SYSCTL_DIRS = ("etc/sysctl.d", "run/sysctl.d", "usr/local/lib/sysctl.d", "usr/lib/sysctl.d")


def sysctl_files(root: Path) -> list[Path]:
    """As systemd-sysctl orders them (src/sysctl/sysctl.c, sysctl.d(5)): *.conf file names
    in lexical order, a name in an earlier directory shadowing it in later ones. It never
    reads /etc/sysctl.conf itself: that file counts only through the
    /etc/sysctl.d/99-sysctl.conf link (Debian <= 12 and Ubuntu ship it; Debian 13 not)."""
    by_name: dict[str, Path] = {}
    for d in SYSCTL_DIRS:
        directory = root / d
        if directory.is_dir():
            for conf in directory.glob("*.conf"):
                by_name.setdefault(conf.name, conf)
    return [by_name[n] for n in sorted(by_name)]


def sysctl_after_boot(spec: HostSpec, root: Path, params: dict[str, str]) -> dict[str, str]:
    """Rules 5 and 10: defaults, the command line, then systemd-sysctl's files."""
    values = {k: str(v) for k, v in spec.sysctl_default.items()}
    if "kernel.numa_balancing" in values and params.get("numa_balancing") == "disable":
        values["kernel.numa_balancing"] = "0"
    for conf in sysctl_files(root):
        try:
            text = _resolve_in_root(root, conf).read_text(errors="replace")
        except (OSError, AttributeError):
            continue
        for line in text.splitlines():
            if line.lstrip().startswith(("#", ";")):
                continue
            m = SYSCTL_LINE.match(line)
            if m:
                key = m.group(1).replace("/", ".")
                if key in values:          # only what the model owns; the rest is the real kernel's
                    values[key] = m.group(2)
    return values


def zfs_params_at_boot(spec: HostSpec, root: Path, release: str, params: dict[str, str]) -> dict[str, int]:
    """zfs_arc_max and zfs_arc_min as the zfs module gets them at this boot: from the
    initramfs of *release* when root is on ZFS (the module loads before the root file
    system), else from the root's modprobe.d, then the kernel command line's `zfs.NAME=`:
    kmod adds the command line's options after every modprobe.d file's (libkmod-config.c
    kmod_config_new parses /proc/cmdline last) and the module takes the last value given;
    0 (the default) where nothing sets one."""
    if spec.zfs is None:
        return {}
    if spec.zfs_root:
        files = shimlib.initramfs_modprobe(_read(root, f"boot/initrd.img-{release}") or "")
    else:
        files = shimlib.modprobe_files(str(root))
    options = shimlib.modprobe_options(files, "zfs")
    for key, value in params.items():
        module, dot, name = key.partition(".")
        if dot and module.replace("-", "_") == "zfs" and value:
            options[name.replace("-", "_")] = value
    out = {}
    for name in ("zfs_arc_max", "zfs_arc_min"):
        try:
            out[name] = int(options.get(name, "0"), 0)
        except ValueError:
            out[name] = 0
    return out


def _resolve_in_root(root: Path, path: Path) -> Path | None:
    """Follow symlinks inside the host's root, never out of it."""
    for _ in range(8):
        if not path.is_symlink():
            return path
        target = path.readlink()
        path = root / str(target).lstrip("/") if target.is_absolute() else path.parent / target
    return None


UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "usr/local/lib/systemd/system", "lib/systemd/system",
             "usr/lib/systemd/system")


def _unit_files(root: Path, name: str, unit: Path) -> list[Path]:
    """A unit as systemd reads it: the unit file, then its drop-ins (<unit>.d/*.conf in every
    unit directory, by file name; systemd.unit(5))."""
    dropins: dict[str, Path] = {}
    for d in reversed(UNIT_DIRS):
        directory = root / d / f"{name}.d"
        if directory.is_dir():
            for conf in directory.glob("*.conf"):
                dropins[conf.name] = conf
    return [unit] + [dropins[n] for n in sorted(dropins)]


def _unit_settings(root: Path, name: str, unit: Path, section: str, key: str) -> list[str]:
    """Every value of *key* in *section* across the unit and its drop-ins, an empty
    assignment resetting the list (systemd.unit(5), systemd.service(5))."""
    values: list[str] = []
    for path in _unit_files(root, name, unit):
        current = None
        for line in path.read_text(errors="replace").splitlines():
            t = line.strip()
            if t.startswith("["):
                current = t
                continue
            m = re.match(rf"^{key}\s*=\s*(.*?)\s*$", t)
            if m and current == section:
                if m.group(1):
                    values.append(m.group(1))
                else:
                    values = []
    return values


def unit_exec_starts(root: Path, name: str, unit: Path) -> list[str]:
    """ExecStart= of a unit as systemd reads it, its prefixes (-@:+!) dropped."""
    return [c.lstrip("-@:+!") for c in _unit_settings(root, name, unit, "[Service]", "ExecStart")]


def _start_order(root: Path, units: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """The units in the order systemd starts them: After=/Before= between units of the same
    boot transaction order them (systemd.unit(5)); the rest keep the order given (by name)."""
    names = [n for n, _ in units]
    after: dict[str, set[str]] = {n: set() for n in names}
    for name, unit in units:
        for value in _unit_settings(root, name, unit, "[Unit]", "After"):
            after[name].update(w for w in value.split() if w in after)
        for value in _unit_settings(root, name, unit, "[Unit]", "Before"):
            for w in value.split():
                if w in after:
                    after[w].add(name)
    ordered: list[tuple[str, Path]] = []
    placed: set[str] = set()
    pending = list(units)
    while pending:
        # the first unit (by name) whose predecessors have all started; a cycle, which
        # systemd breaks by dropping a job, is broken here at the first unit
        ready = next((u for u in pending if after[u[0]] <= placed), pending[0])
        pending.remove(ready)
        ordered.append(ready)
        placed.add(ready[0])
    return ordered


UDEV_DIRS = ("etc/udev/rules.d", "lib/udev/rules.d", "usr/lib/udev/rules.d")


def udev_rules(root: Path) -> list[tuple[str, str]]:
    """Every udev rule, as udev reads the rules files (a name in /etc shadowing the same name
    in /lib, continued lines joined, comments left out): (the file, the rule)."""
    out = []
    for name, rel in shimlib.conf_files(str(root), UDEV_DIRS, ".rules").items():
        for line in (root / rel).read_text(errors="replace").replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                out.append(("/" + rel, line))
    return out


def _udev_pattern(pattern: str, value: str) -> bool:
    """udev(7) match: shell-style patterns, `|` between alternatives."""
    return any(fnmatch.fnmatchcase(value, alt) for alt in pattern.split("|"))


def schedulers_at_boot(spec: HostSpec, root: Path) -> dict[str, str]:
    """Each disk's I/O scheduler after coldplug: the kernel's default (the spec's), then every
    udev rule that writes ATTR{queue/scheduler}, in rules-file order, the last write staying
    (udev(7): ATTR{} matches and writes a file below the device's sysfs directory; coldplug's
    events are "add"). A rule with a key the model does not know is left out: it models the
    keys block rules use (ACTION, SUBSYSTEM, KERNEL, ENV{DEVTYPE}, ATTR{queue/...})."""
    sched = {b.name: b.scheduler for b in spec.block}
    for _, rule in udev_rules(root):
        keys = re.findall(r'([A-Z]+(?:\{[^}]*\})?)\s*(==|!=|\+=|:=|=)\s*"([^"]*)"', rule)
        if not any(k == "ATTR{queue/scheduler}" and op in ("=", ":=") for k, op, _ in keys):
            continue
        for b in spec.block:
            have = {"ACTION": "add", "SUBSYSTEM": "block", "KERNEL": b.name, "ENV{DEVTYPE}": "disk",
                    "ATTR{queue/rotational}": str(int(b.rotational)),
                    "ATTR{queue/scheduler}": _bracket_text(b.schedulers, sched[b.name])}
            matched, writes = True, []
            for key, op, value in keys:
                if op in ("==", "!="):
                    if key not in have:
                        matched = False
                        break
                    if _udev_pattern(value, have[key]) != (op == "=="):
                        matched = False
                        break
                elif key == "ATTR{queue/scheduler}":
                    writes.append(value)
                elif not key.startswith(("ENV{", "TAG", "RUN", "SYMLINK", "OPTIONS")):
                    matched = False
                    break
            if matched:
                for w in writes:
                    if w in b.schedulers:   # elevator_change: a name the queue does not offer is refused
                        sched[b.name] = w
    return sched


def _bracket_text(choices: list[str], current: str) -> str:
    return " ".join(f"[{c}]" if c == current else c for c in choices)


def udev_wanted_units(root: Path) -> list[str]:
    """Units an NVIDIA udev rule starts when the driver binds (ENV{SYSTEMD_WANTS}=, as
    Ubuntu's 71-nvidia.rules starts nvidia-persistenced)."""
    return [name for _, rule in udev_rules(root) if "nvidia" in rule
            for name in re.findall(r'SYSTEMD_WANTS\}\+?="([^"]+)"', rule)]


def _runs_uvm_modprobe(command: str) -> bool:
    """A command that runs nvidia-modprobe with -u: it loads nvidia-uvm and, with -c, makes
    /dev/nvidia-uvm and -tools (nvidia-modprobe.c main: nvidia_uvm_modprobe, nvidia_uvm_mknod)."""
    words = command.replace('"', " ").replace("'", " ").split()
    return any(w.endswith("nvidia-modprobe") for w in words) and any(
        w == "--unified-memory" or re.match(r"^-[a-z]*u", w) for w in words)


def udev_uvm_rules(root: Path) -> list[tuple[str, bool]]:
    """udev rules that run nvidia-modprobe -u: (file, whether the rule waits for nvidia_uvm to
    load, KERNEL=="nvidia_uvm" as the Proxmox forum's 70-nvidia.rules has it, or fires when the
    driver binds a GPU, as a distribution's 60-nvidia.rules does)."""
    found: list[tuple[str, bool]] = []
    for path, rule in udev_rules(root):
        if path not in {f for f, _ in found} and any(_runs_uvm_modprobe(r) for r in re.findall(r'RUN\+?="([^"]*)"', rule)):
            found.append((path, bool(re.search(r'(KERNEL|DEVPATH)=="[^"]*nvidia[_-]uvm', rule))))
    return found


def container_requests(spec: HostSpec, root: Path) -> dict[int, dict]:
    """The containers pve-guests.service starts at boot (the spec's running ones), each with
    what its config on the disk now asks of its CPU set (shimlib.cpuset_request) and the
    device nodes its devN: lines need (the machine starts it only where they all exist)."""
    if not spec.is_proxmox:
        return {}
    out = {}
    for ct in spec.lxc:
        if ct.running:
            text = _read(root, f"etc/pve/nodes/{spec.hostname}/lxc/{ct.vmid}.conf") or ""
            out[ct.vmid] = {"request": shimlib.cpuset_request(text), "devices": shimlib.device_paths(text)}
    return out


def uvm_at_boot(spec: HostSpec, root: Path, nvidia_loaded: bool) -> str:
    """nvidia-uvm at this boot: "nodes" where a udev rule or an enabled unit runs
    nvidia-modprobe -u (a rule on nvidia_uvm only once modules-load.d loads it), or, off
    Proxmox, where the spec says the vendor's setup does; "loaded" where only modules-load.d
    names it (the module registers its major, no node appears); else "absent"."""
    if spec.nvidia is None or not nvidia_loaded:
        return "absent"
    listed = "nvidia_uvm" in shimlib.modules_load(str(root))
    if any(listed or not waits for _, waits in udev_uvm_rules(root)) or \
            any(_runs_uvm_modprobe(c) for c in enabled_units(root, True)):
        return "nodes"
    if spec.nvidia.uvm_at_boot and not spec.is_proxmox:
        return "nodes"
    return "loaded" if listed else "absent"


def enabled_units(root: Path, nvidia_loaded: bool = False) -> list[str]:
    """Rule 10: ExecStart= lines of units enabled in multi-user.target.wants, and of those
    the NVIDIA driver's udev rule starts when it binds, in systemd's start order."""
    wants = root / UNIT_WANTS
    units: list[tuple[str, Path]] = []
    if wants.is_dir():
        for link in sorted(wants.iterdir(), key=lambda p: p.name):
            unit = _resolve_unit(root, link)
            if unit is not None:
                units.append((link.name, unit))
    started = {n for n, _ in units}
    for name in udev_wanted_units(root) if nvidia_loaded else []:
        if name in started:
            continue
        unit = next((root / d / name for d in UNIT_DIRS if (root / d / name).is_file()), None)
        if unit is not None:
            started.add(name)
            units.append((name, unit))
    commands: list[str] = []
    for name, unit in _start_order(root, units):
        commands += unit_exec_starts(root, name, unit)
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
    release, once = choose_kernel(root, spec.boot.loader)
    if release is None:
        raise RuntimeError(f"{spec.hostname}: no kernel in /boot, the host cannot boot")
    cmdline = loader_cmdline(root, spec.boot.loader, release, spec.os.id)
    params = parse_cmdline(cmdline)
    driver, status = cpufreq_for(spec, release, params)
    idle_driver, idle_states = cstates_for(spec, params)
    loaded = nvidia_loaded(spec, root, release)
    return BootState(
        release=release,
        cmdline=cmdline,
        params=params,
        cpufreq_driver=driver,
        amd_pstate_status=status,
        governor=default_governor(spec, driver, params),
        cstate_names=idle_states,
        cpuidle_driver=idle_driver,
        iommu=iommu_for(spec, params),
        thp=params.get("transparent_hugepage") if params.get("transparent_hugepage") in ("always", "madvise", "never") else spec.thp_default,
        nvidia_loaded=loaded,
        sysctl=sysctl_after_boot(spec, root, params),
        units=enabled_units(root, loaded),
        consumed_next_boot_pin=once,
        loader=spec.boot.loader,
        offline=offline_cpus(spec, params),
        cpu_limit=cpu_limit(params),
        zfs=zfs_params_at_boot(spec, root, release, params),
        uvm=uvm_at_boot(spec, root, loaded),
        containers=container_requests(spec, root),
        schedulers=schedulers_at_boot(spec, root),
    )


def clear_next_boot_pin(root: Path, loader: str, mkconfig=None) -> None:
    """What a one-time boot leaves behind, cleared as the real systems do: GRUB's script
    empties grubenv's next_entry as it boots it (00_header: save_env next_entry);
    proxmox-boot-cleanup.service drops proxmox-boot-tool's next-boot pin and writes the
    boot loader again, so the boot after it is the permanent choice. *mkconfig(root, out)*
    runs grub-mkconfig for the host."""
    env_path = root / "boot/grub/grubenv"
    env = _read(root, "boot/grub/grubenv")
    if env and shimlib.grubenv(env).get("next_entry"):
        lines = [("next_entry=" if line.startswith("next_entry=") else line) for line in env.split("\n")]
        text = "\n".join(lines)
        env_path.write_text(text + "#" * max(0, len(env) - len(text)))   # grubenv keeps its 1024-byte block
    if not (root / NEXT_BOOT_PIN_FILE).exists():
        return
    (root / NEXT_BOOT_PIN_FILE).unlink()
    pin = (_read(root, PIN_FILE) or "").strip() or None
    kernels = installed_kernels(root)
    if loader == "systemd-boot":
        cmdline = " ".join(((_read(root, "etc/kernel/cmdline") or "").splitlines() or [""])[0].split())
        shimlib.esp_refresh(kernels, cmdline, pin if pin in kernels else None, root=str(root))
    elif mkconfig is not None:
        shimlib.set_grub_default(pin if pin in kernels else None, root=str(root))
        mkconfig(root, "/" + _grub_cfg_path(loader))
