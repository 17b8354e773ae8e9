"""What a fix may change: a closed set of kinds, each a small dataclass that knows the data
the common fix tasks apply (its keys in ``finding["fix"]``) and the plan line `gpuhost fix`
shows before it asks.

A judgement builds its fix from kinds (``fix_of(CmdlineSet(...), BootUnit(...))``); the
plan reads the same dict back into kinds (``kinds_of``), which refuses a key no kind owns,
so the plan cannot leave a change out and the roles cannot be handed a change the plan does
not name. Each kind's STEP is the task file of roles/common/tasks that applies it
(fix_<step>.yml), which reads exactly that kind's keys (a test holds the two together).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ansible_collections.gpuhost.stack.plugins.module_utils import changes


@dataclass(frozen=True)
class CmdlineSet:
    """Kernel parameters set on the next boot's command line (gpuhost.stack.cmdline)."""
    STEP = "cmdline"
    params: dict

    def put(self, fix: dict) -> None:
        fix.setdefault("cmdline_set", {}).update(self.params)

    def plan(self) -> list[str]:
        return [f"kernel parameter {k}={v} on the boot command line" for k, v in self.params.items()]


@dataclass(frozen=True)
class CmdlineRemove:
    """Kernel parameters taken off the next boot's command line (gpuhost.stack.cmdline)."""
    STEP = "cmdline"
    names: tuple

    def put(self, fix: dict) -> None:
        fix.setdefault("cmdline_remove", []).extend(self.names)

    def plan(self) -> list[str]:
        return [f"remove kernel parameter {k} from the boot command line" for k in self.names]


@dataclass(frozen=True)
class KernelPin:
    """Make *release* the kernel the boot loader starts (gpuhost.stack.kernel_boot):
    proxmox-boot-tool kernel pin, or GRUB_DEFAULT by entry id."""
    STEP = "pin"
    release: str
    tool: str
    grub_default: str | None = None

    def as_data(self) -> dict:
        return {"release": self.release, "tool": self.tool,
                **({"grub_default": self.grub_default} if self.grub_default is not None else {})}

    def put(self, fix: dict) -> None:
        fix["pin"] = self.as_data()

    def plan(self) -> list[str]:
        how = "proxmox-boot-tool kernel pin" if self.tool == "proxmox-boot-tool" else "GRUB_DEFAULT by entry id"
        return [f"make {self.release} the kernel the boot loader starts ({how})"]


@dataclass(frozen=True)
class KernelSeries:
    """Install a kernel series' metapackages (apt), then boot the new kernel only where the
    NVIDIA module was built for it (gpuhost.stack.kernel_boot); the running one stays."""
    STEP = "series"
    series: str
    packages: tuple
    flavor: str | None
    running: str
    headers: bool                   # the packages include the series' headers (dkms builds the driver)
    check_nvidia_module: bool
    pin: KernelPin | None = None
    unpin: bool = False
    default_release: str | None = None

    def put(self, fix: dict) -> None:
        fix.update({"series": self.series, "headers": self.headers, "flavor": self.flavor, "running": self.running,
                    "check_nvidia_module": self.check_nvidia_module,
                    "pin": self.pin.as_data() if self.pin else None, "unpin": self.unpin,
                    "packages": list(self.packages)})
        if self.default_release:
            fix["default_release"] = self.default_release

    def plan(self) -> list[str]:
        out = ["install " + ", ".join(self.packages) + (f" (from {self.default_release})" if self.default_release else "")]
        if self.check_nvidia_module and self.pin:
            out.append(f"if the NVIDIA module is not built for the new kernel: keep booting {self.pin.release} (pinned)")
        if self.unpin:
            out.append("if it is: lift the older kernel's pin")
        return out


@dataclass(frozen=True)
class FileContent:
    """A file gpuhost owns, written whole (gpuhost.stack.file; a backup of what was there)."""
    STEP = "file"
    path: str
    content: str

    def put(self, fix: dict) -> None:
        fix["file"] = {"path": self.path, "content": self.content}

    def plan(self) -> list[str]:
        return [f"write {self.path}"]


@dataclass(frozen=True)
class FileEdit:
    """Another's file edited (lines commented out), written only if it still holds what the
    judgement read (expect_sha256); a copy in /var/backups/gpuhost."""
    STEP = "files"
    path: str
    content: str
    expect_sha256: str

    def put(self, fix: dict) -> None:
        fix.setdefault("files", []).append({"path": self.path, "content": self.content,
                                            "expect_sha256": self.expect_sha256})

    def plan(self) -> list[str]:
        if self.expect_sha256 == "absent":      # a new file in /etc that shadows a vendor one
            return [f"write {self.path}"]
        return [f"edit {self.path} (a copy in /var/backups/gpuhost)"]


@dataclass(frozen=True)
class Initramfs:
    """Every kernel's initramfs built again (update-initramfs -u -k all), after the files the
    images must hold changed: a module that loads from the initramfs reads its copy of them."""
    STEP = "initramfs"

    def put(self, fix: dict) -> None:
        fix["initramfs"] = True

    def plan(self) -> list[str]:
        return ["build every kernel's initramfs again (update-initramfs -u -k all)"]


@dataclass(frozen=True)
class LxcRepair:
    """Container configs repaired under Proxmox's config lock, from what they hold then
    (gpuhost.stack.lxc_config); *devices* and *dev_nodes* are what the repair may add."""
    STEP = "lxc"
    configs: tuple              # ({"path", "vmid", "preview"}, ...)
    devices: dict
    dev_nodes: list | None

    def put(self, fix: dict) -> None:
        fix.update({"lxc": [dict(c) for c in self.configs], "lxc_devices": dict(self.devices),
                    "lxc_dev_nodes": self.dev_nodes})

    def plan(self) -> list[str]:
        return [f"repair {c['path']} under Proxmox's config lock (a copy in /var/backups/gpuhost)" for c in self.configs]


@dataclass(frozen=True)
class LxcCpuset:
    """Each container config gets ``lxc.cgroup2.cpuset.cpus`` in its main section, written
    under Proxmox's config lock from what the file holds then (gpuhost.stack.lxc_config)."""
    STEP = "lxc_cpuset"
    configs: tuple              # ({"path", "vmid", "cpus"}, ...)

    def put(self, fix: dict) -> None:
        fix["lxc_cpuset"] = [dict(c) for c in self.configs]

    def plan(self) -> list[str]:
        return [f"set CPUs {c['cpus']} in {c['path']} under Proxmox's config lock (a copy in /var/backups/gpuhost)"
                for c in self.configs]


@dataclass(frozen=True)
class LxcRestart:
    """Running containers restarted (pct reboot) so their config applies; only where the
    inventory allows it (gpuhost_lxc_restart)."""
    STEP = "lxc_restart"
    vmids: tuple

    def put(self, fix: dict) -> None:
        fix["lxc_restart"] = list(self.vmids)

    def plan(self) -> list[str]:
        return [f"restart container {v} (pct reboot)" for v in self.vmids]


@dataclass(frozen=True)
class BootUnit:
    """A oneshot unit of gpuhost's that re-applies runtime writes at every boot (rendered from
    its steps by persist.Boot): its data files written first, then the unit installed, enabled
    and read by systemd in one call (gpuhost.stack.file, daemon_reload); *content* is what
    systemd reads, *data* ((path, text), ...) what its systemd-tmpfiles calls read."""
    STEP = "unit"
    name: str
    content: str
    data: tuple = ()

    def put(self, fix: dict) -> None:
        fix["unit"] = {"name": self.name, "content": self.content,
                       "data": [{"path": p, "content": t} for p, t in self.data]}

    def plan(self) -> list[str]:
        return [f"write {p}" for p, dummy in self.data] + [f"install and enable the boot unit {self.name}"]


@dataclass(frozen=True)
class UnitRemoval:
    """A unit an older gpuhost installed, disabled and removed."""
    STEP = "remove_unit"
    name: str

    def put(self, fix: dict) -> None:
        fix["remove_unit"] = self.name

    def plan(self) -> list[str]:
        return [f"remove the boot unit {self.name} an older gpuhost installed"]


@dataclass(frozen=True)
class UnitEnable:
    """A vendor's unit enabled as its [Install] section says; the unit stays as packaged."""
    STEP = "enable"
    names: tuple

    def put(self, fix: dict) -> None:
        fix.setdefault("enable", []).extend(self.names)

    def plan(self) -> list[str]:
        return [f"enable {n} (systemctl enable; the unit stays as packaged)" for n in self.names]


@dataclass(frozen=True)
class UnitStart:
    """A vendor's daemon started now where it is not running (systemctl start), after its
    unit is enabled for the boots to come; or, *restart*, a oneshot unit of gpuhost's run
    again now whether or not it ran this boot (systemctl restart)."""
    STEP = "start"
    names: tuple
    restart: bool = False

    def put(self, fix: dict) -> None:
        fix.setdefault("restart" if self.restart else "start", []).extend(self.names)

    def plan(self) -> list[str]:
        if self.restart:
            return [f"run {n} now (systemctl restart)" for n in self.names]
        return [f"start {n} now (systemctl start)" for n in self.names]


@dataclass(frozen=True)
class DaemonReload:
    """systemd reads its units again after a drop-in changed."""
    STEP = "daemon_reload"

    def put(self, fix: dict) -> None:
        fix["daemon_reload"] = True

    def plan(self) -> list[str]:
        return ["systemctl daemon-reload if a unit file changed"]


@dataclass(frozen=True)
class RuntimeWrite:
    """A value written now to a sysfs or procfs file (or each file a glob matches)."""
    STEP = "runtime"
    value: str
    path: str | None = None
    glob: str | None = None
    refused_ok: bool = False        # a kernel that refuses the write is not a failure (EPP)
    selected: bool = False          # the file lists choices, the current one in [brackets]

    def change(self) -> dict:
        out: dict = {"kind": "sysfs", **({"path": self.path} if self.path else {"glob": self.glob})}
        out["value"] = self.value
        if self.refused_ok:
            out["refused_ok"] = True
        if self.selected:
            out["selected"] = True
        return out

    def put(self, fix: dict) -> None:
        fix.setdefault("runtime", []).append(self.change())


@dataclass(frozen=True)
class PciRegister:
    """Bits *mask* of a PCI register set to *value* now, on the function at *bdf* only while
    it still has this vendor:device (gpuhost.stack.runtime, setpci)."""
    STEP = "runtime"
    bdf: str
    device: str                     # vendor:device, hex
    register: str
    value: str                      # hex
    mask: str                       # hex

    def put(self, fix: dict) -> None:
        fix.setdefault("runtime", []).append({"kind": "pci_register", "pci": self.bdf, "device": self.device,
                                              "register": self.register,
                                              "value": self.value, "mask": self.mask})


@dataclass(frozen=True)
class Persistence:
    """Persistence mode on for every GPU now (nvidia-smi -pm 1)."""
    STEP = "runtime"

    def put(self, fix: dict) -> None:
        fix.setdefault("runtime", []).append({"kind": "persistence"})


@dataclass(frozen=True)
class PowerLimit:
    """A GPU's power limit set now (nvidia-smi -i <bus id> -pl <W>), on the GPU at that bus
    address only, read back after: the driver drops a limit set without persistence mode."""
    STEP = "runtime"
    bus_id: str                     # as nvidia-smi names it: 00000000:01:00.0
    watts: int

    def put(self, fix: dict) -> None:
        fix.setdefault("runtime", []).append({"kind": "power_limit", "gpu": self.bus_id, "power_limit_w": self.watts})


@dataclass(frozen=True)
class GpuMode:
    """A GPU's compute mode set now (nvidia-smi -c), or its MIG or ECC mode set as pending
    (nvidia-smi -mig / -e: a GPU reset or reboot makes it current), on the GPU at that bus
    address only, read back after (compute_mode, mig.mode.pending, ecc.mode.pending)."""
    STEP = "runtime"
    bus_id: str
    mode: str                       # compute | mig | ecc
    value: str                      # Default | Exclusive_Process | Prohibited; Enabled | Disabled

    def put(self, fix: dict) -> None:
        fix.setdefault("runtime", []).append({"kind": "gpu_mode", "gpu": self.bus_id, "gpu_mode": self.mode,
                                              "value": self.value})


@dataclass(frozen=True)
class BiosSet:
    """BIOS attributes set for the next reset through the host's BMC (Redfish settings object,
    gpuhost.stack.bios_settings, from the controller): each control's fix stages its values and
    the bios role writes the host's in one request, after its last control."""
    STEP = "bios"
    attributes: dict                # the firmware's attribute name -> value, as its registry spells them
    bmc: str                        # the BMC's address, for the plan

    def put(self, fix: dict) -> None:
        fix["bios"] = {"attributes": dict(self.attributes), "bmc": self.bmc}

    def plan(self) -> list[str]:
        return [f"BIOS attribute {k}={v} through BMC {self.bmc} (applies at the next reset)"
                for k, v in self.attributes.items()]


KINDS = (CmdlineSet, CmdlineRemove, KernelPin, KernelSeries, FileContent, FileEdit, Initramfs, LxcRepair, LxcCpuset,
         LxcRestart, BootUnit, UnitRemoval,
         UnitEnable, UnitStart, DaemonReload, RuntimeWrite, PciRegister, Persistence, PowerLimit, GpuMode, BiosSet)
RUNTIME_KINDS = (RuntimeWrite, PciRegister, Persistence, PowerLimit, GpuMode)
# every key a fix may hold, and the kind that owns it
KEYS = {"cmdline_set": CmdlineSet, "cmdline_remove": CmdlineRemove, "pin": KernelPin, "series": KernelSeries,
        "headers": KernelSeries, "flavor": KernelSeries, "running": KernelSeries, "check_nvidia_module": KernelSeries,
        "unpin": KernelSeries, "packages": KernelSeries, "default_release": KernelSeries, "file": FileContent,
        "files": FileEdit, "initramfs": Initramfs, "lxc": LxcRepair, "lxc_devices": LxcRepair, "lxc_dev_nodes": LxcRepair,
        "lxc_cpuset": LxcCpuset, "lxc_restart": LxcRestart, "unit": BootUnit,
        "remove_unit": UnitRemoval, "enable": UnitEnable, "start": UnitStart, "restart": UnitStart, "daemon_reload": DaemonReload, "runtime": RuntimeWrite,
        "bios": BiosSet}

# the common fix task files (roles/common/tasks/fix_<step>.yml) in the order a fix applies
# them: the command line before the kernel it is for, packages before the module check,
# files and units before systemd reads them again, the runtime writes, then containers restarted into their config;
# bios stages the firmware's values, which its role writes once, after its last control
STEPS = ("cmdline", "pin", "series", "file", "files", "initramfs", "lxc", "lxc_cpuset", "unit", "remove_unit", "daemon_reload", "enable",
         "start", "runtime", "lxc_restart", "bios")

# keys the fix tasks do not act on: kept for a playbook that reads the finding (the kernel
# series' packages already name its headers)
INFORMATIONAL = ("headers",)


def fix_of(*kinds) -> dict:
    """The fix a judgement hands the roles: each kind's data, in the order given."""
    fix: dict = {}
    for kind in kinds:
        if not isinstance(kind, KINDS):
            raise TypeError(f"not a fix kind: {kind!r}")
        kind.put(fix)
    return fix


def _pin(data: dict | None) -> KernelPin | None:
    return KernelPin(data["release"], data["tool"], data.get("grub_default")) if data else None


def kinds_of(fix: dict) -> list:
    """A fix read back into its kinds, in the order the common fix tasks apply them; a key
    no kind owns is an error (the closed set)."""
    unknown = sorted(set(fix) - set(KEYS))
    if unknown:
        raise ValueError(f"a fix key no kind owns: {', '.join(unknown)}")
    out: list = []
    if fix.get("cmdline_set"):
        out.append(CmdlineSet(dict(fix["cmdline_set"])))
    if fix.get("cmdline_remove"):
        out.append(CmdlineRemove(tuple(fix["cmdline_remove"])))
    if "series" in fix:
        out.append(KernelSeries(fix["series"], tuple(fix.get("packages") or ()), fix.get("flavor"), fix.get("running"),
                                bool(fix.get("headers")), bool(fix.get("check_nvidia_module")), _pin(fix.get("pin")),
                                bool(fix.get("unpin")), fix.get("default_release")))
    elif fix.get("pin"):
        out.append(_pin(fix["pin"]))
    if fix.get("file"):
        out.append(FileContent(fix["file"]["path"], fix["file"]["content"]))
    out += [FileEdit(f["path"], f["content"], f["expect_sha256"]) for f in fix.get("files") or []]
    if fix.get("initramfs"):
        out.append(Initramfs())
    if fix.get("lxc"):
        out.append(LxcRepair(tuple(fix["lxc"]), fix.get("lxc_devices") or {}, fix.get("lxc_dev_nodes")))
    if fix.get("lxc_cpuset"):
        out.append(LxcCpuset(tuple(fix["lxc_cpuset"])))
    if fix.get("unit"):
        out.append(BootUnit(fix["unit"]["name"], fix["unit"]["content"],
                            tuple((d["path"], d["content"]) for d in fix["unit"].get("data") or ())))
    if fix.get("remove_unit"):
        out.append(UnitRemoval(fix["remove_unit"]))
    if fix.get("daemon_reload"):
        out.append(DaemonReload())
    if fix.get("enable"):
        out.append(UnitEnable(tuple(fix["enable"])))
    if fix.get("start"):
        out.append(UnitStart(tuple(fix["start"])))
    if fix.get("restart"):
        out.append(UnitStart(tuple(fix["restart"]), restart=True))
    for c in fix.get("runtime") or []:
        kind = changes.check(c)     # the same check gpuhost.stack.runtime makes on the host
        if kind == "persistence":
            out.append(Persistence())
        elif kind == "gpu_mode":
            out.append(GpuMode(c["gpu"], c["gpu_mode"], c["value"]))
        elif kind == "power_limit":
            out.append(PowerLimit(c["gpu"], int(c["power_limit_w"])))
        elif kind == "pci_register":
            out.append(PciRegister(c["pci"], c["device"], c["register"], c["value"], c["mask"]))
        else:
            out.append(RuntimeWrite(str(c["value"]), c.get("path"), c.get("glob"), bool(c.get("refused_ok")),
                                    bool(c.get("selected"))))
    if fix.get("lxc_restart"):
        out.append(LxcRestart(tuple(fix["lxc_restart"])))
    if fix.get("bios"):
        out.append(BiosSet(dict(fix["bios"]["attributes"]), str(fix["bios"]["bmc"])))
    return out


def steps(fix: dict) -> list[str]:
    """The fix task files that apply *fix*, in STEPS order: the roles include exactly these,
    so a control's fix runs its own tasks and no skipped ones."""
    have = {k.STEP for k in kinds_of(fix)}
    if "remove_unit" in have:
        # systemd reads its units again once one is taken out (a BootUnit's own step reloads:
        # the file module's daemon_reload, in the same call that installs it)
        have.add("daemon_reload")
    return [s for s in STEPS if s in have]


def runtime_plan(kinds: list) -> list[str]:
    """The runtime kinds' plan: the same write on many CPUs, policies or disks said once, with a count."""
    out: list[str] = []
    writes: dict[tuple[str, str], list[str]] = {}
    registers: dict[tuple[str, str, str], list[str]] = {}
    limits: dict[int, list[str]] = {}
    modes: dict[tuple[str, str], list[str]] = {}
    for k in kinds:
        if isinstance(k, Persistence):
            out.append("persistence mode on for every GPU")
        elif isinstance(k, PowerLimit):
            limits.setdefault(k.watts, []).append(k.bus_id)
        elif isinstance(k, GpuMode):
            modes.setdefault((k.mode, k.value), []).append(k.bus_id)
        elif isinstance(k, PciRegister):
            registers.setdefault((k.register, k.value, k.mask), []).append(f"{k.bdf} [{k.device}]")
        elif isinstance(k, RuntimeWrite):
            path = k.glob or k.path
            writes.setdefault((re.sub(r"(policy|cpu|state)\d+", r"\1N", path), k.value), []).append(path)
    for (shape, value), paths in writes.items():
        out.append(f"write {value} to {paths[0]}" if len(paths) == 1 else f"write {value} to {shape} ({len(paths)} files)")
    for (register, value, mask), devices in registers.items():
        out.append(f"set PCI register {register} to {value} (bits {mask}) on {', '.join(devices)}")
    for watts, gpus in limits.items():
        out.append(f"power limit {watts} W (nvidia-smi -pl) on GPU {', '.join(gpus)}")
    for (mode, value), gpus in modes.items():
        out.append(f"compute mode {value} (nvidia-smi -c) on GPU {', '.join(gpus)}" if mode == "compute" else
                   f"{mode.upper()} {value}, pending until the GPU resets or the host reboots (nvidia-smi "
                   f"-{'mig' if mode == 'mig' else 'e'}) on GPU {', '.join(gpus)}")
    return out


def plan(fix: dict) -> list[str]:
    """One line per change *fix* makes, in the order the common fix tasks make them."""
    kinds = kinds_of(fix)
    out: list[str] = []
    for k in kinds:
        if not isinstance(k, RUNTIME_KINDS):
            out += k.plan()
    return out + runtime_plan([k for k in kinds if isinstance(k, RUNTIME_KINDS)])


__all__ = [k.__name__ for k in KINDS] + ["fix_of", "kinds_of", "plan", "steps", "KEYS", "STEPS"]
