"""Boot units as data (controls/persist.py): each is rendered in one place, read by the real
systemd-analyze and systemd-tmpfiles as they read it on a host, and never holds shell."""
from __future__ import annotations

import subprocess

import pytest

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import (cpu_boost, cpu_cstates, cpu_governor,
                                                                             fixes, persist)
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import Boot, Run, Write

CSTATES = cpu_cstates.cstate_unit(10, [{"index": 3, "name": "C2"}, {"index": 2, "name": "C1E"}])
UNITS = {"cpu.governor": cpu_governor.GOVERNOR_UNIT, "cpu.boost": cpu_boost.BOOST_UNIT, "cpu.cstates": CSTATES}


def test_writes_and_programs_render_in_their_order_each_run_of_writes_one_tmpfiles_call():
    u = Boot("gpuhost-demo.service", "demo", (
        Write("/sys/a", "1"), Write("/sys/b*", "2"), Write("/sys/c", "3", refused_ok=True),
        Run(("/usr/bin/setpci", "-s", "01:00.0", "CAP_EXP+8.w=5000:7000"), failure_ok=True),
        Write("/sys/d", "4"))).render()
    execs = [line.split("=", 1)[1] for line in u.content.splitlines() if line.startswith("ExecStart=")]
    assert execs == ["systemd-tmpfiles --create /etc/gpuhost/boot.d/gpuhost-demo.conf",
                     "-systemd-tmpfiles --create /etc/gpuhost/boot.d/gpuhost-demo.2.conf",
                     "-/usr/bin/setpci -s 01:00.0 CAP_EXP+8.w=5000:7000",
                     "systemd-tmpfiles --create /etc/gpuhost/boot.d/gpuhost-demo.3.conf"]
    data = dict(u.data)
    assert data["/etc/gpuhost/boot.d/gpuhost-demo.conf"].splitlines()[1:] == ["w /sys/a - - - - 1", "w /sys/b* - - - - 2"]
    assert data["/etc/gpuhost/boot.d/gpuhost-demo.2.conf"].splitlines()[1:] == ["w /sys/c - - - - 3"]
    assert "/bin/sh" not in u.content


@pytest.mark.parametrize("step, why", [
    (Write("/sys/x y", "1"), "white space in a path"),
    (Write("/sys/x", "a b"), "white space in a value"),
    (Write("/sys/x", "a\\nb"), "a backslash escape"),
    (Run(("setpci", "-s", "x")), "a program without its path"),
    (Run(("/usr/bin/nvidia-smi", "-i", "0; reboot")), "a shell word"),
    (Run(("/usr/bin/nvidia-smi", "it's")), "a quote"),
])
def test_a_step_gpuhost_would_have_to_quote_is_refused(step, why):
    with pytest.raises(ValueError):
        Boot("gpuhost-demo.service", "demo", (step,)).render()


def test_percent_and_dollar_stand_for_themselves_in_a_command():
    u = Boot("gpuhost-demo.service", "demo", (Run(("/usr/bin/tool", "50%", "$HOME")),)).render()
    assert "ExecStart=/usr/bin/tool 50%% $$HOME\n" in u.content


@pytest.mark.parametrize("cid", sorted(UNITS))
def test_the_controls_units_pass_systemd_analyze_verify_and_their_data_systemd_tmpfiles(tmp_path, cid):
    """The units as systemd reads them (systemd-analyze verify: sections, ExecStart= found on
    the search path), their data as systemd-tmpfiles parses it (no unknown or bad line)."""
    u = UNITS[cid]
    assert "/bin/sh" not in u.content and u.data
    (tmp_path / u.name).write_text(u.content)
    res = subprocess.run(["systemd-analyze", "verify", str(tmp_path / u.name)], capture_output=True, text=True)
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    for path, text in u.data:
        conf = tmp_path / path.rsplit("/", 1)[1]
        conf.write_text(text)
        res = subprocess.run(["systemd-tmpfiles", f"--root={tmp_path / 'root'}", "--create", str(conf)],
                             capture_output=True, text=True)
        assert res.returncode == 0 and not res.stderr.strip(), res.stderr


def test_systemd_analyze_finds_a_broken_unit(tmp_path):
    """The check above can fail: a command systemd cannot find is an error to it."""
    (tmp_path / "gpuhost-broken.service").write_text(
        UNITS["cpu.boost"].content.replace("systemd-tmpfiles", "systemd-tmpfiles-that-is-not-there"))
    res = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "gpuhost-broken.service")],
                         capture_output=True, text=True)
    assert res.returncode != 0 or res.stderr.strip()


def test_a_unit_is_current_only_with_every_data_file_as_rendered():
    u = cpu_governor.GOVERNOR_UNIT
    good = {"units": {u.name: {"content": u.content, "enabled": True, "data": dict(u.data)}}}
    assert persist.unit_ok(good, u)
    for path, _ in u.data:
        stale = {"units": {u.name: {**good["units"][u.name], "data": {**dict(u.data), path: "w /sys/x - - - - 1\n"}}}}
        assert not persist.unit_ok(stale, u), path
        gone = {"units": {u.name: {**good["units"][u.name], "data": {p: t for p, t in u.data if p != path}}}}
        assert not persist.unit_ok(gone, u), path


def test_a_boot_units_data_travel_through_the_fix_and_back():
    fix = fixes.fix_of(CSTATES)
    assert fix["unit"]["data"] == [{"path": p, "content": t} for p, t in CSTATES.data]
    assert fixes.kinds_of(fix) == [CSTATES]
    assert fixes.plan(fix) == ["write /etc/gpuhost/boot.d/gpuhost-cpu-cstates.conf",
                               "install and enable the boot unit gpuhost-cpu-cstates.service"]
    # the deeper states by index, in order
    assert [line.split()[1] for line in dict(CSTATES.data)["/etc/gpuhost/boot.d/gpuhost-cpu-cstates.conf"].splitlines()[1:]] == \
        ["/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state2/disable", "/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state3/disable"]


@pytest.mark.parametrize("change, says", [
    ({"path": "/proc/sys/kernel/numa_balancing", "value": "0"}, "not a kind of live change"),
    ({"kind": "shell", "command": "echo 0 > /proc/sys/kernel/numa_balancing"}, "not a kind of live change"),
    ({"kind": "sysfs", "value": "0"}, "names a path or a glob"),
    ({"kind": "sysfs", "path": "/x", "glob": "/y*", "value": "0"}, "names a path or a glob"),
    ({"kind": "power_limit", "gpu": "00000000:01:00.0"}, "lacks power_limit_w"),
    ({"kind": "persistence", "command": "nvidia-smi -pm 1"}, "has no field command"),
])
def test_a_live_change_has_one_form_from_the_judgement_to_the_host(change, says):
    """The runtime module and the controller's plan check a change with the same rule: its kind
    and exactly that kind's fields; anything else is refused by both, naming what is wrong."""
    from ansible_collections.gpuhost.stack.plugins.module_utils import changes
    with pytest.raises(ValueError, match=says):
        changes.check(change)
    with pytest.raises(ValueError, match=says):
        fixes.kinds_of({"runtime": [change]})


def test_every_runtime_kind_round_trips_through_its_dict():
    kinds = [fixes.RuntimeWrite("1", glob="/sys/x*/y", refused_ok=True), fixes.RuntimeWrite("none", path="/sys/q", selected=True),
             fixes.PciRegister("0000:01:00.0", "10de:2bb5", "CAP_EXP+8.w", "5000", "7000"), fixes.Persistence(),
             fixes.PowerLimit("00000000:01:00.0", 300), fixes.GpuMode("00000000:01:00.0", "mig", "Disabled")]
    fix = fixes.fix_of(*kinds)
    assert {c["kind"] for c in fix["runtime"]} == {"sysfs", "pci_register", "persistence", "power_limit", "gpu_mode"}
    assert fixes.kinds_of(fix) == kinds
