"""A simulated machine's volatile state for one boot, rendered as sysfs and procfs.

``Machine`` is built from the spec and the ``BootState`` the kernel model derived; it
owns the live values (governors, idle-state flags, sysctls, config space, persistence
mode) and renders them into a ``Tree`` whose writes behave as the kernel's do.
"""
from __future__ import annotations

import errno
import json
import random
import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Callable

from . import configspace, cudamodel
from .kernel import EPP_CHOICES, BootState, boost_files, default_governor, governors_for
from .shims import shimlib
from .spec import GuestSpec, HostSpec, PciDevice
from .tree import Blob, Tree, einval, text

CPU = "sys/devices/system/cpu"


def cpulist(cpus: list[int]) -> str:
    """Kernel list format: 0-31,64-95."""
    out, start, prev = [], None, None
    for c in sorted(cpus):
        if start is None:
            start = prev = c
        elif c == prev + 1:
            prev = c
        else:
            out.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = c
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(out)


@dataclass
class CpuTopo:
    cpu: int
    package: int
    core: int
    node: int
    siblings: list[int] = field(default_factory=list)


def topology(spec: HostSpec) -> list[CpuTopo]:
    """Linux numbering: first thread of every core, then the second threads."""
    c = spec.cpu
    cores = c.sockets * c.cores_per_socket
    per_node = max(1, cores // c.numa_nodes)
    out = []
    for t in range(c.threads_per_core):
        for core in range(cores):
            cpu = t * cores + core
            out.append(CpuTopo(cpu, core // c.cores_per_socket, core % c.cores_per_socket,
                               min(core // per_node, c.numa_nodes - 1),
                               [tt * cores + core for tt in range(c.threads_per_core)]))
    return out


# how the NVIDIA driver words the Xids the lab logs, as real logs show them
# (tests/real_data/SOURCES.md: gpu/xid-*); the rest get the lab's own words
XID_WORDS = {79: "GPU has fallen off the bus.", 13: "Graphics Exception: ESR 0x52e7b0=0x101000e 0x52e7b4=0x4",
             # the catalog's words (docs.nvidia.com/deploy/xid-errors): ROBUST_CHANNEL_UNCONTAINED_ERROR
             95: "Uncontained memory error"}


class Machine:
    """The running state of a kind: host machine for one boot."""

    def __init__(self, spec: HostSpec, boot: BootState,
                 on_reboot: Callable[[str], None], on_container_restart: Callable[[int], None],
                 nvram: dict | None = None):
        self.spec = spec
        self.boot = boot
        self.on_reboot = on_reboot
        self.on_container_restart = on_container_restart
        # nr_cpus=N: the kernel knows N CPUs, the rest are nowhere (kernel.cpu_limit)
        self.cpus = [t for t in topology(spec) if boot.cpu_limit is None or t.cpu < boot.cpu_limit]
        self.btime = int(time.time()) + 1
        self.driver = boot.cpufreq_driver
        self.status = boot.amd_pstate_status
        self.governor = {t.cpu: boot.governor for t in self.cpus}
        self.epp = {t.cpu: self._epp_default(boot.governor) for t in self.cpus}
        # boost and frequency caps as the boot left them (hostspec.md cpu.boost, max_khz_cap):
        # firmware that turned boost off leaves it off whatever the spec's boot wants
        on = spec.cpu.boost and spec.firmware.boost
        self.boost_global = on
        self.boost = {t.cpu: on for t in self.cpus}
        self.max_freq = {t.cpu: min(spec.cpu.max_khz_cap or spec.cpu.max_khz, spec.cpu.max_khz) for t in self.cpus}
        self.idle_disabled = {(t.cpu, i): False for t in self.cpus for i in range(len(boot.cstate_names))}
        self.sysctl = dict(boot.sysctl)
        self.thp = boot.thp
        self.thp_defrag = "madvise"
        self.sched = {b.name: boot.schedulers.get(b.name, b.scheduler) for b in spec.block}
        self.read_ahead = {b.name: b.read_ahead_kb for b in spec.block}
        self.persistence = {g.bdf: spec.nvidia.persistence_default for g in spec.nvidia.gpus} if spec.nvidia else {}
        self.fabric_managed = False          # Fabric Manager set the NVLink fabric up this boot
        self.uvm = boot.uvm                  # absent | loaded | nodes: nvidia-uvm's module and /dev nodes
        # the power limit does not survive a reboot (NVML: "not persistent across reboots or
        # driver unloads"): every boot starts at the spec's limit, else the default
        self.power_limit = {g.bdf: (g.power.limit_w or g.power.default_w)
                            for g in (spec.nvidia.gpus if spec.nvidia else []) if g.power}
        # the compute mode resets at boot (NVML nvmlDeviceSetComputeMode: not persisted across
        # reboots on Linux); MIG and ECC changes wait in the GPU as pending until the next boot
        # (nvidia-smi -q Current/Pending): *nvram* carries them (and whether it booted) from boot to boot
        gpus = spec.nvidia.gpus if spec.nvidia else []
        self.nvram = {} if nvram is None else nvram
        # the spec's compute mode is what the host has when the lab starts (set by hand or a
        # job's prologue since its last boot); every boot after that starts in Default
        # each running container's CPU set, chosen as pve-guests.service starts it at this boot
        self.ct_cpus: dict[int, list[int]] = {}
        present = {"/" + path for path, _, _ in self.dev_nodes()}
        for vmid, ct in boot.containers.items():
            # pve-guests.service: a devN: node missing at start stops that container's start
            if all(p in present or not p.startswith("/dev/nvidia") for p in ct["devices"]):
                self.start_container(vmid, ct["request"])
        first_boot = not self.nvram.get("booted")
        self.nvram["booted"] = True
        self.compute_mode = {g.bdf: (g.compute_mode if first_boot else "Default") for g in gpus}
        self.modes: dict[str, dict[str, list[str] | None]] = {}
        for g in gpus:
            kept = self.nvram.get(g.bdf)
            self.modes[g.bdf] = {m: (None if getattr(g, m) is None else
                                     [kept[m], kept[m]] if kept else [getattr(g, m).current, getattr(g, m).pending])
                                 for m in ("mig", "ecc")}
            self.nvram[g.bdf] = {m: v[1] for m, v in self.modes[g.bdf].items() if v}
        # GPU instances: the spec's when the lab starts, and at every later boot only what the
        # enabled units create (nvidia-smi mig -cgi ...), on a GPU whose MIG mode is on
        self.mig_instances = {g.bdf: (g.mig_instances if first_boot else 0) for g in gpus}
        for command in [] if first_boot else boot.units:
            self._create_mig_instances(shlex.split(command))
        self.mig_instances = {bdf: (n if self._mig_on(bdf) else 0)
                              for bdf, n in self.mig_instances.items()}
        self.config: dict[str, tuple[bytearray, bytearray]] = {}
        bus_range = self._bus_ranges()
        for dev in spec.pci:
            sec, sub = bus_range.get(dev.bdf, (0, 0))
            gpu = self._gpu_spec(dev.bdf)
            # the GPU's framebuffer aperture is resizable from 64 MiB up to what its firmware offers
            rebar = ((gpu.aperture_bar, [1 << n for n in range(6, gpu.rebar_top_mib.bit_length())], gpu.aperture_mib)
                     if gpu is not None and dev.is_pcie and gpu.rebar_top_mib else None)
            self.config[dev.bdf] = configspace.build(dev, sec, sub, rebar,
                                                     [(i, start, flags) for i, start, _, flags in self._gpu_bars(dev.bdf)])
            self._boot_acs(dev)
        for gpu in (spec.nvidia.gpus if spec.nvidia else []):
            if gpu.health.off_bus and gpu.bdf in self.config:
                # a device that does not answer: every config read is all ones (a master
                # abort), writes go nowhere; sysfs keeps vendor/device/class from enumeration
                cfg, mask = self.config[gpu.bdf]
                cfg[:] = b"\xff" * len(cfg)
                mask[:] = bytes(len(mask))
        self.tree = Tree()
        self.render()

    def _boot_acs(self, dev: PciDevice) -> None:
        """Rule 7: with an IOMMU on, the kernel sets SrcValid, ReqRedir, CmpltRedir and
        UpstreamFwd on every ACS port (pci_std_enable_acs, as far as the capability offers
        them); pci=disable_acs_redir= then clears ReqRedir, CmpltRedir and EgressCtrl on the
        ports it names ([<domain>:]<bus>:<dev>.<fn>, or pci:<vendor>:<device>)."""
        if dev.acs_ctrl is None:
            return
        cfg = self.config[dev.bdf][0]
        off = configspace.ECAP_ACS
        caps = int.from_bytes(cfg[off + 4:off + 6], "little")
        ctrl = int.from_bytes(cfg[off + 6:off + 8], "little")
        if self.boot.iommu != "off":
            ctrl |= 0x1D & caps
        if _named_by_acs_redir(self.boot.params.get("pci", ""), dev):
            ctrl &= ~0x2C
        cfg[off + 6:off + 8] = ctrl.to_bytes(2, "little")

    # ---- derived facts -------------------------------------------------------------
    def _bus_ranges(self) -> dict[str, tuple[int, int]]:
        kids: dict[str, list[PciDevice]] = {}
        for dev in self.spec.pci:
            if dev.parent:
                kids.setdefault(dev.parent, []).append(dev)

        def span(bdf: str) -> tuple[int, int]:
            buses = [int(k.bdf[5:7], 16) for k in kids.get(bdf, [])]
            subs = [span(k.bdf)[1] for k in kids.get(bdf, []) if k.is_bridge]
            if not buses:
                return 0, 0
            return min(buses), max(buses + subs)

        return {d.bdf: span(d.bdf) for d in self.spec.pci if d.is_bridge}

    def _epp_default(self, governor: str | None) -> str | None:
        if self.driver not in ("amd-pstate-epp", "intel_pstate"):
            return None
        return "performance" if governor == "performance" else "balance_performance"

    def dev_path(self, bdf: str) -> str:
        chain = []
        dev = self.spec.device(bdf)
        while dev is not None:
            chain.append(dev.bdf)
            dev = self.spec.device(dev.parent) if dev.parent else None
        root = chain[-1]
        return f"sys/devices/pci{root[:7]}/" + "/".join(reversed(chain))

    def driver_of(self, dev: PciDevice) -> str | None:
        if dev.driver:
            return dev.driver
        if dev.bdf in self.spec.gpu_bdfs:
            return "nvidia" if self.boot.nvidia_loaded else None
        return None

    # ---- rendering -----------------------------------------------------------------
    def render(self) -> None:
        t = self.tree
        self._render_cpus(t)
        self._render_cpufreq(t)
        self._render_cpuidle(t)
        self._render_nodes(t)
        for vmid in self.ct_cpus:
            self._render_container(t, vmid)
        self._render_pci(t)
        self._render_iommu(t)
        self._render_misc(t)
        self._render_block(t)
        self._render_zfs(t)
        self._render_proc(t)
        self._render_ctl(t)

    def _render_cpus(self, t: Tree) -> None:
        n = len(self.cpus)
        # the firmware's hotplug slots are possible CPUs too, within nr_cpus= where it is given
        slots = [] if self.boot.cpu_limit is not None else list(range(n, n + self.spec.cpu.hotplug_slots))
        off = set(self.boot.offline)
        t.attr(f"{CPU}/possible", text(cpulist(list(range(n)) + slots)))
        t.attr(f"{CPU}/present", text(cpulist(list(range(n)))))
        t.attr(f"{CPU}/online", text(cpulist([c for c in range(n) if c not in off])))
        # offline: possible but not online (drivers/base/cpu.c print_cpus_offline), hotplug slots too
        t.attr(f"{CPU}/offline", text(cpulist(sorted(off | set(slots)))) if off or slots else b"\n")
        t.attr(f"{CPU}/kernel_max", text(8191))
        smt = self.spec.firmware.smt and self.spec.cpu.threads_per_core > 1
        t.attr(f"{CPU}/smt/active", text(int(smt)))
        t.attr(f"{CPU}/smt/control", text("on" if smt else ("off" if self.spec.firmware.smt else "notsupported")))
        for c in self.cpus:
            base = f"{CPU}/cpu{c.cpu}"
            if c.cpu:
                t.attr(f"{base}/online", text(0 if c.cpu in off else 1))
            t.attr(f"{base}/topology/physical_package_id", text(c.package))
            t.attr(f"{base}/topology/core_id", text(c.core))
            t.attr(f"{base}/topology/thread_siblings_list", text(cpulist(c.siblings)))
            t.attr(f"{base}/topology/core_cpus_list", text(cpulist(c.siblings)))
            if self.spec.firmware.cppc:
                # drivers/acpi/cppc_acpi.c: shown once _CPC is parsed, whatever the interface
                for name, value in (("highest_perf", 196), ("nominal_perf", 120), ("lowest_perf", 20),
                                    ("lowest_nonlinear_perf", 50), ("nominal_freq", self.spec.cpu.max_khz // 1000 or 1)):
                    t.attr(f"{base}/acpi_cppc/{name}", text(value))
            t.link(f"{base}/node{c.node}", f"../../node/node{c.node}")

    def _render_cpufreq(self, t: Tree) -> None:
        t.remove_tree(f"{CPU}/cpufreq")
        t.remove_tree(f"{CPU}/amd_pstate")
        t.remove_tree(f"{CPU}/intel_pstate")
        for c in self.cpus:
            t.remove_tree(f"{CPU}/cpu{c.cpu}/cpufreq")
        fw = self.spec.firmware
        if self.status is not None or (fw.vendor_cpu == "AuthenticAMD" and self.driver in ("amd-pstate", "amd-pstate-epp")):
            t.attr(f"{CPU}/amd_pstate/status", lambda: text(self.status or "disable"), self._write_pstate_status)
            t.attr(f"{CPU}/amd_pstate/prefcore", text("enabled"))
        if self.driver == "intel_pstate":
            t.attr(f"{CPU}/intel_pstate/status", text("active"))
            t.attr(f"{CPU}/intel_pstate/no_turbo", lambda: text(int(not self.boost_global)), self._write_no_turbo)
        if self.driver is None:
            t.mkdir(f"{CPU}/cpufreq")
            return
        govs = governors_for(self.driver)
        c = self.spec.cpu
        global_boost, policy_boost = boost_files(self.spec, self.driver, self.boot.release)
        if global_boost:
            t.attr(f"{CPU}/cpufreq/boost", lambda: text(int(self.boost_global)), self._write_boost)
        for topo in self.cpus:
            cpu = topo.cpu
            p = f"{CPU}/cpufreq/policy{cpu}"
            t.attr(f"{p}/scaling_driver", text(self.driver))
            t.attr(f"{p}/scaling_available_governors", text(" ".join(govs)))
            t.attr(f"{p}/scaling_governor", lambda cpu=cpu: text(self.governor[cpu]),
                   lambda v, cpu=cpu: self._write_governor(cpu, v))
            t.attr(f"{p}/affected_cpus", text(cpu))
            t.attr(f"{p}/related_cpus", text(cpu))
            t.attr(f"{p}/cpuinfo_min_freq", text(c.min_khz))
            t.attr(f"{p}/cpuinfo_max_freq", text(c.max_khz))
            t.attr(f"{p}/scaling_min_freq", text(c.min_khz))
            t.attr(f"{p}/scaling_max_freq", lambda cpu=cpu: text(self.max_freq[cpu]),
                   lambda v, cpu=cpu: self._write_max_freq(cpu, v))
            t.attr(f"{p}/scaling_cur_freq",
                   lambda cpu=cpu: text(self.max_freq[cpu] if self.governor[cpu] == "performance" else c.min_khz))
            if policy_boost:
                t.attr(f"{p}/boost", lambda cpu=cpu: text(int(self.boost[cpu])),
                       lambda v, cpu=cpu: self._write_policy_boost(cpu, v))
            if self.driver in ("amd-pstate-epp", "intel_pstate"):
                t.attr(f"{p}/energy_performance_available_preferences", text(" ".join(EPP_CHOICES)))
                t.attr(f"{p}/energy_performance_preference", lambda cpu=cpu: text(self.epp[cpu]),
                       lambda v, cpu=cpu: self._write_epp(cpu, v))
            t.link(f"{CPU}/cpu{cpu}/cpufreq", f"../cpufreq/policy{cpu}")

    def _render_cpuidle(self, t: Tree) -> None:
        drv = self.boot.cpuidle_driver or self.spec.cpu.cpuidle_driver
        t.attr(f"{CPU}/cpuidle/current_driver", text(drv))
        t.attr(f"{CPU}/cpuidle/current_governor_ro", text("menu"))
        t.attr(f"{CPU}/cpuidle/current_governor", text("menu"))
        if drv == "none":
            return
        lat = [s.latency_us for s in self.spec.cpu.cstates]     # by table position
        for topo in self.cpus:
            for i, name in enumerate(self.boot.cstate_names):
                base = f"{CPU}/cpu{topo.cpu}/cpuidle/state{i}"
                t.attr(f"{base}/name", text(name))
                t.attr(f"{base}/desc", text("CPUIDLE CORE POLL IDLE" if name == "POLL" else f"ACPI FFH MWAIT 0x{i:x}"))
                t.attr(f"{base}/latency", text(lat[i]))
                t.attr(f"{base}/residency", text(lat[i] * 3))
                t.attr(f"{base}/usage", text(0))
                t.attr(f"{base}/time", text(0))
                t.attr(f"{base}/disable", lambda key=(topo.cpu, i): text(int(self.idle_disabled[key])),
                       lambda v, key=(topo.cpu, i): self._write_idle_disable(key, v))

    def _render_nodes(self, t: Tree) -> None:
        nodes = self.spec.cpu.numa_nodes
        t.attr("sys/devices/system/node/online", text(cpulist(list(range(nodes)))))
        t.attr("sys/devices/system/node/possible", text(cpulist(list(range(nodes)))))
        t.attr("sys/devices/system/node/has_cpu", text(cpulist(list(range(nodes)))))
        for n in range(nodes):
            cpus = [c.cpu for c in self.cpus if c.node == n]
            t.attr(f"sys/devices/system/node/node{n}/cpulist", text(cpulist(cpus)))
            kb = self.spec.memory_mib * 1024 // nodes
            t.attr(f"sys/devices/system/node/node{n}/meminfo", text(
                f"Node {n} MemTotal:       {kb} kB\nNode {n} MemFree:        {kb * 9 // 10} kB\n"
                f"Node {n} MemUsed:        {kb // 10} kB"))

    def _render_pci(self, t: Tree) -> None:
        for d in ("sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/bus/pci/slots"):
            t.mkdir(d)
        drivers = set()
        for dev in self.spec.pci:
            path = self.dev_path(dev.bdf)
            cfg, mask = self.config[dev.bdf]
            t.link(f"sys/bus/pci/devices/{dev.bdf}", "../../../" + path.removeprefix("sys/"))
            t.add(f"{path}/config", Blob(cfg, lambda off, data, cfg=cfg, mask=mask: self._write_config(cfg, mask, off, data)))
            t.attr(f"{path}/vendor", text(f"0x{dev.vendor:04x}"))
            t.attr(f"{path}/device", text(f"0x{dev.device:04x}"))
            t.attr(f"{path}/subsystem_vendor", text(f"0x{(0 if dev.is_bridge else dev.vendor):04x}"))
            t.attr(f"{path}/subsystem_device", text(f"0x{(0 if dev.is_bridge else dev.device):04x}"))
            t.attr(f"{path}/class", text(f"0x{dev.pci_class:06x}"))
            t.attr(f"{path}/revision", text("0x00"))
            t.attr(f"{path}/irq", text(0))
            t.attr(f"{path}/numa_node", text(dev.numa_node))
            t.attr(f"{path}/local_cpulist", text(cpulist([c.cpu for c in self.cpus if dev.numa_node < 0 or c.node == dev.numa_node])))
            t.attr(f"{path}/enable", text(1))
            # drivers/pci/probe.c: devices behind an external-facing port are untrusted and removable
            t.attr(f"{path}/removable", text("removable" if dev.untrusted else "unknown"))
            t.attr(f"{path}/resource", self._resources(dev).encode())
            if dev.is_pcie:
                speeds = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}
                t.attr(f"{path}/max_link_speed", text(speeds[dev.link_cap.gen]))
                t.attr(f"{path}/max_link_width", text(dev.link_cap.width))
                t.attr(f"{path}/current_link_speed", text(speeds[dev.link_sta.gen]))
                t.attr(f"{path}/current_link_width", text(dev.link_sta.width))
            drv = self.driver_of(dev)
            if dev.type in ("root_port", "switch_down", "switch_up") and not drv:
                drv = "pcieport"
            if drv:
                drivers.add(drv)
                t.link(f"{path}/driver", "../" * path.count("/") + f"bus/pci/drivers/{drv}")
        for drv in drivers:
            t.mkdir(f"sys/bus/pci/drivers/{drv}")
            for dev in self.spec.pci:
                if self.driver_of(dev) == drv or (drv == "pcieport" and dev.is_bridge and not self.driver_of(dev)):
                    t.link(f"sys/bus/pci/drivers/{drv}/{dev.bdf}", "../../../../" + self.dev_path(dev.bdf).removeprefix("sys/"))

    def _gpu_spec(self, bdf: str):
        return next((g for g in (self.spec.nvidia.gpus if self.spec.nvidia else []) if g.bdf == bdf), None)

    def _gpu_bars(self, bdf: str) -> list[tuple[int, int, int, int]]:
        """An NVIDIA GPU's memory BARs, (index, start, size, resource flags), as lspci shows real
        ones (tests/real_data/SOURCES.md): an RTX A6000 16M 32-bit, the aperture at region 1,
        32M at 3; an RTX PRO 6000 Blackwell 64M, the aperture at 2, 32M at 4, all 64-bit
        prefetchable. Flags: IORESOURCE_MEM 0x200, _PREFETCH 0x2000, _MEM_64 0x100000
        (include/linux/ioport.h), and the BAR register's own low bits."""
        gpu = self._gpu_spec(bdf)
        if gpu is None:
            return []
        bus = int(bdf[5:7], 16)
        base = 0x100000000000 * (bus + 1)
        aperture = gpu.aperture_mib << 20
        first = ((0, base, 64 << 20, 0x14220C) if gpu.aperture_bar == 2
                 else (0, 0xE0000000 + (bus << 24), 16 << 20, 0x40200))
        return [first, (gpu.aperture_bar, base + aperture, aperture, 0x14220C),
                (gpu.aperture_bar + 2, base + 2 * aperture, 32 << 20, 0x14220C)]

    def _resources(self, dev) -> str:
        """sysfs `resource`: start, end and flags of each BAR, the ROM and the SR-IOV BARs
        (13 lines; drivers/pci/pci-sysfs.c resource_show)."""
        lines = [(0, 0, 0)] * 13
        for index, start, size, flags in self._gpu_bars(dev.bdf):
            lines[index] = (start, start + size - 1, flags)
        return "".join(f"0x{a:016x} 0x{b:016x} 0x{f:016x}\n" for a, b, f in lines)

    def _render_iommu(self, t: Tree) -> None:
        t.mkdir("sys/kernel/iommu_groups")
        t.mkdir("sys/class/iommu")
        mode = self.boot.iommu
        if mode == "off":
            return
        unit = "ivhd0" if self.spec.firmware.vendor_cpu == "AuthenticAMD" else "dmar0"
        t.attr(f"sys/devices/virtual/iommu/{unit}/uevent", b"")
        t.link(f"sys/class/iommu/{unit}", f"../../devices/virtual/iommu/{unit}")
        for n, dev in enumerate(self.spec.pci):
            g = f"sys/kernel/iommu_groups/{n}"
            # untrusted devices always get a DMA domain (drivers/iommu/iommu.c)
            t.attr(f"{g}/type", text("DMA" if dev.untrusted else ("identity" if mode == "pt" else "DMA-FQ")))
            t.attr(f"{g}/reserved_regions", b"0x00000000fee00000 0x00000000feefffff msi\n")
            t.link(f"{g}/devices/{dev.bdf}", "../../../../" + self.dev_path(dev.bdf).removeprefix("sys/"))
            path = self.dev_path(dev.bdf)
            t.link(f"{path}/iommu_group", "../" * path.count("/") + f"kernel/iommu_groups/{n}")

    def _render_zfs(self, t: Tree) -> None:
        """The zfs module's ARC limits (module/os/linux/zfs/arc_os.c, arc.c arc_tuning_update):
        zfs_arc_max 0 is the default, half of RAM up to 2.2 and max(5/8 of RAM, RAM - 1 GiB)
        from 2.3; the minimum defaults to max(32 MiB, RAM/32). A zfs_arc_max takes effect only
        from 64 MiB, below RAM and above the minimum (else it is kept and ignored: PVE's ZFS
        docs); a zfs_arc_min from 32 MiB up to the maximum. arcstats shows the limits in effect."""
        z = self.spec.zfs
        if z is None:
            return
        self.arc_ram = self.spec.memory_mib << 20
        new = tuple(int(x) for x in re.findall(r"\d+", z.version)[:2]) >= (2, 3)
        self.arc_default_max = max(self.arc_ram * 5 // 8, self.arc_ram - (1 << 30)) if new else self.arc_ram // 2
        self.arc_default_min = max(32 << 20, self.arc_ram // 32)
        self.arc_params = {"zfs_arc_max": self.boot.zfs.get("zfs_arc_max", 0),
                           "zfs_arc_min": self.boot.zfs.get("zfs_arc_min", 0)}
        self.arc_c = {"c_max": self.arc_default_max, "c_min": self.arc_default_min}
        self._arc_tune()
        t.attr("sys/module/zfs/version", text(z.version + "-1"))
        for name in self.arc_params:
            t.attr(f"sys/module/zfs/parameters/{name}", lambda name=name: text(self.arc_params[name]),
                   lambda v, name=name: self._write_arc(name, v))
        t.attr("proc/spl/kstat/zfs/arcstats", lambda: (
            "13 1 0x01 123 33456 1234567890 9876543210\nname                            type data\n"
            f"hits                            4    1000\nc                               4    {self.arc_c['c_max']}\n"
            f"c_min                           4    {self.arc_c['c_min']}\nc_max                           4    {self.arc_c['c_max']}\n"
            f"size                            4    {min(self.arc_c['c_max'], self.arc_ram // 4)}\n").encode())

    def _arc_tune(self) -> None:
        """arc_tuning_update: the minimum first (valid from 32 MiB up to the maximum in
        effect), then the maximum (from 64 MiB, below RAM, above the minimum in effect)."""
        lo, hi = self.arc_params["zfs_arc_min"], self.arc_params["zfs_arc_max"]
        if lo and 32 << 20 <= lo <= (hi or self.arc_c["c_max"]):
            self.arc_c["c_min"] = lo
        if hi and 64 << 20 <= hi < self.arc_ram and hi > self.arc_c["c_min"]:
            self.arc_c["c_max"] = hi

    def _write_arc(self, name: str, value: bytes) -> None:
        word = _word(value)
        if not word.isdigit():
            raise einval()
        self.arc_params[name] = int(word)
        self._arc_tune()

    def _render_misc(self, t: Tree) -> None:
        t.attr("sys/firmware/acpi/pm_profile", text(self.spec.firmware.acpi_pm_profile))
        # every level, the current one in brackets (security/lockdown/lockdown.c, lockdown_read)
        t.attr("sys/kernel/security/lockdown", text(_bracket(["none", "integrity", "confidentiality"],
                                                             self.spec.firmware.lockdown)))
        thp = "sys/kernel/mm/transparent_hugepage"
        t.attr(f"{thp}/enabled", lambda: text(_bracket(["always", "madvise", "never"], self.thp)),
               lambda v: self._write_choice(v, ["always", "madvise", "never"], "thp"))
        t.attr(f"{thp}/defrag", lambda: text(_bracket(["always", "defer", "defer+madvise", "madvise", "never"], self.thp_defrag)),
               lambda v: self._write_choice(v, ["always", "defer", "defer+madvise", "madvise", "never"], "thp_defrag"))
        t.attr("sys/kernel/mm/transparent_hugepage/hpage_pmd_size", text(2097152))
        if self.spec.firmware.virtualized:
            t.attr("sys/hypervisor/type", text("kvm"))

    def _render_block(self, t: Tree) -> None:
        t.mkdir("sys/block")
        t.mkdir("sys/class/block")
        for b in self.spec.block:
            dev = f"sys/devices/virtual/block/{b.name}"
            t.link(f"sys/block/{b.name}", f"../devices/virtual/block/{b.name}")
            t.link(f"sys/class/block/{b.name}", f"../../devices/virtual/block/{b.name}")
            t.attr(f"{dev}/size", text(3750748848))
            t.attr(f"{dev}/queue/rotational", text(int(b.rotational)))
            t.attr(f"{dev}/queue/scheduler", lambda b=b: text(_bracket(b.schedulers, self.sched[b.name])),
                   lambda v, b=b: self._write_sched(b.name, b.schedulers, v))
            t.attr(f"{dev}/queue/read_ahead_kb", lambda b=b: text(self.read_ahead[b.name]),
                   lambda v, b=b: self._write_read_ahead(b.name, v))
            t.attr(f"{dev}/queue/nr_requests", text(1023))

    def _render_proc(self, t: Tree) -> None:
        t.attr("proc/cmdline", text(self.boot.proc_cmdline))
        t.attr("proc/sys/kernel/osrelease", text(self.boot.release))
        t.attr("proc/sys/kernel/random/boot_id", text(self.boot.boot_id))
        t.attr("proc/cpuinfo", self._cpuinfo())
        t.attr("proc/devices", lambda: self._proc_devices())      # nvidia-uvm appears when it loads
        t.attr("proc/meminfo", self._meminfo())
        t.attr("proc/stat", self._proc_stat())
        for key in self.sysctl:
            t.attr("proc/sys/" + key.replace(".", "/"), lambda key=key: text(self.sysctl[key]),
                   lambda v, key=key: self._write_sysctl(key, v))
        if self.spec.nvidia and self.boot.nvidia_loaded:
            ver = self.spec.nvidia.kernel_module
            t.attr("proc/driver/nvidia/version", text(
                f"NVRM version: NVIDIA UNIX {'Open ' if self.spec.nvidia.flavor == 'open' else ''}Kernel Module for x86_64  {ver}  Release Build  "
                f"(dvs-builder@U22-I3-AE18-09-1)  Thu Mar 13 00:00:00 UTC 2025\n"
                f"GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) ").rstrip(b"\n") + b"\n")
            for i, gpu in enumerate(self.spec.nvidia.gpus):
                t.attr(f"proc/driver/nvidia/gpus/{gpu.bdf}/information", text(
                    f"Model: \t\t {gpu.name}\nIRQ:   \t\t {100 + i}\nGPU UUID: \t {gpu.uuid}\n"
                    f"Video BIOS: \t 98.02.2e.00.04\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
                    f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {gpu.bdf}\nDevice Minor: \t {i}\n"
                    f"GPU Firmware: \t {ver}\nGPU Excluded:\t No").rstrip(b"\n") + b"\n")

    def _render_ctl(self, t: Tree) -> None:
        t.attr("ctl/reboot", b"", self._write_reboot)
        t.attr("ctl/container-restart", b"", self._write_container_restart)
        t.attr("ctl/boot.json", lambda: (json.dumps({
            "release": self.boot.release, "boot_id": self.boot.boot_id,
            "units": self.boot.units, "sysctl": sorted(self.sysctl),
            # proxmox-boot-cleanup.service ran this boot (its condition, /etc/kernel/next-boot-pin, held)
            "cleanup": self.boot.consumed_next_boot_pin}) + "\n").encode())
        t.attr("ctl/nvidia.json", lambda: (json.dumps(self.nvidia_view(self.spec.nvidia.userspace if self.spec.nvidia else None)) + "\n").encode())
        # what the lab's libcuda.so.1 times each operation by, from the state at each read
        t.attr("ctl/cuda-model", lambda: cudamodel.model_text(self).encode())
        t.attr("ctl/nvidia-persistence", lambda: text(json.dumps(self.persistence)), self._write_persistence)
        t.attr("ctl/nvidia-uvm", lambda: text(self.uvm), self._write_uvm)
        t.attr("ctl/fabricmanager", lambda: text("running" if self.fabric_managed else "stopped"), self._write_fabricmanager)
        t.attr("ctl/nvidia-power-limit", lambda: text(json.dumps(self.power_limit)), self._write_power_limit)
        t.attr("ctl/nvidia-compute-mode", lambda: text(json.dumps(self.compute_mode)), self._write_compute_mode)
        t.attr("ctl/nvidia-pending-mode", lambda: text(json.dumps(self.modes)), self._write_pending_mode)
        t.attr("ctl/nvidia-mig-instances", lambda: text(json.dumps(self.mig_instances)), self._write_mig_instances)
        # this boot's kernel log, which the host's init binds at /dev/kmsg
        t.attr("ctl/kmsg", lambda: self.kmsg().encode())
        # the host's init makes these nodes in its /dev (a tmpfs of its own)
        t.attr("ctl/dev", lambda: "".join(f"{p} {ma} {mi}\n" for p, ma, mi in self.dev_nodes()).encode())

    def dev_nodes(self) -> list[tuple[str, int, int]]:
        """The NVIDIA device nodes this boot has, (path, major, minor), as the driver and
        nvidia-modprobe make them: /dev/nvidiaN (minor = the GPU's index among those the
        nvidia driver holds), nvidiactl 255 and nvidia-modeset 254 on major 195 while nvidia
        is loaded; nvidia-uvm 0 and nvidia-uvm-tools 1 on nvidia-uvm's major while it is
        loaded. nvidia-caps nodes exist only where MIG is used, which the lab does not model."""
        nv = self.spec.nvidia
        if not nv or not self.boot.nvidia_loaded:
            return []
        major = nv.char_majors.get("nvidia", 195)
        on_bus = {d.bdf: d for d in self.spec.pci}
        held = [g for g in nv.gpus if g.bdf not in on_bus or self.driver_of(on_bus[g.bdf]) == "nvidia"]
        out = [(f"dev/nvidia{i}", major, i) for i in range(len(held))]
        out += [("dev/nvidiactl", major, 255), ("dev/nvidia-modeset", major, 254)]
        uvm = nv.char_majors.get("nvidia-uvm")
        if uvm is not None and self.uvm == "nodes":
            out += [("dev/nvidia-uvm", uvm, 0), ("dev/nvidia-uvm-tools", uvm, 1)]
        return out

    # ---- what the nvidia-smi shim sees ---------------------------------------------------
    def nvidia_view(self, userspace: str | None) -> dict:
        nv = self.spec.nvidia
        gpus = []
        if nv:
            # the proprietary modules do not drive Grace Hopper or Blackwell (cc >= 10.0)
            # nor does any driver reach a GPU that fell off the bus
            driven = [g for g in nv.gpus if (nv.flavor == "open" or _cc(g.compute_cap) < (10, 0)) and not g.health.off_bus]
            for i, g in enumerate(driven):
                dev = self.spec.device(g.bdf)
                cfg = self.config[g.bdf][0]
                up = self.spec.device(dev.parent) if dev.parent else None
                gen_max = min(dev.link_cap.gen, up.link_cap.gen) if (dev.link_cap and up and up.link_cap) else (dev.link_cap.gen if dev.link_cap else 0)
                gpus.append({"index": i, "bdf": g.bdf, "name": g.name, "uuid": g.uuid, "compute_cap": g.compute_cap,
                             "memory_mib": g.memory_mib, "persistence": self.persistence[g.bdf],
                             "link_gen_max": gen_max, "link_gen_gpumax": dev.link_cap.gen if dev.link_cap else 0,
                             "link_gen_current": dev.link_sta.gen if dev.link_sta else 0,
                             "link_width_max": dev.link_cap.width if dev.link_cap else 0,
                             "link_width_current": dev.link_sta.width if dev.link_sta else 0,
                             "mrrs": configspace.mrrs(cfg) if dev.is_pcie else None,
                             "numa_node": dev.numa_node, "power": self._power_view(g),
                             "compute_mode": self.compute_mode[g.bdf],
                             "mig": self.modes[g.bdf]["mig"], "ecc": self.modes[g.bdf]["ecc"],
                             "mig_instances": self.mig_instances[g.bdf],
                             "processes": [p.model_dump() for p in g.processes], "utilization": g.utilization,
                             "fabric": self._fabric(g),
                             "health": g.health.model_dump()})
        return {"module": nv.kernel_module if (nv and self.boot.nvidia_loaded) else None,
                "userspace": userspace, "cuda_version": nv.cuda_version if nv else None,
                "gpus": gpus, "p2p": [p.model_dump() for p in nv.p2p] if nv else []}

    # ---- procfs text -------------------------------------------------------------------
    def _cpuinfo(self) -> bytes:
        fw = self.spec.firmware
        flags = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid pni pclmulqdq monitor ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm"
        if fw.vendor_cpu == "AuthenticAMD":
            flags += " cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch topoext perfctr_core"
            if fw.cppc and fw.cppc_interface == "msr":     # X86_FEATURE_CPPC: the MSR interface only
                flags += " cppc"
        else:
            flags += " vmx est tm2 pdcm dca"
            if fw.hwp:
                flags += " hwp hwp_notify hwp_act_window hwp_epp"
        if fw.virtualized:
            flags += " hypervisor"
        c = self.spec.cpu
        lines = []
        for topo in self.cpus:
            lines.append(
                f"processor\t: {topo.cpu}\nvendor_id\t: {fw.vendor_cpu}\ncpu family\t: {fw.cpu_family}\n"
                f"model\t\t: 2\nmodel name\t: {fw.model_name}\nstepping\t: 1\n"
                f"cpu MHz\t\t: {c.max_khz / 1000:.3f}\ncache size\t: 1024 KB\nphysical id\t: {topo.package}\n"
                f"siblings\t: {c.cores_per_socket * c.threads_per_core}\ncore id\t\t: {topo.core}\n"
                f"cpu cores\t: {c.cores_per_socket}\napicid\t\t: {topo.cpu}\nfpu\t\t: yes\n"
                f"flags\t\t: {flags}\nbogomips\t: 5990.00\n\n")
        return "".join(lines).encode()

    def _proc_devices(self) -> bytes:
        chars = {1: "mem", 4: "/dev/vc/0", 5: "/dev/tty", 10: "misc", 136: "pts", 180: "usb", 202: "cpu/msr", 203: "cpu/cpuid", 226: "drm", 259: "blkext"}
        if self.spec.nvidia and self.boot.nvidia_loaded:
            for name, major in self.spec.nvidia.char_majors.items():
                if name != "nvidia-uvm" or self.uvm != "absent":     # uvm.c registers it at module load
                    chars[major] = name
        out = "Character devices:\n" + "".join(f"{m:3d} {n}\n" for m, n in sorted(chars.items()))
        out += "\nBlock devices:\n  7 loop\n  8 sd\n 253 device-mapper\n 259 blkext\n"
        return out.encode()

    def _proc_stat(self) -> bytes:
        """/proc/stat (Documentation/filesystems/proc.rst): btime is this boot's start, later
        than every file the boot read, so "changed before this boot" can be told."""
        cpus = "".join(f"cpu{t.cpu} 0 0 0 0 0 0 0 0 0 0\n" for t in self.cpus)
        return (f"cpu  0 0 0 0 0 0 0 0 0 0\n{cpus}intr 0\nctxt 0\nbtime {self.btime}\nprocesses 1\n"
                "procs_running 1\nprocs_blocked 0\nsoftirq 0 0 0 0 0 0 0 0 0 0 0\n").encode()

    def _meminfo(self) -> bytes:
        kb = self.spec.memory_mib * 1024
        return (f"MemTotal:       {kb} kB\nMemFree:        {kb * 9 // 10} kB\nMemAvailable:   {kb * 9 // 10} kB\n"
                f"Buffers:               0 kB\nCached:                0 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n"
                f"HugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n").encode()

    # ---- writes, as the kernel takes them ------------------------------------------------
    def _write_config(self, cfg: bytearray, mask: bytearray, offset: int, data: bytes) -> int:
        """A config-space write from user space: refused under lockdown (drivers/pci/pci-sysfs.c,
        pci_write_config: security_locked_down(LOCKDOWN_PCI_ACCESS) from integrity on)."""
        if self.spec.firmware.lockdown != "none":
            raise OSError(errno.EPERM, "Operation not permitted")
        return configspace.masked_write(cfg, mask, offset, data)

    def _write_governor(self, cpu: int, value: bytes) -> None:
        gov = _word(value)
        if gov not in governors_for(self.driver):
            raise einval()
        self.governor[cpu] = gov
        if self.driver in ("amd-pstate-epp", "intel_pstate"):
            # the EPP drivers force EPP to performance under the performance policy
            self.epp[cpu] = "performance" if gov == "performance" else ("balance_performance" if self.epp[cpu] == "performance" else self.epp[cpu])

    def _boost_value(self, value: bytes) -> bool:
        word = _word(value)
        if word not in ("0", "1"):
            raise einval()
        if word == "1" and not self.spec.firmware.boost:
            # amd_pstate_set_boost without firmware CPB: "Boost mode is not supported by this
            # processor or SBIOS"
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return word == "1"

    def _write_boost(self, value: bytes) -> None:
        """cpufreq/boost sets every policy (cpufreq_boost_trigger_state)."""
        on = self._boost_value(value)
        self.boost_global = on
        self.boost = {cpu: on for cpu in self.boost}

    def _write_policy_boost(self, cpu: int, value: bytes) -> None:
        self.boost[cpu] = self._boost_value(value)

    def _write_no_turbo(self, value: bytes) -> None:
        word = _word(value)
        if word not in ("0", "1"):
            raise einval()
        if word == "0" and not self.spec.firmware.boost:
            # intel_pstate: "Turbo disabled by BIOS or unavailable on processor", -EPERM
            raise OSError(errno.EPERM, "Operation not permitted")
        self.boost_global = word == "0"
        self.boost = {cpu: self.boost_global for cpu in self.boost}

    def _write_max_freq(self, cpu: int, value: bytes) -> None:
        """A new frequency QoS request; the policy's max is clamped to the hardware's range
        (store_scaling_max_freq, cpufreq_set_policy)."""
        word = _word(value)
        if not word.isdigit():
            raise einval()
        c = self.spec.cpu
        self.max_freq[cpu] = max(c.min_khz, min(int(word), c.max_khz))

    def _write_epp(self, cpu: int, value: bytes) -> None:
        epp = _word(value)
        if epp not in EPP_CHOICES:
            raise einval()
        if self.governor[cpu] == "performance" and epp != "performance":
            raise OSError(errno.EBUSY, "Device or resource busy")
        self.epp[cpu] = "balance_performance" if epp == "default" else epp

    def _write_pstate_status(self, value: bytes) -> None:
        mode = _word(value)
        if mode not in ("active", "passive", "guided", "disable"):
            raise einval()
        if mode == (self.status or "disable"):
            return
        self.status = None if mode == "disable" else mode
        self.driver = {"active": "amd-pstate-epp", "passive": "amd-pstate", "guided": "amd-pstate", "disable": None}[mode]
        gov = default_governor(self.spec, self.driver, {})
        self.governor = {t.cpu: gov for t in self.cpus}
        self.epp = {t.cpu: self._epp_default(gov) for t in self.cpus}
        self._render_cpufreq(self.tree)

    def _write_idle_disable(self, key: tuple[int, int], value: bytes) -> None:
        word = _word(value)
        try:
            self.idle_disabled[key] = int(word) != 0
        except ValueError:
            raise einval() from None

    def _write_sysctl(self, key: str, value: bytes) -> None:
        word = _word(value)
        if key == "kernel.numa_balancing" and word not in ("0", "1", "2", "3"):
            raise einval()
        if isinstance(self.spec.sysctl_default.get(key), int):
            try:
                int(word)
            except ValueError:
                raise einval() from None
        self.sysctl[key] = word

    def _write_choice(self, value: bytes, choices: list[str], attr: str) -> None:
        word = _word(value)
        if word not in choices:
            raise einval()
        setattr(self, attr, word)

    def _write_sched(self, name: str, choices: list[str], value: bytes) -> None:
        word = _word(value)
        if word not in choices:
            raise einval()
        self.sched[name] = word

    def _write_read_ahead(self, name: str, value: bytes) -> None:
        try:
            self.read_ahead[name] = int(_word(value))
        except ValueError:
            raise einval() from None

    def _fabric(self, g) -> dict | None:
        """A GPU's fabric registration: the spec's state until Fabric Manager runs this boot,
        then Completed, Success (the guide: GPUs register with the fabric FM sets up)."""
        if g.fabric is None:
            return None
        if self.fabric_managed:
            return {"state": "Completed", "status": "Success"}
        return g.fabric.model_dump()

    def start_container(self, vmid: int, request: str) -> None:
        """A container's CPU set as it starts (pve-container LXC.pm update_lxc_config): a raw
        lxc.cgroup2.cpuset.cpus as written; for cores: N fewer than the host's CPUs, the online
        CPUs with random ones removed until N are left (a new draw at every start: the lab
        seeds it with the host, the container and how often it started, so runs repeat);
        else every online CPU."""
        online = [c.cpu for c in self.cpus if c.cpu not in set(self.boot.offline)]
        kind, _, arg = request.partition(" ")
        if kind == "cpuset":
            cpus = [c for c in shimlib.parse_cpulist(arg) if c in online]
        elif kind == "cores" and int(arg) < len(online):
            starts = self.nvram.setdefault("ct_starts", {})
            starts[vmid] = starts.get(vmid, 0) + 1
            rng = random.Random(f"{self.spec.hostname}/{vmid}/{starts[vmid]}")
            cpus = list(online)
            while len(cpus) > int(arg):
                cpus.pop(rng.randrange(len(cpus)))
        else:
            cpus = online
        self.ct_cpus[vmid] = sorted(cpus)
        if getattr(self, "tree", None) is not None:
            self._render_container(self.tree, vmid)

    def _render_container(self, t: Tree, vmid: int) -> None:
        """A running container's cgroup (pve-container: /sys/fs/cgroup/lxc/<vmid>), its CPU set."""
        for name in ("cpuset.cpus", "cpuset.cpus.effective"):
            t.attr(f"sys/fs/cgroup/lxc/{vmid}/{name}", lambda vmid=vmid: text(cpulist(self.ct_cpus[vmid])))

    def _write_uvm(self, value: bytes) -> None:
        """The lab's nvidia-modprobe tells the model it loaded nvidia-uvm ("loaded") and made
        its nodes ("nodes"); the module loads only with the nvidia driver under it."""
        word = _word(value)
        if word not in ("loaded", "nodes"):
            raise einval()
        if not self.boot.nvidia_loaded or not self.spec.nvidia or "nvidia-uvm" not in self.spec.nvidia.char_majors:
            raise OSError(errno.ENODEV, "No such device")
        if self.uvm != "nodes":
            self.uvm = word

    def _write_fabricmanager(self, value: bytes) -> None:
        """The lab's nv-fabricmanager tells the model it set the fabric up (or stopped)."""
        word = _word(value)
        if word not in ("running", "stopped"):
            raise einval()
        if word == "running" and not self.boot.nvidia_loaded:
            raise OSError(errno.ENODEV, "No such device")
        self.fabric_managed = word == "running"

    def _write_persistence(self, value: bytes) -> None:
        target, _, state = _word(value).partition(" ")
        if state not in ("0", "1"):
            raise einval()
        if not self.boot.nvidia_loaded:
            raise OSError(errno.ENODEV, "No such device")
        for bdf in self.persistence:
            if target in ("all", bdf):
                self.persistence[bdf] = state == "1"

    def kmsg(self) -> str:
        """This boot's kernel log as /dev/kmsg gives it ("level,seq,usec,flags;message",
        Documentation/ABI/testing/dev-kmsg): a first line, then each GPU's Xids as the NVIDIA
        driver words them (real logs: tests/real_data/SOURCES.md), each attach of the GPU's
        first Xid after its UUID line (kernel_rc.c _krcLogUuidOnce: once per attach, so again
        after a reset); a GPU that fell off the bus logs Xid 79 as it goes."""
        records = [(6, f"Linux version {self.boot.release} (gpuhost lab kernel model)")]
        for gpu in (self.spec.nvidia.gpus if self.spec.nvidia else []):
            xids = list(gpu.health.xids) + ([79] if gpu.health.off_bus and 79 not in gpu.health.xids else [])
            for attach in (gpu.health.xids_before_reset, xids):
                if attach:
                    records.append((4, f"NVRM: GPU at PCI:{gpu.bdf[:-2]}: {gpu.uuid}"))
                for xid in attach:
                    records.append((4, f"NVRM: Xid (PCI:{gpu.bdf[:-2]}): {xid}, pid='<unknown>', name=<unknown>, "
                                       + XID_WORDS.get(xid, "an error the lab does not word")))
        return "".join(f"{level},{seq},{seq * 1000},-;{msg}\n" for seq, (level, msg) in enumerate(records))

    def _power_view(self, gpu) -> dict | None:
        if gpu.power is None:
            return None
        limit = self.power_limit[gpu.bdf]
        # the enforced limit is the lowest of the one set and any external cap
        enforced = min(limit, gpu.power.enforced_w) if gpu.power.enforced_w is not None else limit
        return {"limit_w": limit, "enforced_w": enforced, "default_w": gpu.power.default_w,
                "min_w": gpu.power.min_w, "max_w": gpu.power.max_w}

    def _write_compute_mode(self, value: bytes) -> None:
        """"<bdf> <mode>" from nvidia-smi -c: effective at once, gone at the next boot."""
        target, _, mode = _word(value).partition(" ")
        if target not in self.compute_mode or mode not in ("Default", "Exclusive_Process", "Prohibited"):
            raise einval()
        if not self.boot.nvidia_loaded:
            raise OSError(errno.ENODEV, "No such device")
        self.compute_mode[target] = mode

    def _write_pending_mode(self, value: bytes) -> None:
        """"<bdf> mig|ecc Enabled|Disabled" from nvidia-smi -mig / -e: the pending value,
        which the next boot makes current (a GPU without the feature refuses)."""
        target, mode, state = (_word(value).split(" ") + ["", "", ""])[:3]
        if target not in self.modes or mode not in ("mig", "ecc") or state not in ("Enabled", "Disabled"):
            raise einval()
        if not self.boot.nvidia_loaded:
            raise OSError(errno.ENODEV, "No such device")
        pair = self.modes[target][mode]
        if pair is None:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        pair[1] = state
        self.nvram[target][mode] = state

    def _mig_on(self, bdf: str) -> bool:
        """The GPU's MIG mode is on now (current, not pending)."""
        return (self.modes[bdf]["mig"] or ["Disabled"])[0] == "Enabled"

    def _create_mig_instances(self, argv: list[str]) -> None:
        """What `nvidia-smi [-i ID] mig -cgi P1,P2,...` leaves: the lab's GPU holds that many
        GPU instances (up to seven), on each chosen GPU whose MIG mode is on."""
        request = shimlib.mig_create_request(argv)
        if request is None:
            return
        gpu, count = request
        for i, g in enumerate(self.spec.nvidia.gpus if self.spec.nvidia else []):
            if gpu is not None and gpu not in (str(i), g.uuid, "0000" + g.bdf.upper(), g.bdf):
                continue
            if self._mig_on(g.bdf):
                self.mig_instances[g.bdf] = min(shimlib.MIG_MAX_INSTANCES, count)

    def _write_mig_instances(self, value: bytes) -> None:
        """"<bdf> <count>" from nvidia-smi mig -cgi: the GPU's instances now (MIG on)."""
        target, _, count = _word(value).partition(" ")
        if target not in self.mig_instances or not count.isdigit():
            raise einval()
        if not self.boot.nvidia_loaded:
            raise OSError(errno.ENODEV, "No such device")
        if not self._mig_on(target):
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        self.mig_instances[target] = min(shimlib.MIG_MAX_INSTANCES, int(count))

    def _write_power_limit(self, value: bytes) -> None:
        """"<bdf> <watts>" from nvidia-smi -pl. Without persistence mode the driver tears the
        GPU's state down when its last client (nvidia-smi itself) exits, and the limit goes
        back to the default (nvidia-smi's own warning): the write is taken and lost."""
        target, _, watts = _word(value).partition(" ")
        if target not in self.power_limit or not watts.isdigit():
            raise einval()
        if not self.boot.nvidia_loaded:
            raise OSError(errno.ENODEV, "No such device")
        gpu = next(g for g in self.spec.nvidia.gpus if g.bdf == target)
        if not gpu.power.min_w <= int(watts) <= gpu.power.max_w:
            raise einval()
        if self.persistence.get(target):
            self.power_limit[target] = int(watts)

    def _write_reboot(self, value: bytes) -> None:
        action = _word(value)
        if action not in ("reboot", "poweroff", "halt"):
            raise einval()
        self.on_reboot(action)

    def _write_container_restart(self, value: bytes) -> None:
        """The lab's pct (re)starts a container: "<vmid> <what its config asks of the CPU set>"."""
        vmid, _, request = _word(value).partition(" ")
        if not vmid.isdigit() or not re.match(r"^(all|cores \d+|cpuset [0-9,\-]*)$", request or "all"):
            raise einval()
        self.start_container(int(vmid), request or "all")
        self.on_container_restart(int(vmid))


class GuestMachine:
    """A container: the parent's kernel, its own userspace. Its tree holds only ctl/."""

    def __init__(self, spec: GuestSpec, parent: Machine, on_reboot: Callable[[str], None]):
        self.spec = spec
        self.parent = parent
        self.on_reboot = on_reboot
        self.boot_id = BootState.__dataclass_fields__["boot_id"].default_factory()  # type: ignore[misc]
        self.tree = Tree()
        self.tree.attr("ctl/reboot", b"", self._write_reboot)
        self.tree.attr("ctl/boot.json", lambda: (json.dumps({"release": parent.boot.release, "boot_id": self.boot_id, "units": [], "sysctl": []}) + "\n").encode())
        self.tree.attr("ctl/nvidia.json", lambda: (json.dumps(parent.nvidia_view(spec.nvidia.userspace if spec.nvidia else None)) + "\n").encode())
        self.tree.attr("ctl/nvidia-persistence", lambda: text(json.dumps(parent.persistence)), self._read_only)
        self.tree.attr("ctl/nvidia-power-limit", lambda: text(json.dumps(parent.power_limit)), self._read_only)
        # what its threads may run on (a container's affinity is its cgroup's CPU set) and the
        # model its libcuda.so.1 times the parent's GPUs by
        self.tree.attr("ctl/cpuset", lambda: text(cpulist(parent.ct_cpus.get(spec.lxc_vmid) or [])))
        self.tree.attr("ctl/cuda-model", lambda: cudamodel.model_text(parent).encode())
        # the host's nodes, as a container that is given them all sees them
        self.tree.attr("ctl/dev", lambda: "".join(f"{p} {ma} {mi}\n" for p, ma, mi in parent.dev_nodes()).encode())
        self.tree.attr("proc/sys/kernel/random/boot_id", lambda: text(self.boot_id))

    def _read_only(self, value: bytes) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    def _write_reboot(self, value: bytes) -> None:
        if _word(value) not in ("reboot", "poweroff", "halt"):
            raise einval()
        self.on_reboot(_word(value))


def _cc(cap: str) -> tuple[int, ...]:
    return tuple(int(x) for x in cap.split("."))


def _named_by_acs_redir(pci_param: str, dev: PciDevice) -> bool:
    """Whether pci=...,disable_acs_redir=<dev>[;<dev>...] names this device."""
    for opt in pci_param.split(","):
        if not opt.startswith("disable_acs_redir="):
            continue
        for item in opt[len("disable_acs_redir="):].split(";"):
            item = item.strip().lower()
            if item.startswith("pci:"):
                parts = item[4:].split(":")
                try:
                    if int(parts[0], 16) == dev.vendor and int(parts[1], 16) == dev.device:
                        return True
                except (ValueError, IndexError):
                    continue
            elif item and (item == dev.bdf or "0000:" + item == dev.bdf):
                return True
    return False


def _word(value: bytes) -> str:
    return value.decode(errors="replace").strip()


def _bracket(choices: list[str], current: str) -> str:
    return " ".join(f"[{c}]" if c == current else c for c in choices)
