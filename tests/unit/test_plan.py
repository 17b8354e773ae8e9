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
    f = {"fix": {"runtime": [{"kind": "sysfs", "path": f"/sys/devices/system/cpu/cpufreq/policy{i}/scaling_governor",
                              "value": "performance"} for i in range(64)]}}
    assert changes(f) == ["write performance to /sys/devices/system/cpu/cpufreq/policyN/scaling_governor (64 files)"]


def _scenario_finding(tmp_path, cid: str, name: str) -> dict:
    import scenarios
    sc = next(s for c, n, s in scenarios.control_scenarios() if (c, n) == (cid, name))
    return scenarios.render_scenario(sc, tmp_path).finding(cid, **(sc.get("settings") or {}))


def test_a_debian_kernel_upgrade_plan_names_the_packages_and_where_they_come_from(tmp_path):
    """Issue 16: the plan of a Debian kernel upgrade said only "then a reboot"."""
    lines = changes(_scenario_finding(tmp_path, "kernel.version", "debian-flavour.fail"))
    # with headers: the base host builds the NVIDIA driver with dkms
    assert lines[0] == "install linux-image-cloud-amd64, linux-headers-cloud-amd64 (from bookworm-backports)", lines
    assert lines[-1] == "then a reboot (gpuhost fix --reboot if-needed)"


def test_enabling_a_vendor_unit_is_in_the_plan(tmp_path):
    """Issue 16: for a vendor persistence unit that was not enabled the plan listed nothing."""
    lines = changes(_scenario_finding(tmp_path, "nvidia.persistence", "vendor-unit-not-enabled.fail"))
    assert "enable nvidia-persistenced.service (systemctl enable; the unit stays as packaged)" in lines, lines
    assert "systemctl daemon-reload if a unit file changed" in lines
