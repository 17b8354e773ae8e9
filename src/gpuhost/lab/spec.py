"""Host specs (contract ``gpuhost.hostspec/v1``): load, validate, normalise.

Validation is strict on purpose: a spec describes a machine the roles will be tested
against, and a typo that silently becomes a default would test the wrong machine. Every
error is reported as one line naming the file and the field.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SPEC_VERSION = "gpuhost.hostspec/v1"
BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$")
HOSTNAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
RELEASE_RE = re.compile(r"^\d+\.\d+(\.\d+)?[-+.~\w]*$")


class SpecError(ValueError):
    """A spec (or a set of specs) is not valid; the message is one line."""


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=False)


class Os(_Strict):
    id: str
    version_id: str
    codename: str
    pretty_name: str
    proxmox_ve: Optional[str] = None
    # hostspec.md: unattended-upgrades installed and enabled, as its Debian package leaves it
    # (debconf's enable_auto_updates defaults to true), with the driver's packages in dpkg
    unattended_upgrades: bool = False


class Firmware(_Strict):
    vendor_cpu: Literal["AuthenticAMD", "GenuineIntel"]
    cpu_family: int = Field(ge=1)
    model_name: str
    acpi_pm_profile: int = Field(ge=0, le=8)
    cppc: bool
    # AMD: msr (the /proc/cpuinfo cppc flag shows with CPPC) | shared_memory (EPYC 7002/7003:
    # never shows the flag, amd_pstate still loads when cppc is true)
    cppc_interface: Literal["msr", "shared_memory"] = "msr"
    hwp: bool
    iommu: bool
    smt: bool
    virtualized: bool
    # kernel lockdown (Secure Boot): /sys/kernel/security/lockdown; from integrity on, user
    # space's PCI config writes fail with EPERM (drivers/pci/pci-sysfs.c, LOCKDOWN_PCI_ACCESS)
    lockdown: Literal["none", "integrity", "confidentiality"] = "none"
    # frequency boost the firmware allows (hostspec.md firmware.boost); false: the driver
    # offers no boost file (acpi-cpufreq, amd-pstate) or refuses to clear no_turbo (intel_pstate)
    boost: bool = True


# What one lab host can render and boot in bounded time (seconds, on 2 cores). A spec over
# a limit is refused naming it. Real machines fit: the largest two-socket x86 servers have
# 768 threads; the kernel keeps at most CPUIDLE_STATE_MAX (10) idle states per CPU
# (include/linux/cpuidle.h).
LIMITS = {"logical_cpus": 1024, "cstates": 10, "pci": 1024, "gpus": 64, "block": 256, "lxc": 256,
          "kernels": 64, "files": 256, "file_bytes": 1 << 20}


def _within(loc: tuple, count: int, limit_key: str, what: str) -> None:
    if count > LIMITS[limit_key]:
        raise _FieldError(loc, f"{count} {what} exceed the lab's limit of {LIMITS[limit_key]}")


class CState(_Strict):
    name: str
    latency_us: int = Field(ge=0)


class Cpu(_Strict):
    sockets: int = Field(ge=1, le=16)
    cores_per_socket: int = Field(ge=1, le=512)
    threads_per_core: int = Field(ge=1, le=8)
    numa_nodes: int = Field(ge=1, le=64)
    min_khz: int = Field(ge=0)          # 0 where there is no cpufreq (a VM)
    max_khz: int = Field(ge=0)
    governor_default: str
    cpuidle_driver: Literal["acpi_idle", "intel_idle", "none"]
    cstates: list[CState] = Field(default_factory=list)
    # CPUs the kernel did not bring up (hostspec.md), besides those the command line keeps off
    offline: list[int] = Field(default_factory=list)
    # hostspec.md cpu.hotplug_slots: possible CPUs the firmware lists that are not present
    # (ACPI MADT entries with the enabled bit clear: Documentation/arch/x86/x86_64/cpu-hotplug-spec.rst);
    # `possible` and `offline` list them, `present` does not (drivers/base/cpu.c print_cpus_offline)
    hotplug_slots: int = Field(default=0, ge=0, le=8192)
    # boost at boot, before any unit; a scaling_max_freq below max_khz set at boot (hostspec.md)
    boost: bool = True
    max_khz_cap: Optional[int] = Field(default=None, ge=1)

    @property
    def logical_cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @model_validator(mode="after")
    def _check(self) -> "Cpu":
        if self.min_khz > self.max_khz:
            raise ValueError("min_khz is above max_khz")
        if self.max_khz_cap is not None and not self.min_khz <= self.max_khz_cap <= self.max_khz:
            raise ValueError("max_khz_cap is outside min_khz..max_khz")
        return self


class Boot(_Strict):
    loader: Literal["systemd-boot", "grub", "grub-esp"]
    cmdline: str
    grub_default: str = "0"             # grub, grub-esp: GRUB_DEFAULT (0 = newest; saved)


class Kernel(_Strict):
    installed: list[str] = Field(min_length=1)
    pinned: Optional[str] = None
    repository: dict[str, str] = Field(default_factory=dict)

    @field_validator("installed")
    @classmethod
    def _releases(cls, v: list[str]) -> list[str]:
        for rel in v:
            if not RELEASE_RE.match(rel):
                raise ValueError(f"not a kernel release: {rel!r}")
        return v

    @field_validator("repository")
    @classmethod
    def _packages(cls, v: dict[str, str]) -> dict[str, str]:
        for name, rel in v.items():
            if not re.match(r"^[a-z0-9][a-z0-9+.-]+$", name):
                raise ValueError(f"not a Debian package name: {name!r}")
            if not RELEASE_RE.match(rel):
                raise ValueError(f"{name}: not a kernel release: {rel!r}")
        return v


class Link(_Strict):
    gen: int = Field(ge=1, le=6)
    width: Literal[1, 2, 4, 8, 12, 16, 32]


MPS_SIZES = (128, 256, 512, 1024, 2048, 4096)


class PciDevice(_Strict):
    bdf: str
    type: Literal["root_port", "switch_up", "switch_down", "endpoint"]
    parent: Optional[str] = None
    vendor: int = Field(ge=0, le=0xFFFF)
    device: int = Field(ge=0, le=0xFFFF)
    # bridges default to the PCI-to-PCI bridge class, endpoints to "unclassified"
    class_: Optional[int] = Field(default=None, alias="class", ge=0, le=0xFFFFFF)
    numa_node: int = Field(default=-1, ge=-1)
    mps_supported: Optional[int] = None
    mps: Optional[int] = None
    mrrs: Optional[int] = None
    link_cap: Optional[Link] = None
    link_sta: Optional[Link] = None
    acs_ctrl: Optional[int] = Field(default=None, ge=0, le=0xFFFF)
    driver: Optional[str] = None
    untrusted: bool = False             # external-facing: always a DMA domain
    # the config space the kernel gives (drivers/pci/probe.c pci_cfg_space_size): 256 bytes on
    # a PCIe function whose extended space it cannot reach (no ECAM for its segment, pci=nommconf)
    config_size: Optional[Literal[256, 4096]] = None

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)

    @field_validator("bdf", "parent")
    @classmethod
    def _bdf(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not BDF_RE.match(v):
            raise ValueError(f"not a PCI address (dddd:bb:dd.f, lower-case hex): {v!r}")
        return v

    @field_validator("mps_supported", "mps", "mrrs")
    @classmethod
    def _size(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and v not in MPS_SIZES:
            raise ValueError(f"must be one of {', '.join(map(str, MPS_SIZES))} bytes, not {v}")
        return v

    @model_validator(mode="after")
    def _defaults(self) -> "PciDevice":
        pcie = any(x is not None for x in (self.mps_supported, self.mps, self.mrrs, self.link_cap, self.link_sta))
        if pcie:
            # the contract's defaults for a PCIe device that states only its link
            self.mps_supported = self.mps_supported or 256
            self.mps = self.mps or 256
            self.mrrs = self.mrrs or 512
            if self.link_cap is None:
                raise ValueError("a PCIe device needs link_cap")
            if self.link_sta is None:
                self.link_sta = self.link_cap.model_copy()
            if self.mps > self.mps_supported:
                raise ValueError(f"mps {self.mps} is above mps_supported {self.mps_supported}")
        if self.type == "root_port" and self.parent is not None:
            raise ValueError("a root_port has no parent")
        if self.type in ("switch_up", "switch_down") and self.parent is None:
            raise ValueError(f"a {self.type} needs a parent bridge")
        return self

    @property
    def is_pcie(self) -> bool:
        return self.link_cap is not None

    @property
    def is_bridge(self) -> bool:
        return self.type != "endpoint"

    @property
    def pci_class(self) -> int:
        if self.class_ is not None:
            return self.class_
        return 0x060400 if self.is_bridge else 0x000000


class GpuHealth(_Strict):
    """hostspec.md: what a GPU reports about its health (all clear by default). off_bus: the
    GPU fell off the bus (Xid 79): its config space reads all ones from then on."""
    recovery_action: Optional[str] = None
    xids: list[int] = Field(default_factory=list)
    # Xids the GPU logged in this boot before a reset (nvidia-smi -r): they stay in the log,
    # and the GPU's UUID line comes again before the first Xid after it
    xids_before_reset: list[int] = Field(default_factory=list)
    remapped_rows_pending: bool = False
    retired_pages_pending: bool = False
    off_bus: bool = False


class GpuPower(_Strict):
    """hostspec.md: a GPU's power management (nvidia-smi -q "Power Readings"). The limit does
    not survive a reboot or driver unload (NVML nvmlDeviceSetPowerManagementLimit): at boot it
    is limit_w when given (a cap the firmware or an external manager sets), else default_w.
    enforced_w below the limit models an external cap (the lower of the two is enforced)."""
    # watts as the driver reports them, to the hundredth (a 39.50 W default is real)
    default_w: float = Field(ge=1)
    min_w: float = Field(ge=1)
    max_w: float = Field(ge=1)
    limit_w: Optional[int] = None
    enforced_w: Optional[int] = None

    @model_validator(mode="after")
    def _range(self) -> "GpuPower":
        if not self.min_w <= self.default_w <= self.max_w:
            raise ValueError(f"default_w {self.default_w} is outside min_w..max_w ({self.min_w}..{self.max_w})")
        if self.limit_w is not None and not self.min_w <= self.limit_w <= self.max_w:
            raise ValueError(f"limit_w {self.limit_w} is outside min_w..max_w ({self.min_w}..{self.max_w})")
        return self


class ModePair(_Strict):
    """A GPU mode with a pending value (nvidia-smi -q "MIG Mode", "ECC Mode": Current and
    Pending): a change waits for a GPU reset or reboot, then pending becomes current."""
    current: Literal["Enabled", "Disabled"]
    pending: Literal["Enabled", "Disabled"]


class GpuFabric(_Strict):
    """hostspec.md: a GPU's registration with the NVLink fabric (nvidia-smi -q "Fabric":
    State, Status; NVML nvmlGpuFabricState_t), reported by Hopper and later GPUs on an
    NVSwitch baseboard; absent: the GPU reports none ([N/A], as a PCIe card or an A100)."""
    state: Literal["Not Started", "In Progress", "Completed"]
    status: str = "N/A"         # "Success" once completed, or NVML's error string


class GpuProcess(_Strict):
    """A compute process on a GPU, as nvidia-smi --query-compute-apps lists it."""
    pid: int = Field(ge=1)
    name: str
    used_mib: int = Field(default=1024, ge=0)


class Gpu(_Strict):
    bdf: str
    name: str
    compute_cap: str
    memory_mib: int = Field(ge=1)
    uuid: str
    health: GpuHealth = Field(default_factory=GpuHealth)
    power: Optional[GpuPower] = None      # absent: the GPU reports no power management
    # the framebuffer aperture (resource 2 from compute capability 10.0, else 1) and the
    # largest size its Resizable BAR capability offers (hostspec.md); default: the next power
    # of two at or above the framebuffer, as firmware with Above 4G Decoding and ReBAR sets it;
    # rebar_max_mib 0: no Resizable BAR capability (a GPU with a fixed aperture, like a V100)
    bar_mib: Optional[int] = Field(default=None, ge=1)
    rebar_max_mib: Optional[int] = Field(default=None, ge=0)
    # hostspec.md: the compute mode when the lab starts (NVML: not persisted across reboots on
    # Linux, so every later boot starts in Default), MIG and ECC as current and pending; null:
    # the GPU does not have the feature ([N/A])
    compute_mode: Literal["Default", "Exclusive_Process", "Prohibited"] = "Default"
    mig: Optional[ModePair] = Field(default_factory=lambda: ModePair(current="Disabled", pending="Disabled"))
    ecc: Optional[ModePair] = Field(default_factory=lambda: ModePair(current="Enabled", pending="Enabled"))
    fabric: Optional[GpuFabric] = None
    # hostspec.md: the GPU instances a MIG GPU has when the lab starts. They are gone after
    # every boot ("the created MIG devices are not persistent across system reboots", NVIDIA
    # MIG User Guide) unless an enabled unit creates them (nvidia-smi mig -cgi ...)
    mig_instances: int = Field(default=0, ge=0, le=7)
    # a driver call that fails on this GPU in the lab's libcuda.so.1, as "<call> <CUresult>"
    # (cuda.h's code): a GPU that fails mid-measurement
    cuda_fail: Optional[str] = Field(default=None, pattern=r"^cu[A-Za-z0-9_]+ [0-9]+$")
    # what runs on it (nvidia-smi --query-compute-apps) and how busy it is (utilization.gpu, %)
    processes: list[GpuProcess] = Field(default_factory=list)
    utilization: int = Field(default=0, ge=0, le=100)

    @property
    def aperture_mib(self) -> int:
        return self.bar_mib or 1 << (self.memory_mib - 1).bit_length()

    @property
    def rebar_top_mib(self) -> int:
        return self.aperture_mib if self.rebar_max_mib is None else self.rebar_max_mib

    @property
    def aperture_bar(self) -> int:
        return 2 if tuple(int(x) for x in self.compute_cap.split(".")) >= (10, 0) else 1

    @field_validator("compute_cap")
    @classmethod
    def _cc(cls, v: str) -> str:
        if not re.match(r"^\d+\.\d+$", v):
            raise ValueError(f"not a compute capability (like 12.0): {v!r}")
        return v


P2P_CODES = ("OK", "CNS", "GNS", "TNS", "NS", "DR", "U")


class P2pPair(_Strict):
    """hostspec.md: a pair of GPUs (by index) whose peer-to-peer status is not OK, as
    nvidia-smi topo -p2p r and w print it (its legend's codes)."""
    pair: list[int] = Field(min_length=2, max_length=2)
    read: Literal["OK", "CNS", "GNS", "TNS", "NS", "DR", "U"] = "OK"
    write: Literal["OK", "CNS", "GNS", "TNS", "NS", "DR", "U"] = "OK"


class FabricManager(_Strict):
    """hostspec.md nvidia.fabricmanager: NVIDIA Fabric Manager installed from its package
    (nvidia-fabricmanager-<branch>) at *version* (default: the kernel module's), its unit
    enabled or not. The daemon starts only at the loaded driver's version (the guide: it checks
    the loaded driver stack and aborts), and while it runs the GPUs that report a fabric state
    have registered with the fabric (Completed, Success)."""
    version: Optional[str] = None
    enabled: bool = True


class Nvidia(_Strict):
    kernel_module: str
    userspace: str
    cuda_version: str
    dkms: bool = True
    builds_up_to: Optional[str] = None  # newest kernel series the dkms build succeeds on
    flavor: Literal["open", "proprietary"] = "open"
    persistence_default: bool = False
    gpus: list[Gpu] = Field(default_factory=list)
    p2p: list[P2pPair] = Field(default_factory=list)        # every other pair: OK both ways
    char_majors: dict[str, int] = Field(default_factory=lambda: {"nvidia": 195, "nvidia-uvm": 508, "nvidia-caps": 236})
    fabricmanager: Optional[FabricManager] = None
    # hostspec.md nvidia.uvm_at_boot: true, something of the vendor's loads nvidia-uvm at
    # boot and makes its nodes; false, only what the host's own files say does (modules-load.d
    # loads the module, nvidia-modprobe -u makes the nodes: uvm.c registers a char region and
    # no device, so udev makes no node for it)
    uvm_at_boot: bool = True


class GuestNvidia(_Strict):
    userspace: str
    cuda_version: str


class BlockDev(_Strict):
    name: str
    rotational: bool
    scheduler: str
    schedulers: list[str] = Field(min_length=1)
    read_ahead_kb: int = Field(default=128, ge=0)

    @model_validator(mode="after")
    def _sched(self) -> "BlockDev":
        if self.scheduler not in self.schedulers:
            raise ValueError(f"scheduler {self.scheduler!r} is not among schedulers {self.schedulers}")
        if not re.match(r"^[a-z0-9]+$", self.name):
            raise ValueError(f"not a block device name: {self.name!r}")
        return self


class LxcContainer(_Strict):
    vmid: int = Field(ge=100, le=999999999)
    config: str
    running: bool = True        # started at boot (its CPU set is then chosen as pve-container does)


class Zfs(_Strict):
    """hostspec.md zfs: the zfs module loaded; *arc_max* is what /etc/modprobe.d/zfs.conf sets
    (bytes; None: no file, as hosts installed before PVE 8.1 have), *root* a root on ZFS (the
    module then loads from the initramfs, with the modprobe.d files it was built with). In the
    lab such a host's /proc is a tmpfs of the real procfs's entries with /proc/spl beside them
    (shims/init-outer): procfs itself takes no directory its kernel did not make."""
    version: str = "2.2.7"
    arc_max: Optional[int] = Field(default=None, ge=0)
    root: bool = False


class BmcSpec(_Strict):
    """The host's BMC (hostspec.md bmc): a Redfish service on the host's lab address whose Bios
    resource holds these attributes (names and values as the vendor's own documents spell
    them, tests/real_data/bmc), what is pending, and, where given, the values the registry
    offers; the faults it plays."""
    vendor: Literal["Dell", "HPE", "Lenovo", "Supermicro", "AMI", "DMTF"]
    attributes: dict[str, str]
    pending: dict[str, str] = Field(default_factory=dict)
    registry: Optional[dict[str, list[str]]] = None
    username: str = "root"
    password: str = "lab-bmc-secret"
    faults: list[Literal["unreachable", "slow", "not_json", "huge", "wrong_certificate", "job_never_runs"]] = \
        Field(default_factory=list)
    # what the firmware's settings make of the host at each boot: attribute -> the value it
    # runs with -> the spec's fields (dotted, a list's item by its index: firmware.cppc,
    # cpu.numa_nodes, cpu.cstates, pci.0.acs_ctrl) that value sets, each value as the field
    # takes it. The lab's own model of that firmware, never gpuhost's table.
    effects: dict[str, dict[str, dict[str, object]]] = Field(default_factory=dict)
    # faults of the firmware: pending values it does not apply at reset (they stay pending),
    # and attributes a firmware update renames at the next reset (their pending values gone)
    ignores: list[str] = Field(default_factory=list)
    renames_at_reset: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> "BmcSpec":
        for name in list(self.pending) + list(self.effects) + self.ignores + list(self.renames_at_reset):
            if name not in self.attributes:
                raise ValueError(f"{name}: not among the BMC's attributes")
        return self


class HostSpec(_Strict):
    spec: Literal["gpuhost.hostspec/v1"]
    hostname: str
    kind: Literal["host"]
    parent: None = None
    lxc_vmid: None = None
    os: Os
    firmware: Firmware
    cpu: Cpu
    memory_mib: int = Field(ge=64)
    sysctl_default: dict[str, int | str]
    thp_default: Literal["always", "madvise", "never"]
    boot: Boot
    kernel: Kernel
    pci: list[PciDevice]
    nvidia: Optional[Nvidia] = None
    block: list[BlockDev]
    lxc: list[LxcContainer] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=dict)
    zfs: Optional[Zfs] = None
    # hostspec.md cuda_runtimes on a host: none unless given (a bare-metal inference host has
    # its toolkit or torch on its own disk, and guest.cuda judges hosts too)
    cuda_runtimes: list["CudaRuntime"] = Field(default_factory=list)
    bmc: Optional[BmcSpec] = None

    @property
    def runtimes(self) -> list["CudaRuntime"]:
        return self.cuda_runtimes

    @property
    def zfs_root(self) -> bool:
        """Root on ZFS: the spec says so, or the command line's root=ZFS=... (zfs-initramfs)."""
        return self.zfs is not None and (self.zfs.root or "root=ZFS=" in self.boot.cmdline)

    @model_validator(mode="after")
    def _cross(self) -> "HostSpec":
        seen: dict[str, int] = {}
        for i, dev in enumerate(self.pci):
            if dev.bdf in seen:
                raise _FieldError(("pci", i, "bdf"), f"duplicate BDF {dev.bdf}")
            seen[dev.bdf] = i
        for i, dev in enumerate(self.pci):
            if dev.parent is not None:
                if dev.parent not in seen:
                    raise _FieldError(("pci", i, "parent"), f"no device {dev.parent} in pci")
                if not self.pci[seen[dev.parent]].is_bridge:
                    raise _FieldError(("pci", i, "parent"), f"{dev.parent} is an endpoint, not a bridge")
        if self.nvidia:
            for i, gpu in enumerate(self.nvidia.gpus):
                if gpu.bdf not in seen:
                    raise _FieldError(("nvidia", "gpus", i, "bdf"), f"no device {gpu.bdf} in pci")
        if self.kernel.pinned is not None and self.kernel.pinned not in self.kernel.installed:
            raise _FieldError(("kernel", "pinned"), f"{self.kernel.pinned} is not in kernel.installed")
        _within(("cpu",), self.cpu.logical_cpus, "logical_cpus", "logical CPUs (sockets x cores x threads)")
        _within(("cpu", "cstates"), len(self.cpu.cstates), "cstates", "idle states")
        _within(("pci",), len(self.pci), "pci", "PCI functions")
        _within(("nvidia", "gpus"), len(self.nvidia.gpus) if self.nvidia else 0, "gpus", "GPUs")
        _within(("block",), len(self.block), "block", "block devices")
        _within(("lxc",), len(self.lxc), "lxc", "containers")
        _within(("kernel", "installed"), len(self.kernel.installed), "kernels", "kernels")
        if self.cpu.numa_nodes > self.cpu.logical_cpus:
            raise _FieldError(("cpu", "numa_nodes"), "more NUMA nodes than CPUs")
        vmids = [c.vmid for c in self.lxc]
        for i, vmid in enumerate(vmids):
            if vmids.index(vmid) != i:
                raise _FieldError(("lxc", i, "vmid"), f"duplicate vmid {vmid}")
        names = [b.name for b in self.block]
        for i, name in enumerate(names):
            if names.index(name) != i:
                raise _FieldError(("block", i, "name"), f"duplicate block device {name}")
        for key in self.sysctl_default:
            if not re.match(r"^[a-z0-9_]+(\.[a-z0-9_-]+)+$", key):
                raise _FieldError(("sysctl_default", key), "not a sysctl name")
        _check_files(self.files)
        return self

    @property
    def is_guest(self) -> bool:
        return False

    @property
    def is_proxmox(self) -> bool:
        return self.os.proxmox_ve is not None

    @property
    def gpu_bdfs(self) -> list[str]:
        return [g.bdf for g in self.nvidia.gpus] if self.nvidia else []

    def device(self, bdf: str) -> PciDevice:
        return next(d for d in self.pci if d.bdf == bdf)


class CudaRuntime(_Strict):
    """hostspec.md guest cuda_runtimes: a CUDA runtime on the guest's disk, laid out as its
    package does: a toolkit (/usr/local/cuda-X.Y with version.json and libcudart), torch in a
    site-packages directory (torch/version.py: cuda = 'X.Y'), or the nvidia-cuda-runtime wheel
    there. Without *kind*, a site-packages path holds torch, any other a toolkit."""
    path: str = Field(pattern=r"^/[A-Za-z0-9._/+-]+$")
    version: str = Field(pattern=r"^\d+\.\d+(\.\d+)?$")
    kind: Optional[Literal["toolkit", "torch", "wheel"]] = None
    torch: str = "2.7.0"                    # torch's own version, for kind torch

    @property
    def what(self) -> str:
        if self.kind:
            return self.kind
        return "torch" if re.search(r"/(site|dist)-packages$", self.path) else "toolkit"


HostSpec.model_rebuild()


class GuestSpec(_Strict):
    spec: Literal["gpuhost.hostspec/v1"]
    hostname: str
    kind: Literal["lxc-guest"]
    parent: str
    lxc_vmid: int = Field(ge=100)
    os: Os
    nvidia: Optional[GuestNvidia] = None
    files: dict[str, str] = Field(default_factory=dict)
    # None: one toolkit of nvidia.cuda_version, as a CUDA container image has it
    cuda_runtimes: Optional[list[CudaRuntime]] = None

    @property
    def runtimes(self) -> list[CudaRuntime]:
        if self.cuda_runtimes is not None:
            return self.cuda_runtimes
        if self.nvidia is None:
            return []
        return [CudaRuntime(path=f"/usr/local/cuda-{self.nvidia.cuda_version}", version=self.nvidia.cuda_version)]

    @model_validator(mode="after")
    def _cross(self) -> "GuestSpec":
        _check_files(self.files)
        return self

    @property
    def is_guest(self) -> bool:
        return True

    @property
    def is_proxmox(self) -> bool:
        return False


AnySpec = HostSpec | GuestSpec


class _FieldError(ValueError):
    def __init__(self, loc: tuple, msg: str):
        super().__init__(msg)
        self.loc = loc
        self.msg = msg


def _check_files(files: dict[str, str]) -> None:
    _within(("files",), len(files), "files", "files")
    for path, content in files.items():
        size = len(content.encode())
        if size > LIMITS["file_bytes"]:
            raise _FieldError(("files", path), f"{size} bytes exceed the lab's limit of {LIMITS['file_bytes']} per file")
        if not path.startswith("/") or ".." in path.split("/") or path.endswith("/"):
            raise _FieldError(("files", path), "must be an absolute file path without '..'")
        # /var/run and /var/lock are links to /run on every distribution the lab imitates
        if path.startswith(("/proc/", "/sys/", "/dev/", "/run/", "/var/run/", "/var/lock/")):
            raise _FieldError(("files", path), "lies on a virtual filesystem, not on the disk")


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def parse_spec(data: object, source: str) -> AnySpec:
    """Validate one spec document; raise SpecError naming *source* and the field."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: not a host spec (a YAML mapping is expected)")
    if data.get("spec") != SPEC_VERSION:
        raise SpecError(f"{source}: spec: must be {SPEC_VERSION!r}, not {data.get('spec')!r}")
    kind = data.get("kind")
    model = {"host": HostSpec, "lxc-guest": GuestSpec}.get(kind)  # type: ignore[arg-type]
    if model is None:
        raise SpecError(f"{source}: kind: must be 'host' or 'lxc-guest', not {kind!r}")
    try:
        spec = model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _FieldError):
            raise SpecError(f"{source}: {_loc(ctx_err.loc)}: {ctx_err.msg}") from None
        loc = _loc(tuple(p for p in err["loc"] if p not in ("function-after",)))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field" + (" (a guest states only os, nvidia.userspace/cuda_version and files)" if kind == "lxc-guest" else "")
        raise SpecError(f"{source}: {loc}: {msg}") from None
    if not HOSTNAME_RE.match(spec.hostname):
        raise SpecError(f"{source}: hostname: not a valid host name: {spec.hostname!r}")
    if isinstance(spec, HostSpec) and spec.bmc is not None:
        # every value's effects make a host spec that holds: found at load, not at a reboot
        for name, by_value in spec.bmc.effects.items():
            for value in by_value:
                try:
                    with_firmware(spec, {**spec.bmc.attributes, name: value})
                except (SpecError, ValidationError, KeyError, TypeError) as exc:
                    first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
                    raise SpecError(f"{source}: bmc.effects.{name}.{value}: {first}") from None
    return spec


def _index(part: str) -> int:
    """A list's item in an effect's field: its position, from 0."""
    if not part.isdigit():
        raise ValueError(part)
    return int(part)


def with_firmware(spec: HostSpec, attributes: dict) -> HostSpec:
    """The host as its firmware makes it at boot: *spec* with the fields that its BMC's
    *attributes* (the values it runs with) set, by the spec's bmc.effects."""
    if spec.bmc is None or not spec.bmc.effects:
        return spec
    data = spec.model_dump(mode="python")
    for name, by_value in spec.bmc.effects.items():
        for field, value in (by_value.get(str(attributes.get(name))) or {}).items():
            *parents, leaf = field.split(".")
            node = data
            try:
                for part in parents:
                    node = node[_index(part)] if isinstance(node, list) else node[part]
                if isinstance(node, list):
                    node[_index(leaf)] = value
                elif leaf in node:
                    node[leaf] = value
                else:
                    raise KeyError(leaf)
            except (KeyError, IndexError, ValueError, TypeError):
                raise SpecError(f"{spec.hostname}: bmc.effects.{name}: no field {field} in a host spec") from None
    return HostSpec.model_validate(data)


def load_spec(path: str | Path) -> AnySpec:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if mark is None and isinstance(getattr(exc, "position", None), int):
            # the reader's refusal of a character (a NUL byte): where it is, in one line
            line = text[:exc.position].count("\n") + 1
            char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
            raise SpecError(f"{path}: not valid YAML (line {line}): character #x{char:04x} is not allowed "
                            "in YAML") from None
        where = f" (line {mark.line + 1})" if mark else ""
        problem = str(getattr(exc, "problem", None) or exc).splitlines()[0]
        raise SpecError(f"{path}: not valid YAML{where}: {problem}") from None
    return parse_spec(data, str(path))


def load_specs(paths: list[str | Path]) -> list[AnySpec]:
    """Load a lab's worth of specs and check them against each other."""
    specs: list[AnySpec] = []
    sources: dict[str, str] = {}
    for path in paths:
        spec = load_spec(path)
        if spec.hostname in sources:
            raise SpecError(f"{path}: hostname: {spec.hostname} is already defined by {sources[spec.hostname]}")
        sources[spec.hostname] = str(path)
        specs.append(spec)
    by_name = {s.hostname: s for s in specs}
    for spec in specs:
        if isinstance(spec, GuestSpec):
            src = sources[spec.hostname]
            parent = by_name.get(spec.parent)
            if parent is None:
                raise SpecError(f"{src}: parent: no host {spec.parent!r} in this lab")
            if not isinstance(parent, HostSpec):
                raise SpecError(f"{src}: parent: {spec.parent} is a guest, not a host")
            if not parent.is_proxmox:
                raise SpecError(f"{src}: parent: {spec.parent} is not a Proxmox VE host (os.proxmox_ve)")
            if spec.lxc_vmid not in [c.vmid for c in parent.lxc]:
                raise SpecError(f"{src}: lxc_vmid: {spec.parent} has no container {spec.lxc_vmid}")
    return specs
