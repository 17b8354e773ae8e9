"""Bad input in a fleet's inventory stops the run before the first connection (issue 19:
one bad value on host 737 of 1,000 was found after 737 hosts had been logged in to and read)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml


def fleet(tmp_path, bad: dict[int, dict]) -> str:
    # addresses in the lab's range on a port nothing listens on: a login would be "unreachable"
    hosts = {f"gpu{i:04d}": {"ansible_host": f"127.0.1.{200 + i % 50}", "ansible_port": 2, **bad.get(i, {})}
             for i in range(1, 1001)}
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return str(path)


@pytest.mark.parametrize("verb", [["audit"], ["fix", "--yes"]])
def test_a_bad_value_on_host_737_of_1000_stops_the_run_before_any_login(tmp_path, verb):
    inv = fleet(tmp_path, {737: {"gpuhost_cstate_max_latency_us": "10us"}, 900: {"gpuhost_controlz": ["x"]},
                           901: {"gpuhost_kernel_min_version": 6.14}})
    began = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "gpuhost.cli", *verb, "-i", inv, "--json", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)
    took = time.monotonic() - began
    assert res.returncode == 1, res.stderr[-2000:]
    assert res.stderr.splitlines() == [
        "error: host gpu0737: gpuhost_cstate_max_latency_us: must be a whole number of microseconds from 0 to 100000, "
        "not '10us' (and 2 other hosts with bad gpuhost variables)"], res.stderr[-2000:]
    assert "unreachable" not in res.stdout + res.stderr, "no host was connected to"
    assert took < 30, f"checked on the controller in seconds, not host by host ({took:.1f} s)"
