"""The facts probe on a rendered machine, the judgement on its facts, and container configs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conftest import COLLECTION, SEED_HOST, SPECS
import scenarios
from ansible_collections.gpuhost.stack.plugins.module_utils import controls, lxcconf
from gpuhost.lab import configspace
from gpuhost.lab.machine import Machine
from gpuhost.lab.spec import load_spec

from ansible_collections.gpuhost.stack.plugins.module_utils import probe


def render(spec_path: Path, root: Path) -> Machine:
    """Lay a lab host's disk and its rendered /sys and /proc out in a directory."""
    return scenarios.render(spec_path, root).machine


def test_parse_config_reads_what_configspace_wrote():
    spec = load_spec(SEED_HOST)
    cfg, _ = configspace.build(spec.pci[1])
    regs = probe.parse_config(bytes(cfg))
    assert regs["mrrs"] == 512 and regs["mps"] == 256 and regs["mps_supported"] == 256
    assert regs["link_cap"] == {"gen": 5, "width": 16} and regs["port_type"] == 0
    port, _ = configspace.build(spec.pci[0], 1, 1)
    assert probe.parse_config(bytes(port))["acs_ctrl"] == 0x1D
    assert probe.parse_config(bytes(64)) == {}, "no capability list: nothing decoded"


def test_probe_on_the_rendered_seed_and_the_judgement(tmp_path):
    render(SEED_HOST, tmp_path)
    facts = probe.Probe(str(tmp_path), run=lambda argv: (127, "", "not here")).gather()
    assert facts["cpu"]["vendor"] == "AuthenticAMD" and facts["cpu"]["logical_cpus"] == 128 and facts["cpu"]["cppc"]
    assert facts["cpufreq"]["driver"] == "acpi-cpufreq" and len(facts["cpufreq"]["policies"]) == 128
    assert facts["cpuidle"]["states"][2] == {"index": 2, "name": "C2", "latency_us": 800, "cpus": 128, "disabled": 0}
    assert facts["numa"]["nodes"] == 2 and facts["sysctl"]["live"]["kernel.numa_balancing"] == "1"
    assert facts["iommu"]["group_types"] == ["DMA-FQ"]
    gpus = [d for d in facts["pci"] if d["vendor"] == 0x10DE]
    assert len(gpus) == 8 and {d["mrrs"] for d in gpus} == {512} and gpus[0]["parent"] == "0000:00:01.1"
    assert facts["nvidia"]["module"] == "570.133.20" and facts["nvidia"]["majors"]["nvidia-uvm"] == 508
    f = controls.evaluate(facts, {"controls": ["cpu.cstates", "numa.balancing", "pcie.mrrs", "iommu.mode", "pcie.link"]})
    assert {k: v["status"] for k, v in f.items()} == {
        "cpu.cstates": "drift", "numa.balancing": "drift", "pcie.mrrs": "drift", "iommu.mode": "drift", "pcie.link": "pass"}
    # matched by address and vendor:device: a renumbered bus writes nothing to another device
    assert f["pcie.mrrs"]["fix"]["runtime"][0] == {"kind": "pci_register", "pci": "0000:01:00.0", "device": "10de:2bb5",
                                                   "register": "CAP_EXP+8.w", "value": "5000", "mask": "7000"}
    assert f["iommu.mode"]["fix"] == {"cmdline_set": {"iommu": "pt"}}


def test_probe_reads_a_narrow_link_and_the_judgement_names_the_slot(tmp_path):
    render(SPECS / "intel-grub.yml", tmp_path)
    facts = probe.Probe(str(tmp_path), run=lambda argv: (127, "", "")).gather()
    f = controls.evaluate(facts, {"controls": ["pcie.link"]})["pcie.link"]
    assert f["status"] == "manual"
    assert "0000:17:00.0 runs x8, both ends support x16 (port 0000:16:01.0)" in f["message"]


def test_waivers_expire_and_skips_leave_controls_out(tmp_path):
    render(SPECS / "intel-grub.yml", tmp_path)
    facts = probe.Probe(str(tmp_path), run=lambda argv: (127, "", "")).gather()
    waiver = {"control": "pcie.link", "reason": "riser", "expires": "2030-01-01"}
    live = controls.evaluate(facts, {"controls": ["pcie.link"], "waivers": [waiver], "today": "2029-12-31"})
    assert live["pcie.link"]["status"] == "waived" and "riser" in live["pcie.link"]["message"]
    gone = controls.evaluate(facts, {"controls": ["pcie.link"], "waivers": [waiver], "today": "2030-01-02"})
    assert gone["pcie.link"]["status"] == "manual"
    skipped = controls.evaluate(facts, {"controls_skip": ["pcie.link"]})
    assert skipped["pcie.link"]["status"] == "na" and len(skipped) == len(controls.CATALOG)


def test_a_probe_section_that_cannot_be_read_is_an_error_not_a_guess(tmp_path):
    facts = probe.Probe(str(tmp_path), run=lambda argv: (127, "", "")).gather()
    assert "cpu" in facts["errors"]
    f = controls.evaluate(facts, {"controls": ["cpu.driver"]})["cpu.driver"]
    assert f["status"] == "error" and "cpuinfo" in f["message"]


SEED_CT = yaml.safe_load(SEED_HOST.read_text())["lxc"][0]["config"]
DEVICES = {195: "nvidia", 508: "nvidia-uvm", 236: "nvidia-caps", 226: "drm", 10: "misc"}


def test_lxc_config_repair_replaces_the_stale_major_and_adds_what_is_missing():
    pt = lxcconf.inspect("129", SEED_CT)
    assert pt.gives_gpus and 509 in pt.allowed
    probs = lxcconf.problems(pt, DEVICES)
    assert "stale allow c 509:*" in probs and "missing mount /dev/nvidia-uvm-tools" in probs
    # nvidia-caps nodes are for MIG only (libnvidia-container mounts them only there): never added
    assert not any("caps" in p for p in probs)
    fixed = lxcconf.repair(SEED_CT, DEVICES)
    assert "c 509:" not in fixed and fixed.count("c 508:* rwm") == 1 and "nvidia-caps" not in fixed
    assert lxcconf.problems(lxcconf.inspect("129", fixed), DEVICES) == []
    assert lxcconf.repair(fixed, DEVICES) == fixed, "idempotent"
    for line in SEED_CT.splitlines():
        if "509" not in line:
            assert line in fixed.splitlines()


def test_lxc_config_keeps_other_dynamic_majors_and_snapshots():
    text = SEED_CT + "lxc.cgroup2.devices.allow: c 226:* rwm\n[snap]\nlxc.cgroup2.devices.allow: c 509:* rwm\n"
    fixed = lxcconf.repair(text, DEVICES)
    assert "c 226:* rwm" in fixed
    assert fixed.endswith("[snap]\nlxc.cgroup2.devices.allow: c 509:* rwm\n")


def test_a_container_without_gpus_is_not_judged():
    assert not lxcconf.inspect("130", "arch: amd64\nhostname: db-one\n").gives_gpus


def test_the_inventory_check_covers_every_variable_the_role_declares():
    """site.yml turns the role's own argument validation off because its inventory check
    covers the same variables; this keeps the two lists the same."""
    from gpuhost.inventory import CHECKED_VARS

    specs = yaml.safe_load((COLLECTION / "roles/common/meta/argument_specs.yml").read_text())
    declared = set(specs["argument_specs"]["main"]["options"])
    # gpuhost_apply is documented but set by gpuhost itself (the CLI's audit, audit.yml)
    assert declared == set(CHECKED_VARS) | {"gpuhost_apply"}


@pytest.mark.parametrize("var, value, message", [
    ("gpuhost_controls", ["cpu.driver", "cpu.turbo"], "gpuhost_controls: unknown control 'cpu.turbo'"),
    ("gpuhost_controls", "cpu.driver", "gpuhost_controls: must be a list of strings"),
    ("gpuhost_cstate_max_latency_us", "10", "gpuhost_cstate_max_latency_us: must be a whole number"),
    ("gpuhost_lxc_restart", "maybe", "gpuhost_lxc_restart: must be true or false"),
    ("gpuhost_reboot_ok", 2, "gpuhost_reboot_ok: must be true or false"),
    ("gpuhost_kernel_min_version", 6.14, "gpuhost_kernel_min_version: must be a string"),
    ("gpuhost_controls_skip", ["cpu.turbo"], "gpuhost_controls_skip: unknown control 'cpu.turbo'"),
    ("gpuhost_waivers", None, "gpuhost_waivers: has no value (null): give one, or remove the line to keep the default"),
    ("gpuhost_waivers", [{"control": "pcie.mrrs", "reason": "a", "expires": "2030-01-01"},
                         {"control": "pcie.mrrs", "reason": "b", "expires": "2031-01-01"}],
     "gpuhost_waivers[1]: a second waiver for pcie.mrrs (the first is gpuhost_waivers[0])"),
    ("gpuhost_waivers", [{"control": "pcie.mrrs", "expires": "2030-01-01"}], "gpuhost_waivers[0]: a waiver needs a reason"),
    ("gpuhost_waivers", [{"control": "pcie.mrrs", "reason": "x", "expires": "2030-02-30"}],
     "gpuhost_waivers[0]: expires is not a real date: 2030-02-30"),
])
def test_the_inventory_check_names_the_bad_variable(var, value, message):
    from gpuhost.inventory import InventoryError, check_vars

    with pytest.raises(InventoryError, match="^" + re.escape(f"host h1: {message}")):
        check_vars("h1", {var: value})


@pytest.mark.parametrize("word", ["true", "False", "yes", "no", "1", "0"])
def test_a_boolean_given_as_a_word_on_the_command_line_is_good_input(word):
    """`-e gpuhost_reboot_ok=true` arrives as a string; the roles read it with `| bool`."""
    from gpuhost.inventory import check_vars

    check_vars("h1", {"gpuhost_reboot_ok": word, "gpuhost_lxc_restart": word})


def test_an_allow_is_never_stale_while_nvidia_uvm_is_not_loaded():
    """After a host boot nvidia-uvm is often not loaded yet: 508 is then missing from
    /proc/devices, and may be its own major once it loads. Not stale: blocked, manual."""
    fixed_seed = lxcconf.repair(SEED_CT, DEVICES)
    no_uvm = {k: v for k, v in DEVICES.items() if v != "nvidia-uvm"}
    pt = lxcconf.inspect("129", fixed_seed)
    assert not [p for p in lxcconf.problems(pt, no_uvm) if "stale" in p]
    assert lxcconf.repair(fixed_seed, no_uvm) == fixed_seed, "no allow deleted"
    blocked = lxcconf.blockers(pt, no_uvm, [])
    assert blocked and "nvidia-uvm is not loaded" in blocked[0] and "lxc.gpu_nodes" in blocked[0]
    assert lxcconf.blockers(pt, DEVICES, []) == []


def test_an_allow_line_with_a_trailing_comment_is_read_and_not_duplicated():
    text = SEED_CT.replace("lxc.cgroup2.devices.allow: c 195:* rwm", "lxc.cgroup2.devices.allow: c 195:* rwm # nvidia")
    assert "# nvidia" in text
    pt = lxcconf.inspect("129", text)
    assert 195 in pt.allowed
    fixed = lxcconf.repair(text, DEVICES)
    assert fixed.count("c 195:") == 1 and "c 195:* rwm # nvidia" in fixed


DEV_CT = "arch: amd64\nhostname: infer\ndev0: /dev/nvidia0,gid=44\ndev1: /dev/nvidiactl,gid=44\n"


def test_a_devn_is_added_only_for_a_node_that_exists_on_the_host():
    pt = lxcconf.inspect("130", DEV_CT)
    nodes = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert lxcconf.blockers(pt, DEVICES, nodes) == []
    fixed = lxcconf.repair(DEV_CT, DEVICES)
    assert "dev2: /dev/nvidia-uvm,gid=44\n" in fixed and "dev3: /dev/nvidia-uvm-tools,gid=44\n" in fixed
    assert "caps" not in fixed
    blocked = lxcconf.blockers(pt, DEVICES, ["/dev/nvidia0", "/dev/nvidiactl"])
    assert blocked and "/dev/nvidia-uvm" in blocked[0] and "not exist" in blocked[0]


def test_an_allow_whose_comment_lxc_cannot_parse_is_for_a_person():
    text = SEED_CT.replace("lxc.cgroup2.devices.allow: c 195:* rwm", "lxc.cgroup2.devices.allow: c 195:* rw # nvidia")
    pt = lxcconf.inspect("129", text)
    (why,) = lxcconf.blockers(pt, DEVICES, [])
    assert "cannot parse" in why and "rw # nvidia" in why


def test_zfs_arc_fix_edits_the_file_that_sets_the_limit_and_keeps_every_other_byte(tmp_path):
    """The limit that counts is the last one modprobe reads (here the operator's 99-local.conf,
    on a host with no zfs.conf): the fix edits that line only (its comment, its other option, the file's other lines kept),
    and on a 128 GiB host sets zfs_arc_min below a maximum the default minimum would void."""
    import scenarios
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls.storage_zfs_arc import edited_line

    local = "# ARC for the old workload\r\noptions zfs zfs_arc_max=68719476736 zfs_prefetch_disable=1\r\n# end\n"
    assert edited_line(local, 2, {"zfs_arc_max": 2147483648, "zfs_arc_min": 2147483647}) == (
        "# ARC for the old workload\r\noptions zfs zfs_arc_max=2147483648 zfs_prefetch_disable=1 zfs_arc_min=2147483647\r\n"
        "# end\n")
    data = scenarios.merge(scenarios.BASE_HOST, {"zfs": {}})
    data["files"] = {"/etc/modprobe.d/99-local.conf": local}
    host = scenarios.render(data, tmp_path)
    # 128 GiB less the base host's GPU container (0.5 GiB) and 119 GiB kept: 8.5 GiB fit
    f = host.finding("storage.zfs_arc", zfs_reserve_gib=119)
    assert f["status"] == "drift" and f["message"].endswith("limit it to 8.5 GiB"), f
    edit, = f["fix"]["files"]
    assert edit["path"] == "/etc/modprobe.d/99-local.conf"
    assert edit["content"] == local.replace("zfs_arc_max=68719476736", "zfs_arc_max=9126805504")
    assert f["fix"]["runtime"] == [{"kind": "sysfs", "path": "/sys/module/zfs/parameters/zfs_arc_max", "value": "9126805504"}]
    assert f["fix"]["initramfs"] is True, "root=ZFS=: the module reads the initramfs' copy"


class _Started:
    """A tool run started early, as subprocess.Popen looks to the probe: answered by the scenario's model."""

    def __init__(self, argv, run):
        self.argv, self.killed = argv, False
        self.returncode, self._out, self._err = run(argv)

    def communicate(self):
        return self._out.encode(), self._err.encode()

    def kill(self):
        self.killed = True


def test_nvidia_smi_runs_start_before_the_file_reads_and_the_facts_are_the_same(tmp_path):
    """The facts module starts nvidia-smi's query and its two P2P reads before reading any
    file (on a GPU host each takes 0.1 s to seconds): probe_nvidia takes their answers
    instead of running them again, and the facts are those of running them in turn."""
    host = scenarios.render(SEED_HOST, tmp_path)
    asked, started = [], []

    def run(argv):
        asked.append(argv)
        return host.run(argv)

    def start(argv):
        started.append(_Started(argv, host.run))
        return started[-1]

    in_turn = probe.Probe(str(tmp_path), run=host.run).gather()
    early = probe.Probe(str(tmp_path), run=run, start=start).gather()
    assert early == in_turn and len(in_turn["nvidia"]["gpus"]) == 8 and in_turn["nvidia"]["p2p"]
    smi = [a for a in asked if a[0].endswith("nvidia-smi")]
    assert smi == [] and [s.argv[1:] for s in started] == [
        ["--query-gpu=" + ",".join(probe.SMI_FIELDS), "--format=csv,noheader"], ["topo", "-p2p", "r"], ["topo", "-p2p", "w"]]
    assert not any(s.killed for s in started)


def test_an_early_run_no_section_asks_for_is_stopped(tmp_path):
    """The query fails (the driver cannot be reached): the P2P reads started with it are
    never asked for, and are stopped and reaped, not left running after the module."""
    host = scenarios.render(SEED_HOST, tmp_path)
    started = []

    def failing(argv):
        if argv[0].endswith("nvidia-smi") and argv[1].startswith("--query-gpu"):
            return 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", ""
        return host.run(argv)

    def start(argv):
        started.append(_Started(argv, failing))
        return started[-1]

    facts = probe.Probe(str(tmp_path), run=host.run, start=start).gather()
    assert facts["nvidia"]["smi_error"].startswith("NVIDIA-SMI has failed") and facts["nvidia"]["gpus"] == []
    assert [s.killed for s in started] == [False, True, True]


def test_a_sysfs_read_takes_one_read_call_and_still_gets_every_byte(tmp_path, monkeypatch):
    """read_attribute stops at the first read shorter than the smallest page (kernfs hands a
    value over whole, a binary attribute a page at a time): a value is one read(2), a longer
    file is read to its end, and a limit (config space's 4096 bytes) is kept."""
    import os

    from ansible_collections.gpuhost.stack.plugins.module_utils.probe.attribute import read_attribute

    reads = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    short, long = tmp_path / "governor", tmp_path / "config"
    short.write_bytes(b"performance\n")
    long.write_bytes(bytes(range(256)) * 40)                  # 10,240 bytes
    assert read_attribute(str(short)) == b"performance\n" and len(reads) == 1
    reads.clear()
    assert read_attribute(str(long)) == bytes(range(256)) * 40 and len(reads) == 2
    reads.clear()
    assert read_attribute(str(long), 4096) == (bytes(range(256)) * 40)[:4096] and reads == [4096]
    # this machine's own sysfs reads the same as a buffered read does
    online = "/sys/devices/system/cpu/online"
    with open(online, "rb") as f:
        assert read_attribute(online) == f.read()


def _cpu_tree(root, cpus: dict[int, list[str]], driver_dirs: bool = False) -> None:
    """cpuN/cpuidle/stateK/{name,latency,disable} for each CPU's list of disable values
    (an empty list: the CPU has no cpuidle directory, as an offline one)."""
    base = root / "sys/devices/system/cpu"
    for cpu, disables in cpus.items():
        (base / f"cpu{cpu}").mkdir(parents=True)
        for k, value in enumerate(disables):
            state = base / f"cpu{cpu}/cpuidle/state{k}"
            state.mkdir(parents=True)
            (state / "name").write_text(["POLL", "C1", "C2"][k] + "\n")
            (state / "latency").write_text(f"{[0, 1, 800][k]}\n")
            (state / "disable").write_text(value + "\n")
        if driver_dirs and disables:
            (base / f"cpu{cpu}/cpuidle/driver").mkdir()
    (base / "cpuidle").mkdir(parents=True, exist_ok=True)
    (base / "cpuidle/current_driver").write_text("acpi_idle\n")


def test_idle_states_are_listed_once_for_one_driver_and_per_cpu_for_several(tmp_path):
    """drivers/cpuidle/sysfs.c: a CPU has its driver's states, state0..state_count-1, so with
    one driver the first CPU's list is everyone's (an offline CPU, with no cpuidle directory,
    counts for none); a kernel with per-CPU drivers (cpuidle/driver/) is read CPU by CPU."""
    one = tmp_path / "one"
    _cpu_tree(one, {0: [], 1: ["0", "0", "0"], 2: ["0", "0", "1"], 3: [], 10: ["0", "0", "1"]})
    pb = probe.Probe(str(one))
    listed = []
    real_glob = pb.glob
    pb.glob = lambda pattern: listed.append(pattern) or real_glob(pattern)
    idle = pb.probe_cpuidle()
    assert idle == {"driver": "acpi_idle", "states": [
        {"index": 0, "name": "POLL", "latency_us": 0, "cpus": 3, "disabled": 0},
        {"index": 1, "name": "C1", "latency_us": 1, "cpus": 3, "disabled": 0},
        {"index": 2, "name": "C2", "latency_us": 800, "cpus": 3, "disabled": 2}]}
    assert [p for p in listed if "/cpuidle/state" in p] == ["/sys/devices/system/cpu/cpu0/cpuidle/state[0-9]*",
                                                            "/sys/devices/system/cpu/cpu1/cpuidle/state[0-9]*"], \
        "listed until a CPU has states, then never again"
    several = tmp_path / "several"
    _cpu_tree(several, {0: ["0", "0"], 1: ["0", "0", "1"]}, driver_dirs=True)
    states = probe.Probe(str(several)).probe_cpuidle()["states"]
    assert [(s["index"], s["cpus"], s["disabled"]) for s in states] == [(0, 2, 0), (1, 2, 0), (2, 1, 1)]


def test_a_policy_file_the_first_policy_lacks_is_not_looked_for_on_the_others(tmp_path):
    """cpufreq creates a driver's attributes (and the per-policy boost file) on every policy
    alike: acpi-cpufreq has no energy_performance_preference on any, and the probe asks once."""
    base = tmp_path / "sys/devices/system/cpu/cpufreq"
    for i in range(3):
        pol = base / f"policy{i}"
        pol.mkdir(parents=True)
        for name, value in (("scaling_driver", "acpi-cpufreq"), ("scaling_available_governors", "performance schedutil"),
                            ("scaling_governor", "performance"), ("boost", "1"), ("scaling_max_freq", "3000000"),
                            ("cpuinfo_max_freq", "3000000")):
            (pol / name).write_text(value + "\n")
    pb = probe.Probe(str(tmp_path))
    asked = []
    real_read = pb.read
    pb.read = lambda path, default=None: asked.append(path) or real_read(path, default)
    freq = pb.probe_cpufreq()
    assert [p["boost"] for p in freq["policies"]] == [1, 1, 1] and all("epp" not in p for p in freq["policies"])
    assert not [p for p in asked if p.endswith("energy_performance_preference")]
