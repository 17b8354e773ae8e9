"""The probe and the judgement on outputs from real machines (sources in
tests/real_data/SOURCES.md). Expected values are the source's own text: lspci's decoded
lines for the config-space dumps, the posted strings and files for the rest."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import scenarios
from ansible_collections.gpuhost.stack.plugins.module_utils import controls, lxcconf

DATA = Path(__file__).resolve().parents[1] / "real_data"
probe = scenarios.probe


def dumps(name: str) -> dict[str, bytes]:
    """BDF -> config space bytes, from an lspci -vvv -xxxx text."""
    out, current = {}, None
    for line in (DATA / "pciutils" / name).read_text().splitlines():
        m = re.match(r"^((?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ", line)
        if m:
            current = m.group(1)
            out[current] = bytearray()
            continue
        m = re.match(r"^([0-9a-f]{2,3}): ((?:[0-9a-f]{2} ?){16})$", line)
        if m and current is not None:
            assert int(m.group(1), 16) == len(out[current]), f"{name} {current}: hex lines out of order"
            out[current] += bytes.fromhex(m.group(2))
    return {k: bytes(v) for k, v in out.items()}


# (file, BDF, what lspci decoded from the same bytes)
PCI_CASES = [
    # Sunrise Point-LP root port: "Express (v2) Root Port", DevCap MaxPayload 256, DevCtl MaxPayload 256
    # MaxReadReq 128, LnkCap 8GT/s x4, LnkSta 8GT/s x4, ACSCtl all -, ACSCap ReqRedir+ CmpltRedir+
    ("cap-exp-lnkcap2", "00:1c.0", dict(port_type=4, mps_supported=256, mps=256, mrrs=128,
                                        link_cap={"gen": 3, "width": 4}, link_sta={"gen": 3, "width": 4}, acs_ctrl=0x0000)),
    # GP108M [GeForce MX150]: "Express (v2) Endpoint", MaxPayload 256, MaxReadReq 512, 8GT/s x4
    ("cap-exp-lnkcap2", "02:00.0", dict(port_type=0, mps_supported=256, mps=256, mrrs=512,
                                        link_cap={"gen": 3, "width": 4}, link_sta={"gen": 3, "width": 4})),
    # JHL6240 Thunderbolt 3 bridge: "Express (v2) Downstream Port", MaxPayload 128, MaxReadReq 512, 2.5GT/s x4
    ("cap-exp-lnkcap2", "08:00.0", dict(port_type=6, mps_supported=128, mps=128, mrrs=512,
                                        link_cap={"gen": 1, "width": 4}, link_sta={"gen": 1, "width": 4})),
    # Haswell-E root port: ACSCtl SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ (0x1f), 8GT/s x8
    ("cap-aer-root", "00:02.0", dict(port_type=4, mps=256, mrrs=128, link_cap={"gen": 3, "width": 8},
                                     link_sta={"gen": 3, "width": 8}, acs_ctrl=0x001F)),
    # ConnectX-3 Pro: Endpoint, DevCap MaxPayload 256, MaxReadReq 512, 8GT/s x8
    ("cap-aer-root", "03:00.0", dict(port_type=0, mps_supported=256, mps=256, mrrs=512,
                                     link_cap={"gen": 3, "width": 8}, link_sta={"gen": 3, "width": 8})),
    # PLX 10b5:9716 downstream port, dumped as 256 bytes: DevCap MaxPayload 1024, DevCtl MaxPayload 128
    # MaxReadReq 128, 8GT/s x4; its ACS capability lies beyond the dump
    ("cap-dpc", "05:01.0", dict(port_type=6, mps_supported=1024, mps=128, mrrs=128,
                                link_cap={"gen": 3, "width": 4}, link_sta={"gen": 3, "width": 4})),
    # QuickPath root port: LnkCap 5GT/s x4, LnkSta 2.5GT/s x4, ACSCtl all -
    ("cap-pcie-1", "00:01.0", dict(port_type=4, mps=256, mrrs=128, link_cap={"gen": 2, "width": 4},
                                   link_sta={"gen": 1, "width": 4}, acs_ctrl=0x0000)),
    # Intel 10c9 NIC: DevCap MaxPayload 512, DevCtl MaxPayload 256, MaxReadReq 512, 2.5GT/s x4
    ("cap-pcie-2", "01:00.0", dict(port_type=0, mps_supported=512, mps=256, mrrs=512,
                                   link_cap={"gen": 1, "width": 4}, link_sta={"gen": 1, "width": 4})),
    # 8086:9d10 root port: LnkCap 8GT/s x1, LnkSta 5GT/s (downgraded) x1
    ("cap-exp-dev2", "00:1c.0", dict(port_type=4, mrrs=128, link_cap={"gen": 3, "width": 1},
                                     link_sta={"gen": 2, "width": 1}, acs_ctrl=0x0000)),
]


@pytest.mark.parametrize("name, bdf, expected", PCI_CASES, ids=[f"{c[0]}-{c[1]}" for c in PCI_CASES])
def test_config_space_of_real_devices(name, bdf, expected):
    regs = probe.parse_config(dumps(name)[bdf])
    for key, value in expected.items():
        assert regs.get(key) == value, (key, regs.get(key), value)


def test_a_256_byte_dump_has_no_acs_and_the_judgement_says_unknown():
    cfg = dumps("cap-dpc")["05:01.0"]
    assert len(cfg) == 256 and "acs_ctrl" not in probe.parse_config(cfg)
    # the PLX port above a GPU, read as 256 bytes: ACS is unknown, never "no switch"
    up = {"bdf": "0000:04:00.0", "port_type": 5, "parent": None, "config_size": 4096}
    port = {"bdf": "0000:05:01.0", "parent": "0000:04:00.0", "vendor": 0x10B5, "device": 0x9716,
            "config_size": len(cfg), **probe.parse_config(cfg)}
    gpu = {"bdf": "0000:06:00.0", "parent": "0000:05:01.0", "vendor": 0x10DE, "class": 0x030200, "config_size": 4096}
    facts = {"pci": [up, port, gpu], "boot": {"cmdline": "", "persisted_cmdline": ""}, "iommu": {"units": [], "groups": 0}}
    f = controls.evaluate(facts, {"controls": ["pcie.acs"]})["pcie.acs"]
    assert f["status"] == "error" and "256 bytes" in f["message"]


def test_a_real_gpu_with_maxreadreq_512_is_drift_and_the_fix_names_it_exactly():
    cfg = dumps("cap-exp-lnkcap2")["02:00.0"]
    gpu = {"bdf": "0000:02:00.0", "parent": "0000:00:1c.0", "vendor": 0x10DE, "device": 0x1D10, "class": 0x030200,
           "driver": "nvidia", **probe.parse_config(cfg)}
    f = controls.evaluate({"pci": [gpu]}, {"controls": ["pcie.mrrs"]})["pcie.mrrs"]
    assert f["status"] == "drift" and f["observed"] == "512 bytes"
    assert f["fix"]["runtime"] == [{"kind": "pci_register", "pci": "0000:02:00.0", "device": "10de:1d10", "register": "CAP_EXP+8.w",
                                    "value": "5000", "mask": "7000"}]


NVIDIA_VERSIONS = [
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  525.60.11  Release Build  (archlinux-builder@localhost)  \n"
     "GCC version:  gcc version 12.2.0 (GCC) \n", "525.60.11", "open"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  (dvs-builder@U16-A24-9-2)  "
     "Thu Oct 10 12:15:00 UTC 2024\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n", "565.57.01", "open"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.58  Release Build  (portage@localhost)  "
     "Сб 29 июн 2024 14:36:22 MSK\n", "555.58", "open"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017\n"
     "GCC version:  gcc version 7.2.0 (Ubuntu 7.2.0-8ubuntu3) \n", "384.98", "proprietary"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  35.3.1  Release Build  (buildbrain@mobile-u64-6289-d7000)  "
     "Sun Mar 19 08:09:33 PDT 2023\nGCC version:  gcc version 9.3.0 (Buildroot 2020.08) \n", "35.3.1", "open"),
]


@pytest.mark.parametrize("text, version, flavor", NVIDIA_VERSIONS, ids=[v[1] for v in NVIDIA_VERSIONS])
def test_proc_driver_nvidia_version_from_real_hosts(tmp_path, text, version, flavor):
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(text)
    nv = probe.Probe(str(tmp_path), run=lambda argv: (127, "", "")).probe_nvidia()
    assert (nv["module"], nv["flavor"]) == (version, flavor)


def devices(text: str) -> dict[int, str]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+) (\S+)$", line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def test_imex_and_caps_majors_from_a_real_host_are_told_apart():
    # dra-driver-nvidia-gpu#304: 234 nvidia-caps-imex-channels, 511 nvidia-caps (nvidia-cap1 is 511,1)
    host = devices("Character devices:\n195 nvidia\n234 nvidia-caps-imex-channels\n505 nvidia-uvm\n511 nvidia-caps\n")
    assert lxcconf.nvidia_majors(host)["nvidia-caps"] == 511
    conf = ("lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.allow: c 505:* rwm\n"
            "lxc.cgroup2.devices.allow: c 234:* rwm\n"
            "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
            "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file\n"
            "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
            "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file\n"
            "lxc.mount.entry: /dev/nvidia-caps/nvidia-cap1 dev/nvidia-caps/nvidia-cap1 none bind,optional,create=file\n")
    probs = lxcconf.problems(lxcconf.inspect("1", conf), host)
    # the caps node needs the caps major (511), not the IMEX one (234), which is live and stays
    assert probs == ["missing allow c 511:* (nvidia-caps)"]
    fixed = lxcconf.repair(conf, host)
    assert "c 234:* rwm" in fixed and fixed.endswith("lxc.cgroup2.devices.allow: c 511:* rwm\n")


def test_nvidia_frontend_name_of_older_drivers_is_still_major_195():
    # nvidia-container-toolkit#324: before 550.40 /proc/devices said "195 nvidia-frontend"
    host = devices("Character devices:\n195 nvidia-frontend\n236 nvidia-caps\n510 nvidia-uvm\n")
    text = (DATA / "lxc/ollama-220.conf").read_text().replace("c 506:", "c 510:")
    pt = lxcconf.inspect("220", text)
    assert pt.gives_gpus
    # 195 counts for nvidia-frontend too; nvidia-caps is for MIG only, so nothing is missing
    assert 195 in pt.allowed and lxcconf.problems(pt, host) == []
    assert lxcconf.problems(pt, devices("Character devices:\n195 nvidia-frontend\n511 nvidia-uvm\n")) == [
        "missing allow c 511:* (nvidia-uvm)", "stale allow c 510:*"]


def test_a_posted_container_config_is_judged_on_its_own_gpu():
    text = (DATA / "lxc/ollama-220.conf").read_text()
    pt = lxcconf.inspect("220", text)
    assert pt.gpu_nodes == ["dev/nvidia0"]
    # on the poster's host (nvidia-uvm 506, no nvidia-caps): complete
    assert lxcconf.problems(pt, {195: "nvidia", 506: "nvidia-uvm"}) == []
    # after a driver reload gave nvidia-uvm 511: the stale 506 is replaced in place, nothing else moves
    moved = {195: "nvidia", 511: "nvidia-uvm"}
    assert lxcconf.problems(pt, moved) == ["missing allow c 511:* (nvidia-uvm)", "stale allow c 506:*"]
    fixed = lxcconf.repair(text, moved)
    assert fixed == text.replace("lxc.cgroup2.devices.allow: c 506:* rwm", "lxc.cgroup2.devices.allow: c 511:* rwm")
    assert lxcconf.inspect("220", fixed).gpu_nodes == ["dev/nvidia0"], "no GPU added"


def test_nvidias_unit_template_turns_persistence_on(tmp_path):
    unit = (DATA / "nvidia/nvidia-persistenced.service.template").read_text()
    (tmp_path / "lib/systemd/system").mkdir(parents=True)
    (tmp_path / "lib/systemd/system/nvidia-persistenced.service").write_text(unit)
    u = probe.Probe(str(tmp_path), run=lambda argv: (127, "", "")).effective_unit("nvidia-persistenced.service")
    assert u["exec_start"] == ["/usr/bin/nvidia-persistenced --user __USER__"] and u["installable"]
    facts = {"nvidia": {"gpus": [{"bdf": "0000:01:00.0", "persistence": True}]},
             "units": {"nvidia-persistenced.service": {**u, "enabled": True}}}
    assert controls.evaluate(facts, {"controls": ["nvidia.persistence"]})["nvidia.persistence"]["status"] == "pass"


def test_a_posted_proxmox_grub_line_is_read_without_running_it(tmp_path):
    # r-pufky's Proxmox /etc/default/grub line
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/grub").write_text(
        'GRUB_DEFAULT=0\nGRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`\n'
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet amd_iommu=on iommu=pt"\nGRUB_CMDLINE_LINUX=""\n')
    p = probe.Probe(str(tmp_path), run=lambda argv: pytest.fail(f"ran {argv}"))
    values, _ = p.grub_settings()
    line = " ".join((values["GRUB_CMDLINE_LINUX"] + " " + values["GRUB_CMDLINE_LINUX_DEFAULT"]).split())
    assert line == "quiet amd_iommu=on iommu=pt"
    assert controls.params(line)["iommu"] == "pt"


@pytest.mark.parametrize("pvecfg, expected", [
    # pve-manager 7.4-3's installed PVE/pvecfg.pm (pveversion: "pve-manager/7.4-3/9002ab8a"):
    # the version literal as its build writes it; SOURCES.md
    ("sub version {\n    return '7.4-3';\n}\n\nsub release {\n    return '7.4';\n}\n", "7.4"),
    # pve-manager 5.2-8's (tab-indented, `use vars`)
    ("use vars qw(@ISA);\nuse Carp;\n\nsub version {\n\treturn '5.2';\n}\n\nsub release {\n\treturn '8';\n}\n", "5.2"),
])
def test_the_proxmox_version_is_read_from_pvecfg_without_running_pveversion(tmp_path, pvecfg, expected):
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/pveversion").write_text("#!/usr/bin/perl\n")
    (tmp_path / "usr/share/perl5/PVE").mkdir(parents=True)
    (tmp_path / "usr/share/perl5/PVE/pvecfg.pm").write_text("package PVE::pvecfg;\n\nuse strict;\n" + pvecfg)
    ran = []
    os_facts = probe.Probe(str(tmp_path), run=lambda argv: ran.append(argv) or (0, "pve-manager/9.9/x", "")).probe_os()
    assert os_facts["proxmox_ve"] == expected and ran == []
    (tmp_path / "usr/share/perl5/PVE/pvecfg.pm").unlink()          # no pvecfg.pm: ask pveversion
    os_facts = probe.Probe(str(tmp_path), run=lambda argv: ran.append(argv) or (0, "pve-manager/8.2.4/faa8 (x)", "")).probe_os()
    assert os_facts["proxmox_ve"] == "8.2.4" and len(ran) == 1


LOCKDOWN = [("lockdown-kicksecure-none", "none"), ("lockdown-sriov-none", "none"),
            ("lockdown-sriov-integrity", "integrity"), ("lockdown-sriov-confidentiality", "confidentiality")]


@pytest.mark.parametrize("name, level", LOCKDOWN, ids=[n for n, _ in LOCKDOWN])
def test_kernel_lockdown_levels_as_real_kernels_print_them(tmp_path, name, level):
    """The bracketed level is the current one, whether the kernel lists two levels or three;
    from integrity on, pcie.mrrs is for a person (setpci is refused)."""
    (tmp_path / "sys/kernel/security").mkdir(parents=True)
    (tmp_path / "sys/kernel/security/lockdown").write_bytes((DATA / "security" / name).read_bytes())
    assert probe.Probe(str(tmp_path)).probe_lockdown() == level
    host = scenarios.render(scenarios.BASE_HOST, tmp_path / "host")
    facts = host.facts()
    facts["lockdown"] = probe.Probe(str(tmp_path)).probe_lockdown()
    gpu = next(d for d in facts["pci"] if d.get("vendor") == 0x10DE and d.get("class", 0) >> 16 == 0x03)
    gpu["mrrs"] = 512
    finding = controls.evaluate(facts, {"controls": ["pcie.mrrs"]})["pcie.mrrs"]
    assert finding["status"] == ("drift" if level == "none" else "manual"), finding



def test_gpu_numa_nodes_of_a_real_eight_gpu_host_pass_and_an_unknown_node_is_for_a_person(tmp_path):
    """numa.gpu_affinity on the NUMA nodes a real 8x L4 host's sysfs gives its GPUs (two
    nodes, four GPUs each); with one node unknown (-1, firmware without _PXM for it) it is
    manual, naming that GPU."""
    import copy

    rows = [line.split() for line in (DATA / "gpu/numa-node-aws-8xL4").read_text().splitlines()]
    facts = scenarios.render(scenarios.BASE_HOST, tmp_path / "host").facts()
    template = next(d for d in facts["pci"] if d.get("vendor") == 0x10DE and d.get("class", 0) >> 16 == 0x03)
    others = [d for d in facts["pci"] if d is not template]
    facts["pci"] = others + [dict(copy.deepcopy(template), bdf=bdf, numa_node=int(node)) for bdf, node in rows]
    assert facts["numa"]["nodes"] == 2
    good = controls.evaluate(copy.deepcopy(facts), {"controls": ["numa.gpu_affinity"]})["numa.gpu_affinity"]
    assert good["status"] == "pass" and good["message"] == "8 GPUs on known nodes of 2", good
    assert "0000:9f:00.0 node 0" in good["observed"] and "0000:b4:00.0 node 1" in good["observed"]
    next(d for d in facts["pci"] if d["bdf"] == "0000:ae:00.0")["numa_node"] = -1
    bad = controls.evaluate(facts, {"controls": ["numa.gpu_affinity"]})["numa.gpu_affinity"]
    assert bad["status"] == "manual" and bad["observed"] == "numa_node -1 on 0000:ae:00.0", bad


def _q_power(text: str) -> dict[str, dict]:
    """Each GPU's power limits from `nvidia-smi -q`'s "GPU Power Readings": "Current" is the
    enforced limit and "Requested" the one set (driver 535 on), as nvidia-smi's CSV fields
    enforced.power.limit and power.limit name them."""
    out: dict[str, dict] = {}
    gpu = None
    keys = {"Current Power Limit": "enforced_w", "Requested Power Limit": "limit_w", "Default Power Limit": "default_w",
            "Min Power Limit": "min_w", "Max Power Limit": "max_w"}
    for line in text.splitlines():
        if line.startswith("GPU 0"):
            gpu = line.split()[1].lower()[4:]
            out[gpu] = {}
        name, _, value = (p.strip() for p in line.partition(":"))
        if gpu and name in keys:
            out[gpu][keys[name]] = float(value.split()[0])
    return out


def _power_facts(tmp_path, power: dict[str, dict]) -> dict:
    import copy

    facts = scenarios.render(scenarios.BASE_HOST, tmp_path / "host").facts()
    template = facts["nvidia"]["gpus"][0]
    facts["nvidia"]["gpus"] = [dict(copy.deepcopy(template), index=i, bdf=bdf, power=p)
                               for i, (bdf, p) in enumerate(power.items())]
    return facts


def test_power_limits_of_a_real_8x_rtx_pro_6000_host_pass(tmp_path):
    """nvidia.power_limit on the limits a real 8x RTX PRO 6000 Blackwell host's nvidia-smi -q
    shows (600 W set, enforced and default; 300..600 W): pass; asked for 450 W, still pass
    (a lower cap of the operator's is not raised); the same host capped at 300 W is drift."""
    import copy

    power = _q_power((DATA / "gpu/nvidia-smi-q-power-8x-rtxpro6000").read_text())
    assert len(power) == 8 and power["0000:06:00.0"] == {"enforced_w": 600.0, "limit_w": 600.0, "default_w": 600.0,
                                                           "min_w": 300.0, "max_w": 600.0}
    facts = _power_facts(tmp_path, power)
    good = controls.evaluate(copy.deepcopy(facts), {"controls": ["nvidia.power_limit"]})["nvidia.power_limit"]
    assert good["status"] == "pass" and good["message"] == "8 GPUs may draw the default limit", good
    assert "0000:06:00.0 600 W of 600 W" in good["observed"]
    own = controls.evaluate(copy.deepcopy(facts), {"controls": ["nvidia.power_limit"], "nvidia_power_limit_w": 450})
    assert own["nvidia.power_limit"]["status"] == "pass"
    for p in facts["nvidia"]["gpus"][3:5]:
        p["power"].update(limit_w=300.0, enforced_w=300.0)
    bad = controls.evaluate(facts, {"controls": ["nvidia.power_limit"]})["nvidia.power_limit"]
    assert bad["status"] == "drift" and bad["message"].count("is limited to 300 W (600 W wanted)") == 2, bad


def test_a_real_gpu_capped_out_of_band_is_manual(tmp_path):
    """A real GPU whose enforced ("Current") limit, 500 W, is below the one set and its
    default, 700 W (the BMC's cap): no nvidia-smi -pl lifts it, so manual, naming it; an
    inventory limit above its real maximum (700 W) is manual too, naming the range."""
    power = _q_power((DATA / "gpu/nvidia-smi-q-power-capped").read_text())
    assert power == {"0000:06:00.0": {"enforced_w": 500.0, "limit_w": 700.0, "default_w": 700.0, "min_w": 200.0,
                                      "max_w": 700.0}}
    facts = _power_facts(tmp_path, power)
    f = controls.evaluate(facts, {"controls": ["nvidia.power_limit"]})["nvidia.power_limit"]
    assert f["status"] == "manual" and "0000:06:00.0 enforces 500 W below its limit 700 W" in f["message"], f
    over = controls.evaluate(facts, {"controls": ["nvidia.power_limit"], "nvidia_power_limit_w": 750})
    assert over["nvidia.power_limit"]["status"] == "manual"
    assert "allows (200 W to 700 W)" in over["nvidia.power_limit"]["message"]


def test_a_real_gpu_without_power_management_reads_as_none():
    """The probe's reading of nvidia-smi's CSV on a real GTX 770 whose power fields all print
    [Not Supported]: no power limits (nvidia.power_limit is na for it), never a number."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    command, line = (DATA / "gpu/query-gpu-power-not-supported").read_text().splitlines()
    fields = command.split("--query-gpu=")[1].split()[0].split(",")
    row = dict(zip(fields, (c.strip() for c in line.split(","))))
    assert row["power.limit"] == "[Not Supported]" and row["temperature.gpu"] == "52"
    assert devices.smi_power(row) is None
    assert devices._watts("600.00 W") == 600.0 and devices._watts("200.00") == 200.0


def _health(tmp_path, log_lines: list[str], bdf: str, persistence: bool = True) -> dict:
    """health.gpu on the base host, its GPU moved to *bdf*, with the Xids the probe reads
    in *log_lines*."""
    import copy

    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    facts = scenarios.render(scenarios.BASE_HOST, tmp_path / "host").facts()
    gpu = next(d for d in facts["pci"] if d.get("vendor") == 0x10DE)
    facts["pci"] = [d for d in facts["pci"] if d is not gpu] + [dict(copy.deepcopy(gpu), bdf=bdf)]
    facts["nvidia"]["gpus"][0]["bdf"] = bdf
    facts["nvidia"]["gpus"][0]["persistence"] = persistence
    facts["kernel_log"] = {"xids": devices.xids_in(log_lines)}
    return controls.evaluate(facts, {"controls": ["health.gpu"]})["health.gpu"]


def test_a_real_xid_79_makes_the_gpu_health_manual_naming_it(tmp_path):
    """A real H800 host's dmesg when its GPU fell off the bus: the probe finds Xid 79 on
    0000:5d:00 (the continuation lines of the next record are no Xid), and health.gpu is
    manual, naming the GPU and the driver's words."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    lines = (DATA / "gpu/dmesg-xid79-h800").read_text().splitlines()
    assert devices.xids_in(lines) == [{"pci": "0000:5d:00", "xid": 79, "count": 1, "since_reset": True,
                                       "message": "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."}]
    f = _health(tmp_path, lines, "0000:5d:00.0")
    assert f["status"] == "manual", f
    assert "0000:5d:00: Xid 79 in this boot's kernel log: pid='<unknown>', name=<unknown>, GPU has fallen off" in f["message"]


def test_an_xid_before_the_gpus_next_attach_does_not_count(tmp_path):
    """The real H800's lines (its UUID line, then Xid 79), then the same UUID line again, as
    the driver logs it before the first Xid of a GPU attached anew (a reset: kernel_rc.c
    _krcLogUuidOnce), and an application's Xid 13: the 79 came before the reset and no
    longer counts; health.gpu passes and says what it left out."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    lines = (DATA / "gpu/dmesg-xid79-h800").read_text().splitlines()
    after = [lines[0].replace("4254.197816", "5100.000001"),
             "[ 5100.000002] NVRM: Xid (PCI:0000:5d:00): 13, pid=1, name=python3, Graphics Exception"]
    xids = devices.xids_in(lines + after)
    assert [(x["xid"], x["since_reset"]) for x in xids] == [(79, False), (13, True)]
    f = _health(tmp_path, lines + after, "0000:5d:00.0")
    assert f["status"] == "pass", f
    assert "Xid 79 before the GPU's last reset" in f["observed"]
    # without the second UUID line, the 79 is this attach's: manual
    assert _health(tmp_path, lines, "0000:5d:00.0")["status"] == "manual"
    # without persistence mode the driver makes the GPU's object anew whenever its last client
    # closes: a second UUID line is then no proof of a reset, and the 79 still counts
    assert _health(tmp_path / "np", lines + after, "0000:5d:00.0", persistence=False)["status"] == "manual"


def test_a_gpu_the_driver_release_does_not_support_is_named_not_called_a_binding_problem(tmp_path):
    """T3-11: a real probe failure (NVIDIA/open-gpu-kernel-modules#393): "The NVIDIA GPU
    0000:01:00.0 (PCI ID: 10de:25a0) installed in this system is not supported by the NVIDIA
    520.56.06 driver release", and nvidia-smi finds no devices. nvidia.driver names the GPU and
    the release, never "check the GPUs' driver binding"."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    lines = (DATA / "gpu/dmesg-unsupported-520-3050ti").read_text().splitlines()
    assert devices.unsupported_in(lines) == [{"bdf": "0000:01:00.0", "pci_id": "10de:25a0", "why": "release",
                                              "release": "520.56.06"}]
    facts = scenarios.render(scenarios.BASE_HOST, tmp_path).facts()
    # the driver that host loaded, as its log names it
    facts["nvidia"].update(gpus=[], no_devices=True, smi_error="No devices were found", module="520.56.06",
                           userspace="520.56.06")
    facts["kernel_log"] = {"xids": [], "unsupported_gpus": devices.unsupported_in(lines)}
    f = controls.evaluate(facts, {"controls": ["nvidia.driver"]})["nvidia.driver"]
    assert f["status"] == "manual", f
    assert f["message"].startswith("0000:01:00.0 (PCI ID 10de:25a0) is not supported by the NVIDIA 520.56.06 "
                                   "driver release, as its probe logged") and "binding" not in f["message"], f
    # a line of a release since replaced (the module loaded now is another) is history
    facts["nvidia"].update(module="575.57.08", userspace="575.57.08")
    assert "520.56.06" not in controls.evaluate(facts, {"controls": ["nvidia.driver"]})["nvidia.driver"]["message"]


def test_real_application_xids_leave_the_gpu_healthy(tmp_path):
    """Six real Xid 13s (an application's Graphics Exception, vLLM on A800s): counted, not the
    GPU's fault: health.gpu passes."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    lines = (DATA / "gpu/dmesg-xid13-a800").read_text().splitlines()
    assert [(x["pci"], x["xid"], x["count"]) for x in devices.xids_in(lines)] == [("0000:43:00", 13, 6)]
    f = _health(tmp_path, lines, "0000:43:00.0")
    assert f["status"] == "pass", f


def test_real_gsp_crashes_of_an_rtx_pro_6000_are_named(tmp_path):
    """A real RTX PRO 6000 Blackwell's journal over two crashes: Xid 120 (GSP) and 62 are
    critical, 154 (the recovery action changing) and 45 (a killed channel) are not."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    lines = (DATA / "gpu/journal-xid120-62-rtxpro6000").read_text().splitlines()
    assert [(x["xid"], x["count"]) for x in devices.xids_in(lines)] == [(45, 1), (62, 1), (120, 1), (154, 2)]
    f = _health(tmp_path, lines, "0000:01:00.0")
    assert f["status"] == "manual"
    assert "0000:01:00: Xid 62" in f["message"] and "0000:01:00: Xid 120" in f["message"]
    assert "Xid 154" not in f["message"] and "Xid 45" not in f["message"]


def test_the_kernel_log_reader_takes_kmsg_records_as_the_kernel_documents_them(tmp_path):
    """Documentation/ABI/testing/dev-kmsg's example records: the message after the prefix's
    ';', continuation lines (a leading space) left out."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    log = tmp_path / "kmsg"
    log.write_text((DATA / "gpu/dev-kmsg-abi-example").read_text())
    assert devices.read_kmsg(str(log)) == [
        "pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)",
        "NET: Registered protocol family 10", "udevd[80]: starting version 181"]


def test_a_real_h100s_query_reads_as_healthy_with_its_power_limits():
    """The probe's reading of a real H100's nvidia-smi --query-gpu CSV (driver 590.48.01): no
    recovery action ("None"), no remap pending, page retirement not reported ([N/A]: the
    H100 remaps rows instead), limits 700 W set, enforced and default, 200..700 W."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    header, row = (DATA / "gpu/query-gpu-h100-590").read_text().splitlines()
    names = [re.sub(r" \[.*\]$", "", n.strip()) for n in header.split(",")]
    cells = dict(zip(names, (c.strip() for c in row.split(","))))
    assert len(names) == len(row.split(",")) and cells["pci.bus_id"] == "00000000:00:09.0"
    assert devices.smi_health(cells) == {"recovery_action": "None", "remapped_rows_pending": False,
                                         "retired_pages_pending": None}
    assert devices.smi_power(cells) == {"limit_w": 700.0, "enforced_w": 700.0, "default_w": 700.0, "min_w": 200.0,
                                        "max_w": 700.0}


def test_the_resizable_bar_capability_of_a_real_device():
    """pciutils' real dump of an AMD Fiji: its Physical Resizable BAR capability at 0x200,
    which the real lspci decodes as "BAR 0: current size: 256MB, supported: 256MB 512MB 1GB
    2GB 4GB", is what the probe reads."""
    assert probe.parse_config(dumps("cap-rebar")["09:00.0"])["rebar"] == [
        {"bar": 0, "sizes_mib": [256, 512, 1024, 2048, 4096], "current_mib": 256}]


def _lspci_bars(name: str) -> dict:
    """The facts the probe reads from sysfs `resource` and the Resizable BAR capability, as a
    real `lspci -vv` prints them: "Region N: Memory at ... (64-bit, prefetchable) [size=..]"
    and "BAR N: current size: .., supported: ..", sizes in MiB."""
    unit = {"M": 1, "G": 1024}
    text = (DATA / "gpu" / name).read_text()
    resources = [{"index": int(i), "mib": int(n) * unit[u], "prefetch": "non-prefetchable" not in kind,
                  "mem64": kind.startswith("64-bit")}
                 for i, kind, n, u in re.findall(r"Region (\d+): Memory at \S+ \(([^)]+)\) \[size=(\d+)([MG])\]", text)]
    physical = text.split("Physical Resizable BAR", 1)[1].split("Capabilities:", 1)[0]
    rebar = [{"bar": int(b), "current_mib": int(c) * unit[cu],
              "sizes_mib": [int(n) * unit[u] for n, u in re.findall(r"(\d+)([MG])B", sizes)]}
             for b, c, cu, sizes in re.findall(r"BAR (\d+): current size: (\d+)([MG])B, supported: ([^\n]*)", physical)]
    return {"resources": resources, "rebar": rebar}


@pytest.mark.parametrize("name, status, says", [
    # firmware with Resizable BAR off: 256 MB where 64 GB is offered
    ("lspci-vv-rtxa6000-rebar-off", "manual", "0000:01:00.0 BAR1 is 256 MiB; its Resizable BAR offers up to 64 GiB"),
    # on: the 128 GB aperture is the largest offered (and holds the 96 GB framebuffer)
    ("lspci-vv-rtxpro6000-rebar-on", "pass", "map their whole framebuffer or the largest aperture offered"),
])
def test_the_framebuffer_aperture_of_real_gpus(tmp_path, name, status, says):
    facts = scenarios.render(scenarios.BASE_HOST, tmp_path / "host").facts()
    gpu = next(d for d in facts["pci"] if d.get("vendor") == 0x10DE)
    gpu.update(_lspci_bars(name))
    facts["nvidia"]["gpus"][0]["memory_mib"] = None     # lspci does not say it: judged on the capability
    f = controls.evaluate(facts, {"controls": ["pcie.bar1"]})["pcie.bar1"]
    assert f["status"] == status and says in f["message"], f


def _p2p(tmp_path, name: str, n: int) -> dict:
    """nvidia.p2p on the base host with *n* GPUs whose topo -p2p r and w read as the real
    output in *name* (one matrix: its source printed one, for r or rw)."""
    import copy

    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    matrix = devices.parse_p2p((DATA / "gpu" / name).read_text())
    facts = scenarios.render(scenarios.BASE_HOST, tmp_path / "host").facts()
    template = facts["nvidia"]["gpus"][0]
    facts["nvidia"]["gpus"] = [dict(copy.deepcopy(template), index=i, bdf=f"0000:{i + 1:02x}:00.0") for i in range(n)]
    facts["nvidia"]["p2p"], facts["nvidia"]["p2p_error"] = {"r": matrix, "w": matrix}, None
    return controls.evaluate(facts, {"controls": ["nvidia.p2p"]})["nvidia.p2p"]


def test_peer_to_peer_of_real_hosts(tmp_path):
    """The probe's reading of real nvidia-smi topo -p2p matrices, tabs kept or expanded: an
    8x H100 node all OK (pass); two GeForce RTX 5090 GNS (manual, the legend's words); four
    GPUs OK on their two NVLink pairs and CNS on the four PCIe pairs (manual, naming those)."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    ok = devices.parse_p2p((DATA / "gpu/topo-p2p-r-8xh100-ok").read_text())
    assert len(ok) == 56 and {c for _, _, c in ok} == {"OK"}
    f = _p2p(tmp_path / "a", "topo-p2p-r-8xh100-ok", 8)
    assert f["status"] == "pass" and f["observed"] == "28 of 28 pairs OK both ways", f
    assert devices.parse_p2p((DATA / "gpu/topo-p2p-2x5090-gns").read_text()) == [[0, 1, "GNS"], [1, 0, "GNS"]]
    f = _p2p(tmp_path / "b", "topo-p2p-2x5090-gns", 2)
    assert f["status"] == "manual" and "GPU0-GPU1 (0000:01:00.0, 0000:02:00.0): read GNS (GPU not supported)" in f["message"]
    f = _p2p(tmp_path / "c", "topo-p2p-4gpu-nvlink-cns", 4)
    assert f["status"] == "manual" and f["observed"] == "2 of 6 pairs OK both ways", f
    assert [p for p in ("GPU0-GPU1", "GPU0-GPU2", "GPU1-GPU3", "GPU2-GPU3", "GPU0-GPU3", "GPU1-GPU2")
            if p + " (" in f["message"]] == ["GPU0-GPU1", "GPU0-GPU2", "GPU1-GPU3", "GPU2-GPU3"]


def _q_sections(text: str) -> dict[str, str]:
    """nvidia-smi -q's mode lines as 'Section/Key' -> value (indented key: value lines)."""
    out, section = {}, ""
    for line in text.splitlines():
        m = re.match(r"^    (\S.*?)\s*(?::\s*(.*))?$", line)
        if m:
            section = m.group(1)
            if m.group(2) is not None:
                out[section] = m.group(2)
            continue
        m = re.match(r"^        (\S.*?)\s*:\s*(.*)$", line)
        if m:
            out[f"{section}/{m.group(1)}"] = m.group(2)
    return out


def test_a_real_rtx_pro_6000s_modes_are_the_labs_defaults_and_pass(tmp_path):
    """A real RTX PRO 6000 Blackwell's nvidia-smi -q: compute mode Default, MIG Disabled and
    ECC Enabled, nothing pending (the DRAM Encryption block's Current/Pending is not ECC's).
    The lab's GPU starts in the same modes, its -q says so in the same words, and
    nvidia.gpu_modes passes on it."""
    real = _q_sections((DATA / "gpu/nvidia-smi-q-modes-rtxpro6000").read_text())
    modes = {k: real[k] for k in ("Compute Mode", "MIG Mode/Current", "MIG Mode/Pending", "ECC Mode/Current",
                                  "ECC Mode/Pending")}
    assert modes == {"Compute Mode": "Default", "MIG Mode/Current": "Disabled", "MIG Mode/Pending": "Disabled",
                     "ECC Mode/Current": "Enabled", "ECC Mode/Pending": "Enabled"}
    assert real["DRAM Encryption Mode/Current"] == "Disabled"
    host = scenarios.render(scenarios.BASE_HOST, tmp_path)
    rc, out, _ = host.run(["/usr/bin/nvidia-smi", "-q"])
    lab = _q_sections(out)
    assert rc == 0 and {k: lab[k] for k in modes} == modes
    assert host.status("nvidia.gpu_modes") == "pass"


def test_real_mig_queries_read_as_modes():
    """nvidia-smi's MIG columns as real hosts print them: one GPU of four with MIG Enabled and
    nothing pending; a GeForce's [N/A] is no MIG at all (never Disabled)."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    command, header, *rows = (DATA / "gpu/query-gpu-mig-4gpu").read_text().splitlines()
    names = [n.strip() for n in header.split(",")]
    assert command.split("--query-gpu=")[1].split()[0].split(",") == names
    read = [devices.smi_modes(dict(zip(names, (c.strip() for c in r.split(","))))) for r in rows]
    assert [m["mig"] for m in read] == [["Enabled", "Enabled"]] + [["Disabled", "Disabled"]] * 3
    assert all(m["ecc"] is None and m["compute"] is None for m in read), "fields not asked are unknown"
    _, field, cell = (DATA / "gpu/query-gpu-mig-rtx-na").read_text().splitlines()
    assert devices.smi_modes({field: cell})["mig"] is None


def test_a_real_mig_gpu_is_drift_where_the_inventory_wants_mig_off(tmp_path):
    """The real four-GPU node's MIG modes on the base host's GPU model: with MIG unset it
    passes (the operator's choice); with gpuhost_nvidia_mig false the one GPU with MIG on is
    drift, named, and its fix sets MIG Disabled as pending (a reset applies it)."""
    import copy

    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    _, header, *rows = (DATA / "gpu/query-gpu-mig-4gpu").read_text().splitlines()
    names = [n.strip() for n in header.split(",")]
    facts = scenarios.render(scenarios.BASE_HOST, tmp_path).facts()
    template = facts["nvidia"]["gpus"][0]
    facts["nvidia"]["gpus"] = []
    for i, r in enumerate(rows):
        gpu = copy.deepcopy(template)
        gpu.update(index=i, bdf=f"0000:{0x41 + i:02x}:00.0")
        gpu["modes"]["mig"] = devices.smi_modes(dict(zip(names, (c.strip() for c in r.split(",")))))["mig"]
        if gpu["modes"]["mig"][0] == "Enabled":
            # its GPU instances are not in the paste: one, as a GPU serving through MIG has
            gpu["mig_instances"] = 1
        facts["nvidia"]["gpus"].append(gpu)
    unset = controls.evaluate(copy.deepcopy(facts), {"controls": ["nvidia.gpu_modes"]})["nvidia.gpu_modes"]
    assert unset["status"] == "pass", unset
    off = controls.evaluate(copy.deepcopy(facts), {"controls": ["nvidia.gpu_modes"], "nvidia_mig": False})["nvidia.gpu_modes"]
    assert off["status"] == "drift" and off["message"] == "0000:41:00.0 MIG is Enabled, Disabled wanted", off
    assert off["fix"]["runtime"] == [{"kind": "gpu_mode", "gpu": "00000000:41:00.0", "gpu_mode": "mig", "value": "Disabled"}]
    assert off["reboot_required"] is True


def test_real_zfs_conf_files_read_as_the_limit_they_set():
    """Two zfs.conf files posted in OpenZFS issues: 8 GiB in decimal, and in hex with a
    commented-out zfs_arc_min (which sets nothing)."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import zfs

    hexa = zfs.options_in((DATA / "zfs/zfs-conf-arc-max-hex").read_text(), "zfs")
    assert ("zfs_arc_max", "0x200000000", 1, 1) in hexa and not [o for o in hexa if o[0] == "zfs_arc_min"]
    assert int("0x200000000", 0) == 8 << 30
    assert zfs.options_in((DATA / "zfs/zfs-conf-arc-max-8g").read_text(), "zfs") == [("zfs_arc_max", "8589934592", 1, 1)]


def test_a_real_hex_zfs_conf_limits_the_arc_on_the_lab_host(tmp_path):
    """The hex zfs.conf on the base host (128 GiB, no ZFS root): the kernel model loads zfs
    with 8 GiB, arcstats shows it in effect, and storage.zfs_arc passes."""
    data = scenarios.merge(scenarios.BASE_HOST, {"zfs": {}})
    data["files"] = {"/etc/modprobe.d/zfs.conf": (DATA / "zfs/zfs-conf-arc-max-hex").read_text()}
    host = scenarios.render(data, tmp_path)
    f = host.finding("storage.zfs_arc")
    assert f["status"] == "pass" and f["message"].startswith("the ARC is limited to 8.0 GiB, live and at boot"), f


def test_real_arcstats_read_as_the_limits_in_effect(tmp_path):
    """arcstats of a real 32 GB host (OpenZFS issue 1779): c_max 16 GiB, c_min 3.5 GiB, read
    by the probe as the limits in effect."""
    text = (DATA / "zfs/arcstats-c-max-32g").read_text()
    stats = text[text.index("\nc "):]
    (tmp_path / "proc/spl/kstat/zfs").mkdir(parents=True)
    (tmp_path / "proc/spl/kstat/zfs/arcstats").write_text("13 1 0x01 96 4608 1 2\nname type data" + stats)
    (tmp_path / "sys/module/zfs/parameters").mkdir(parents=True)
    (tmp_path / "sys/module/zfs/parameters/zfs_arc_max").write_text("17179869184\n")
    (tmp_path / "proc/meminfo").write_text("MemTotal:       32890000 kB\n")
    z = probe.Probe(str(tmp_path)).probe_zfs()
    assert (z["c_max"], z["c_min"], z["arc_max"]) == (17179869184, 3758096384, 17179869184)


def test_real_unattended_upgrades_settings_and_the_driver_package_it_upgraded(tmp_path):
    """A real 20auto-upgrades, read by the real apt-config on a host with the driver's
    packages: unattended-upgrades runs, the driver is exposed (drift). The package a real
    unattended-upgrade replaced under a loaded module (libnvidia-common-460, history.log) is
    one gpuhost counts as the driver's."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe.packages import DRIVER_PACKAGE

    history = (DATA / "apt/history-unattended-nvidia-460").read_text()
    assert "Commandline: /usr/bin/unattended-upgrade" in history
    upgraded = re.findall(r"(\S+):amd64 \(", history)
    assert upgraded == ["libnvidia-common-460"] and all(DRIVER_PACKAGE.match(p) for p in upgraded)
    data = scenarios.merge(scenarios.BASE_HOST, {"os": {"unattended_upgrades": True}})
    host = scenarios.render(data, tmp_path)
    host.write("/etc/apt/apt.conf.d/20auto-upgrades", (DATA / "apt/20auto-upgrades").read_text().split("\n", 1)[1])
    f = host.finding("nvidia.driver_pinned")
    assert f["status"] == "drift" and "nvidia-driver" in f["message"], f
    host.write("/etc/apt/apt.conf.d/20auto-upgrades", 'APT::Periodic::Unattended-Upgrade "0";\n')
    assert host.status("nvidia.driver_pinned") == "na"


def _lspci_nn(text: str) -> list[dict]:
    """`lspci -nn` lines as the lab's PCI entries: address, [class], [vendor:device]."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) .*\[([0-9a-f]{4})\]: .*\[([0-9a-f]{4}):([0-9a-f]{4})\]", line)
        if m:
            out.append({"bdf": m.group(1), "type": "endpoint", "class": int(m.group(2), 16) << 8,
                        "vendor": int(m.group(3), 16), "device": int(m.group(4), 16)})
    return out


def test_a_real_hgx_a100_bus_has_six_nvswitches_and_fabric_manager_is_judged(tmp_path):
    """The NVIDIA devices of a real HGX A100's `lspci -nn` on the base host's bus: the six
    `Bridge [0680]` 10de:1af1 are the NVSwitches (the eight [0302] GPUs are not), and with
    no Fabric Manager installed the control says to install it at the driver's version."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls.nvidia_fabricmanager import nvswitches

    devices = _lspci_nn((DATA / "fabric/lspci-nn-hgx-a100").read_text())
    assert len(devices) == 14
    switches = [d for d in devices if (d["vendor"], d["device"]) == (0x10DE, 0x1AF1)]
    assert nvswitches(devices) == [d["bdf"] for d in switches] and len(switches) == 6
    assert switches[0]["bdf"] == "0005:00:00.0" and switches[-1]["bdf"] == "000a:00:00.0"
    host = scenarios.render_scenario({"pci_append": switches}, tmp_path)
    f = host.finding("nvidia.fabricmanager")
    assert f["status"] == "manual" and f["observed"]["nvswitches"] == 6, f
    assert "6 NVSwitches and Fabric Manager is not installed: install nvidia-fabricmanager at 575.57.08" in f["message"]


def test_real_fabric_sections_read_as_the_gpu_fabric_state():
    """Each `nvidia-smi -q` Fabric section quoted in public threads and NVIDIA's guide, as the
    probe reads the same values from --query-gpu=fabric.state,fabric.status: In Progress (no
    status yet), Completed with Success or with an error, and an A100's N/A (no fabric state)."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe.devices import smi_fabric, SMI_FIELDS

    help_text = (DATA / "fabric/help-query-gpu-fabric").read_text()
    assert '"fabric.state"' in help_text and '"fabric.status"' in help_text
    assert {"fabric.state", "fabric.status"} <= set(SMI_FIELDS)
    pairs = []
    for text in ((DATA / "fabric/nvidia-smi-q-fabric-sections").read_text(),
                 (DATA / "fabric/nvidia-smi-q-a100-sxm4-fabric-na").read_text()):
        pairs += re.findall(r"^\s*Fabric\s*\n\s*State\s*:\s*(.+?)\s*\n\s*Status\s*:\s*(.+?)\s*$", text, re.M)
    read = [smi_fabric({"fabric.state": s, "fabric.status": st}) for s, st in pairs]
    assert read == [{"state": "In Progress", "status": None},
                    {"state": "Completed", "status": "Insufficient Resources"},
                    {"state": "Completed", "status": "Success"},
                    {"state": "In Progress", "status": None},
                    {"state": "Completed", "status": "Success"},
                    None]


def test_a_warning_line_of_nvidia_smi_is_no_gpu_row():
    """A line nvidia-smi prints besides its CSV (a warning) is neither a row nor joined onto
    one; a row split by a line break in the GPU's name is joined."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

    text = ("WARNING: infoROM is corrupted at gpu 0000:01:00.0\n"
            "0, 00000000:01:00.0, NVIDIA RTX PRO 6000, 575.57.08, Enabled\n"
            "1, 00000000:02:00.0, NVIDIA RTX\nPRO 6000, 575.57.08, Enabled\n")
    assert devices.smi_rows(text, 5) == [["0", "00000000:01:00.0", "NVIDIA RTX PRO 6000", "575.57.08", "Enabled"],
                                         ["1", "00000000:02:00.0", "NVIDIA RTX\\nPRO 6000", "575.57.08", "Enabled"]]
