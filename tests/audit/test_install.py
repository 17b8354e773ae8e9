"""gpuhost installed from its wheel (not editable) audits a lab host from any directory."""
from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from test_seed import SEED_EXPECTED


def test_the_wheel_installs_into_a_clean_venv_and_audits_from_another_directory(seed_lab, tmp_path):
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(wheels), str(ROOT)], capture_output=True, text=True, timeout=600,
                           stdin=subprocess.DEVNULL)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = wheels.glob("gpuhost-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin/pip"), "install", "-q", "--no-deps", "--no-index", str(wheel)],
                         capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)
    assert pip.returncode == 0, pip.stderr
    # its dependencies from this environment's site-packages, as plain paths (offline): the
    # checkout's editable gpuhost (a .pth hook there) is not seen, only the wheel's
    (next((venv / "lib").glob("python3*/site-packages")) / "gpuhost-test-deps.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")
    for tool in Path(sys.executable).parent.glob("ansible*"):      # ansible-core's commands, which gpuhost runs
        (venv / "bin" / tool.name).symlink_to(tool)
    where = subprocess.run([str(venv / "bin/python"), "-c", "import gpuhost; print(gpuhost.COLLECTION)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout.strip()
    assert where.startswith(str(venv)) and Path(where, "playbooks/site.yml").is_file(), where
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run([str(venv / "bin/gpuhost"), "audit", "-i", str(seed_lab.inventory), "--limit", "pve-gpu1",
                          "--json", "r.json"], capture_output=True, text=True, cwd=elsewhere, timeout=300,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 2, run.stderr[-2000:]
    report = json.loads((elsewhere / "r.json").read_text())
    assert {f["control"]: f["status"] for f in report["hosts"]["pve-gpu1"]["findings"]} == SEED_EXPECTED
