"""One test per control: the state a fixed host must be in (contract: controls-and-report.md)."""
from __future__ import annotations

import re

import pytest

from conftest import View, host_level

# what does not apply is skipped with the reason, never counted as passed
CONTAINER = "a host-level control: this is a container; verify its host"
NO_GPU = "no NVIDIA GPU the host drives"

CPU = "/sys/devices/system/cpu"


def _lspci_vv(view: View, bdf: str) -> str:
    return view.host.check_output(f"lspci -vv -s {bdf}")


def test_cpu_driver(view: View):
    drivers = set(view.host.run(f"cat {CPU}/cpufreq/policy*/scaling_driver 2>/dev/null").stdout.split())
    if not host_level(view):
        view.skip(CONTAINER)
    if not drivers:
        view.skip("no cpufreq driver (a VM, or cpufreq off): no frequency driver to judge")
    flags = view.host.check_output("grep -m1 ^flags /proc/cpuinfo")
    vendor = view.host.check_output("grep -m1 ^vendor_id /proc/cpuinfo")
    if "AuthenticAMD" in vendor and " cppc" in flags:
        assert drivers == {"amd-pstate-epp"}
        assert view.read(f"{CPU}/amd_pstate/status") == "active"
    elif "GenuineIntel" in vendor and " hwp" in flags:
        assert drivers == {"intel_pstate"}
    else:
        view.skip("no CPPC (AMD) or HWP (Intel) in firmware: no driver gpuhost can require")


def test_cpu_governor(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    governors = view.host.run(f"cat {CPU}/cpufreq/policy*/scaling_governor 2>/dev/null").stdout.split()
    assert set(governors) <= {"performance"}
    epp = view.host.run(f"cat {CPU}/cpufreq/policy*/energy_performance_preference 2>/dev/null").stdout.split()
    assert set(epp) <= {"performance"}


def test_cpu_cstates(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    limit = view.setting("gpuhost_cstate_max_latency_us", 10)
    out = view.host.run(f"for s in {CPU}/cpu[0-9]*/cpuidle/state[0-9]*; do echo $(cat $s/latency) $(cat $s/disable) $s; done").stdout
    enabled_deep = [l for l in out.splitlines() if l.split()[1] == "0" and int(l.split()[0]) > limit]
    assert enabled_deep == []


def test_numa_balancing(view: View):
    nodes = view.host.run("ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null").stdout.split()
    path = "/proc/sys/kernel/numa_balancing"
    if not host_level(view):
        view.skip(CONTAINER)
    if len(nodes) <= 1 or not view.host.file(path).exists:
        view.skip("one NUMA node (or no NUMA balancing in this kernel): nothing to balance")
    assert view.read(path) == "0"
    persisted = view.params.get("numa_balancing") == "disable" or view.host.run(
        "cat /etc/sysctl.d/*.conf 2>/dev/null | grep -E '^\\s*kernel.numa_balancing\\s*=' | tail -n1").stdout.split("=")[-1].strip() == "0"
    assert persisted, "nothing keeps NUMA balancing off at boot"


def test_pcie_mrrs(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.gpus:
        view.skip(NO_GPU)
    for bdf in view.gpus:
        assert "MaxReadReq 4096 bytes" in _lspci_vv(view, bdf), bdf


def test_pcie_link(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.gpus:
        view.skip(NO_GPU)
    for bdf in view.gpus:
        vv = _lspci_vv(view, bdf)
        cap = re.search(r"LnkCap:.*Width x(\d+)", vv)
        sta = re.search(r"LnkSta:.*Width x(\d+)", vv)
        if cap and sta:
            assert int(sta.group(1)) == int(cap.group(1)), f"{bdf} runs x{sta.group(1)} of x{cap.group(1)}"


def test_pcie_acs(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.gpus:
        view.skip(NO_GPU)
    if view.host.run("ls /sys/bus/pci/drivers/vfio-pci 2>/dev/null | grep -c :").stdout.strip() not in ("", "0"):
        view.skip("devices are bound to vfio-pci: ACS isolation is wanted where devices go to VMs")
    blocks = view.host.check_output("lspci -D -vv").split("\n\n")
    for block in blocks:
        if "Downstream Port" in block or "Upstream Port" in block:
            ctl = re.search(r"ACSCtl:.*", block)
            if ctl:
                assert "ReqRedir+" not in ctl.group(0) and "CmpltRedir+" not in ctl.group(0) and "EgressCtrl+" not in ctl.group(0), block.split()[0]


def test_iommu_mode(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.host.run("ls /sys/class/iommu 2>/dev/null").stdout.split():
        view.skip("the IOMMU is off: nothing translates")
    types = set(view.host.run("cat /sys/kernel/iommu_groups/*/type 2>/dev/null").stdout.split())
    assert types <= {"identity"}
    assert view.params.get("iommu") == "pt"


def test_kernel_version(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    minimum = str(view.setting("gpuhost_kernel_min_version", "") or "")
    if not minimum:
        if not view.proxmox or not re.match(r"pve-manager/[89]\.", view.host.check_output("pveversion")):
            view.skip("no minimum kernel set (gpuhost_kernel_min_version) and not Proxmox VE 8 or 9")
        minimum = "6.14"
    release = view.read("/proc/sys/kernel/osrelease")
    have = tuple(int(x) for x in re.findall(r"\d+", release)[:2])
    assert have >= tuple(int(x) for x in minimum.split(".")[:2]), f"{release} is older than {minimum}"


def test_kernel_reboot_pending(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    running = [p for p in view.cmdline if not p.startswith(("BOOT_IMAGE=", "initrd=", "vt.handoff="))]
    if not view.cmdline[0].startswith("BOOT_IMAGE="):
        # systemd-boot (no BOOT_IMAGE=): it reads /etc/kernel/cmdline
        persisted = view.read("/etc/kernel/cmdline").split()
    elif view.host.file("/etc/kernel/proxmox-boot-uuids").exists:
        view.skip("GRUB on proxmox-boot-tool ESPs: its grub.cfg lives on the ESPs, which are not mounted")
    else:
        release = view.read("/proc/sys/kernel/osrelease")
        cfg = view.read("/boot/grub/grub.cfg")
        line = re.search(rf"^\s*linux\s+\S*vmlinuz-{re.escape(release)}\s+(.*)$", cfg, re.M)
        assert line, f"grub.cfg has no entry for the running kernel {release}"
        persisted = [p for p in line.group(1).split() if not p.startswith("vt.handoff=")]
    assert sorted(persisted) == sorted(running), "the next boot's command line is not the running one"


def test_nvidia_driver(view: View):
    if not view.host.exists("nvidia-smi"):
        view.skip("no nvidia-smi: no NVIDIA driver here")
    res = view.host.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert res.rc == 0, res.stdout.strip()
    module = re.search(r"Kernel Module(?: for \S+)?\s+(\S+)", view.read("/proc/driver/nvidia/version")).group(1)
    assert set(res.stdout.split()) == {module}


def test_nvidia_persistence(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.host.exists("nvidia-smi"):
        view.skip("no nvidia-smi: no NVIDIA driver here")
    res = view.host.run("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
    if "No devices were found" in res.stdout:
        view.skip(NO_GPU)
    assert set(res.stdout.split()) <= {"Enabled"}
    # the unit as systemd reads it (systemd.unit(5)): the first file in the unit path, then the
    # drop-ins of every unit directory by file name; an empty ExecStart= resets the list
    name = "nvidia-persistenced.service"
    dirs = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system",
            "/usr/lib/systemd/system")
    unit = next((f"{d}/{name}" for d in dirs if view.host.file(f"{d}/{name}").exists), None)
    assert unit, f"no {name}"
    dropins = {}
    for d in reversed(dirs):
        for path in view.host.run(f"ls {d}/{name}.d/*.conf 2>/dev/null").stdout.split():
            dropins[path.rsplit("/", 1)[1]] = path
    text = "\n".join(view.host.file(p).content_string for p in [unit] + [dropins[k] for k in sorted(dropins)])
    execs = [line.split("=", 1)[1].strip() for line in text.splitlines() if line.strip().startswith("ExecStart=")]
    while "" in execs:
        execs = execs[execs.index("") + 1:]
    assert execs and "--no-persistence-mode" not in execs[-1], execs
    enabled = view.host.run("systemctl is-enabled nvidia-persistenced.service").stdout.strip() == "enabled"
    by_udev = view.host.run("grep -ls 'SYSTEMD_WANTS.*nvidia-persistenced' /etc/udev/rules.d/* /lib/udev/rules.d/*").rc == 0
    assert enabled or by_udev, "nothing starts nvidia-persistenced at boot"


def test_lxc_gpu_passthrough(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.host.file("/etc/pve/lxc").exists:
        view.skip("not a Proxmox VE host: no containers")
    devices = view.read("/proc/devices").split("Block devices:")[0]
    majors = {m.group(2): m.group(1) for m in re.finditer(r"^\s*(\d+) (nvidia\S*)$", devices, re.M)}
    for conf in view.host.run("ls /etc/pve/lxc/*.conf 2>/dev/null").stdout.split():
        main = view.host.file(conf).content_string.split("\n[")[0]
        mounted = re.findall(r"^lxc\.mount\.entry:\s*\S+\s+/?(dev/nvidia\S*)", main, re.M)
        devn = [p.lstrip("/") for p in re.findall(r"^dev\d+:\s*(?:path=)?(/dev/nvidia[^,\s]*)", main, re.M)]
        if not [n for n in mounted + devn if re.match(r"^dev/nvidia\d+$", n)]:
            continue
        allow_all = re.search(r"^lxc\.cgroup2\.devices\.allow:\s*a\s*$", main, re.M)
        for node in mounted:        # a bind mount needs a cgroup2 allow of its major; devN: brings its own
            name = "nvidia-caps" if "caps" in node else "nvidia-uvm" if "uvm" in node else "nvidia"
            major = majors.get(name) or ("195" if name == "nvidia" else None)
            if major and not allow_all:
                assert re.search(rf"^lxc\.cgroup2\.devices\.allow: c {major}:\* rwm$", main, re.M), f"{conf}: {node}"
        for node in ("dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools"):
            assert node in mounted + devn, f"{conf}: {node}"
        # nvidia-caps nodes only matter for MIG (libnvidia-container mounts them only there): a
        # container that uses them needs them to exist on the host
        for node in [n for n in devn if n.startswith("dev/nvidia-caps")]:
            assert view.host.file("/" + node).exists, f"{conf}: /{node} does not exist on the host"


def test_storage_scheduler(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    for disk in view.host.run("ls /sys/block").stdout.split():
        if re.match(r"^(loop|ram|zram|sr|fd|nbd)", disk):
            continue
        if view.read(f"/sys/block/{disk}/queue/rotational") == "0":
            sched = view.read(f"/sys/block/{disk}/queue/scheduler")
            assert "[none]" in sched or "[" not in sched, f"{disk}: {sched}"
