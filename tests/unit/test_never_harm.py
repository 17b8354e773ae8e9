"""Never harm a host, never loop: the cases issue 15's review found, at unit speed.

Each case lays a host out with the lab's own provisioning and kernel model (BASE from
test_scenarios: Proxmox VE 8 on ZFS/systemd-boot, an EPYC 9335, one RTX PRO 6000), brings it
into the state the review found (a backport kernel without its NVIDIA module, nvidia-uvm not
loaded, a held GRUB default...), and checks what gpuhost decides: what it would fix, and
above all that no finding asks for a reboot it must not do.
"""
from __future__ import annotations

import json
from pathlib import Path

import scenarios
from test_scenarios import BASE, CT_MOUNTS, INTEL, ROOT_ARGS, _render, ct, write

from ansible_collections.gpuhost.stack.plugins.module_utils import controls

RUNNING, BPO = "6.8.12-4-pve", "6.14.8-2-bpo12-pve"
PVE8_68 = {"kernel": {"installed": [RUNNING]}}


def install_kernel(host: scenarios.Rendered, release: str, module: bool) -> None:
    """What `apt install proxmox-kernel-6.14` leaves on a host after it booted: the image in
    /boot, its modules directory, the NVIDIA module only if dkms built it."""
    host.write(f"/boot/vmlinuz-{release}", "image\n")
    host.write(f"/lib/modules/{release}/modules.dep", "")
    if module:
        host.write(f"/lib/modules/{release}/updates/dkms/nvidia.ko", "nvidia\n")


def reboots(findings: dict) -> list[str]:
    return [cid for cid, f in findings.items() if f["status"] == "pending_reboot" or f.get("reboot_required")
            and f["status"] != "drift"]


# ---- a kernel without the NVIDIA module is never booted, never left as the default --------
def test_a_bpo12_kernel_without_the_nvidia_module_is_pinned_away_not_booted(tmp_path):
    host = _render(tmp_path, PVE8_68, None)
    install_kernel(host, BPO, module=False)
    # systemd-boot on the ESPs: the newest kernel boots next once refreshed
    host.write("/var/lib/gpuhost-lab/esp/loader/loader.conf", f"timeout 3\ndefault proxmox-{BPO}.conf\n")
    findings = host.judge()
    kv = findings["kernel.version"]
    assert kv["status"] == "drift", kv
    assert kv["fix"] == {"pin": {"release": RUNNING, "tool": "proxmox-boot-tool"}}
    assert BPO in kv["message"] and "nvidia.ko" in kv["message"]
    assert findings["kernel.reboot_pending"]["status"] == "manual"
    assert not reboots(findings), "no finding may ask for a reboot into a kernel without the module"
    # after the pin: the running kernel boots, and a later run neither unpins nor reboots
    host.write("/etc/kernel/proxmox-boot-pin", RUNNING + "\n")
    again = host.judge()
    assert again["kernel.version"]["status"] == "manual" and "(pinned)" in again["kernel.version"]["message"]
    assert "unpin" not in repr(again["kernel.version"]["fix"])
    assert again["kernel.reboot_pending"]["status"] == "pass"
    assert not reboots(again)


def test_the_reboot_gate_holds_every_pending_reboot_while_the_next_kernel_has_no_module(tmp_path):
    # iommu.mode waits for a boot (iommu=pt persisted, not live): that boot would start BPO
    host = _render(tmp_path, {**PVE8_68, "boot": {"cmdline": "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active"}},
                   None)
    host.write("/etc/kernel/cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active iommu=pt\n")
    install_kernel(host, BPO, module=False)
    f = host.judge()["iommu.mode"]
    assert f["status"] == "manual" and not f["reboot_required"], f
    assert "not rebooted" in f["message"] and BPO in f["message"]


def test_plain_grub_proxmox_pins_with_proxmox_boot_tool(tmp_path):
    host = _render(tmp_path, {**PVE8_68, "boot": {"loader": "grub"}}, None)
    install_kernel(host, BPO, module=False)
    host.write("/boot/grub/grub.cfg", grub_cfg(tmp_path, [RUNNING, BPO]))
    f = host.finding("kernel.version")
    assert f["status"] == "drift" and f["fix"]["pin"]["tool"] == "proxmox-boot-tool", f


def test_plain_grub_debian_pins_by_entry_id(tmp_path):
    rel, new = "6.1.0-26-amd64", "6.12.12+bpo-amd64"
    host = _render(tmp_path, {"os": {"proxmox_ve": None}, "kernel": {"installed": [rel]},
                              "boot": {"loader": "grub", "cmdline": "root=UUID=5d7e2c10-3a4b-4c5d-8e9f-0a1b2c3d4e5f ro quiet "
                                                                   "amd_pstate=active iommu=pt"}}, None)
    install_kernel(host, new, module=False)
    host.write("/boot/grub/grub.cfg", grub_cfg(tmp_path, [rel, new]))
    f = host.finding("kernel.version", kernel_min_version="6.12")
    assert f["status"] == "drift", f
    pin = f["fix"]["pin"]
    assert pin["tool"] == "grub" and pin["release"] == rel
    assert pin["grub_default"] == ("gnulinux-advanced-5d7e2c10-3a4b-4c5d-8e9f-0a1b2c3d4e5f>"
                                   f"gnulinux-{rel}-advanced-5d7e2c10-3a4b-4c5d-8e9f-0a1b2c3d4e5f")


def grub_cfg(root: Path, kernels: list[str]) -> str:
    from gpuhost.lab.shims import shimlib
    return shimlib.grub_cfg(kernels, shimlib.grub_settings(str(root)), shimlib.grub_device(str(root)))


# ---- GRUB's default resolved as GRUB does: a held kernel is not a pending reboot ----------
def test_a_deliberately_held_grub_default_is_not_a_reboot_every_run(tmp_path):
    old, new = "6.1.0-26-amd64", "6.12.12+bpo-amd64"
    uuid = "5d7e2c10-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
    held = f"gnulinux-advanced-{uuid}>gnulinux-{old}-advanced-{uuid}"
    host = _render(tmp_path, {"os": {"proxmox_ve": None}, "kernel": {"installed": [old, new]},
                              "boot": {"loader": "grub", "grub_default": f'"{held}"',
                                       "cmdline": f"root=UUID={uuid} ro quiet amd_pstate=active iommu=pt"}}, None)
    facts = host.facts()
    assert facts["boot"]["running_kernel"] == old, "the lab boots the held entry"
    assert facts["boot"]["default_kernel"] == old
    assert host.finding("kernel.reboot_pending")["status"] == "pass"


def test_a_kernel_held_back_by_the_grub_default_is_manual_not_installed_for_ever(tmp_path):
    """The fourth review: a kernel of the minimum is installed, with its module, but GRUB's own
    default (the operator's: an entry id, or GRUB_DEFAULT=saved and grub-set-default) starts an
    older one. Installing the series changes nothing and the reboot starts the same kernel:
    manual, with no fix and no reboot; the same at every later audit."""
    old, new = "6.1.0-26-amd64", "6.12.12+bpo-amd64"
    uuid = "5d7e2c10-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
    for held in (f'"gnulinux-advanced-{uuid}>gnulinux-{old}-advanced-{uuid}"', "saved"):
        host = _render(tmp_path / held[:5].strip('"'), {
            "os": {"proxmox_ve": None}, "kernel": {"installed": [old, new]},
            "boot": {"loader": "grub", "grub_default": held,
                     "cmdline": f"root=UUID={uuid} ro quiet amd_pstate=active iommu=pt"}}, None)
        if held == "saved":
            # grub-set-default wrote the older entry as the saved one (grubenv)
            host.write("/boot/grub/grubenv", "# GRUB Environment Block\n"
                       f"saved_entry=gnulinux-advanced-{uuid}>gnulinux-{old}-advanced-{uuid}\n")
            host.reboot()
        facts = host.facts()
        assert facts["boot"]["running_kernel"] == old and facts["boot"]["default_kernel"] == old, facts["boot"]
        for _ in range(3):
            f = host.finding("kernel.version", kernel_min_version="6.12")
            assert f["status"] == "manual" and not f["fix"] and not f["reboot_required"], f
            assert f"{new} is installed with the NVIDIA module, but the boot loader's own default" in f["message"]
            assert host.finding("kernel.reboot_pending")["status"] == "pass"


def test_a_consumed_one_time_rollback_boot_is_said_not_stale(tmp_path):
    """T3-12: `proxmox-boot-tool kernel pin <old> --next-boot`, then a reboot: that boot runs
    the old kernel once, and proxmox-boot-cleanup.service removes the pin and refreshes the
    ESPs at it. The newer default was installed before this boot, yet the next boot does start
    it: said so, never "a reboot will not help"; when to go back is the operator's, so it is
    manual and gpuhost never reboots for it."""
    old, new = "6.8.12-4-pve", "6.14.11-4-pve"
    host = _render(tmp_path, {"kernel": {"installed": [old, new]}}, None)
    assert host.facts()["boot"]["running_kernel"] == new
    host.write("/etc/kernel/next-boot-pin", old + "\n")
    # its refresh writes the pinned kernel as the ESPs' default (zz-proxmox-boot)
    from gpuhost.lab.shims import shimlib
    shimlib.esp_refresh([old, new], (host.root / "etc/kernel/cmdline").read_text().strip(), old, root=str(host.root))
    host.reboot()
    boot = host.facts()["boot"]
    assert boot["running_kernel"] == old and boot["default_kernel"] == new and boot["next_boot_pin_consumed"], boot
    assert not (host.root / "etc/kernel/next-boot-pin").exists()
    # the new kernel's image landed well before this boot (a boot time after its ctime: ctime
    # cannot be set back)
    import time
    stat = (host.root / "proc/stat").read_text()
    host.write("/proc/stat", "\n".join(f"btime {int(time.time()) + 600}" if line.startswith("btime ") else line
                                       for line in stat.splitlines()) + "\n")
    f = host.finding("kernel.reboot_pending")
    assert f["status"] == "manual" and not f["reboot_required"], f
    assert f"{old} ran this boot once: proxmox-boot-tool kernel pin --next-boot" in f["message"]
    assert "gpuhost does not reboot for a kernel chosen for one boot" in f["message"]
    # without the cleanup's trace the same state is a boot that did not apply the default
    (host.root / "run/gpuhost-lab-units/proxmox-boot-cleanup.service").unlink()
    f = host.finding("kernel.reboot_pending")
    assert f["status"] == "manual" and "a reboot will not help" in f["message"], f


def test_a_grub_reboot_trial_boot_is_pending_not_stale(tmp_path):
    old, new = "6.1.0-26-amd64", "6.12.12+bpo-amd64"
    uuid = "5d7e2c10-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
    host = _render(tmp_path, {"os": {"proxmox_ve": None}, "kernel": {"installed": [old, new]},
                              "boot": {"loader": "grub", "grub_default": f'"gnulinux-advanced-{uuid}>gnulinux-{old}-advanced-{uuid}"',
                                       "cmdline": f"root=UUID={uuid} ro quiet amd_pstate=active iommu=pt"}}, None)
    # grub-reboot writes next_entry into grubenv: used once by the next boot
    host.write("/boot/grub/grubenv", f"# GRUB Environment Block\nnext_entry=gnulinux-advanced-{uuid}>gnulinux-{new}-advanced-{uuid}\n")
    f = host.finding("kernel.reboot_pending")
    assert f["status"] == "pending_reboot" and "once" in f["message"], f


# ---- no second reboot for a finding the first did not clear -------------------------------
def test_a_finding_gpuhosts_last_reboot_did_not_clear_is_manual(tmp_path):
    host = _render(tmp_path, {"boot": {"cmdline": "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active"}}, None)
    host.write("/etc/kernel/cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active iommu=pt\n")
    first = host.judge()
    assert first["iommu.mode"]["status"] == "pending_reboot"
    record = controls.reboot_record(first, "a-boot-before-this-one", "2026-12-02T03:00:00Z")
    assert set(record["findings"]) >= {"iommu.mode"}
    host.write("/var/lib/gpuhost/last-reboot.json", json.dumps(record))
    after = host.judge()
    assert after["iommu.mode"]["status"] == "manual", after["iommu.mode"]
    assert "second reboot will not help" in after["iommu.mode"]["message"]
    assert not reboots(after)
    # the same record, written in this very boot (the reboot has not happened): still pending
    boot = host.facts()["boot"]
    host.write("/var/lib/gpuhost/last-reboot.json", json.dumps({**record, "boot_id": boot["boot_id"]}))
    assert host.finding("iommu.mode")["status"] == "pending_reboot"
    # gpuhost's reboot a minute before this boot started: that boot did not apply it
    host.write("/var/lib/gpuhost/last-reboot.json", json.dumps({**record, "epoch": boot["boot_time"] - 60}))
    assert host.finding("iommu.mode")["status"] == "manual"
    # a record from weeks before this boot: somebody else's boot since, the finding is new again
    host.write("/var/lib/gpuhost/last-reboot.json", json.dumps({**record, "epoch": boot["boot_time"] - 30 * 86400}))
    assert host.finding("iommu.mode")["status"] == "pending_reboot"


def test_a_record_another_user_could_have_written_is_not_trusted(tmp_path):
    """The fault campaign's planted last-reboot.json (another user's, mode 0666) stopped every
    reboot and blamed one that never happened: gpuhost trusts its records on a host only as it
    writes them (root's, no one else may write), and says which one it ignored."""
    import os

    host = _render(tmp_path, {"boot": {"cmdline": "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active"}}, None)
    host.write("/etc/kernel/cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active iommu=pt\n")
    record = controls.reboot_record(host.judge(), "a-boot-before-this-one", "2026-12-02T03:00:00Z")
    path = host.root / "var/lib/gpuhost/last-reboot.json"
    host.write("/var/lib/gpuhost/last-reboot.json", json.dumps(record))
    assert host.finding("iommu.mode")["status"] == "manual"          # gpuhost's own: trusted
    for planted in ((0, 0o666), (1000, 0o644), (1000, 0o600)):
        os.chown(path, planted[0], -1)
        os.chmod(path, planted[1])
        assert host.finding("iommu.mode")["status"] == "pending_reboot", planted
        why = "writable by others (mode 0666)" if planted[0] == 0 else "owned by uid 1000"
        assert host.facts()["boot"]["untrusted_records"] == [
            f"/var/lib/gpuhost/last-reboot.json: {why}, not gpuhost's: ignored"]
    path.unlink()
    path.symlink_to("/etc/hostname")
    assert host.finding("iommu.mode")["status"] == "pending_reboot"
    assert "not a plain file" in host.facts()["boot"]["untrusted_records"][0]


def test_a_write_the_kernel_refused_in_this_boot_is_manual_not_a_fix_for_ever(tmp_path):
    """The runtime module's record of a refused write (intel_pstate's EPERM for no_turbo 0 with
    Turbo off in the firmware): in the boot it was refused, the finding is manual naming it and
    carries no fix; a record of another boot is history, and the fix is tried again."""
    host = _render(tmp_path, {"firmware": {"vendor_cpu": "GenuineIntel", "cpu_family": 6, "hwp": True,
                                           "model_name": "INTEL(R) XEON(R) PLATINUM 8568Y+", "boost": False},
                              "cpu": {"boost": False}, "boot": {"cmdline": "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet iommu=pt"}},
                   None)
    f = host.finding("cpu.boost")
    assert f["status"] == "drift" and {"kind": "sysfs", "path": "/sys/devices/system/cpu/intel_pstate/no_turbo", "value": "0"} in \
        f["fix"]["runtime"], f
    bid = host.facts()["boot"]["boot_id"]
    record = {"/sys/devices/system/cpu/intel_pstate/no_turbo": {"value": "0", "error": "Operation not permitted",
                                                                "boot_id": bid, "since": "2026-12-07T02:40:00Z"}}
    host.write("/var/lib/gpuhost/refused-writes.json", json.dumps(record))
    f = host.finding("cpu.boost")
    assert f["status"] == "manual" and not f["fix"], f
    assert "the kernel refused 0 for /sys/devices/system/cpu/intel_pstate/no_turbo at gpuhost's fix in this boot " \
           "(Operation not permitted)" in f["message"]
    record[next(iter(record))]["boot_id"] = "an-earlier-boot"
    host.write("/var/lib/gpuhost/refused-writes.json", json.dumps(record))
    assert host.finding("cpu.boost")["status"] == "drift"


# ---- a container keeps its GPUs -----------------------------------------------------------
def test_an_allow_for_nvidia_uvm_is_kept_while_the_module_is_not_loaded(tmp_path):
    # after a host boot nothing has loaded nvidia-uvm yet: 508 is not in /proc/devices
    host = _render(tmp_path, {"nvidia": {"char_majors": {"nvidia": 195, "nvidia-caps": 236}}}, None)
    assert "508" not in host.facts()["nvidia"]["char_devices"]
    f = host.finding("lxc.gpu_passthrough")
    assert f["status"] == "manual" and "lxc.gpu_nodes" in f["message"], f
    assert not f["fix"], "never deletes the allow nor restarts the container"


DEV_CT = """arch: amd64
hostname: infer
dev0: /dev/nvidia0,gid=44
dev1: /dev/nvidiactl,gid=44
dev2: /dev/nvidia-uvm,gid=44
dev3: /dev/nvidia-uvm-tools,gid=44
"""


def test_a_devn_container_is_not_given_mig_caps_it_does_not_use(tmp_path):
    host = _render(tmp_path, ct(DEV_CT), None)
    f = host.finding("lxc.gpu_passthrough")
    assert f["status"] == "pass", f


def test_a_devn_for_a_node_the_host_lacks_is_never_added(tmp_path):
    host = _render(tmp_path, {**ct("arch: amd64\nhostname: infer\ndev0: /dev/nvidia0,gid=44\ndev1: /dev/nvidiactl,gid=44\n"),
                              "nvidia": {"char_majors": {"nvidia": 195, "nvidia-caps": 236}}}, None)
    assert not (tmp_path / "dev/nvidia-uvm").exists()
    f = host.finding("lxc.gpu_passthrough")
    assert f["status"] == "manual" and "/dev/nvidia-uvm" in f["message"], f
    assert not f["fix"]


def test_an_allow_line_with_a_trailing_comment_passes(tmp_path):
    text = CT_MOUNTS.replace("c 195:* rwm", "c 195:* rwm # nvidia").replace("c 508:* rwm", "c 508:* rwm # nvidia-uvm")
    host = _render(tmp_path, ct(text), None)
    assert host.finding("lxc.gpu_passthrough")["status"] == "pass"


# ---- reboot loops: what a boot cannot apply is never pending_reboot -----------------------
def test_shared_memory_cppc_on_6_8_gets_amd_pstate_active_not_a_bare_reboot(tmp_path):
    # a Threadripper PRO 5000WX workstation (shared-memory CPPC, no cpuinfo cppc) on PVE 8's 6.8
    host = _render(tmp_path, {**PVE8_68, "firmware": {"cpu_family": 25, "cppc_interface": "shared_memory",
                                                       "acpi_pm_profile": 3,
                                                       "model_name": "AMD Ryzen Threadripper PRO 5975WX 32-Cores"},
                              "boot": {"cmdline": ROOT_ARGS + " iommu=pt"}}, None)
    facts = host.facts()
    assert facts["cpufreq"]["driver"] == "acpi-cpufreq", "6.5-6.10 skip shared-memory designs without amd_pstate="
    f = host.finding("cpu.driver")
    assert f["status"] == "drift" and f["fix"].get("cmdline_set") == {"amd_pstate": "active"}, f


def test_intel_pstate_boots_in_powersave_so_a_hand_set_governor_is_drift(tmp_path):
    host = _render(tmp_path, {**INTEL, "cpu": {"governor_default": "schedutil"}}, None)
    for gov in tmp_path.glob("sys/devices/system/cpu/cpufreq/policy*/scaling_governor"):
        assert gov.read_text().strip() == "powersave"
        gov.write_text("performance\n")            # the operator's echo, gone at the next boot
        (gov.parent / "energy_performance_preference").write_text("performance\n")
    f = host.finding("cpu.governor")
    assert f["status"] == "drift" and "nothing sets it at boot" in f["message"], f


# ---- missed drift ---------------------------------------------------------------------------
PVE9 = {"os": {"version_id": "13", "codename": "trixie", "pretty_name": "Debian GNU/Linux 13 (trixie)",
               "proxmox_ve": "9.0.3"}}


def test_sysctl_conf_does_nothing_on_debian_13(tmp_path):
    conf = "kernel.numa_balancing = 0\n"
    trixie = _render(tmp_path / "trixie", {**PVE9, "sysctl_default": {"kernel.numa_balancing": 1}},
                     write("/etc/sysctl.conf", conf))
    assert not (tmp_path / "trixie/etc/sysctl.d/99-sysctl.conf").is_symlink()
    f = trixie.finding("numa.balancing")
    assert f["status"] == "drift" and f["observed"] == "1", f
    bookworm = _render(tmp_path / "bookworm", {"sysctl_default": {"kernel.numa_balancing": 1}},
                       write("/etc/sysctl.conf", conf))
    assert bookworm.finding("numa.balancing")["status"] == "pass"


def test_pve9_still_booting_a_pinned_6_8_is_behind(tmp_path):
    host = _render(tmp_path, {**PVE9, "kernel": {"installed": [RUNNING, "6.14.8-1-pve"], "pinned": RUNNING}}, None)
    f = host.finding("kernel.version")
    assert f["status"] != "na" and f["expected"] == ">= 6.14", f


# ---- maintenance: series metapackages, never one ABI image ---------------------------------
def test_debian_installs_the_backports_metapackage(tmp_path):
    host = _render(tmp_path, {"os": {"proxmox_ve": None}, "kernel": {"installed": ["6.1.0-26-amd64"]},
                              "boot": {"loader": "grub", "cmdline": "root=UUID=5d7e2c10-3a4b-4c5d-8e9f-0a1b2c3d4e5f ro quiet "
                                                                   "amd_pstate=active iommu=pt"}}, None)
    f = host.finding("kernel.version", kernel_min_version="6.12")
    assert f["status"] == "drift"
    assert f["fix"]["packages"] == ["linux-image-amd64", "linux-headers-amd64"]
    assert f["fix"]["default_release"] == "bookworm-backports"


def test_ubuntu_installs_the_hwe_series(tmp_path):
    host = _render(tmp_path, {"os": {"id": "ubuntu", "version_id": "24.04", "codename": "noble",
                                     "pretty_name": "Ubuntu 24.04.1 LTS", "proxmox_ve": None},
                              "kernel": {"installed": ["6.8.0-45-generic"]},
                              "boot": {"loader": "grub", "cmdline": "quiet splash amd_pstate=active iommu=pt"}}, None)
    f = host.finding("kernel.version", kernel_min_version="6.14")
    assert f["status"] == "drift" and f["fix"]["packages"] == ["linux-generic-hwe-24.04"], f


# ---- real data read right -------------------------------------------------------------------
def test_a_gpu_that_fell_off_the_bus_is_an_error_never_a_register_to_fix(tmp_path):
    gpu = {**BASE["nvidia"]["gpus"][0], "health": {"off_bus": True}}
    host = _render(tmp_path, {"nvidia": {"gpus": [gpu]}}, None)
    raw = (tmp_path / "sys/bus/pci/devices/0000:01:00.0/config").read_bytes()
    assert raw[:4] == b"\xff\xff\xff\xff", "the lab reads a dead GPU's config space as all ones"
    for cid in ("pcie.mrrs", "pcie.link"):
        f = host.finding(cid)
        assert f["status"] == "error", f
        assert "does not answer" in f["message"] and "0000:01:00.0" in f["message"] and "0000:00:01.1" in f["message"]
        assert not f["fix"]


def test_etc_kernel_cmdline_counts_its_first_line_only(tmp_path):
    host = _render(tmp_path, {}, None)
    host.write("/etc/kernel/cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active iommu=pt\n"
                                      "# notes: try pcie_aspm=off\nnosmt\n")
    assert host.facts()["boot"]["persisted_cmdline"] == "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active iommu=pt"
    assert host.finding("kernel.reboot_pending")["status"] == "pass"


def test_a_quoted_value_and_an_unbalanced_quote_never_fail_the_host(tmp_path):
    host = _render(tmp_path, {"boot": {"cmdline": 'root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active iommu=pt '
                                                  'acpi_osi="Windows 2015"'}}, None)
    assert host.finding("kernel.reboot_pending")["status"] == "pass"
    host.write("/etc/kernel/cmdline", 'root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_pstate=active iommu=pt acpi_osi="Windows\n')
    findings = host.judge()
    assert [cid for cid, f in findings.items() if f["status"] == "error"] == [], findings
    assert findings["kernel.reboot_pending"]["status"] == "pending_reboot"


def test_an_update_whose_dkms_build_failed_is_pinned_away_with_no_minimum_set(tmp_path):
    """Debian/Ubuntu with no kernel minimum: an unattended kernel update that the driver did
    not build for is GRUB's new default; kernel.version pins the running kernel anyway."""
    rel, new = "6.8.0-45-generic", "6.8.0-49-generic"
    host = _render(tmp_path, {"os": {"id": "ubuntu", "version_id": "24.04", "codename": "noble",
                                     "pretty_name": "Ubuntu 24.04.1 LTS", "proxmox_ve": None},
                              "kernel": {"installed": [rel]},
                              "boot": {"loader": "grub", "cmdline": "quiet splash amd_pstate=active iommu=pt"}}, None)
    install_kernel(host, new, module=False)
    host.write("/boot/grub/grub.cfg", grub_cfg(tmp_path, [rel, new]))
    findings = host.judge()
    f = findings["kernel.version"]
    assert f["status"] == "drift" and f["fix"]["pin"]["tool"] == "grub" and f["fix"]["pin"]["release"] == rel, f
    assert not reboots(findings)


def test_a_container_config_with_bytes_that_are_not_utf8_is_not_edited(tmp_path):
    stale = CT_MOUNTS.replace("c 508:*", "c 509:*")
    host = _render(tmp_path, {**ct(stale), "nvidia": {"char_majors": {"nvidia": 195, "nvidia-uvm": 508,
                                                                        "nvidia-caps": 236}}}, None)
    assert host.finding("lxc.gpu_passthrough")["status"] == "drift"
    conf = next(tmp_path.glob("etc/pve/nodes/*/lxc/129.conf"))
    conf.write_bytes(b"#Caf\xe9 inference box (Latin-1)\n" + stale.encode())
    f = host.finding("lxc.gpu_passthrough")
    assert f["status"] == "manual" and "not UTF-8" in f["message"] and not f["fix"], f


# ---- a kernel whose image is missing from /boot: manual, never a fix that changes nothing --
def test_a_kernel_whose_boot_files_are_missing_is_manual_not_installed_for_ever(tmp_path):
    """Issue 19: after an upgrade with /boot not mounted, the kernel's modules are there and
    its image is not; apt has the series, so `install proxmox-kernel-6.14` changed nothing
    and kernel.version was drift on every run. It is manual, naming the package to reinstall."""
    host = _render(tmp_path, PVE8_68, None)
    install_kernel(host, "6.14.8-2-pve", module=True)
    host.remove("/boot/vmlinuz-6.14.8-2-pve")
    host.write("/var/lib/dpkg/info/proxmox-kernel-6.14.8-2-pve-signed.list", "/lib/modules/6.14.8-2-pve\n")
    kv = host.judge()["kernel.version"]
    assert kv["status"] == "manual", kv
    assert kv["message"] == ("6.14.8-2-pve is installed (/lib/modules/6.14.8-2-pve) but /boot/vmlinuz-6.14.8-2-pve is "
                             "missing, so no boot loader can start it: check that /boot is mounted, then "
                             "`apt install --reinstall proxmox-kernel-6.14.8-2-pve-signed` (and run gpuhost fix again)")
    # the image back (reinstalled): the kernel waits for its boot as usual
    host.write("/boot/vmlinuz-6.14.8-2-pve", "image\n")
    host.write("/var/lib/gpuhost-lab/esp/loader/loader.conf", "timeout 3\ndefault proxmox-6.14.8-2-pve.conf\n")
    assert host.judge()["kernel.version"]["status"] == "pending_reboot"


def test_a_refusal_of_one_file_a_glob_matched_holds_that_glob_fix():
    """A change written by glob (each cpufreq policy's file) whose write the kernel refused for
    one of the files: the same fix would fail the same way, so it is manual too."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls.gates import respect_refusals
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Finding, Host

    path = "/sys/devices/system/cpu/cpufreq/policy3/energy_performance_preference"
    host = Host({"boot": {"refused_writes": {path: {"value": "performance", "error": "Invalid argument"}}}}, {})
    f = Finding("cpu.governor", "drift", message="EPP is balance_performance",
                fix={"runtime": [{"kind": "sysfs", "glob": "/sys/devices/system/cpu/cpufreq/policy*/energy_performance_preference",
                                  "value": "performance"}]})
    respect_refusals(host, f)
    assert f.status == "manual" and f.fix == {} and f"the kernel refused performance for {path}" in f.message
    other = Finding("cpu.governor", "drift", fix={"runtime": [{"kind": "sysfs", "glob": "/sys/devices/system/cpu/cpufreq/policy*/"
                                                               "scaling_governor", "value": "performance"}]})
    respect_refusals(host, other)
    assert other.status == "drift" and other.fix
