"""Every control's pass/fail scenarios at unit speed, the way ComplianceAsCode tests each
rule with *.pass/*.fail scenarios: a small spec overlay, laid out and booted by the lab's
own provisioning and kernel model into a directory, probed and judged in milliseconds.

BASE is a host on which every control passes; each case changes one thing (live wrong,
persisted wrong, both, conflicting sources, or a real-world variant) and states the
status the judgement must reach, and where it matters a word of its message or fix.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

import scenarios

UNIT = """[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvpd
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
"""
CT_MOUNTS = """arch: amd64
hostname: infer
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 508:* rwm
lxc.cgroup2.devices.allow: c 236:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir
"""
GPU = {"bdf": "0000:01:00.0", "type": "endpoint", "parent": "0000:00:01.1", "vendor": 0x10DE, "device": 0x2BB5,
       "class": 0x030200, "numa_node": 0, "mps_supported": 256, "mps": 256, "mrrs": 4096,
       "link_cap": {"gen": 5, "width": 16}}
BASE = {
    "spec": "gpuhost.hostspec/v1", "hostname": "scenario", "kind": "host",
    "os": {"id": "debian", "version_id": "12", "codename": "bookworm", "pretty_name": "Debian GNU/Linux 12 (bookworm)",
           "proxmox_ve": "8.3.2"},
    "firmware": {"vendor_cpu": "AuthenticAMD", "cpu_family": 26, "model_name": "AMD EPYC 9335 32-Core Processor",
                 "acpi_pm_profile": 4, "cppc": True, "hwp": False, "iommu": True, "smt": False, "virtualized": False},
    "cpu": {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "numa_nodes": 2, "min_khz": 1500000,
            "max_khz": 4400000, "governor_default": "performance", "cpuidle_driver": "acpi_idle",
            "cstates": [{"name": "POLL", "latency_us": 0}, {"name": "C1", "latency_us": 1}]},
    "memory_mib": 131072,
    "sysctl_default": {"kernel.numa_balancing": 0},
    "thp_default": "madvise",
    "boot": {"loader": "systemd-boot", "cmdline": "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active iommu=pt"},
    "kernel": {"installed": ["6.14.11-4-pve"]},
    "pci": [
        {"bdf": "0000:00:01.1", "type": "root_port", "vendor": 0x1022, "device": 0x14AB, "numa_node": 0,
         "link_cap": {"gen": 5, "width": 16}, "acs_ctrl": 0x001D},
        GPU,
        {"bdf": "0000:00:01.2", "type": "root_port", "vendor": 0x1022, "device": 0x14AB, "numa_node": 0,
         "link_cap": {"gen": 5, "width": 4}},
        {"bdf": "0000:02:00.0", "type": "endpoint", "parent": "0000:00:01.2", "vendor": 0x144D, "device": 0xA80C,
         "class": 0x010802, "numa_node": 0, "link_cap": {"gen": 5, "width": 4}, "driver": "nvme"},
    ],
    "nvidia": {"kernel_module": "575.57.08", "userspace": "575.57.08", "cuda_version": "12.9", "persistence_default": True,
               "gpus": [{"bdf": "0000:01:00.0", "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                         "compute_cap": "12.0", "memory_mib": 97887, "uuid": "GPU-00000000-0000-4000-8000-000000000001"}]},
    "block": [{"name": "nvme0n1", "rotational": False, "scheduler": "none", "schedulers": ["none", "mq-deadline"]}],
    "lxc": [{"vmid": 129, "config": CT_MOUNTS}],
    "files": {"/lib/systemd/system/nvidia-persistenced.service": UNIT,
              "/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service": UNIT},
}
SWITCH = [
    {"bdf": "0000:00:01.1", "type": "root_port", "vendor": 0x1022, "device": 0x14AB, "numa_node": 0,
     "link_cap": {"gen": 5, "width": 16}},
    {"bdf": "0000:01:00.0", "type": "switch_up", "parent": "0000:00:01.1", "vendor": 0x1000, "device": 0xC030,
     "link_cap": {"gen": 5, "width": 16}},
    {"bdf": "0000:02:00.0", "type": "switch_down", "parent": "0000:01:00.0", "vendor": 0x1000, "device": 0xC030,
     "link_cap": {"gen": 5, "width": 16}, "acs_ctrl": 0},
    {"bdf": "0000:02:01.0", "type": "switch_down", "parent": "0000:01:00.0", "vendor": 0x1000, "device": 0xC030,
     "link_cap": {"gen": 5, "width": 16}, "acs_ctrl": 0},
    {**GPU, "bdf": "0000:03:00.0", "parent": "0000:02:00.0"},
    {"bdf": "0000:04:00.0", "type": "endpoint", "parent": "0000:02:01.0", "vendor": 0x15B3, "device": 0x1021,
     "class": 0x020000, "link_cap": {"gen": 5, "width": 16}, "driver": "mlx5_core"},
]
SWITCH_NV = {"gpus": [{**BASE["nvidia"]["gpus"][0], "bdf": "0000:03:00.0"}]}


def ct(config: str) -> dict:
    return {"lxc": [{"vmid": 129, "config": config}]}


def cmdline(line: str) -> dict:
    return {"boot": {"cmdline": line}}


def write(path: str, text: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return apply


def mask(unit: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        target = root / "etc/systemd/system" / unit
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            target.unlink()
        target.symlink_to("/dev/null")
    return apply


def remove(path: str) -> Callable[[Path], None]:
    return lambda root: (root / path.lstrip("/")).unlink()


ROOT_ARGS = "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet"
INTEL = {"firmware": {"vendor_cpu": "GenuineIntel", "cpu_family": 6, "model_name": "Intel(R) Xeon(R) Gold 6430",
                      "cppc": False, "hwp": True},
         "boot": {"cmdline": ROOT_ARGS + " iommu=pt"}}
INTEL_IDLE = {"cpu": {"cpuidle_driver": "intel_idle", "cstates": [
    {"name": "POLL", "latency_us": 0}, {"name": "C1", "latency_us": 1}, {"name": "C1E", "latency_us": 2},
    {"name": "C6", "latency_us": 170}]}}

# (case, overlay, before_boot, control, settings, status, a word the message or fix must have)
CASES = [
    # cpu.driver
    ("cpu.driver/active", {}, None, "cpu.driver", {}, "pass", "active"),
    ("cpu.driver/zen5-6.14-default", cmdline(ROOT_ARGS + " iommu=pt"), None, "cpu.driver", {}, "pass", ""),
    ("cpu.driver/zen4-server-no-param", {"firmware": {"cpu_family": 25}, **cmdline(ROOT_ARGS + " iommu=pt")}, None,
     "cpu.driver", {}, "drift", "amd_pstate=active"),
    ("cpu.driver/undefined-profile", {"firmware": {"acpi_pm_profile": 0}, **cmdline(ROOT_ARGS + " iommu=pt")}, None,
     "cpu.driver", {}, "drift", "amd_pstate=active"),
    ("cpu.driver/passive-live", cmdline(ROOT_ARGS + " iommu=pt amd_pstate=passive"), None, "cpu.driver", {}, "drift",
     "passive"),
    ("cpu.driver/epyc7003-shared-memory-cppc", {"firmware": {"cpu_family": 25, "cppc_interface": "shared_memory"}}, None,
     "cpu.driver", {}, "pass", ""),
    ("cpu.driver/no-cppc", {"firmware": {"cppc": False}}, None, "cpu.driver", {}, "manual", "_CPC"),
    ("cpu.driver/kernel-6.1", {"kernel": {"installed": ["6.1.0-26-amd64"]}, "os": {"proxmox_ve": None}}, None,
     "cpu.driver", {}, "manual", "older than 6.3"),
    ("cpu.driver/kernel-6.1-upgrade-planned", {"kernel": {"installed": ["6.1.0-26-amd64"]}, "os": {"proxmox_ve": None},
                                               **cmdline(ROOT_ARGS + " iommu=pt")}, None,
     "cpu.driver", {"kernel_min_version": "6.12"}, "drift", "amd_pstate=active"),
    ("cpu.driver/param-live-driver-absent", {"firmware": {"cppc": False}}, None, "cpu.driver", {}, "manual", ""),
    ("cpu.driver/config-default-passive", {**cmdline(ROOT_ARGS + " iommu=pt"), "firmware": {"acpi_pm_profile": 1}},
     write("/boot/config-6.14.11-4-pve", "CONFIG_X86_AMD_PSTATE=y\nCONFIG_X86_AMD_PSTATE_DEFAULT_MODE=2\n"),
     "cpu.driver", {}, "drift", ""),
    ("cpu.driver/vm", {"firmware": {"virtualized": True}, "cpu": {"min_khz": 0, "max_khz": 0}}, None, "cpu.driver", {},
     "na", ""),
    ("cpu.driver/intel-hwp", INTEL, None, "cpu.driver", {}, "pass", ""),
    ("cpu.driver/intel-no-hwp", {**INTEL, "firmware": {**INTEL["firmware"], "hwp": False}}, None, "cpu.driver", {},
     "manual", "HWP"),
    ("cpu.driver/intel-disabled", {**INTEL, **cmdline(ROOT_ARGS + " iommu=pt intel_pstate=disable")}, None,
     "cpu.driver", {}, "drift", "intel_pstate"),
    # cpu.governor
    ("cpu.governor/performance", {}, None, "cpu.governor", {}, "pass", ""),
    ("cpu.governor/setpolicy-fallback-server", {"cpu": {"governor_default": "schedutil"}}, None, "cpu.governor", {},
     "pass", ""),
    ("cpu.governor/setpolicy-desktop-profile", {"cpu": {"governor_default": "schedutil"}, "firmware": {"acpi_pm_profile": 1}},
     None, "cpu.governor", {}, "drift", "powersave"),
    ("cpu.governor/acpi-cpufreq-schedutil", {"cpu": {"governor_default": "schedutil"},
                                             **cmdline(ROOT_ARGS + " iommu=pt amd_pstate=disable")}, None,
     "cpu.governor", {}, "drift", ""),
    ("cpu.governor/cmdline-default", {"cpu": {"governor_default": "schedutil"},
                                      **cmdline(ROOT_ARGS + " iommu=pt amd_pstate=disable cpufreq.default_governor=performance")},
     None, "cpu.governor", {}, "pass", ""),
    # cpu.cstates
    ("cpu.cstates/shallow", {}, None, "cpu.cstates", {}, "pass", ""),
    ("cpu.cstates/acpi-deep", {"cpu": {"cstates": [{"name": "POLL", "latency_us": 0}, {"name": "C1", "latency_us": 1},
                                                   {"name": "C2", "latency_us": 800}]}}, None, "cpu.cstates", {},
     "drift", "C2"),
    ("cpu.cstates/acpi-capped", {"cpu": {"cstates": [{"name": "POLL", "latency_us": 0}, {"name": "C1", "latency_us": 1},
                                                     {"name": "C2", "latency_us": 800}]},
                                 **cmdline(ROOT_ARGS + " iommu=pt amd_pstate=active processor.max_cstate=1")}, None,
     "cpu.cstates", {}, "pass", ""),
    ("cpu.cstates/limit-setting", {"cpu": {"cstates": [{"name": "POLL", "latency_us": 0}, {"name": "C1", "latency_us": 1},
                                                       {"name": "C2", "latency_us": 800}]}}, None, "cpu.cstates",
     {"cstate_max_latency_us": 1000}, "pass", ""),
    ("cpu.cstates/intel-deep", {**INTEL, **INTEL_IDLE}, None, "cpu.cstates", {}, "drift", "C6"),
    # issue 19: the administrator masked gpuhost's unit (systemctl mask): manual, never unmasked
    ("cpu.cstates/unit-masked", {**INTEL, **INTEL_IDLE}, mask("gpuhost-cpu-cstates.service"), "cpu.cstates", {},
     "manual", "systemctl unmask gpuhost-cpu-cstates.service"),
    ("cpu.cstates/intel-max-cstate-2-counts-entries", {**INTEL, **INTEL_IDLE,
                                                       **cmdline(ROOT_ARGS + " iommu=pt intel_idle.max_cstate=2")},
     None, "cpu.cstates", {}, "pass", ""),
    ("cpu.cstates/intel-max-cstate-3-keeps-c6", {**INTEL, **INTEL_IDLE,
                                                 **cmdline(ROOT_ARGS + " iommu=pt intel_idle.max_cstate=3")},
     None, "cpu.cstates", {}, "drift", "C6"),
    ("cpu.cstates/no-idle-driver", {"cpu": {"cpuidle_driver": "none", "cstates": []}}, None, "cpu.cstates", {}, "na", ""),
    # numa.balancing
    ("numa.balancing/off", {}, None, "numa.balancing", {}, "drift", "kernel default"),
    ("numa.balancing/cmdline", cmdline(ROOT_ARGS + " iommu=pt amd_pstate=active numa_balancing=disable"), None,
     "numa.balancing", {}, "pass", ""),
    ("numa.balancing/on-live", {"sysctl_default": {"kernel.numa_balancing": 1}}, None, "numa.balancing", {}, "drift", "is 1"),
    ("numa.balancing/dropin", {"sysctl_default": {"kernel.numa_balancing": 1}},
     write("/etc/sysctl.d/90-numa.conf", "kernel.numa_balancing = 0\n"), "numa.balancing", {}, "pass", ""),
    ("numa.balancing/cmdline-then-sysctl-turns-it-on", cmdline(ROOT_ARGS + " iommu=pt amd_pstate=active numa_balancing=disable"),
     write("/etc/sysctl.d/99-tuning.conf", "kernel.numa_balancing=1\n"), "numa.balancing", {}, "drift",
     "over numa_balancing=disable"),
    ("numa.balancing/etc-sysctl-conf-sorts-last", {},
     lambda root: (write("/etc/sysctl.d/90-numa.conf", "kernel.numa_balancing = 0\n")(root),
                   write("/etc/sysctl.conf", "# local\nkernel.numa_balancing = 1\n")(root)),
     "numa.balancing", {}, "drift", "/etc/sysctl.conf"),
    ("numa.balancing/vendor-file-shadowed-by-etc", {},
     lambda root: (write("/usr/lib/sysctl.d/50-numa.conf", "kernel.numa_balancing = 1\n")(root),
                   write("/etc/sysctl.d/50-numa.conf", "kernel.numa_balancing = 0\n")(root)),
     "numa.balancing", {}, "pass", ""),
    ("numa.balancing/one-node", {"cpu": {"numa_nodes": 1}}, None, "numa.balancing", {}, "na", ""),
    # pcie.mrrs
    ("pcie.mrrs/4096", {}, None, "pcie.mrrs", {}, "pass", ""),
    ("pcie.mrrs/512", {"pci": [BASE["pci"][0], {**GPU, "mrrs": 512}] + BASE["pci"][2:]}, None, "pcie.mrrs", {}, "drift",
     "-d 10de:2bb5"),
    ("pcie.mrrs/vfio-gpu", {"pci": [BASE["pci"][0], {**GPU, "mrrs": 512, "driver": "vfio-pci"}] + BASE["pci"][2:]}, None,
     "pcie.mrrs", {}, "na", ""),
    # pcie.link
    ("pcie.link/full", {}, None, "pcie.link", {}, "pass", ""),
    ("pcie.link/idle-downshift", {"pci": [BASE["pci"][0], {**GPU, "link_sta": {"gen": 1, "width": 16}}] + BASE["pci"][2:]},
     None, "pcie.link", {}, "pass", ""),
    ("pcie.link/x8", {"pci": [BASE["pci"][0], {**GPU, "link_sta": {"gen": 5, "width": 8}}] + BASE["pci"][2:]}, None,
     "pcie.link", {}, "manual", "x8"),
    ("pcie.link/slow-port", {"pci": [{**BASE["pci"][0], "link_cap": {"gen": 4, "width": 16}}] + BASE["pci"][1:]}, None,
     "pcie.link", {}, "manual", "16GT/s"),
    # pcie.acs
    ("pcie.acs/root-ports-only", {}, None, "pcie.acs", {}, "pass", "root ports"),
    ("pcie.acs/switch-iommu-sets-redirect", {"pci": SWITCH, "nvidia": SWITCH_NV}, None, "pcie.acs", {}, "drift",
     "pci:1000:c030"),
    ("pcie.acs/switch-nic-port-judged", {"pci": SWITCH, "nvidia": SWITCH_NV}, None, "pcie.acs", {}, "drift", "02:01.0"),
    ("pcie.acs/switch-disable-acs-redir", {"pci": SWITCH, "nvidia": SWITCH_NV,
                                           **cmdline(ROOT_ARGS + " iommu=pt amd_pstate=active pci=disable_acs_redir=pci:1000:c030")},
     None, "pcie.acs", {}, "pass", ""),
    ("pcie.acs/switch-disable-acs-redir-by-bdf", {"pci": SWITCH, "nvidia": SWITCH_NV, **cmdline(
        ROOT_ARGS + " iommu=pt amd_pstate=active pci=noaer,disable_acs_redir=0000:02:00.0;0000:02:01.0")},
     None, "pcie.acs", {}, "drift", "noaer"),
    ("pcie.acs/switch-iommu-off-clean", {"pci": SWITCH, "nvidia": SWITCH_NV, "firmware": {"iommu": False}}, None,
     "pcie.acs", {}, "pass", ""),
    ("pcie.acs/vm-host-hostpci", {"pci": SWITCH, "nvidia": SWITCH_NV},
     write("/etc/pve/nodes/scenario/qemu-server/100.conf", "cores: 8\nhostpci0: 0000:03:00.0,pcie=1\n"),
     "pcie.acs", {}, "na", "hostpci"),
    ("pcie.acs/vm-host-vfio-ids", {"pci": SWITCH, "nvidia": SWITCH_NV,
                                   **cmdline(ROOT_ARGS + " iommu=pt amd_pstate=active vfio-pci.ids=10de:2bb5")}, None,
     "pcie.acs", {}, "na", "vfio-pci.ids"),
    ("pcie.acs/vm-host-keeps-nothing-of-gpuhost", {"pci": SWITCH, "nvidia": SWITCH_NV, **cmdline(
        ROOT_ARGS + " iommu=pt amd_pstate=active vfio-pci.ids=10de:2bb5 pci=disable_acs_redir=pci:1000:c030")}, None,
     "pcie.acs", {}, "drift", "take out"),
    # iommu.mode
    ("iommu.mode/pt", {}, None, "iommu.mode", {}, "pass", ""),
    ("iommu.mode/passthrough-1", cmdline(ROOT_ARGS + " amd_pstate=active iommu.passthrough=1"), None, "iommu.mode", {},
     "pass", ""),
    ("iommu.mode/translated", cmdline(ROOT_ARGS + " amd_pstate=active"), None, "iommu.mode", {}, "drift", "iommu=pt"),
    ("iommu.mode/off", {"firmware": {"iommu": False}, **cmdline(ROOT_ARGS + " amd_pstate=active")}, None, "iommu.mode",
     {}, "pass", "off"),
    ("iommu.mode/untrusted-dma-not-judged", {"pci": BASE["pci"] + [
        {"bdf": "0000:00:01.3", "type": "root_port", "vendor": 0x1022, "device": 0x14AB, "link_cap": {"gen": 4, "width": 4}},
        {"bdf": "0000:05:00.0", "type": "endpoint", "parent": "0000:00:01.3", "vendor": 0x8086, "device": 0x15F3,
         "class": 0x020000, "link_cap": {"gen": 4, "width": 4}, "untrusted": True}]}, None, "iommu.mode", {}, "pass", ""),
    # kernel.version
    ("kernel.version/pve8-6.14", {}, None, "kernel.version", {}, "pass", ""),
    ("kernel.version/pve8-6.8", {"kernel": {"installed": ["6.8.12-4-pve"]}}, None, "kernel.version", {}, "drift",
     "proxmox-headers"),
    ("kernel.version/debian-no-minimum", {"kernel": {"installed": ["6.1.0-26-amd64"]}, "os": {"proxmox_ve": None}}, None,
     "kernel.version", {}, "na", ""),
    ("kernel.version/debian-flavour", {"kernel": {"installed": ["6.1.0-26-cloud-amd64"]}, "os": {"proxmox_ve": None}},
     None, "kernel.version", {"kernel_min_version": "6.12"}, "drift", "cloud-amd64"),
    ("kernel.version/installed-without-nvidia-module", {"kernel": {"installed": ["6.8.12-4-pve", "6.14.11-4-pve"],
                                                                   "pinned": "6.8.12-4-pve"}},
     remove("/lib/modules/6.14.11-4-pve/updates/dkms/nvidia.ko"), "kernel.version", {}, "manual", "did not build"),
    ("kernel.version/installed-boots-next", {"kernel": {"installed": ["6.8.12-4-pve", "6.14.11-4-pve"],
                                                        "pinned": "6.8.12-4-pve"}},
     remove("/etc/kernel/proxmox-boot-pin"), "kernel.version", {}, "pending_reboot", ""),
    # kernel.reboot_pending
    ("kernel.reboot_pending/clean", {}, None, "kernel.reboot_pending", {}, "pass", ""),
    ("kernel.reboot_pending/cmdline-edited", {}, write("/etc/kernel/cmdline", ROOT_ARGS + " iommu=pt amd_pstate=active mitigations=off\n"),
     "kernel.reboot_pending", {}, "pending_reboot", "mitigations=off"),
    ("kernel.reboot_pending/cmdline-changed-before-this-boot-is-no-loop", {},
     lambda root: (write("/etc/kernel/cmdline", ROOT_ARGS + " iommu=pt amd_pstate=active mitigations=off\n")(root),
                   write("/proc/stat", f"cpu  1 2 3 4\nbtime {int(__import__('time').time()) + 3600}\n")(root)),
     "kernel.reboot_pending", {}, "manual", "a reboot will not help"),
    ("kernel.reboot_pending/kernel-installed-before-this-boot", {"kernel": {"installed": ["6.8.12-4-pve", "6.14.11-4-pve"],
                                                                            "pinned": "6.8.12-4-pve"}},
     lambda root: (remove("/etc/kernel/proxmox-boot-pin")(root),
                   write("/proc/stat", f"btime {int(__import__('time').time()) + 3600}\n")(root)),
     "kernel.reboot_pending", {}, "manual", "/boot/vmlinuz-6.14.11-4-pve"),
    ("kernel.reboot_pending/grub-esp-reads-grub", {"boot": {"loader": "grub-esp"}},
     write("/etc/kernel/cmdline", ROOT_ARGS + " nothing-reads-this\n"), "kernel.reboot_pending", {}, "pass", ""),
    ("kernel.reboot_pending/grub-esp-grub-edited", {"boot": {"loader": "grub-esp"}},
     write("/etc/default/grub.d/90-local.cfg", 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX mitigations=off"\n'),
     "kernel.reboot_pending", {}, "pending_reboot", "mitigations=off"),
    ("kernel.reboot_pending/ubuntu-vt-handoff", {"os": {"id": "ubuntu", "version_id": "24.04", "codename": "noble",
                                                        "pretty_name": "Ubuntu 24.04.1 LTS", "proxmox_ve": None},
                                                 "boot": {"loader": "grub", "cmdline": "quiet splash iommu=pt amd_pstate=active"}},
     None, "kernel.reboot_pending", {}, "pass", ""),
    ("kernel.reboot_pending/new-kernel-without-module", {"kernel": {"installed": ["6.8.12-4-pve", "6.14.11-4-pve"],
                                                                    "pinned": "6.8.12-4-pve"}},
     lambda root: (remove("/lib/modules/6.14.11-4-pve/updates/dkms/nvidia.ko")(root),
                   remove("/etc/kernel/proxmox-boot-pin")(root)), "kernel.reboot_pending", {}, "manual", "pin"),
    # issue 19: the reason, not just "cannot tell", when a GRUB value cannot be read safely
    ("kernel.reboot_pending/grub-value-over-two-lines", {"os": {"proxmox_ve": None}, "boot": {"loader": "grub"}},
     write("/etc/default/grub.d/90-local.cfg", 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX\n  mitigations=$(cat /x)"\n'),
     "kernel.reboot_pending", {}, "error", "/etc/default/grub.d/90-local.cfg line 1"),
    ("iommu.mode/grub-value-over-two-lines", {"os": {"proxmox_ve": None}, "boot": {"loader": "grub"}},
     write("/etc/default/grub.d/90-local.cfg", 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX\n  mitigations=$(cat /x)"\n'),
     "iommu.mode", {}, "error", "/etc/default/grub.d/90-local.cfg line 1"),
    ("kernel.reboot_pending/grub-default-saved", {"os": {"proxmox_ve": None}, "boot": {"loader": "grub"},
                                                  "kernel": {"installed": ["6.12.9-amd64", "6.14.3-amd64"]}},
     lambda root: write("/boot/grub/grub.cfg", (root / "boot/grub/grub.cfg").read_text().replace(
         'set default="0"', 'set default="${saved_entry}"'))(root), "kernel.reboot_pending", {}, "pass", ""),
    # nvidia.driver
    ("nvidia.driver/ok", {}, None, "nvidia.driver", {}, "pass", ""),
    ("nvidia.driver/too-old-for-blackwell", {"nvidia": {"kernel_module": "570.86.15", "userspace": "570.86.15"}}, None,
     "nvidia.driver", {}, "manual", "570.124.06"),
    ("nvidia.driver/mismatch", {"nvidia": {"userspace": "575.51.02"}}, None, "nvidia.driver", {}, "manual", "mismatch"),
    ("nvidia.driver/proprietary-blackwell", {"nvidia": {"flavor": "proprietary"}}, None, "nvidia.driver", {}, "manual",
     "open kernel modules"),
    ("nvidia.driver/proprietary-hopper", {"nvidia": {"flavor": "proprietary", "gpus": [
        {**BASE["nvidia"]["gpus"][0], "compute_cap": "9.0", "name": "NVIDIA H100 80GB HBM3"}]}}, None, "nvidia.driver",
     {}, "pass", ""),
    ("nvidia.driver/all-vfio", {"pci": [BASE["pci"][0], {**GPU, "driver": "vfio-pci"}] + BASE["pci"][2:],
                                "nvidia": None, "lxc": []}, None, "nvidia.driver", {}, "na", "vfio-pci"),
    # nvidia.persistence
    ("nvidia.persistence/vendor-unit-enabled", {}, None, "nvidia.persistence", {}, "pass", "vendor unit"),
    ("nvidia.persistence/vendor-unit-not-enabled", {"files": {"/lib/systemd/system/nvidia-persistenced.service": UNIT,
                                                              "/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service": None}},
     None, "nvidia.persistence", {},
     "drift", "not started at boot"),
    ("nvidia.persistence/dropin-no-persistence-mode", {"nvidia": {"persistence_default": False}},
     write("/etc/systemd/system/nvidia-persistenced.service.d/override.conf",
           "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced --user nvpd --no-persistence-mode\n"),
     "nvidia.persistence", {}, "drift", "--no-persistence-mode"),
    ("nvidia.persistence/udev-started", {},
     lambda root: (remove("/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service")(root),
                   write("/lib/udev/rules.d/71-nvidia.rules",
                         'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", TAG+="systemd", '
                         'ENV{SYSTEMD_WANTS}="nvidia-persistenced.service"\n')(root)),
     "nvidia.persistence", {}, "pass", ""),
    ("nvidia.persistence/no-unit-off", {"files": {}, "nvidia": {"persistence_default": False}}, None,
     "nvidia.persistence", {}, "drift", "no unit"),
    # lxc.gpu_passthrough
    ("lxc/complete", {}, None, "lxc.gpu_passthrough", {}, "pass", ""),
    ("lxc/stale-uvm", ct(CT_MOUNTS.replace("c 508:", "c 509:")), None, "lxc.gpu_passthrough", {}, "drift", "stale"),
    ("lxc/devn-both-forms", ct("arch: amd64\ndev0: /dev/nvidia0,gid=44\ndev1: path=/dev/nvidiactl\ndev2: /dev/nvidia-uvm\n"
                               "dev3: /dev/nvidia-uvm-tools\ndev4: /dev/nvidia-caps/nvidia-cap1\n"
                               "dev5: /dev/nvidia-caps/nvidia-cap2\n"), None, "lxc.gpu_passthrough", {}, "pass", ""),
    ("lxc/devn-missing-uvm-tools", ct("arch: amd64\ndev0: /dev/nvidia0\ndev1: /dev/nvidiactl\ndev2: /dev/nvidia-uvm\n"
                                      "dev3: /dev/nvidia-caps/nvidia-cap1\ndev4: /dev/nvidia-caps/nvidia-cap2\n"), None,
     "lxc.gpu_passthrough", {}, "drift", "dev5: /dev/nvidia-uvm-tools"),
    ("lxc/cgroup-v1-only", ct(CT_MOUNTS.replace("lxc.cgroup2.", "lxc.cgroup.")), None, "lxc.gpu_passthrough", {}, "drift",
     "lxc.cgroup2.devices.allow: c 195"),
    ("lxc/allow-a", ct("\n".join(line for line in CT_MOUNTS.splitlines() if "allow" not in line)
                       + "\nlxc.cgroup2.devices.allow: a\n"), None, "lxc.gpu_passthrough", {}, "pass", ""),
    ("lxc/mount-known-by-target", ct(CT_MOUNTS.replace("/dev/nvidia-uvm-tools dev/", "/dev/nvidia-uvm-tools /dev/")),
     None, "lxc.gpu_passthrough", {}, "pass", ""),
    ("lxc/per-node-caps", ct(CT_MOUNTS.replace(
        "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir",
        "lxc.mount.entry: /dev/nvidia-caps/nvidia-cap1 dev/nvidia-caps/nvidia-cap1 none bind,optional,create=file")),
     None, "lxc.gpu_passthrough", {}, "pass", ""),
    ("lxc/live-imex-major-kept", {**ct(CT_MOUNTS + "lxc.cgroup2.devices.allow: c 234:* rwm\n"),
                                  "nvidia": {"char_majors": {"nvidia": 195, "nvidia-uvm": 508, "nvidia-caps": 236,
                                                             "nvidia-caps-imex-channels": 234}}}, None,
     "lxc.gpu_passthrough", {}, "pass", ""),
    ("lxc/allow-195-no-gpu-node", ct("arch: amd64\nlxc.cgroup2.devices.allow: c 195:* rwm\n"), None,
     "lxc.gpu_passthrough", {}, "manual", "given no /dev/nvidiaN"),
    ("lxc/no-gpus", ct("arch: amd64\nhostname: db\n"), None, "lxc.gpu_passthrough", {}, "na", ""),
    ("lxc/not-proxmox", {"os": {"proxmox_ve": None}, "lxc": []}, None, "lxc.gpu_passthrough", {}, "na", ""),
    # storage.scheduler
    ("storage.scheduler/none", {}, None, "storage.scheduler", {}, "pass", ""),
    ("storage.scheduler/mq-deadline", {"block": [{"name": "nvme0n1", "rotational": False, "scheduler": "mq-deadline",
                                                  "schedulers": ["none", "mq-deadline"]}]}, None, "storage.scheduler",
     {}, "drift", "mq-deadline"),
    ("storage.scheduler/rotational-left-alone", {"block": [{"name": "sda", "rotational": True, "scheduler": "mq-deadline",
                                                           "schedulers": ["none", "mq-deadline"]}]}, None,
     "storage.scheduler", {}, "na", ""),
]


def _files_overlay(overlay: dict) -> dict:
    """Spec files set to None in an overlay are left out."""
    if "files" in overlay and isinstance(overlay["files"], dict):
        overlay = {**overlay, "files": {k: v for k, v in overlay["files"].items() if v is not None}}
    return overlay


def _render(tmp_path: Path, overlay: dict, before_boot) -> scenarios.Rendered:
    data = scenarios.merge(BASE, _files_overlay(overlay))
    if "files" in overlay:
        data["files"] = _files_overlay(overlay)["files"]
    if overlay.get("nvidia", {}) is None:
        data.pop("nvidia")
    return scenarios.render(data, tmp_path, before_boot=before_boot)


def test_the_base_host_passes_every_control(tmp_path):
    host = _render(tmp_path, {}, None)
    statuses = {cid: f["status"] for cid, f in host.judge().items()}
    assert {s for cid, s in statuses.items() if cid != "numa.balancing"} == {"pass"}, statuses
    # with two NUMA nodes and nothing on the disk that turns balancing off, the next boot has the kernel default
    assert statuses["numa.balancing"] == "drift"


@pytest.mark.parametrize("case, overlay, before_boot, control, settings, status, word",
                         CASES, ids=[c[0] for c in CASES])
def test_scenario(tmp_path, case, overlay, before_boot, control, settings, status, word):
    host = _render(tmp_path, overlay, before_boot)
    f = host.finding(control, **settings)
    assert f["status"] == status, f
    if word:
        assert word in f["message"] + str(f["observed"]) + repr(f["fix"]), f


def test_every_control_has_a_passing_and_a_failing_scenario():
    from gpuhost import controls
    for c in controls.CATALOG:
        statuses = {s for _, _, _, control, _, s, _ in CASES if control == c.id}
        assert "pass" in statuses or c.id == "numa.balancing", c.id
        assert statuses & {"drift", "manual", "pending_reboot", "error"}, c.id


def test_r470_without_compute_cap_is_still_read(tmp_path):
    data = scenarios.merge(BASE, {"nvidia": {"kernel_module": "470.256.02", "userspace": "470.256.02",
                                             "gpus": [{**BASE["nvidia"]["gpus"][0], "compute_cap": "8.0",
                                                       "name": "NVIDIA A100-PCIE-40GB"}]}})
    host = scenarios.render(data, tmp_path, r470=True)
    facts = host.facts()
    assert [g["bdf"] for g in facts["nvidia"]["gpus"]] == ["0000:01:00.0"] and facts["nvidia"]["gpus"][0]["compute_cap"] is None
    assert host.finding("nvidia.driver")["status"] == "pass"
    assert host.finding("nvidia.persistence")["status"] == "pass"


def test_the_numa_fix_comments_out_later_settings_and_keeps_every_other_byte(tmp_path):
    conf = "# local tuning\r\nvm.swappiness = 10\r\nkernel.numa_balancing = 1\r\nvm.dirty_ratio=5"
    host = _render(tmp_path, {}, write("/etc/sysctl.conf", conf))
    fix = host.finding("numa.balancing")["fix"]
    assert fix["file"]["path"] == "/etc/sysctl.d/99-gpuhost-numa-balancing.conf"
    (edit,) = fix["files"]
    assert edit["path"] == "/etc/sysctl.conf"
    assert edit["content"] == conf.replace("kernel.numa_balancing = 1",
                                           "# disabled by gpuhost (numa.balancing): kernel.numa_balancing = 1")
    # applied, the next boot sets 0
    host.write("/etc/sysctl.conf", edit["content"])
    host.write(fix["file"]["path"], fix["file"]["content"])
    assert host.facts()["sysctl"]["persisted"]["kernel.numa_balancing"] == "0"


def test_the_persistence_fix_keeps_the_vendor_unit_and_converges(tmp_path):
    host = _render(tmp_path, {"nvidia": {"persistence_default": False}},
                   lambda root: (remove("/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service")(root),
                                 write("/etc/systemd/system/nvidia-persistenced.service.d/override.conf",
                                       "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced --no-persistence-mode\n")(root)))
    fix = host.finding("nvidia.persistence")["fix"]
    assert "unit" not in fix, "the vendor unit is never replaced"
    assert fix["enable"] == ["nvidia-persistenced.service"]
    assert fix["file"]["path"].startswith("/etc/systemd/system/nvidia-persistenced.service.d/")
    assert "--no-persistence-mode" not in fix["file"]["content"]
    host.write(fix["file"]["path"], fix["file"]["content"])
    effective = host.facts()["units"]["nvidia-persistenced.service"]["exec_start"]
    assert effective == ["/usr/bin/nvidia-persistenced"]


class Reads(dict):
    """A facts dict that notes which sections are read."""

    def __init__(self, data: dict, seen: set):
        super().__init__(data)
        self.seen = seen

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)


@pytest.mark.parametrize("case, overlay, before_boot, control, settings, status, word",
                         CASES, ids=[c[0] for c in CASES])
def test_a_judgement_reads_only_the_facts_its_control_declares(tmp_path, case, overlay, before_boot, control, settings,
                                                                status, word):
    """CONTROL.facts is what judge() reads: a section it does not declare is never touched."""
    from gpuhost import controls
    host = _render(tmp_path, overlay, before_boot)
    seen: set = set()
    h = controls.Host(Reads(controls.plain(host.facts()), seen), settings)
    finding = controls.DEFAULT_REGISTRY.judges[control](h)      # before the gates (masks, reboot holds)
    assert finding.control == control and finding.status in controls.STATUSES and seen
    declared = set(controls.BY_ID[control].facts) | {"errors"}
    assert seen <= declared, f"{control} reads {sorted(seen - declared)} but declares {sorted(declared)}"
