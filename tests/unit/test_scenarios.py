"""Fix data at unit speed, and the base host the scenarios share.

Each control's pass/fail scenarios are data, in tests/controls/<id>.yml (run by
tests/unit/test_controls.py). BASE is tests/controls/base.yml's host, on which every control
passes; the helpers here let other unit tests change one thing of it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import scenarios

BASE = scenarios.BASE_HOST
CT_MOUNTS = BASE["lxc"][0]["config"]
INTEL = scenarios.FRAGMENTS["intel"]
ROOT_ARGS = "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet"


def ct(config: str) -> dict:
    return {"lxc": [{"vmid": 129, "config": config}]}


def write(path: str, text: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return apply


def remove(path: str) -> Callable[[Path], None]:
    return lambda root: (root / path.lstrip("/")).unlink()


def _files_overlay(overlay: dict) -> dict:
    """Spec files set to None in an overlay are left out."""
    if "files" in overlay and isinstance(overlay["files"], dict):
        overlay = {**overlay, "files": {k: v for k, v in overlay["files"].items() if v is not None}}
    return overlay


def _render(tmp_path: Path, overlay: dict, before_boot) -> scenarios.Rendered:
    data = scenarios.merge(BASE, _files_overlay(overlay))
    if "files" in overlay:
        data["files"] = _files_overlay(overlay)["files"]
    if overlay.get("nvidia", {}) is None:
        data.pop("nvidia")
    return scenarios.render(data, tmp_path, before_boot=before_boot)


def test_r470_without_compute_cap_is_still_read(tmp_path):
    data = scenarios.merge(BASE, {"nvidia": {"kernel_module": "470.256.02", "userspace": "470.256.02",
                                             "gpus": [{**BASE["nvidia"]["gpus"][0], "compute_cap": "8.0",
                                                       "name": "NVIDIA A100-PCIE-40GB"}]}})
    host = scenarios.render(data, tmp_path, r470=True)
    facts = host.facts()
    assert [g["bdf"] for g in facts["nvidia"]["gpus"]] == ["0000:01:00.0"] and facts["nvidia"]["gpus"][0]["compute_cap"] is None
    assert host.finding("nvidia.driver")["status"] == "pass"
    assert host.finding("nvidia.persistence")["status"] == "pass"


def test_the_numa_fix_comments_out_later_settings_and_keeps_every_other_byte(tmp_path):
    conf = "# local tuning\r\nvm.swappiness = 10\r\nkernel.numa_balancing = 1\r\nvm.dirty_ratio=5"
    host = _render(tmp_path, {}, write("/etc/sysctl.conf", conf))
    fix = host.finding("numa.balancing")["fix"]
    assert fix["file"]["path"] == "/etc/sysctl.d/99-gpuhost-numa-balancing.conf"
    (edit,) = fix["files"]
    assert edit["path"] == "/etc/sysctl.conf"
    assert edit["content"] == conf.replace("kernel.numa_balancing = 1",
                                           "# disabled by gpuhost (numa.balancing): kernel.numa_balancing = 1")
    # applied, the next boot sets 0
    host.write("/etc/sysctl.conf", edit["content"])
    host.write(fix["file"]["path"], fix["file"]["content"])
    assert host.facts()["sysctl"]["persisted"]["kernel.numa_balancing"] == "0"


def test_the_persistence_fix_keeps_the_vendor_unit_and_converges(tmp_path):
    host = _render(tmp_path, {"nvidia": {"persistence_default": False}},
                   lambda root: (remove("/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service")(root),
                                 write("/etc/systemd/system/nvidia-persistenced.service.d/override.conf",
                                       "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced --no-persistence-mode\n")(root)))
    fix = host.finding("nvidia.persistence")["fix"]
    assert "unit" not in fix, "the vendor unit is never replaced"
    assert fix["enable"] == ["nvidia-persistenced.service"]
    assert fix["file"]["path"].startswith("/etc/systemd/system/nvidia-persistenced.service.d/")
    assert "--no-persistence-mode" not in fix["file"]["content"]
    host.write(fix["file"]["path"], fix["file"]["content"])
    effective = host.facts()["units"]["nvidia-persistenced.service"]["exec_start"]
    assert effective == ["/usr/bin/nvidia-persistenced"]

