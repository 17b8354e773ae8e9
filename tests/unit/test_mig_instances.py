"""MIG's GPU instances (issue 37): MIG mode survives a reboot, the instances do not ("the
created MIG devices are not persistent across system reboots", NVIDIA MIG User Guide), and a
MIG GPU without instances offers no CUDA device. Real output where there is some
(tests/real_data/SOURCES.md), the lab's kernel model across boots for the rest."""
from __future__ import annotations

from pathlib import Path

import scenarios
from ansible_collections.gpuhost.stack.plugins.module_utils.probe import devices

DATA = Path(__file__).resolve().parents[1] / "real_data"

MIG_ON = {"current": "Enabled", "pending": "Enabled"}
LAYOUT_UNIT = """[Unit]
Description=MIG layout
After=nvidia-persistenced.service

[Service]
Type=oneshot
ExecStart=/usr/bin/nvidia-smi mig -cgi 14,14,14 -C

[Install]
WantedBy=multi-user.target
"""


def test_a_real_mig_lgi_table_reads_as_the_instances_of_each_gpu():
    """An A100 node's table (NVIDIA/DCGM#138): four GPU instances on GPU 0 and on GPU 1."""
    text = (DATA / "gpu/mig-lgi-a100-dcgm138").read_text()
    assert devices.parse_mig_lgi(0, text) == ({0: 4, 1: 4}, None)


def test_no_instances_and_an_unreadable_answer_are_told_apart():
    # what nvidia-smi says on a MIG GPU with no GPU instance (exit 6, NVML's NOT_FOUND)
    assert devices.parse_mig_lgi(6, "No GPU instances found: Not Found\n") == ({}, None)
    assert devices.parse_mig_lgi(255, "Failed to initialize NVML: Unknown Error\n") == \
        (None, "nvidia-smi mig -lgi: Failed to initialize NVML: Unknown Error")


def _mig_host(tmp_path, instances: int, files: dict | None = None):
    data = scenarios.merge(scenarios.BASE_HOST, {"files": dict(scenarios.BASE_HOST.get("files") or {}, **(files or {}))})
    gpu = data["nvidia"]["gpus"][0]
    gpu["mig"], gpu["mig_instances"] = MIG_ON, instances
    return scenarios.render(data, tmp_path)


def test_mig_without_instances_is_manual_before_and_after_a_reboot(tmp_path):
    """Instances made by hand: they pass now, and the reboot leaves MIG on with none, which is
    manual (no CUDA device) and stays so at the boot after."""
    host = _mig_host(tmp_path, 3)
    f = host.finding("nvidia.gpu_modes")
    assert f["status"] == "pass" and "(3 GPU instances)" in f["observed"], f
    for _ in range(2):
        host.reboot()
        f = host.finding("nvidia.gpu_modes")
        assert f["status"] == "manual", f
        assert "0000:01:00.0 has MIG on and no GPU instance, so no CUDA device" in f["message"]


def test_a_unit_that_creates_the_instances_at_boot_brings_them_back(tmp_path):
    unit = "/etc/systemd/system/mig-layout.service"
    host = _mig_host(tmp_path, 3, {unit: LAYOUT_UNIT,
                                   "/etc/systemd/system/multi-user.target.wants/mig-layout.service": LAYOUT_UNIT})
    host.reboot()
    f = host.finding("nvidia.gpu_modes")
    assert f["status"] == "pass" and "(3 GPU instances)" in f["observed"], f
    assert host.facts()["nvidia"]["mig_boot_units"] == ["mig-layout.service"]


def test_mig_is_not_turned_on_where_nothing_creates_the_instances(tmp_path):
    """gpuhost_nvidia_mig true and no unit: manual, no fix (gpuhost's own MIG fix once enabled
    MIG, rebooted, and came back to a GPU with no CUDA device, judged pass)."""
    host = scenarios.render(scenarios.BASE_HOST, tmp_path)
    f = host.finding("nvidia.gpu_modes", nvidia_mig=True)
    assert f["status"] == "manual" and not f["fix"], f
    assert "no enabled unit creates GPU instances at boot" in f["message"]
