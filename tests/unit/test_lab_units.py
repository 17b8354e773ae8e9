"""Unit tests of the lab's pure parts: spec validation, config space, the kernel model's rules."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import SEED_GUEST, SEED_HOST, SPECS
from gpuhost.lab import configspace, kernel
from gpuhost.lab.spec import SpecError, load_spec, load_specs, parse_spec


def seed() -> dict:
    return yaml.safe_load(SEED_HOST.read_text())


def test_every_shipped_spec_is_valid():
    specs = load_specs([SEED_HOST, SEED_GUEST] + sorted(SPECS.glob("*.yml")) + sorted(SPECS.glob("matrix/*.yml")))
    assert [s.hostname for s in specs][:2] == ["pve-gpu1", "llm-two"]


def test_pcie_defaults_when_only_the_link_is_given():
    data = seed()
    dev = data["pci"][1]
    for key in ("mps_supported", "mps", "mrrs", "link_sta"):
        dev.pop(key)
    spec = parse_spec(data, "x.yml")
    d = spec.pci[1]
    assert (d.mps_supported, d.mps, d.mrrs) == (256, 256, 512)
    assert d.link_sta == d.link_cap


def test_hex_and_flow_style_are_accepted(tmp_path):
    text = SEED_HOST.read_text().replace("vendor: 0x10de", "vendor: 4318")
    p = tmp_path / "s.yml"
    p.write_text(text)
    assert load_spec(p).pci[1].vendor == 0x10DE


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.__setitem__("spec", "v2"), "spec: must be 'gpuhost.hostspec/v1', not 'v2'"),
    (lambda d: d.__setitem__("kind", "vm"), "kind: must be 'host' or 'lxc-guest', not 'vm'"),
    (lambda d: d["kernel"].__setitem__("pinned", "6.1.0-1"), "kernel.pinned: 6.1.0-1 is not in kernel.installed"),
    (lambda d: d["block"][1].__setitem__("scheduler", "bfq"), "block[1]: Value error, scheduler 'bfq' is not among schedulers ['none', 'mq-deadline', 'kyber']"),
    (lambda d: d["lxc"][1].__setitem__("vmid", 129), "lxc[1].vmid: duplicate vmid 129"),
    (lambda d: d["pci"][0].__setitem__("bdf", "0:0:1.1"), "pci[0].bdf: not a PCI address (dddd:bb:dd.f, lower-case hex): '0:0:1.1'"),
    (lambda d: d["firmware"].__setitem__("cppc", "yes"), "firmware.cppc: Input should be a valid boolean"),
    (lambda d: d["pci"][1].__setitem__("parent", "0000:01:00.0"), "pci[1].parent: 0000:01:00.0 is an endpoint, not a bridge"),
])
def test_invalid_specs_name_the_field(mutate, message):
    data = seed()
    mutate(data)
    with pytest.raises(SpecError) as err:
        parse_spec(data, "x.yml")
    assert str(err.value).replace("Value error, ", "") == f"x.yml: {message}".replace("Value error, ", "")
    assert "\n" not in str(err.value)


def test_guest_may_not_state_host_fields():
    data = yaml.safe_load(SEED_GUEST.read_text())
    data["firmware"] = {"iommu": True}
    with pytest.raises(SpecError, match=r"^x.yml: firmware: unknown field \(a guest states only"):
        parse_spec(data, "x.yml")


def test_config_space_layout_and_masked_writes():
    spec = parse_spec(seed(), "x.yml")
    cfg, mask = configspace.build(spec.pci[1])
    assert len(cfg) == 4096
    assert cfg[0:4] == bytes([0xDE, 0x10, 0xB5, 0x2B])
    assert configspace.mrrs(cfg) == 512
    configspace.masked_write(cfg, mask, configspace.CAP_EXP + 8, (0x583F).to_bytes(2, "little"))
    assert configspace.mrrs(cfg) == 4096
    configspace.masked_write(cfg, mask, 0, b"\xff\xff")
    assert cfg[0:2] == bytes([0xDE, 0x10]), "vendor ID is read-only"
    port, pmask = configspace.build(spec.pci[0], 1, 1)
    assert configspace.acs_ctrl(port) == 0x001D
    configspace.masked_write(port, pmask, configspace.ECAP_ACS + 6, b"\x01\x00")
    assert configspace.acs_ctrl(port) == 0x0001
    assert configspace.acs_ctrl(cfg) is None


def test_cpufreq_rules():
    spec = parse_spec(seed(), "x.yml")
    assert kernel.cpufreq_for(spec, "6.8.12-4-pve", {}) == ("acpi-cpufreq", None)
    assert kernel.cpufreq_for(spec, "6.14.11-4-pve", {}) == ("amd-pstate-epp", "active")
    assert kernel.cpufreq_for(spec, "6.8.12-4-pve", {"amd_pstate": "guided"}) == ("amd-pstate", "guided")
    spec.firmware.cppc = False
    assert kernel.cpufreq_for(spec, "6.14.11-4-pve", {"amd_pstate": "active"}) == ("acpi-cpufreq", None)
    spec.firmware.cppc, spec.firmware.acpi_pm_profile, spec.firmware.cpu_family = True, 1, 25
    assert kernel.cpufreq_for(spec, "6.5.0", {}) == ("amd-pstate-epp", "active"), "desktop profile, >= 6.5"
    assert kernel.cpufreq_for(spec, "6.4.16", {}) == ("acpi-cpufreq", None)


def test_kernel_release_ordering_and_cmdline_parsing():
    rels = ["6.8.12-4-pve", "6.14.11-4-pve", "6.8.4-2-pve", "6.17.2-1-pve"]
    assert sorted(rels, key=kernel.version_key)[-1] == "6.17.2-1-pve"
    assert kernel.release_at_least("6.14.11-4-pve", "6.13") and not kernel.release_at_least("6.8.12-4-pve", "6.13")
    params = kernel.parse_cmdline("root=ZFS=rpool/ROOT/pve-1 quiet iommu=pt iommu=off")
    assert params == {"root": "ZFS=rpool/ROOT/pve-1", "quiet": "", "iommu": "off"}


def test_loader_state_is_read_from_what_was_last_written(tmp_path: Path):
    (tmp_path / "boot/grub").mkdir(parents=True)
    (tmp_path / "boot/grub/grub.cfg").write_text(
        "menuentry 'x' {\n\tlinux\t/boot/vmlinuz-6.2.0 root=/dev/sda1 ro quiet\n}\n"
        "menuentry 'y' {\n\tlinux\t/boot/vmlinuz-6.1.0 root=/dev/sda1 ro\n}\n")
    assert kernel.loader_cmdline(tmp_path, "grub", "6.1.0") == "root=/dev/sda1 ro"
    assert kernel.loader_cmdline(tmp_path, "grub", "6.3.0") == "root=/dev/sda1 ro quiet"


# ---- the lab never runs or writes spec content outside its host (issue 19) ---------------------
def test_files_under_var_run_or_var_lock_are_refused_by_the_spec():
    for path in ("/var/run/gpuhost/x", "/var/lock/x"):
        data = seed()
        data["files"] = {path: "x\n"}
        with pytest.raises(SpecError) as err:
            parse_spec(data, "x.yml")
        assert str(err.value) == f"x.yml: files.{path}: lies on a virtual filesystem, not on the disk"


def test_a_written_path_follows_links_inside_the_host_root_never_out_of_it(tmp_path):
    import os

    from gpuhost.lab import provision

    # an absolute path on no virtual file system (the test's own files may be on /dev/shm),
    # which nothing here creates: the write must not land there
    root, outside = tmp_path / "root", Path(f"/opt/gpuhost-lab-test-{os.getpid()}-{tmp_path.name}")
    (root / "var").mkdir(parents=True)
    os.symlink("/run", root / "var/run")                  # Debian's own link
    os.symlink(str(outside), root / "var/cache")          # an absolute link the lower layer may hold
    os.symlink("../../etc", root / "var/etc-up")          # a relative one climbing to /
    provision._write(root, "var/cache/x/y", "inside\n")
    assert (root / outside.relative_to("/") / "x/y").read_text() == "inside\n", "the link, read with root as /"
    assert not outside.exists(), "nothing written on the machine"
    provision._write(root, "var/etc-up/z", "z\n")
    assert (root / "etc/z").read_text() == "z\n"
    with pytest.raises(ValueError, match="virtual file system"):
        provision._write(root, "var/run/gpuhost/x", "x\n")
    assert not (root / "run").exists()


def test_a_hostile_command_line_in_a_spec_stays_one_grub_value(tmp_path):
    """boot.cmdline goes into /etc/default/grub as a double-quoted shell word: sourced (as
    grub-mkconfig does), it is the same text and runs nothing."""
    import subprocess

    from gpuhost.lab import provision

    marker = tmp_path / "ran"
    hostile = f'quiet "; touch {marker}; : " $(touch {marker}) `touch {marker}` \\'
    (tmp_path / "grub").write_text(f"GRUB_CMDLINE_LINUX_DEFAULT={provision.sh_double_quoted(hostile)}\n")
    out = subprocess.run(["sh", "-c", f'. {tmp_path}/grub; printf %s "$GRUB_CMDLINE_LINUX_DEFAULT"'],
                         capture_output=True, text=True, check=True).stdout
    assert out == hostile and not marker.exists()


def test_enabled_units_start_in_systemds_order(tmp_path):
    """After=/Before= between the boot's units order them (systemd.unit(5)); the rest start
    by name, and a unit's drop-in can add an ordering."""
    units = tmp_path / "etc/systemd/system"
    wants = units / "multi-user.target.wants"
    wants.mkdir(parents=True)

    def unit(name: str, command: str, unit_section: str = "") -> None:
        (units / name).write_text(f"[Unit]\n{unit_section}\n[Service]\nExecStart={command}\n"
                                  "[Install]\nWantedBy=multi-user.target\n")
        (wants / name).symlink_to(f"/etc/systemd/system/{name}")

    unit("a-limit.service", "/bin/limit", "After=z-daemon.service")
    unit("m-plain.service", "/bin/plain")
    unit("z-daemon.service", "/bin/daemon")
    unit("b-early.service", "/bin/early")
    (units / "b-early.service.d").mkdir()
    (units / "b-early.service.d/order.conf").write_text("[Unit]\nBefore=a-limit.service m-plain.service\n")
    assert kernel.enabled_units(tmp_path) == ["/bin/early", "/bin/plain", "/bin/daemon", "/bin/limit"]


def test_the_hosts_bytecode_cache_compiles_a_zipped_module_once_and_never_serves_stale_code(tmp_path):
    """shims/gpuhost_lab_bytecode.py: what a lab host's Python compiles from a zip (Ansible's
    module payloads) is compiled once; the same source from another zip is read from the
    cache under that zip's own file name; changed source is compiled again."""
    import json
    import subprocess
    import sys
    import zipfile

    from gpuhost.lab import provision

    cache = tmp_path / "cache"

    def import_from(zip_name: str, value: int) -> dict:
        payload = tmp_path / zip_name
        with zipfile.ZipFile(payload, "w") as z:
            z.writestr("pkg/__init__.py", "")
            z.writestr("pkg/mod.py", f"VALUE = {value}\n\ndef where():\n    return where.__code__.co_filename\n")
        script = (f"import json, sys; sys.path.insert(0, {str(provision.shim_source())!r})\n"
                  "import gpuhost_lab_bytecode as hook\n"
                  f"hook.CACHE = {str(cache)!r}\n"
                  "compiled, real = [], hook._compile\n"
                  "hook._compile = lambda path, source: compiled.append(path.rsplit('/', 1)[-1]) or real(path, source)\n"
                  f"sys.path.insert(0, {str(payload)!r})\n"
                  "import pkg.mod\n"
                  "print(json.dumps({'value': pkg.mod.VALUE, 'file': pkg.mod.where(), 'compiled': sorted(compiled)}))\n")
        out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    first = import_from("AnsiballZ_a.zip", 1)
    assert first == {"value": 1, "file": f"{tmp_path}/AnsiballZ_a.zip/pkg/mod.py", "compiled": ["__init__.py", "mod.py"]}
    assert len(list(cache.iterdir())) == 2
    again = import_from("AnsiballZ_b.zip", 1)
    assert again == {"value": 1, "file": f"{tmp_path}/AnsiballZ_b.zip/pkg/mod.py", "compiled": []}, \
        "the cached code, under the file name of the zip it came from this time"
    changed = import_from("AnsiballZ_c.zip", 2)
    assert changed == {"value": 2, "file": f"{tmp_path}/AnsiballZ_c.zip/pkg/mod.py", "compiled": ["mod.py"]}


def test_the_bytecode_cache_is_on_a_host_only_where_the_lab_was_asked_for_it(tmp_path, monkeypatch):
    from gpuhost.lab import provision

    for off in ("", "0"):
        monkeypatch.setenv(provision.BYTECODE_CACHE_ENV, off)
        assert provision.bytecode_cache() is None
    monkeypatch.setenv(provision.BYTECODE_CACHE_ENV, str(tmp_path / "shared"))
    assert provision.bytecode_cache() == str(tmp_path / "shared") and (tmp_path / "shared").is_dir()

    site = tmp_path / provision.PY_SITE
    provision.install_bytecode_cache(tmp_path, True)
    assert (site / "gpuhost_lab_bytecode.pth").read_text() == "import gpuhost_lab_bytecode\n"
    assert (site / "gpuhost_lab_bytecode.py").read_bytes() == (provision.shim_source() / "gpuhost_lab_bytecode.py").read_bytes()
    provision.install_bytecode_cache(tmp_path, False)
    assert sorted(p.name for p in site.rglob("*gpuhost_lab_bytecode*")) == []


def test_udev_rules_set_each_disks_scheduler_at_coldplug_in_file_order(tmp_path):
    """Rules that write ATTR{queue/scheduler}, in rules-file order (udev(7)), the last write
    staying; a rule that does not match a disk, a name the queue does not offer, and a rule
    with a key the model does not know leave it alone."""
    spec = parse_spec(seed(), "seed.yml")
    rules = tmp_path / "etc/udev/rules.d"
    rules.mkdir(parents=True)
    assert kernel.schedulers_at_boot(spec, tmp_path) == {"nvme0n1": "none", "nvme1n1": "mq-deadline"}
    (rules / "60-kyber.rules").write_text('ACTION=="add|change", KERNEL=="nvme0n*", ATTR{queue/scheduler}="kyber"\n')
    assert kernel.schedulers_at_boot(spec, tmp_path) == {"nvme0n1": "kyber", "nvme1n1": "mq-deadline"}
    (rules / "70-none.rules").write_text('SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", ATTR{queue/rotational}=="0", '
                                         'ATTR{queue/scheduler}=="*none*", ATTR{queue/scheduler}="none"\n')
    assert kernel.schedulers_at_boot(spec, tmp_path) == {"nvme0n1": "none", "nvme1n1": "none"}
    (rules / "80-hdd.rules").write_text('ATTR{queue/rotational}=="1", ATTR{queue/scheduler}="mq-deadline"\n'
                                        'KERNEL=="nvme1n1", ATTR{queue/scheduler}="bfq"\n'
                                        'DRIVERS=="nvme", ATTR{queue/scheduler}="mq-deadline"\n')
    assert kernel.schedulers_at_boot(spec, tmp_path) == {"nvme0n1": "none", "nvme1n1": "none"}
