"""A repaired container config is checked as pve-container reads it before it is written."""
from pathlib import Path

from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf

REAL = Path(__file__).resolve().parents[1] / "real_data/lxc/ollama-220.conf"


def test_a_real_config_repaired_reads_back():
    text = REAL.read_text()
    devices = {195: "nvidia", 508: "nvidia-uvm", 236: "nvidia-caps", 226: "drm"}
    fixed = lxcconf.repair(text, devices)
    assert lxcconf.reads_back(text, fixed) is None


def test_a_line_pve_container_would_not_parse_is_refused():
    text = "arch: amd64\nlxc.cgroup2.devices.allow: c 195:* rwm\n[snap1]\narch: amd64\n"
    assert lxcconf.reads_back(text, text.replace("[snap1]", "[snap1]\n")) == "a snapshot section would change"
    bad = text.replace("arch: amd64\n", "arch: amd64\n/dev/nvidia0 dev/nvidia0\n", 1)
    assert lxcconf.reads_back(text, bad) == "the line '/dev/nvidia0 dev/nvidia0' is not one pve-container reads"
    assert lxcconf.reads_back(text, text.replace("arch: amd64\n", "arch: amd64\ndev0: /dev/nvidia0\n", 1)) is None
    assert lxcconf.reads_back(text, text.replace("arch: amd64\n", "arch: amd64\nlxc.mount.entry = /dev/x dev/x none bind\n", 1)) is None


def test_lines_added_to_a_crlf_config_end_as_its_own_do():
    """The fault campaign: lines gpuhost added to a config with CRLF line ends ended in LF.
    pve-container reads either (PVE::LXC::Config splits on \\n, its patterns end in \\s*$), but
    an edit keeps the file's own style; every byte it did not mean to change stays."""
    from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf

    text = ("arch: amd64\r\ncores: 4\r\nlxc.cgroup2.devices.allow: c 195:* rwm\r\n"
            "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\r\n")
    fixed = lxcconf.with_cpuset(text, "1-2")
    assert fixed == text + "lxc.cgroup2.cpuset.cpus: 1-2\r\n"
    repaired = lxcconf.repair(text, {195: "nvidia", 508: "nvidia-uvm"})
    assert repaired.startswith(text) and "\n" not in repaired.replace("\r\n", "")
    assert repaired.count("\r\n") == repaired.count("\n") == 8
    assert lxcconf.reads_back(text, repaired) is None
    # a file in LF keeps LF; one whose last line had no end gets the file's end
    assert lxcconf.with_cpuset("arch: amd64\ncores: 4", "1") == "arch: amd64\ncores: 4\nlxc.cgroup2.cpuset.cpus: 1\n"
    assert lxcconf.with_cpuset("arch: amd64\r\ncores: 4", "1") == "arch: amd64\r\ncores: 4\r\nlxc.cgroup2.cpuset.cpus: 1\r\n"
