"""Every rule of the lab's kernel model (contracts/hostspec.md), on real hosts over SSH."""
from __future__ import annotations

import pytest

from conftest import SEED_GUEST, SEED_HOST, SPECS

CPUFREQ = "/sys/devices/system/cpu/cpufreq/policy0"


def test_cmdline_edited_but_not_refreshed_does_not_take_effect(make_lab):
    lab = make_lab(SEED_HOST)
    lab.ssh("pve-gpu1", "sed -i 's/$/ amd_pstate=active/' /etc/kernel/cmdline")
    lab.reboot_inside("pve-gpu1")
    assert "amd_pstate" not in lab.out("pve-gpu1", "cat /proc/cmdline")
    assert lab.out("pve-gpu1", f"cat {CPUFREQ}/scaling_driver") == "acpi-cpufreq"
    # after proxmox-boot-tool refresh and a reboot it does
    lab.ssh("pve-gpu1", "proxmox-boot-tool refresh")
    assert "amd_pstate" not in lab.out("pve-gpu1", "cat /proc/cmdline"), "a refresh alone changes nothing live"
    lab.reboot_inside("pve-gpu1")
    # systemd-boot passes the entry's initrd= first, and no BOOT_IMAGE= (that is GRUB's)
    assert lab.out("pve-gpu1", "cat /proc/cmdline") == (
        "initrd=\\EFI\\proxmox\\6.8.12-4-pve\\initrd.img-6.8.12-4-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active")
    assert lab.out("pve-gpu1", f"cat {CPUFREQ}/scaling_driver") == "amd-pstate-epp"
    assert lab.out("pve-gpu1", "cat /sys/devices/system/cpu/amd_pstate/status") == "active"
    # the default governor is offered by amd-pstate-epp, so EPP follows it
    assert lab.out("pve-gpu1", f"cat {CPUFREQ}/scaling_governor {CPUFREQ}/energy_performance_preference").split() == [
        "performance", "performance"]


def test_grub_cmdline_takes_effect_only_after_update_grub(make_lab):
    lab = make_lab(SPECS / "intel-grub.yml")
    lab.ssh("intel-grub", "sed -i 's/^GRUB_CMDLINE_LINUX=\"\"/GRUB_CMDLINE_LINUX=\"intel_idle.max_cstate=1 numa_balancing=disable\"/' /etc/default/grub")
    lab.reboot("intel-grub")
    assert "max_cstate" not in lab.out("intel-grub", "cat /proc/cmdline")
    assert lab.out("intel-grub", "cat /proc/sys/kernel/numa_balancing") == "1"
    lab.ssh("intel-grub", "update-grub")
    lab.reboot("intel-grub")
    cmdline = lab.out("intel-grub", "cat /proc/cmdline")
    # grub-mkconfig's 10_linux: root=<device> ro, then GRUB_CMDLINE_LINUX, then _DEFAULT
    assert cmdline == ("BOOT_IMAGE=/boot/vmlinuz-6.1.0-26-amd64 root=UUID=2b7c1a62-6c0e-4a4b-9d0e-1f0b8f0a1c11 ro "
                       "intel_idle.max_cstate=1 numa_balancing=disable quiet")
    names = lab.out("intel-grub", "cat /sys/devices/system/cpu/cpu0/cpuidle/state*/name").split()
    # drivers/idle/intel_idle.c: max_cstate counts table entries after POLL, not C-numbers
    assert names == ["POLL", "C1"], "intel_idle.max_cstate=1 keeps the first state after POLL"
    assert lab.out("intel-grub", "cat /proc/sys/kernel/numa_balancing") == "0"


def test_new_kernel_with_headers_keeps_the_nvidia_driver(make_lab):
    lab = make_lab(SEED_HOST)
    res = lab.ssh("pve-gpu1", "apt-get install -y proxmox-kernel-6.14 proxmox-headers-6.14")
    assert "Setting up proxmox-kernel-6.14" in res.stdout
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/osrelease") == "6.8.12-4-pve", "installing is not booting"
    lab.reboot_inside("pve-gpu1")
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/osrelease") == "6.14.11-4-pve"
    # kernel >= 6.13 on Zen 5 loads amd_pstate by default, even on a server profile
    assert lab.out("pve-gpu1", f"cat {CPUFREQ}/scaling_driver") == "amd-pstate-epp"
    assert lab.out("pve-gpu1", "nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u") == "570.133.20"
    assert "NVRM version" in lab.out("pve-gpu1", "cat /proc/driver/nvidia/version")


def test_new_kernel_without_headers_loses_the_nvidia_driver(make_lab):
    lab = make_lab(SEED_HOST)
    lab.ssh("pve-gpu1", "apt-get install -y proxmox-kernel-6.14")
    lab.reboot_inside("pve-gpu1")
    # the command, the file and Python (Ansible's setup module, platform.release()) agree
    python_release = "/usr/bin/python3 -c 'import platform; print(platform.release())'"
    assert lab.out("pve-gpu1", f"uname -r; cat /proc/sys/kernel/osrelease; {python_release}").splitlines() == \
        ["6.14.11-4-pve"] * 3
    res = lab.ssh("pve-gpu1", "nvidia-smi", check=False)
    assert res.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in res.stdout
    assert lab.ssh("pve-gpu1", "test -e /proc/driver/nvidia/version", check=False).returncode == 1
    assert "nvidia" not in lab.out("pve-gpu1", "cat /proc/devices")
    # pinning the old kernel brings the driver back
    # without a terminal the pin is only recorded; the ESPs change at the next refresh
    out = lab.out("pve-gpu1", "proxmox-boot-tool kernel pin 6.8.12-4-pve")
    assert "Use the 'refresh' command to update the ESPs." in out
    lab.reboot_inside("pve-gpu1")
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/osrelease") == "6.14.11-4-pve", "a pin without refresh boots nothing"
    lab.ssh("pve-gpu1", "proxmox-boot-tool refresh")
    lab.reboot_inside("pve-gpu1")
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/osrelease") == "6.8.12-4-pve"
    assert lab.ssh("pve-gpu1", "nvidia-smi -L").returncode == 0


def test_next_boot_pin_is_a_one_time_trial(make_lab):
    lab = make_lab(SEED_HOST)
    lab.ssh("pve-gpu1", "apt-get install -y proxmox-kernel-6.14 proxmox-headers-6.14")
    lab.ssh("pve-gpu1", "proxmox-boot-tool kernel pin 6.8.12-4-pve")
    lab.ssh("pve-gpu1", "proxmox-boot-tool kernel pin 6.14.11-4-pve --next-boot && proxmox-boot-tool refresh")
    lab.reboot_inside("pve-gpu1")
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/osrelease") == "6.14.11-4-pve"
    lab.reboot_inside("pve-gpu1")
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/osrelease") == "6.8.12-4-pve"


def test_pinning_a_kernel_that_is_not_installed_fails(make_lab):
    lab = make_lab(SEED_HOST)
    res = lab.ssh("pve-gpu1", "proxmox-boot-tool kernel pin 6.17.2-1-pve", check=False)
    assert res.returncode != 0
    assert "no kernel image found in /boot for '6.17.2-1-pve'" in res.stderr


def test_sysctl_d_and_enabled_units_are_applied_at_boot(make_lab):
    lab = make_lab(SEED_HOST)
    lab.ssh("pve-gpu1", "sysctl -w kernel.numa_balancing=0 && setpci -s 01:00.0 CAP_EXP+8.w=5000:7000")
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/numa_balancing") == "0"
    lab.reboot_inside("pve-gpu1")
    # runtime writes are lost at reboot
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/numa_balancing") == "1"
    assert lab.out("pve-gpu1", "setpci -s 01:00.0 CAP_EXP+8.w") == "283f"
    # persisted: a sysctl.d drop-in and an enabled oneshot unit
    lab.ssh("pve-gpu1", "printf 'kernel.numa_balancing = 0\\n' > /etc/sysctl.d/90-numa.conf")
    lab.ssh("pve-gpu1", "printf '[Unit]\\nDescription=mrrs\\n[Service]\\nType=oneshot\\n"
                        "ExecStart=/usr/bin/setpci -s 01:00.0 CAP_EXP+8.w=5000:7000\\n"
                        "[Install]\\nWantedBy=multi-user.target\\n' > /etc/systemd/system/mrrs.service"
                        " && systemctl enable mrrs.service")
    lab.reboot_inside("pve-gpu1")
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/numa_balancing") == "0"
    assert "MaxReadReq 4096 bytes" in lab.out("pve-gpu1", "lspci -vv -s 01:00.0")
    assert "MaxReadReq 512 bytes" in lab.out("pve-gpu1", "lspci -vv -s 21:00.0"), "only the unit's device changed"


def test_sysctl_d_files_apply_in_lexical_order(make_lab):
    lab = make_lab(SEED_HOST)
    lab.ssh("pve-gpu1", "echo 'vm.swappiness = 10' > /etc/sysctl.d/10-a.conf; echo 'vm.swappiness = 30' > /etc/sysctl.d/20-b.conf")
    lab.reboot("pve-gpu1")
    assert lab.out("pve-gpu1", "cat /proc/sys/vm/swappiness") == "30"


def test_setpci_changes_max_read_request_live_and_reboot_restores_it(make_lab):
    lab = make_lab(SEED_HOST)
    assert "MaxReadReq 512 bytes" in lab.out("pve-gpu1", "lspci -vv -s 01:00.0")
    lab.ssh("pve-gpu1", "setpci -s 01:00.0 CAP_EXP+8.w=5000:7000")
    assert "MaxReadReq 4096 bytes" in lab.out("pve-gpu1", "lspci -vv -s 01:00.0")
    # value:mask changes those three bits and nothing else of Device Control
    assert lab.out("pve-gpu1", "setpci -s 01:00.0 CAP_EXP+8.w") == "583f"
    lab.reboot("pve-gpu1")
    assert "MaxReadReq 512 bytes" in lab.out("pve-gpu1", "lspci -vv -s 01:00.0")


def test_amd_pstate_runtime_switch_and_epp_rules(make_lab):
    lab = make_lab(SEED_HOST)
    lab.ssh("pve-gpu1", "sed -i 's/$/ amd_pstate=passive/' /etc/kernel/cmdline && proxmox-boot-tool refresh")
    lab.reboot("pve-gpu1")
    assert lab.out("pve-gpu1", f"cat {CPUFREQ}/scaling_driver") == "amd-pstate"
    assert lab.ssh("pve-gpu1", f"test -e {CPUFREQ}/energy_performance_preference", check=False).returncode == 1
    # the mode can be switched at runtime through amd_pstate/status
    lab.ssh("pve-gpu1", "echo active > /sys/devices/system/cpu/amd_pstate/status")
    assert lab.out("pve-gpu1", f"cat {CPUFREQ}/scaling_driver") == "amd-pstate-epp"
    assert lab.out("pve-gpu1", f"cat {CPUFREQ}/scaling_available_governors") == "performance powersave"
    bad = lab.ssh("pve-gpu1", f"echo power > {CPUFREQ}/energy_performance_preference", check=False)
    assert bad.returncode != 0 and "Device or resource busy" in bad.stderr
    lab.ssh("pve-gpu1", f"echo powersave > {CPUFREQ}/scaling_governor && echo power > {CPUFREQ}/energy_performance_preference")
    assert lab.out("pve-gpu1", f"cat {CPUFREQ}/energy_performance_preference") == "power"
    bad = lab.ssh("pve-gpu1", "echo turbo > /sys/devices/system/cpu/amd_pstate/status", check=False)
    assert "Invalid argument" in bad.stderr


def test_zen4_server_needs_the_parameter_even_on_new_kernels(make_lab):
    lab = make_lab(SPECS / "zen4-server.yml")
    assert lab.out("zen4-server", f"cat {CPUFREQ}/scaling_driver") == "acpi-cpufreq"
    # governor_default schedutil is offered by acpi-cpufreq
    assert lab.out("zen4-server", f"cat {CPUFREQ}/scaling_governor") == "schedutil"
    assert lab.ssh("zen4-server", "test -d /sys/devices/system/cpu/amd_pstate", check=False).returncode == 1


def test_cmdline_governor_cstates_numa_iommu_thp(make_lab):
    lab = make_lab(SEED_HOST)
    extra = ("amd_pstate=active cpufreq.default_governor=powersave processor.max_cstate=1 "
             "numa_balancing=disable iommu=pt transparent_hugepage=never")
    lab.ssh("pve-gpu1", f"sed -i 's/$/ {extra}/' /etc/kernel/cmdline && proxmox-boot-tool refresh")
    assert lab.out("pve-gpu1", "cat /sys/kernel/iommu_groups/0/type") == "DMA-FQ"
    lab.reboot("pve-gpu1")
    assert lab.out("pve-gpu1", f"cat {CPUFREQ}/scaling_governor {CPUFREQ}/energy_performance_preference").split() == [
        "powersave", "balance_performance"]
    assert lab.out("pve-gpu1", "cat /sys/devices/system/cpu/cpu0/cpuidle/state*/name").split() == ["POLL", "C1"]
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/numa_balancing") == "0"
    assert lab.out("pve-gpu1", "cat /sys/kernel/iommu_groups/0/type") == "identity"
    assert lab.out("pve-gpu1", "cat /sys/kernel/mm/transparent_hugepage/enabled") == "always madvise [never]"


def test_iommu_off_in_firmware(make_lab):
    lab = make_lab(SPECS / "zen4-server.yml")
    assert lab.out("zen4-server", "find /sys/kernel/iommu_groups /sys/class/iommu -mindepth 1 | wc -l") == "0"


def test_persistence_mode_is_lost_at_boot_unless_the_daemon_sets_it(make_lab):
    lab = make_lab(SEED_HOST)
    q = "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader | sort -u"
    assert lab.out("pve-gpu1", q) == "Disabled"
    assert "All done." in lab.out("pve-gpu1", "nvidia-smi -pm 1")
    assert lab.out("pve-gpu1", q) == "Enabled"
    lab.reboot("pve-gpu1")
    assert lab.out("pve-gpu1", q) == "Disabled"
    lab.ssh("pve-gpu1", "printf '[Service]\\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode\\n"
                        "[Install]\\nWantedBy=multi-user.target\\n' > /etc/systemd/system/nvidia-persistenced.service"
                        " && systemctl enable nvidia-persistenced")
    lab.reboot("pve-gpu1")
    assert lab.out("pve-gpu1", q) == "Enabled"


def test_power_limit_needs_persistence_and_is_lost_at_boot(make_lab):
    """NVML: a power limit is "not persistent across reboots or driver unloads"; nvidia-smi
    warns that without persistence mode it goes back to the default as its last client exits.
    The spec's limit_w is what every boot starts with; the range is the GPU's min..max."""
    lab = make_lab(SPECS / "pve-gpu1-power.yml")
    host, gpu = "pve-gpu1-power", "00000000:01:00.0"
    q = f"nvidia-smi -i {gpu} --query-gpu=power.limit,enforced.power.limit,power.default_limit --format=csv,noheader"
    assert lab.out(host, q) == "300.00 W, 300.00 W, 600.00 W"
    said = lab.out(host, f"nvidia-smi -i {gpu} -pl 600")
    assert "was set to 600.00 W from 300.00 W." in said and "persistence mode is disabled" in said
    assert lab.out(host, q) == "300.00 W, 300.00 W, 600.00 W", "dropped as nvidia-smi exits"
    lab.ssh(host, f"nvidia-smi -i {gpu} -pm 1 && nvidia-smi -i {gpu} -pl 600")
    assert lab.out(host, q) == "600.00 W, 600.00 W, 600.00 W"
    refused = lab.ssh(host, f"nvidia-smi -i {gpu} -pl 700", check=False)
    assert refused.returncode == 2 and "should be between 300.00 W and 600.00 W" in refused.stdout
    lab.reboot(host)
    assert lab.out(host, q) == "300.00 W, 300.00 W, 600.00 W"


def test_guest_shares_the_parent_kernel_and_its_sys_is_read_only(make_lab):
    lab = make_lab(SEED_HOST, SEED_GUEST)
    assert lab.out("llm-two", "cat /proc/cmdline") == lab.out("pve-gpu1", "cat /proc/cmdline")
    assert lab.out("llm-two", "cat /proc/sys/kernel/osrelease") == "6.8.12-4-pve"
    assert 'ID=ubuntu' in lab.out("llm-two", "cat /etc/os-release")
    for path in ("/sys/devices/system/cpu/cpu0/cpuidle/state2/disable", "/proc/sys/kernel/numa_balancing"):
        res = lab.ssh("llm-two", f"echo 1 > {path}", check=False)
        assert res.returncode != 0 and "Read-only file system" in res.stderr, path
    assert lab.out("pve-gpu1", "cat /sys/devices/system/cpu/cpu0/cpuidle/state2/disable") == "0"
    # the guest sees the parent's GPUs through its own userspace
    assert lab.out("llm-two", "nvidia-smi -L | wc -l") == "8"
    assert lab.ssh("llm-two", "test -e /usr/sbin/proxmox-boot-tool", check=False).returncode == 1
    # a host's reboot restarts its containers; the guest's own reboot leaves the host alone
    guest_boot = lab.out("llm-two", "cat /proc/sys/kernel/random/boot_id")
    host_boot = lab.out("pve-gpu1", "cat /proc/sys/kernel/random/boot_id")
    assert guest_boot != host_boot
    guest_boot2 = lab.reboot_inside("llm-two")
    assert guest_boot2 != guest_boot
    assert lab.out("pve-gpu1", "cat /proc/sys/kernel/random/boot_id") == host_boot
    lab.reboot("pve-gpu1")
    assert lab.status("llm-two")["state"] == "up"
    assert lab.out("llm-two", "cat /proc/sys/kernel/random/boot_id") != guest_boot2


def test_disk_survives_reboot_and_tmpfs_does_not(make_lab):
    lab = make_lab(SEED_HOST)
    lab.ssh("pve-gpu1", "echo kept > /root/on-disk; echo lost > /run/on-tmpfs; echo lost > /tmp/on-tmpfs")
    lab.reboot_inside("pve-gpu1", "shutdown -r now")
    assert lab.out("pve-gpu1", "cat /root/on-disk") == "kept"
    assert lab.ssh("pve-gpu1", "ls /run/on-tmpfs /tmp/on-tmpfs", check=False).returncode != 0
    assert (lab.layout.disk("pve-gpu1") / "root/on-disk").read_text() == "kept\n"
    lab.reboot_inside("pve-gpu1", "systemctl reboot")
    assert lab.out("pve-gpu1", "cat /root/on-disk") == "kept"


@pytest.mark.parametrize("path,value", [
    ("/sys/devices/system/cpu/cpufreq/policy3/scaling_governor", "turbo"),
    ("/sys/block/nvme1n1/queue/scheduler", "cfq"),
    ("/sys/kernel/mm/transparent_hugepage/enabled", "sometimes"),
    ("/proc/sys/kernel/numa_balancing", "7"),
])
def test_bad_writes_fail_as_the_kernel_fails_them(seed_lab, path, value):
    before = seed_lab.out("pve-gpu1", f"cat {path}")
    res = seed_lab.ssh("pve-gpu1", f"echo {value} > {path}", check=False)
    assert res.returncode != 0 and "Invalid argument" in res.stderr
    assert seed_lab.out("pve-gpu1", f"cat {path}") == before


def test_grub_cfg_is_the_real_grub_mkconfigs_and_the_scenarios_writer_reads_the_same(make_lab, tmp_path):
    """The lab's hosts run Debian's own grub-mkconfig (its 00_header and 10_linux); the
    unit-speed scenarios use a writer in its layout. Both must give GRUB the same default,
    the same entry ids and the same linux lines, or the scenarios would judge another GRUB."""
    from gpuhost.lab.shims import shimlib

    lab = make_lab(SPECS / "intel-grub.yml")
    host = "intel-grub"
    lab.ssh(host, "touch /boot/vmlinuz-6.12.9+bpo-amd64 && update-grub")
    real = lab.out(host, "cat /boot/grub/grub.cfg")
    assert "It is automatically generated by grub-mkconfig" in real and "### BEGIN /etc/grub.d/10_linux ###" in real
    assert 'if [ "${next_entry}" ] ; then' in real
    (tmp_path / "etc/default/grub.d").mkdir(parents=True)
    (tmp_path / "etc/default/grub").write_text(lab.out(host, "cat /etc/default/grub") + "\n")
    (tmp_path / "var/lib/gpuhost-lab").mkdir(parents=True)
    (tmp_path / "var/lib/gpuhost-lab/grub-probe.conf").write_text(lab.out(host, "cat /var/lib/gpuhost-lab/grub-probe.conf") + "\n")
    ours = shimlib.grub_cfg(["6.1.0-26-amd64", "6.12.9+bpo-amd64"], shimlib.grub_settings(str(tmp_path)),
                            shimlib.grub_device(str(tmp_path)))

    def reading(cfg: str) -> list:
        flat, stack = [], shimlib.grub_menu(cfg)
        while stack:
            e = stack.pop(0)
            flat.append((e["id"], e["release"], " ".join((e["args"] or "").split())))
            stack[:0] = e["kids"]
        return flat

    assert reading(ours) == reading(real)
    for env in ("", "next_entry=1>2\n", "saved_entry=gnulinux-advanced-2b7c1a62-6c0e-4a4b-9d0e-1f0b8f0a1c11>"
                                         "gnulinux-6.1.0-26-amd64-advanced-2b7c1a62-6c0e-4a4b-9d0e-1f0b8f0a1c11\n"):
        a, b = shimlib.grub_entry(ours, env), shimlib.grub_entry(real, env)
        assert (a[0]["id"], a[1]) == (b[0]["id"], b[1]), env


def test_dev_holds_the_nodes_the_driver_made_and_pct_refuses_a_missing_devn_path(make_lab):
    """Step 9: /dev/nvidia* as the driver makes them (no nvidia-caps without MIG); pct start
    fails, as Proxmox's does, when a devN: path does not exist on the host."""
    lab = make_lab(SEED_HOST)
    nodes = lab.out("pve-gpu1", "ls /dev | grep ^nvidia | sort").split()
    assert nodes == sorted([f"nvidia{i}" for i in range(8)] + ["nvidiactl", "nvidia-modeset", "nvidia-uvm",
                                                               "nvidia-uvm-tools"])
    assert lab.out("pve-gpu1", "stat -c %t:%T /dev/nvidia-uvm") == "1fc:0", "nvidia-uvm's major (508), minor 0"
    lab.ssh("pve-gpu1", "sed -i 's/^hostname: .*/&\\ndev9: \\/dev\\/nvidia-caps\\/nvidia-cap1/' /etc/pve/lxc/129.conf")
    res = lab.ssh("pve-gpu1", "pct start 129", check=False)
    assert res.returncode != 0 and "'/dev/nvidia-caps/nvidia-cap1' does not exist" in res.stderr


def test_fabric_manager_refuses_a_driver_of_another_version_and_the_fabric_waits(make_lab, tmp_path):
    """The Fabric Manager User Guide: the daemon checks the loaded driver's version and aborts
    on a mismatch. The HGX H100 host with Fabric Manager one release behind, enabled: its boot
    starts the unit, the daemon refuses with the message real hosts log, the unit is not active
    and the GPUs' fabric registration stays In Progress; started with the right version, they
    register (Completed, Success)."""
    import yaml
    data = yaml.safe_load((SPECS / "hgx-h100.yml").read_text())
    data["nvidia"]["fabricmanager"] = {"version": "550.120", "enabled": True}
    spec = tmp_path / "hgx-behind.yml"
    spec.write_text(yaml.safe_dump(data))
    lab = make_lab(spec)
    res = lab.ssh("hgx-h100", "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg", check=False)
    assert res.returncode == 1 and ("fabric manager NVIDIA GPU driver interface version 550.120 don't match with "
                                    "driver version 550.127.05") in res.stderr
    assert lab.ssh("hgx-h100", "systemctl is-active nvidia-fabricmanager", check=False).stdout.strip() == "inactive"
    fabric = "nvidia-smi --query-gpu=fabric.state,fabric.status --format=csv,noheader | sort -u"
    assert lab.out("hgx-h100", fabric) == "In Progress, N/A"
    lab.ssh("hgx-h100", "sed -i 's/^Version: 550.120-1$/Version: 550.127.05-1/' /var/lib/dpkg/status")
    assert lab.ssh("hgx-h100", "systemctl start nvidia-fabricmanager", check=False).returncode == 0
    assert lab.out("hgx-h100", fabric) == "Completed, Success"
