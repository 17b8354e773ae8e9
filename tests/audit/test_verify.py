"""`gpuhost verify`: the testinfra suite disagrees with a broken host and agrees with a fixed one."""
from __future__ import annotations

import subprocess
import sys

from conftest import SEED_GUEST, SEED_HOST, ci_stdin, gpuhost


def verify(*args: str) -> subprocess.CompletedProcess:
    with ci_stdin() as stdin:
        return subprocess.run([sys.executable, "-m", "gpuhost.cli", "verify", *args], stdin=stdin,
                              capture_output=True, text=True, timeout=600)


def test_verify_fails_the_seed_and_passes_it_after_the_fix(make_lab):
    lab = make_lab(SEED_HOST, SEED_GUEST)
    before = verify("-i", str(lab.inventory))
    assert before.returncode == 2, before.stdout[-2000:]
    failed = {line.split("::")[1].split("[")[0] for line in before.stdout.splitlines() if line.startswith("FAILED")}
    assert failed == {"test_cpu_driver", "test_cpu_cstates", "test_numa_balancing", "test_pcie_mrrs", "test_iommu_mode",
                      "test_kernel_version", "test_nvidia_persistence", "test_lxc_gpu_passthrough", "test_storage_scheduler"}
    assert all("pve-gpu1" in line for line in before.stdout.splitlines() if line.startswith("FAILED")), "the container passes"
    fix = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--reboot", "if-needed")
    assert fix.rc == 0, fix.stderr
    after = verify("-i", str(lab.inventory))
    assert after.returncode == 0, after.stdout[-3000:]
    assert "28 passed" in after.stdout


def test_verify_limit_and_bad_inventory(seed_lab, tmp_path):
    res = verify("-i", str(seed_lab.inventory), "--limit", "llm-two")
    assert res.returncode == 0 and "14 passed" in res.stdout
    res = verify("-i", str(tmp_path / "none.yml"))
    assert res.returncode == 1 and res.stderr == f"error: -i: no inventory at {tmp_path / 'none.yml'}\n"
