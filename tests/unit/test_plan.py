"""The fix's plan says what will change on the host, from the judgement's typed fix data."""
from __future__ import annotations

import fleet
from gpuhost.plan import changes


def test_the_seed_hosts_plan_names_every_file_value_register_package_and_parameter():
    found = fleet.seed_findings()
    plan = {cid: changes(f) for cid, f in found.items() if f["status"] == "drift"}
    assert plan["cpu.driver"] == ["kernel parameter amd_pstate=active on the boot command line",
                                  "then a reboot (gpuhost fix --reboot if-needed)"]
    assert plan["numa.balancing"] == ["write /etc/sysctl.d/99-gpuhost-numa-balancing.conf",
                                      "write 0 to /proc/sys/kernel/numa_balancing"]
    assert plan["kernel.version"][0] == "install proxmox-kernel-6.14, proxmox-headers-6.14"
    mrrs = plan["pcie.mrrs"]
    assert mrrs[0] == "install and enable the boot unit gpuhost-pcie-mrrs.service"
    assert mrrs[1].startswith("set PCI register CAP_EXP+8.w to 5000 (bits 7000) on 0000:01:00.0 [10de:")
    assert mrrs[1].count("[10de:") == 8, "all eight GPUs, by address and vendor:device"
    assert plan["lxc.gpu_passthrough"] == ["repair /etc/pve/lxc/129.conf under Proxmox's config lock (a copy in /var/backups/gpuhost)"]
    assert "write none to /sys/block/nvme1n1/queue/scheduler" in plan["storage.scheduler"]
    assert all(plan[c] for c in plan), "every drift has a change to show"


def test_a_write_on_every_policy_is_one_line_with_a_count():
    f = {"fix": {"runtime": [{"path": f"/sys/devices/system/cpu/cpufreq/policy{i}/scaling_governor",
                              "value": "performance"} for i in range(64)]}}
    assert changes(f) == ["write performance to /sys/devices/system/cpu/cpufreq/policyN/scaling_governor (64 files)"]
