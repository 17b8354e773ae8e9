"""Real boot and device data the review found read wrong: each fixture as a real machine
or a real user produced it (sources in tests/real_data/SOURCES.md), the expected values
read off the source's own text."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from test_scenarios import BASE, _render

from ansible_collections.gpuhost.stack.plugins.module_utils import controls, lxcconf
from gpuhost.lab.shims import shimlib
from ansible_collections.gpuhost.stack.plugins.module_utils import probe  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "real_data"
DEBIAN9_UUID = "3378f75a-e05c-4372-88dd-b98c02822c90"


def test_a_systemd_boot_command_line_keeps_its_backslashes():
    line = (DATA / "boot/proc-cmdline-systemd-boot").read_text().strip()
    p = controls.params(line)
    assert p["initrd"] == "\\EFI\\proxmox\\6.1.10-1-pve\\initrd.img-6.1.10-1-pve"
    assert len(controls.kernel_args(line)) == 11
    assert p["root"] == "ZFS=rpool/ROOT/pve-1" and p["iommu"] == "pt" and "BOOT_IMAGE" not in p
    # what /etc/kernel/cmdline holds for that boot: the same, without the entry's initrd=
    persisted = controls.params(line.split(" ", 1)[1])
    assert controls._comparable(p) == controls._comparable(persisted)


def test_a_real_grub_cfg_is_resolved_as_grub_does():
    cfg = (DATA / "boot/grub-debian9.cfg").read_text()
    assert '   set default="${next_entry}"' in cfg, "the first set default= is grub-reboot's"
    assert probe.grub_default_kernel(cfg, "") == ("4.9.0-3-amd64", False)
    assert probe.grub_entry_ids(cfg) == {
        "4.9.0-3-amd64": f"gnulinux-advanced-{DEBIAN9_UUID}>gnulinux-4.9.0-3-amd64-advanced-{DEBIAN9_UUID}"}
    once = f"next_entry=gnulinux-advanced-{DEBIAN9_UUID}>gnulinux-4.9.0-3-amd64-recovery-{DEBIAN9_UUID}\n"
    assert probe.grub_default_kernel(cfg, "# GRUB Environment Block\n" + once) == ("4.9.0-3-amd64", True)
    # the lab reads it the same way, recovery entry and its `single` included
    node, was_once = shimlib.grub_entry(cfg, once)
    assert was_once and node["release"] == "4.9.0-3-amd64" and node["args"].startswith(
        "root=/dev/mapper/debian--vg-root ro single")


def test_the_lab_pins_with_the_id_proxmox_boot_tool_scrapes_from_a_real_grub_cfg(tmp_path):
    # proxmox-kernel-helper's set_grub_default takes the id from the submenu line
    text = (DATA / "boot/grub-pve8-menuentries").read_text()
    (tmp_path / "boot/grub").mkdir(parents=True)
    (tmp_path / "boot/grub/grub.cfg").write_text(text)
    shimlib.set_grub_default("6.8.12-8-pve", root=str(tmp_path))
    uuid = "f768d6b7-5898-4c6b-827d-aab79581f769"
    assert (tmp_path / "etc/default/grub.d/proxmox-kernel-pin.cfg").read_text() == (
        f'GRUB_DEFAULT="gnulinux-advanced-{uuid}>gnulinux-6.8.12-8-pve-advanced-{uuid}"\n')
    assert f"'gnulinux-6.8.12-8-pve-advanced-{uuid}'" in text, "the id it names is in the real menu"


def test_proxmox_6_14_release_names_keep_their_flavour():
    for name, release in (("dmesg-pve8-6.14-bpo12", "6.14.8-1-bpo12-pve"), ("dmesg-pve8.4-6.14.0", "6.14.0-2-pve")):
        text = (DATA / "boot" / name).read_text()
        assert re.search(r"(?:Linux version |BOOT_IMAGE=/boot/vmlinuz-)(\S+)", text).group(1) == release
        assert controls.kernel_flavor(release) == "pve"
        assert controls.at_least(release, "6.14")
    # Debian's backport names, old and new (debian-kernel MR !1524: +deb12 instead of +bpo)
    for release in ("6.5.0-0.deb12.4-amd64", "6.10.11+bpo-amd64", "6.12.43+deb12-amd64", "6.12.9+bpo-cloud-amd64"):
        assert controls.kernel_flavor(release) == ("cloud-amd64" if "cloud" in release else "amd64"), release


def test_a_config_space_that_reads_all_ones_is_a_dead_device():
    rows = re.findall(r"^[0-9a-f]{2}: ((?:[0-9a-f]{2} ?){16})$", (DATA / "gpu/lspci-xxx-all-ones").read_text(), re.M)
    cfg = bytes.fromhex("".join(rows).replace(" ", ""))
    assert len(cfg) == 240 and set(cfg) == {0xFF}
    assert probe.parse_config(cfg) == {"dead": True}


def test_the_labs_dead_gpu_reads_as_real_lspci_shows_one(tmp_path):
    # lspci on a GPU whose config space reads all ones: header type 7f, the nvidia driver still bound.
    # (The 2012 report also shows "rev ff": that pciutils read the revision from config space;
    # today's reads sysfs, which keeps what the kernel read at enumeration.)
    real = (DATA / "gpu/lspci-nvidia-rev-ff").read_text()
    assert "!!! Unknown header type 7f" in real and "Kernel driver in use: nvidia" in real
    gpu = {**BASE["nvidia"]["gpus"][0], "health": {"off_bus": True}}
    _render(tmp_path, {"nvidia": {"gpus": [gpu]}}, None)
    out = subprocess.run(["lspci", "-A", "linux-sysfs", "-O", f"sysfs.path={tmp_path}/sys/bus/pci", "-s", "01:00.0", "-vnn"],
                         capture_output=True, text=True, check=True).stdout
    assert "[10de:2bb5]" in out and "!!! Unknown header type 7f" in out and "Kernel driver in use: nvidia" in out, out


def test_a_posted_config_with_trailing_comments_on_its_allows_is_read_whole():
    text = "arch: amd64\nhostname: gpu\n" + (DATA / "lxc/trailing-comment.conf").read_text()
    pt = lxcconf.inspect("101", text)
    assert pt.allowed == [195, 511]
    host = {195: "nvidia", 511: "nvidia-uvm", 236: "nvidia-caps"}
    assert lxcconf.problems(pt, host) == []
    assert lxcconf.repair(text, host) == text, "nothing duplicated, every byte kept"


def test_a_posted_epyc_host_with_cpu_255_offline_is_manual_naming_it(tmp_path):
    """lscpu of a 2x EPYC 7742 host (netutils-linux #226): 256 CPUs, CPU 255 offline. Its
    sysfs laid out from those lines (`present` is every CPU lscpu counts, `offline` its
    Off-line list), probed and judged: manual, naming CPU 255; the post shows no command line,
    so no cause is named."""
    text = (DATA / "cpu/lscpu-2x-epyc7742-cpu255-offline").read_text()
    field = dict(line.split(":", 1) for line in text.splitlines())
    count, offline = int(field["CPU(s)"]), field["Off-line CPU(s) list"].strip()
    cpu = tmp_path / "sys/devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "present").write_text(f"0-{count - 1}\n")
    (cpu / "offline").write_text(offline + "\n")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("".join(
        f"processor\t: {n}\nvendor_id\t: {field['Vendor ID'].strip()}\nmodel name\t: {field['Model name'].strip()}\n\n"
        for n in range(count) if n != int(offline)))
    facts = probe.Probe(str(tmp_path), run=lambda argv: (127, "", "")).gather()
    assert facts["cpu"]["offline"] == [255] and facts["cpu"]["present"] == 256
    finding = controls.evaluate(facts, {"controls": ["cpu.online"]})["cpu.online"]
    assert finding["status"] == "manual" and finding["observed"] == "1 of 256 CPUs offline (255)"
    assert finding["message"] == "CPU 255 is offline: the host shows no cause (firmware, or CPUs taken offline by hand)"
