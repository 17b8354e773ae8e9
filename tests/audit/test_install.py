"""gpuhost installed from its wheel (not editable), with pip into a clean venv and with
pipx, audits a lab host from any directory."""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from test_seed import SEED_EXPECTED

# the runtime dependencies as wheels, kept by `make install-test` (pipx resolves them offline)
WHEELHOUSE = Path(sys.executable).parents[1] / "wheelhouse"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    wheels = tmp_path_factory.mktemp("wheels")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(wheels), str(ROOT)], capture_output=True, text=True, timeout=600,
                           stdin=subprocess.DEVNULL)
    assert build.returncode == 0, build.stderr[-2000:]
    (built,) = wheels.glob("gpuhost-*.whl")
    return built


def audit_from_elsewhere(gpuhost: Path, inventory: Path, tmp_path: Path) -> None:
    """`gpuhost audit` of the seed host, run from a directory that is not the checkout."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run([str(gpuhost), "audit", "-i", str(inventory), "--limit", "pve-gpu1", "--json", "r.json",
                          "--html", "r.html", "--prom", "r.prom"],
                         capture_output=True, text=True, cwd=elsewhere, timeout=300, stdin=subprocess.DEVNULL)
    assert run.returncode == 2, run.stderr[-2000:]
    report = json.loads((elsewhere / "r.json").read_text())
    assert {f["control"]: f["status"] for f in report["hosts"]["pve-gpu1"]["findings"]} == SEED_EXPECTED
    assert "pcie.mrrs" in (elsewhere / "r.html").read_text(), "the HTML template travels in the wheel"
    assert "gpuhost_control_status" in (elsewhere / "r.prom").read_text()


def test_the_wheel_installs_into_a_clean_venv_and_audits_from_another_directory(seed_lab, wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin/pip"), "install", "-q", "--no-deps", "--no-index", str(wheel)],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
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
    audit_from_elsewhere(venv / "bin/gpuhost", seed_lab.inventory, tmp_path)


def test_pipx_installs_the_wheel_with_its_dependencies_and_the_command_audits(seed_lab, wheel, tmp_path):
    assert any(WHEELHOUSE.glob("ansible_core-*.whl")), f"{WHEELHOUSE} lacks the runtime wheels: run `make install-test`"
    home, bindir = tmp_path / "pipx", tmp_path / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PIPX_", "VIRTUAL_ENV"))}
    env.update(PIPX_HOME=str(home), PIPX_BIN_DIR=str(bindir), PIPX_MAN_DIR=str(tmp_path / "man"),
               PIP_CONFIG_FILE=os.devnull,                        # no index, no find-links but the wheelhouse
               PIPX_DISABLE_SHARED_LIBS_AUTO_UPGRADE="1",          # its pip upgrade would need an index
               PATH="/usr/bin:/bin")
    install = subprocess.run([str(Path(sys.executable).parent / "pipx"), "install", "--python", "/usr/bin/python3",
                              "--pip-args", f"--no-index --find-links {WHEELHOUSE}", str(wheel)],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
                             stdin=subprocess.DEVNULL)
    assert install.returncode == 0, install.stdout[-1500:] + install.stderr[-1500:]
    assert "gpuhost" in install.stdout, install.stdout
    # pipx's own venv, its own ansible-core: nothing of this checkout or its .venv
    where = subprocess.run([str(home / "venvs/gpuhost/bin/python"), "-c",
                            "import ansible, gpuhost; print(ansible.__file__); print(gpuhost.COLLECTION)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout.split()
    assert all(w.startswith(str(home)) for w in where), where
    audit_from_elsewhere(bindir / "gpuhost", seed_lab.inventory, tmp_path)
