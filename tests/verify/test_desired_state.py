"""One test per control: the state a fixed host must be in (contract: controls-and-report.md)."""
from __future__ import annotations

import re

from conftest import View, host_level

CPU = "/sys/devices/system/cpu"


def _lspci_vv(view: View, bdf: str) -> str:
    return view.host.check_output(f"lspci -vv -s {bdf}")


def test_cpu_driver(view: View):
    drivers = set(view.host.run(f"cat {CPU}/cpufreq/policy*/scaling_driver 2>/dev/null").stdout.split())
    if not host_level(view) or not drivers:
        return
    flags = view.host.check_output("grep -m1 ^flags /proc/cpuinfo")
    vendor = view.host.check_output("grep -m1 ^vendor_id /proc/cpuinfo")
    if "AuthenticAMD" in vendor and " cppc" in flags:
        assert drivers == {"amd-pstate-epp"}
        assert view.read(f"{CPU}/amd_pstate/status") == "active"
    elif "GenuineIntel" in vendor and " hwp" in flags:
        assert drivers == {"intel_pstate"}


def test_cpu_governor(view: View):
    if not host_level(view):
        return
    governors = view.host.run(f"cat {CPU}/cpufreq/policy*/scaling_governor 2>/dev/null").stdout.split()
    assert set(governors) <= {"performance"}
    epp = view.host.run(f"cat {CPU}/cpufreq/policy*/energy_performance_preference 2>/dev/null").stdout.split()
    assert set(epp) <= {"performance"}


def test_cpu_cstates(view: View):
    if not host_level(view):
        return
    limit = 10
    out = view.host.run(f"for s in {CPU}/cpu[0-9]*/cpuidle/state[0-9]*; do echo $(cat $s/latency) $(cat $s/disable) $s; done").stdout
    enabled_deep = [l for l in out.splitlines() if l.split()[1] == "0" and int(l.split()[0]) > limit]
    assert enabled_deep == []


def test_numa_balancing(view: View):
    nodes = view.host.run("ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null").stdout.split()
    path = "/proc/sys/kernel/numa_balancing"
    if not host_level(view) or len(nodes) <= 1 or not view.host.file(path).exists:
        return
    assert view.read(path) == "0"
    persisted = view.params.get("numa_balancing") == "disable" or view.host.run(
        "cat /etc/sysctl.d/*.conf 2>/dev/null | grep -E '^\\s*kernel.numa_balancing\\s*=' | tail -n1").stdout.split("=")[-1].strip() == "0"
    assert persisted, "nothing keeps NUMA balancing off at boot"


def test_pcie_mrrs(view: View):
    if not host_level(view):
        return
    for bdf in view.gpus:
        assert "MaxReadReq 4096 bytes" in _lspci_vv(view, bdf), bdf


def test_pcie_link(view: View):
    if not host_level(view):
        return
    for bdf in view.gpus:
        vv = _lspci_vv(view, bdf)
        cap = re.search(r"LnkCap:.*Width x(\d+)", vv)
        sta = re.search(r"LnkSta:.*Width x(\d+)", vv)
        if cap and sta:
            assert int(sta.group(1)) == int(cap.group(1)), f"{bdf} runs x{sta.group(1)} of x{cap.group(1)}"


def test_pcie_acs(view: View):
    if not host_level(view) or not view.gpus:
        return
    if view.host.run("ls /sys/bus/pci/drivers/vfio-pci 2>/dev/null | grep -c :").stdout.strip() not in ("", "0"):
        return                                           # isolation is wanted where devices go to VMs
    blocks = view.host.check_output("lspci -D -vv").split("\n\n")
    for block in blocks:
        if "Downstream Port" in block or "Upstream Port" in block:
            ctl = re.search(r"ACSCtl:.*", block)
            if ctl:
                assert "ReqRedir+" not in ctl.group(0) and "CmpltRedir+" not in ctl.group(0) and "EgressCtrl+" not in ctl.group(0), block.split()[0]


def test_iommu_mode(view: View):
    if not host_level(view):
        return
    if not view.host.run("ls /sys/class/iommu 2>/dev/null").stdout.split():
        return                                           # off: nothing translates
    types = set(view.host.run("cat /sys/kernel/iommu_groups/*/type 2>/dev/null").stdout.split())
    assert types <= {"identity"}
    assert view.params.get("iommu") == "pt"


def test_kernel_version(view: View):
    if not host_level(view) or not view.proxmox:
        return
    if not view.host.check_output("pveversion").startswith("pve-manager/8."):
        return
    release = view.read("/proc/sys/kernel/osrelease")
    assert tuple(int(x) for x in re.findall(r"\d+", release)[:2]) >= (6, 14), release


def test_kernel_reboot_pending(view: View):
    if not host_level(view):
        return
    if view.host.file("/etc/kernel/proxmox-boot-uuids").exists and view.host.file("/etc/kernel/cmdline").exists:
        persisted = view.read("/etc/kernel/cmdline").split()
        assert all(p in view.cmdline for p in persisted), "the next boot's command line is not the running one"


def test_nvidia_driver(view: View):
    if not view.host.exists("nvidia-smi"):
        return
    res = view.host.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert res.rc == 0, res.stdout.strip()
    module = re.search(r"Kernel Module(?: for \S+)?\s+(\S+)", view.read("/proc/driver/nvidia/version")).group(1)
    assert set(res.stdout.split()) == {module}


def test_nvidia_persistence(view: View):
    if not host_level(view) or not view.host.exists("nvidia-smi"):
        return
    modes = view.host.check_output("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader").split()
    assert set(modes) <= {"Enabled"}
    unit = view.host.file("/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service")
    assert unit.exists and "--persistence-mode" in unit.content_string


def test_lxc_gpu_passthrough(view: View):
    if not host_level(view) or not view.host.file("/etc/pve/lxc").exists:
        return
    devices = view.read("/proc/devices").split("Block devices:")[0]
    majors = {m.group(2): m.group(1) for m in re.finditer(r"^\s*(\d+) (nvidia\S*)$", devices, re.M)}
    for conf in view.host.run("ls /etc/pve/lxc/*.conf 2>/dev/null").stdout.split():
        main = view.host.file(conf).content_string.split("\n[")[0]
        if "/dev/nvidia" not in main:
            continue
        for name in ("nvidia", "nvidia-uvm", "nvidia-caps"):
            if name in majors:
                assert re.search(rf"^lxc\.cgroup2\.devices\.allow: c {majors[name]}:\* rwm$", main, re.M), f"{conf}: {name}"
        for node in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps"):
            assert f"/dev/{node} dev/{node}" in main, f"{conf}: {node}"


def test_storage_scheduler(view: View):
    if not host_level(view):
        return
    for disk in view.host.run("ls /sys/block").stdout.split():
        if re.match(r"^(loop|ram|zram|sr|fd|nbd)", disk):
            continue
        if view.read(f"/sys/block/{disk}/queue/rotational") == "0":
            sched = view.read(f"/sys/block/{disk}/queue/scheduler")
            assert "[none]" in sched or "[" not in sched, f"{disk}: {sched}"
