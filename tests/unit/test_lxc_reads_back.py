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
