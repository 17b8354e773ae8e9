"""Hosts shaped like real ones that the lab's first beliefs got wrong: each audited, fixed
through its reboots, fixed again (the second fix changes nothing and reboots nothing),
rebooted once more and audited. Files a fix edits keep every byte it did not mean to
change; no container gains a GPU."""
from __future__ import annotations

from conftest import SPECS, gpuhost, inventory_with
from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf


def boot_id(lab, host: str) -> str:
    return lab.out(host, "cat /proc/sys/kernel/random/boot_id")


def cycle(lab, host: str, inventory, found: dict[str, str], healthy: set[str] = frozenset({"pass", "na"})):
    """audit -> fix --reboot if-needed -> fix again -> reboot -> audit; returns the reports."""
    audit = gpuhost("audit", "-i", str(inventory))
    got = audit.status(host)
    assert {c: got[c] for c in found} == found, audit.stderr
    fix = gpuhost("fix", "-i", str(inventory), "--yes", "--reboot", "if-needed")
    assert fix.report is not None, fix.stderr
    after = fix.status(host)
    assert set(after.values()) <= set(healthy), ({c: fix.finding(host, c)["message"] for c, v in after.items()
                                                  if v not in healthy}, fix.stderr[-2000:])
    disk, boot = lab.disk(host), boot_id(lab, host)
    again = gpuhost("fix", "-i", str(inventory), "--yes", "--reboot", "if-needed")
    assert again.changed(host) == set(), again.stderr
    assert boot_id(lab, host) == boot, "a second fix rebooted the host"
    assert lab.disk(host) == disk, "a second fix wrote to the host"
    lab.reboot(host)
    final = gpuhost("audit", "-i", str(inventory))
    assert final.status(host) == after, final.stderr
    return audit, fix, final


def test_proxmox_zfs_on_grub_esps_edits_what_grub_reads(make_lab):
    lab = make_lab(SPECS / "pve-zfs-grub.yml")
    host = "pve-zfs-grub"
    kernel_cmdline = lab.out(host, "cat /etc/kernel/cmdline")
    grub_main = lab.out(host, "cat /etc/default/grub")
    assert "configured with: grub" in lab.out(host, "proxmox-boot-tool status")
    assert lab.out(host, "cat /proc/cmdline").startswith("BOOT_IMAGE=")
    audit, fix, _ = cycle(lab, host, lab.inventory, {
        "cpu.driver": "drift", "iommu.mode": "drift", "kernel.version": "drift", "kernel.reboot_pending": "pass"})
    assert fix.rc == 0, fix.stderr[-2000:]
    # GRUB reads its drop-in; /etc/kernel/cmdline, which nothing reads, is untouched
    dropin = lab.out(host, "cat /etc/default/grub.d/gpuhost.cfg")
    assert "amd_pstate=active" in dropin and "iommu=pt" in dropin
    assert lab.out(host, "cat /etc/kernel/cmdline") == kernel_cmdline
    assert lab.out(host, "cat /etc/default/grub") == grub_main
    cmdline = lab.out(host, "cat /proc/cmdline")
    assert cmdline.startswith("BOOT_IMAGE=/boot/vmlinuz-6.14.11-4-bpo12-pve ") and "amd_pstate=active" in cmdline
    assert lab.out(host, "cat /sys/devices/system/cpu/cpufreq/policy0/scaling_driver") == "amd-pstate-epp"


def test_debian_epyc_7003_gets_its_own_flavour_and_amd_pstate_on_the_new_kernel(make_lab):
    lab = make_lab(SPECS / "epyc7003-deb12.yml")
    host = "epyc7003-deb12"
    assert "cppc" not in lab.out(host, "grep -m1 flags /proc/cpuinfo").split(), "shared-memory CPPC shows no flag"
    assert lab.ssh(host, "test -d /sys/devices/system/cpu/cpu0/acpi_cppc").returncode == 0
    inv = inventory_with(lab, {host: {"gpuhost_kernel_min_version": "6.12"}})
    plain = gpuhost("audit", "-i", str(lab.inventory), "--controls", "cpu.driver,nvidia.persistence")
    assert plain.status(host) == {"cpu.driver": "manual", "nvidia.persistence": "pass"}
    assert "older than 6.3" in plain.finding(host, "cpu.driver")["message"]
    sysctl_conf = lab.out(host, "cat /etc/sysctl.conf") + "\n"
    audit, fix, _ = cycle(lab, host, inv, {"cpu.driver": "drift", "kernel.version": "drift", "nvidia.persistence": "pass",
                                           "numa.balancing": "drift"})
    assert fix.rc == 0, fix.stderr[-2000:]
    assert "/etc/sysctl.conf" in audit.finding(host, "numa.balancing")["message"]
    # the later setting commented out, every other byte kept, a copy in /var/backups/gpuhost
    assert lab.out(host, "cat /etc/sysctl.conf") + "\n" == sysctl_conf.replace(
        "kernel.numa_balancing = 1", "# disabled by gpuhost (numa.balancing): kernel.numa_balancing = 1")
    assert "kernel.numa_balancing = 1" in lab.out(host, "cat /var/backups/gpuhost/*sysctl.conf*")
    assert lab.out(host, "cat /proc/sys/kernel/numa_balancing") == "0"
    assert lab.out(host, "uname -r") == "6.12.9+bpo-amd64", "the -amd64 flavour, never -cloud or -rt"
    installed = lab.out(host, "dpkg-query -W -f='${Package}\\n' 'linux-image-*amd64'").split()
    assert sorted(installed) == ["linux-image-6.12.9+bpo-amd64", "linux-image-amd64"], "the series metapackage"
    assert lab.ssh(host, "test -e /lib/modules/6.12.9+bpo-amd64/updates/dkms/nvidia.ko").returncode == 0
    assert lab.out(host, "cat /sys/devices/system/cpu/amd_pstate/status") == "active"
    assert lab.out(host, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader") == "Enabled"


def test_a_driver_that_does_not_build_for_the_new_kernel_is_never_booted(make_lab, tmp_path):
    import yaml
    data = yaml.safe_load((SPECS / "pve-zfs-grub.yml").read_text())
    data["nvidia"]["builds_up_to"] = "6.11"
    data["boot"]["loader"] = "systemd-boot"
    spec = tmp_path / "old-driver.yml"
    spec.write_text(yaml.safe_dump(data))
    lab = make_lab(spec)
    host = "pve-zfs-grub"
    before = boot_id(lab, host)
    fix = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--reboot", "if-needed", "--controls", "kernel.version")
    assert fix.status(host) == {"kernel.version": "manual"}, fix.stderr[-2000:]
    assert "did not build" in fix.finding(host, "kernel.version")["message"]
    assert boot_id(lab, host) == before, "never rebooted into a kernel without the NVIDIA module"
    # the running kernel stays the default (pinned and refreshed), so an operator's reboot keeps the GPUs
    lab.reboot(host)
    assert lab.out(host, "uname -r") == "6.8.12-4-pve"
    assert lab.ssh(host, "nvidia-smi -L").returncode == 0
    again = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--reboot", "if-needed", "--controls", "kernel.version")
    assert again.changed(host) == set() and again.status(host) == {"kernel.version": "manual"}


def test_containers_splitting_gpus_keep_their_share(make_lab):
    lab = make_lab(SPECS / "pve-split-gpus.yml")
    host = "pve-split"
    confs = {v: lab.out(host, f"cat /etc/pve/lxc/{v}.conf") + "\n" for v in (201, 202, 203)}
    audit, fix, _ = cycle(lab, host, lab.inventory, {"lxc.gpu_passthrough": "drift"})
    assert fix.rc == 0 and fix.changed(host) == {"lxc.gpu_passthrough"}, fix.stderr[-2000:]
    msg = audit.finding(host, "lxc.gpu_passthrough")["observed"]
    assert "202: " in msg and "201" not in msg and "203" not in msg
    after = {v: lab.out(host, f"cat /etc/pve/lxc/{v}.conf") + "\n" for v in (201, 202, 203)}
    assert after[201] == confs[201] and after[203] == confs[203], "complete containers are left alone"
    for vmid in (201, 202, 203):
        before_gpus = lxcconf.inspect(str(vmid), confs[vmid]).gpu_nodes
        assert lxcconf.inspect(str(vmid), after[vmid]).gpu_nodes == before_gpus, f"{vmid} gained or lost a GPU"
    # 202: the stale 509 replaced in place by the current uvm major, v1 keys kept, uvm-tools added;
    # every other byte as it was
    assert after[202] == confs[202].replace("lxc.cgroup2.devices.allow: c 509:* rwm", "lxc.cgroup2.devices.allow: c 505:* rwm") \
        + "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file\n"
    assert lab.ssh(host, "ls -A /etc/pve/lxc/ | grep -v '\\.conf$'", check=False).stdout == "", "no temporary file in /etc/pve"


def test_ubuntu_splash_and_intel_idle(make_lab):
    lab = make_lab(SPECS / "ubuntu-splash.yml")
    host = "ubuntu-splash"
    assert "vt.handoff=7" in lab.out(host, "cat /proc/cmdline")
    audit, fix, _ = cycle(lab, host, lab.inventory, {
        "kernel.reboot_pending": "pass", "cpu.governor": "drift", "cpu.cstates": "drift", "nvidia.persistence": "drift",
        "cpu.driver": "pass", "iommu.mode": "pass", "nvidia.driver_pinned": "drift"})
    assert fix.rc == 0, fix.stderr[-2000:]
    # intel_pstate starts every policy in powersave (intel_pstate_cpu_init): gpuhost keeps performance at boot
    assert fix.changed(host) == {"cpu.governor", "cpu.cstates", "nvidia.persistence", "nvidia.driver_pinned"}
    # unattended-upgrades, on as Ubuntu installs it, now leaves the driver's packages alone (apt's own reading)
    blacklist = lab.out(host, "apt-config dump | grep '^Unattended-Upgrade::Package-Blacklist::'")
    assert blacklist.splitlines() == [f'Unattended-Upgrade::Package-Blacklist:: "{p}-550$";' for p in
                                      ("libnvidia-compute", "nvidia-dkms", "nvidia-driver", "nvidia-utils")], blacklist
    # Ubuntu's unit has no [Install]: the udev rule starts it; gpuhost's drop-in drops the flag
    assert lab.out(host, "cat /lib/systemd/system/nvidia-persistenced.service").count("--no-persistence-mode") == 1
    assert lab.out(host, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader") == "Enabled"


def test_blackwell_on_the_proprietary_module_is_for_a_person(make_lab):
    lab = make_lab(SPECS / "blackwell-proprietary.yml")
    host = "bw-proprietary"
    assert lab.ssh(host, "nvidia-smi -L", check=False).stdout.strip() == "No devices were found"
    audit = gpuhost("audit", "-i", str(lab.inventory))
    f = audit.finding(host, "nvidia.driver")
    assert f["status"] == "manual" and "open kernel modules" in f["message"] and "mismatch" not in f["message"]
    assert audit.status(host)["nvidia.persistence"] == "na"
    disk = lab.disk(host)
    fix = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--reboot", "if-needed")
    assert fix.rc == 2 and fix.changed(host) == set() and lab.disk(host) == disk


def test_a_vendor_persistence_unit_gets_a_dropin_never_a_replacement(make_lab):
    lab = make_lab(SPECS / "vendor-persistenced.yml")
    host = "vendor-pd"
    vendor = lab.out(host, "cat /lib/systemd/system/nvidia-persistenced.service")
    override = lab.out(host, "cat /etc/systemd/system/nvidia-persistenced.service.d/override.conf")
    audit, fix, _ = cycle(lab, host, lab.inventory, {"nvidia.persistence": "drift"})
    assert fix.rc == 0 and fix.changed(host) == {"nvidia.persistence"}, fix.stderr[-2000:]
    assert lab.out(host, "cat /lib/systemd/system/nvidia-persistenced.service") == vendor
    assert lab.out(host, "cat /etc/systemd/system/nvidia-persistenced.service.d/override.conf") == override
    assert lab.ssh(host, "test -e /etc/systemd/system/nvidia-persistenced.service", check=False).returncode == 1
    assert lab.out(host, "readlink /etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service") \
        == "/lib/systemd/system/nvidia-persistenced.service"
    assert lab.out(host, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader") == "Enabled"


def test_acs_on_a_switch_with_a_nic_is_cleared_before_iommu_groups_form(make_lab):
    lab = make_lab(SPECS / "switch-nic.yml")
    host = "switch-nic"
    ports = "setpci -s 02:00.0 ECAP_ACS+6.w; setpci -s 02:01.0 ECAP_ACS+6.w; setpci -s 02:02.0 ECAP_ACS+6.w"
    assert lab.out(host, ports).split() == ["001d"] * 3, "the kernel sets redirect with the IOMMU on"
    audit, fix, _ = cycle(lab, host, lab.inventory, {"pcie.acs": "drift", "iommu.mode": "pass"})
    assert fix.rc == 0, fix.stderr[-2000:]
    assert "02:02.0" in audit.finding(host, "pcie.acs")["observed"], "the NIC's port counts"
    assert "pci=disable_acs_redir=pci:1000:c030" in lab.out(host, "cat /proc/cmdline")
    assert lab.out(host, ports).split() == ["0011"] * 3
    assert lab.out(host, "setpci -s 00:01.1 ECAP_ACS+6.w") == "001d", "root ports are left alone"


def test_a_vm_host_keeps_acs_and_loses_the_old_unit(make_lab):
    lab = make_lab(SPECS / "pve-vm-host.yml")
    host = "pve-vmhost"
    audit, fix, final = cycle(lab, host, lab.inventory, {
        "pcie.acs": "drift", "nvidia.driver": "na", "pcie.mrrs": "na", "iommu.mode": "pass"})
    assert fix.rc == 0, fix.stderr[-2000:]
    assert "hostpci in VM 110" in audit.finding(host, "pcie.acs")["message"]
    assert final.status(host)["pcie.acs"] == "na"
    assert lab.ssh(host, "test -e /etc/systemd/system/gpuhost-pcie-acs.service", check=False).returncode == 1
    assert lab.out(host, "setpci -s 02:00.0 ECAP_ACS+6.w") == "001d", "isolation kept after the reboot"


def test_secure_boot_lockdown_clears_acs_by_the_command_line_and_leaves_mrrs_to_firmware(make_lab, tmp_path):
    """Kernel lockdown (Secure Boot) refuses user space's PCI config writes with EPERM
    (drivers/pci/pci-sysfs.c): gpuhost never tries one. ACS redirect is cleared by the
    command line alone, at the reboot the fix asks for; a MaxReadReq of 512 is the
    firmware's to change (manual); the second fix changes nothing."""
    import yaml

    data = yaml.safe_load((SPECS / "switch-host.yml").read_text())
    data["firmware"]["lockdown"] = "integrity"
    next(d for d in data["pci"] if d["bdf"] == "0000:03:00.0")["mrrs"] = 512
    spec = tmp_path / "switch-host.yml"
    spec.write_text(yaml.safe_dump(data))
    lab = make_lab(spec)
    host = "switch-host"
    assert lab.out(host, "cat /sys/kernel/security/lockdown") == "none [integrity] confidentiality"
    # as the real setpci does: the kernel's EPERM is a pcilib warning, the exit status 0, the register as it was
    refused = lab.ssh(host, "setpci -s 02:00.0 ECAP_ACS+6.w=0011")
    assert "sysfs_write: write failed: Operation not permitted" in refused.stderr, refused
    assert lab.out(host, "setpci -s 02:00.0 ECAP_ACS+6.w") == "001d"
    audit, fix, final = cycle(lab, host, lab.inventory, {"pcie.acs": "drift", "pcie.mrrs": "manual"},
                              healthy={"pass", "na", "manual"})
    assert fix.rc == 2 and "pcie.acs" in fix.changed(host) and "pcie.mrrs" not in fix.changed(host), fix.stderr[-2000:]
    assert "kernel parameter pci=disable_acs_redir=pci:1000:c030 on the boot command line" in fix.stderr
    assert "set PCI register" not in fix.stderr, "no config write is planned under lockdown"
    assert "kernel lockdown (integrity" in audit.finding(host, "pcie.mrrs")["message"]
    assert "pci=disable_acs_redir=pci:1000:c030" in lab.out(host, "cat /proc/cmdline")
    ports = "setpci -s 02:00.0 ECAP_ACS+6.w; setpci -s 02:01.0 ECAP_ACS+6.w"
    assert lab.out(host, ports).split() == ["0011", "0011"], "the boot cleared the redirect"
    assert final.status(host)["pcie.acs"] == "pass" and final.status(host)["pcie.mrrs"] == "manual"


def test_a_write_the_firmware_refuses_fails_once_then_is_manual_until_a_boot(make_lab, tmp_path):
    """The fourth review: an Intel host whose firmware turned Turbo off (intel_pstate refuses
    no_turbo 0, EPERM) drifted with a fix that failed the same way at every run. The first fix
    fails naming the refusal and remembers it on the host; the second and third change nothing,
    fail nothing and reboot nothing (cpu.boost is manual, naming the refusal); a boot tries again."""
    import yaml

    spec = yaml.safe_load((SPECS / "intel-grub.yml").read_text())
    spec["firmware"]["boost"] = False
    spec["cpu"].pop("max_khz_cap", None)
    (tmp_path / "intel-no-turbo.yml").write_text(yaml.safe_dump(spec))
    lab = make_lab(tmp_path / "intel-no-turbo.yml")
    host, inv = "intel-grub", str(lab.inventory)
    assert gpuhost("audit", "-i", inv, "--controls", "cpu.boost").status(host) == {"cpu.boost": "drift"}
    first = gpuhost("fix", "-i", inv, "--controls", "cpu.boost", "--yes")
    assert first.rc == 3 and first.status(host)["cpu.boost"] == "error", first.stderr[-2000:]
    assert "no_turbo" in first.finding(host, "cpu.boost")["message"]
    boot = boot_id(lab, host)
    for _ in range(2):
        disk = lab.disk(host)
        again = gpuhost("fix", "-i", inv, "--controls", "cpu.boost", "--yes", "--reboot", "if-needed")
        f = again.finding(host, "cpu.boost")
        assert again.rc == 2 and f["status"] == "manual", (f, again.stderr[-2000:])
        assert "the kernel refused 0 for /sys/devices/system/cpu/intel_pstate/no_turbo" in f["message"], f
        assert again.changed(host) == set() and lab.disk(host) == disk and boot_id(lab, host) == boot
    lab.reboot(host)
    assert gpuhost("audit", "-i", inv, "--controls", "cpu.boost").status(host) == {"cpu.boost": "drift"}


def test_a_bare_metal_mig_host_with_hotplug_slots_and_its_own_cuda_runtimes(make_lab):
    """The fourth review's false findings, end to end: MIG with the instances a unit creates at
    every boot passes through fix and reboot; the firmware's hotplug slots are no lost CPUs;
    the host's own CUDA runtimes are judged. Without the unit, the next boot leaves MIG on with
    no instance: manual, and no fix."""
    lab = make_lab(SPECS / "h100-mig-bare-metal.yml")
    host = "h100-mig"
    _, fix, final = cycle(lab, host, lab.inventory, {"nvidia.gpu_modes": "pass", "cpu.online": "pass",
                                                     "guest.cuda": "pass", "nvidia.persistence": "drift"})
    assert fix.changed(host) == {"nvidia.persistence"}, fix.stderr[-2000:]
    assert "(3 GPU instances)" in final.finding(host, "nvidia.gpu_modes")["observed"]
    assert "8 hotplug slots" in final.finding(host, "cpu.online")["observed"]
    assert "torch CUDA 12.8 at /opt/serve/.venv" in final.finding(host, "guest.cuda")["observed"]
    lab.ssh(host, "rm /etc/systemd/system/multi-user.target.wants/mig-layout.service")
    lab.reboot(host)
    after = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--controls", "nvidia.gpu_modes")
    f = after.finding(host, "nvidia.gpu_modes")
    assert f["status"] == "manual" and "no GPU instance, so no CUDA device" in f["message"], f
    assert after.changed(host) == set()


def test_the_seed_with_two_servers_on_one_node_gets_disjoint_cpu_sets(make_lab):
    """Issue 37's seed copy, with its ZFS root and the installer's ARC limit: the fourth review's harm. Two serving containers with `cores: 24`
    on node 0's GPUs were both pinned to the same CPUs, for good (pvestatd never rebalances a
    fixed set). Now the full cycle, audit, fix through its reboot, a second fix that changes
    nothing, a boot, gives each 12 whole cores of node 0 that the other does not have, and
    both run on them; the GPUs' 600 W default limit passes as it is."""
    lab = make_lab(SPECS / "pve-gpu1-two-servers.yml")
    host = "pve-gpu1-two"
    inventory = inventory_with(lab, {host: {"gpuhost_lxc_restart": True}})
    audit, fix, final = cycle(lab, host, inventory, {"lxc.cpuset": "drift", "lxc.gpu_passthrough": "drift",
                                                     "nvidia.power_limit": "pass", "storage.zfs_arc": "drift"})
    assert fix.rc == 0, fix.stderr[-2000:]
    sets = {v: lxcconf.cpu_request(lab.out(host, f"cat /etc/pve/lxc/{v}.conf"))[0] for v in (129, 131)}
    assert sets == {129: "1-12,65-76", 131: "13-24,77-88"}, sets
    running = {v: lab.out(host, f"cat /sys/fs/cgroup/lxc/{v}/cpuset.cpus.effective") for v in (129, 131)}
    assert running == sets, running
    assert lxcconf.cpu_request(lab.out(host, "cat /etc/pve/lxc/130.conf")) == (None, 8), "a container without GPUs is left alone"
    assert final.status(host)["lxc.cpuset"] == "pass"
    # the root is on ZFS: the ARC's limits come from the initramfs the fix built again, and the
    # installer's 16 GiB limit is in effect now that the minimum is below it
    assert lab.out(host, "cat /sys/module/zfs/parameters/zfs_arc_max") == "17179869184"
    assert "c_max                           4    17179869184" in lab.out(host, "cat /proc/spl/kstat/zfs/arcstats")
    assert final.status(host)["storage.zfs_arc"] == "pass"


def test_a_kernel_held_back_by_grubs_own_default_is_never_installed_again(make_lab, tmp_path):
    """The fourth review: a kernel of the minimum is installed with its module, but GRUB_DEFAULT
    names the older entry (the operator's choice): kernel.version was drift whose install
    changed nothing at every run. Now `fix` three times: each says it is manual, and none
    installs, changes, fails or reboots anything."""
    import yaml

    old, new = "6.1.0-26-amd64", "6.12.9+bpo-amd64"
    spec = yaml.safe_load((SPECS / "intel-grub.yml").read_text())
    uuid = spec["boot"]["cmdline"].split("root=UUID=")[1].split()[0]
    spec["kernel"]["installed"] = [old, new]
    spec["boot"]["grub_default"] = f'"gnulinux-advanced-{uuid}>gnulinux-{old}-advanced-{uuid}"'
    (tmp_path / "held.yml").write_text(yaml.safe_dump(spec))
    lab = make_lab(tmp_path / "held.yml")
    host = "intel-grub"
    assert lab.out(host, "uname -r") == old
    inventory = inventory_with(lab, {host: {"gpuhost_kernel_min_version": "6.12"}})
    boot, disk = boot_id(lab, host), lab.disk(host)
    for _ in range(3):
        run = gpuhost("fix", "-i", str(inventory), "--controls", "kernel.version,kernel.reboot_pending", "--yes",
                      "--reboot", "if-needed")
        f = run.finding(host, "kernel.version")
        assert f["status"] == "manual" and f"{new} is installed with the NVIDIA module" in f["message"], f
        assert run.status(host)["kernel.reboot_pending"] == "pass"
        assert run.rc == 2 and run.changed(host) == set(), run.stderr[-2000:]
        assert boot_id(lab, host) == boot and lab.disk(host) == disk
