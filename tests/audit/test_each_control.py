"""Every control with a fix, alone (`--controls ID`) on a lab host where it is the bad state:
the audit finds it, the fix changes that control and no other, the audit passes, a second
fix changes nothing (not a byte of the host's disk), and after a reboot it still passes.

The seed host starts with ten of them in drift: nine fixed here in two cycles of unrelated
controls (a cycle of several still checks each one, and that nothing outside it moved), and
lxc.cpuset, whose fix waits for a container restart (the seed's full fix reboots the host, and
its own cycle is the container host's below). The switch host brings pcie.acs, the seed with
its GPUs' power data nvidia.power_limit, the GeForce pair nvidia.gpu_modes, the HGX H100 host
nvidia.fabricmanager, and a Proxmox host whose container cannot start at boot (nothing makes
/dev/nvidia-uvm) lxc.gpu_nodes with lxc.cpuset.
(storage.zfs_arc's lab cycle is the seed copy's with its ZFS root, in test_real_world_hosts;
its branches run at unit speed. cpu.governor's cycle on the Intel/GRUB host is test_paths'
full cycle of that host, which finds, fixes, re-fixes, boots and audits it.)
"""
from __future__ import annotations

import pytest

from conftest import SEED_HOST, SPECS, gpuhost

# the seed's nine in two cycles, each control of a cycle found, fixed and kept on its own
# terms, and nothing outside the cycle moved: the kernel upgrade alone (it moves cpu.driver by
# itself), and the rest together: the two command-line fixes, whose reboot the boot units,
# files, GPU and container fixes made beside them must survive
SEED_DRIFT = ("kernel.version", "cpu.driver,iommu.mode,cpu.cstates,numa.balancing,pcie.mrrs,nvidia.persistence,"
              "lxc.gpu_passthrough,storage.scheduler")
CASES = [(SEED_HOST, "pve-gpu1", c) for c in SEED_DRIFT] + [
    (SPECS / "switch-host.yml", "switch-host", "pcie.acs"),
    (SPECS / "pve-gpu1-power.yml", "pve-gpu1-power", "nvidia.power_limit"),
    (SPECS / "geforce-pair.yml", "geforce-pair", "nvidia.gpu_modes"),
    (SPECS / "hgx-h100.yml", "hgx-h100", "nvidia.fabricmanager"),
    (SPECS / "pve-ct-boot.yml", "pve-ct-boot", "lxc.gpu_nodes,lxc.cpuset"),
]
# What a fix changes besides its own control, knowingly: booting a kernel >= 6.13 on a
# Zen 5 CPU loads amd_pstate by default (the kernel model's rule, and the real kernel's).
ALSO_CHANGES = {"kernel.version": {"cpu.driver"}}
# what the fix must have done live, read on the host as a person would check it
LIVE_AFTER_FIX = {
    # the switch's downstream ports lose Request and Completion Redirect; Source Validation stays
    "pcie.acs": ("setpci -s 02:00.0 ECAP_ACS+6.w; setpci -s 02:01.0 ECAP_ACS+6.w", "0011\n0011"),
    "numa.balancing": ("cat /proc/sys/kernel/numa_balancing", "0"),
    "nvidia.power_limit": ("nvidia-smi -i 00000000:E1:00.0 --query-gpu=power.limit --format=csv,noheader", "600.00 W"),
    "nvidia.gpu_modes": ("nvidia-smi --query-gpu=compute_mode --format=csv,noheader", "Default\nDefault"),
    # the daemon runs and every GPU registered with the fabric it set up
    "nvidia.fabricmanager": ("systemctl is-active nvidia-fabricmanager; nvidia-smi --query-gpu=fabric.state,fabric.status "
                             "--format=csv,noheader | sort -u", "active\nCompleted, Success"),
    # nvidia-uvm loaded (major 508) and both nodes made, without a reboot
    "lxc.gpu_nodes": ("stat -c '%F %t:%T' /dev/nvidia-uvm /dev/nvidia-uvm-tools",
                      "character special file 1fc:0\ncharacter special file 1fc:1"),
}
# what must hold after the reboot: container 200, refused at boot while /dev/nvidia-uvm was
# missing, starts at boot now, on whole cores of its GPU's node
LIVE_AFTER_BOOT = {
    "lxc.cpuset": ("cat /sys/fs/cgroup/lxc/200/cpuset.cpus.effective", "5-6,13-14"),
}


# a fresh lab of a spec audits the same every time: the whole audit before any fix, once per spec
WHOLE_BEFORE: dict[str, dict[str, str]] = {}


@pytest.mark.parametrize("spec, host, control", CASES, ids=[c for _, _, c in CASES])
def test_one_control_found_fixed_idempotent_and_kept_across_a_reboot(make_lab, spec, host, control):
    # "a,b": two controls of one host in one cycle (each found, fixed and kept; nothing else moved)
    ids = set(control.split(","))
    lab = make_lab(spec)
    inv = str(lab.inventory)
    if str(spec) not in WHOLE_BEFORE:
        WHOLE_BEFORE[str(spec)] = gpuhost("audit", "-i", inv).status(host)
    whole_before = WHOLE_BEFORE[str(spec)]
    assert {c: whole_before[c] for c in ids} == dict.fromkeys(ids, "drift"), "the lab host starts in the bad state"

    fix = gpuhost("fix", "-i", inv, "--controls", control, "--yes", "--reboot", "if-needed")
    assert fix.rc == 0, fix.stdout + fix.stderr
    assert fix.changed(host) == ids
    assert fix.status(host) == dict.fromkeys(ids, "pass"), "--controls narrows the fix and its report to the control"
    for c in ids:
        assert any(l.startswith(f"gpuhost fix: apply: {host}: changed: ") and l.endswith(f" | {c}")
                   for l in fix.stderr.splitlines()), "progress names each change"
        if c in LIVE_AFTER_FIX:
            command, live = LIVE_AFTER_FIX[c]
            assert lab.out(host, command) == live

    disk = lab.disk(host)
    again = gpuhost("fix", "-i", inv, "--controls", control, "--yes", "--reboot", "if-needed")
    assert again.rc == 0 and again.changed(host) == set(), again.stderr
    assert "nothing to fix" in again.stderr
    assert lab.disk(host) == disk, "a second fix wrote to the host"

    # after a boot the control still passes, and the others are where they were: fixing one
    # control fixes (or breaks) no other
    lab.reboot(host)
    for c in ids & set(LIVE_AFTER_BOOT):
        command, live = LIVE_AFTER_BOOT[c]
        assert lab.out(host, command) == live
    whole_after = gpuhost("audit", "-i", inv).status(host)
    assert {c: whole_after[c] for c in ids} == dict.fromkeys(ids, "pass"), whole_after
    moved = {c for c in whole_before if c not in ids and whole_after[c] != whole_before[c]}
    allowed = set().union(*(ALSO_CHANGES.get(c, set()) for c in ids))
    assert moved <= allowed, {c: (whole_before[c], whole_after[c]) for c in moved}
    assert all(whole_after[c] == "pass" for c in moved)
