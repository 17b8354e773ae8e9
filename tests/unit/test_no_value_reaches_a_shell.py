"""No value from a host or an inventory is ever read by a shell.

A fix's live changes are data (paths and values, PCI registers by value:mask, GPU
persistence), applied by gpuhost.stack.runtime with file writes and argv, never a shell.
The seed host is rendered, then its facts are given the hostile names a compromised or
strange host could report (a block device, a PCI address): they stay inert data, or the
control refuses to act on them.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

import scenarios
from conftest import SEED_HOST
from ansible_collections.gpuhost.stack.plugins.module_utils import controls
from ansible_collections.gpuhost.stack.plugins.modules import runtime

HOSTILE = ["$(touch {m})", "`touch {m}`", "x;touch {m}", "x&&touch {m}", "x|touch {m}", "x\ntouch {m}",
           "' ; touch {m} ; '", "\" ; touch {m} ; \""]
CHANGE_KEYS = {frozenset({"kind", "path", "value"}), frozenset({"kind", "path", "value", "refused_ok"}),
               frozenset({"kind", "path", "value", "selected"}), frozenset({"kind", "glob", "value"}),
               frozenset({"kind", "pci", "device", "register", "value", "mask"}), frozenset({"kind"})}


@pytest.fixture(scope="module")
def seed_facts(tmp_path_factory):
    return scenarios.render(SEED_HOST, tmp_path_factory.mktemp("seed")).facts()


def test_every_live_change_of_the_seed_host_is_data(seed_facts):
    findings = controls.evaluate(copy.deepcopy(seed_facts), {})
    changes = [c for f in findings.values() for c in (f.get("fix") or {}).get("runtime") or []]
    assert len(changes) > 10
    assert all(frozenset(c) in CHANGE_KEYS for c in changes), changes


@pytest.mark.parametrize("shape", HOSTILE)
def test_a_hostile_block_device_name_stays_a_path(seed_facts, shape):
    name = shape.format(m="/tmp/pwned")
    facts = copy.deepcopy(seed_facts)
    facts["block"] = [{"name": name, "rotational": False, "schedulers": ["none", "mq-deadline"],
                       "scheduler": "mq-deadline"}]
    finding = controls.evaluate(facts, {"controls": ["storage.scheduler"]})["storage.scheduler"]
    assert finding["status"] == "drift"
    assert finding["fix"]["runtime"] == [{"kind": "sysfs", "path": f"/sys/block/{name}/queue/scheduler", "value": "none",
                                          "selected": True}]
    assert name not in finding["fix"]["file"]["content"], "the udev rule selects disks by property, never by name"
    assert finding["fix"]["file"]["path"] == "/etc/udev/rules.d/99-gpuhost-storage-scheduler.rules"


@pytest.mark.parametrize("shape", HOSTILE)
def test_a_hostile_pci_address_never_reaches_a_command_or_a_unit(seed_facts, shape):
    bdf = shape.format(m="/tmp/pwned")
    facts = copy.deepcopy(seed_facts)
    gpu = next(d for d in facts["pci"] if d.get("vendor") == 0x10DE and d.get("class", 0) >> 16 == 0x03)
    gpu["bdf"] = bdf
    findings = controls.evaluate(facts, {})
    assert findings["pcie.mrrs"]["status"] == "error" and "not an address gpuhost puts in a command" in \
        findings["pcie.mrrs"]["message"]
    for f in findings.values():
        assert bdf not in str(f.get("fix") or ""), f["control"]


class Recorder:
    """Just enough of AnsibleModule to see how gpuhost.stack.runtime calls setpci."""

    check_mode = False

    def __init__(self, reads: dict, refused: bool = False):
        self.calls, self.reads, self.refused = [], reads, refused

    def run_command(self, argv, **kw):
        self.calls.append(argv)
        if "=" in argv[-1]:
            # a write: as setpci does, exit 0 even where the kernel refuses it (lockdown's EPERM)
            register, wanted = argv[-1].split("=")
            if self.refused:
                # what a real setpci printed under lockdown (tests/real_data/SOURCES.md), and it went on
                real = Path(__file__).resolve().parents[1] / "real_data/security/setpci-under-lockdown"
                return 0, "", real.read_text().splitlines()[1] + "\n"
            value, mask = (int(x, 16) for x in wanted.split(":"))
            self.reads[register] = "%04x" % ((int(self.reads[register], 16) & ~mask) | (value & mask))
            return 0, "", ""
        return 0, self.reads.get(argv[-1], ""), ""

    def fail_json(self, **kw):
        raise AssertionError(kw["msg"])


def test_the_runtime_module_runs_setpci_as_argv_and_writes_only_what_differs():
    m = Recorder({"CAP_EXP+8.w": "2950"})
    change = {"pci": "0000:01:00.0", "device": "10de:2bb5", "register": "CAP_EXP+8.w", "value": "5000", "mask": "7000"}
    assert runtime.pci_change(m, change) == [("0000:01:00.0 CAP_EXP+8.w: 2950", "0000:01:00.0 CAP_EXP+8.w: 5950")]
    assert m.calls == [["setpci", "-s", "0000:01:00.0", "-d", "10de:2bb5", "CAP_EXP+8.w"],
                       ["setpci", "-s", "0000:01:00.0", "-d", "10de:2bb5", "CAP_EXP+8.w=5000:7000"],
                       ["setpci", "-s", "0000:01:00.0", "-d", "10de:2bb5", "CAP_EXP+8.w"]], "written, then read back"
    done = Recorder({"CAP_EXP+8.w": "5950"})
    assert runtime.pci_change(done, change) == [] and len(done.calls) == 1, "already 4096: read, nothing written"
    # setpci exits 0 on a write the kernel refused: the read back fails the change, with setpci's warning
    refused = Recorder({"CAP_EXP+8.w": "2950"}, refused=True)
    with pytest.raises(AssertionError, match=r"did not take: 0000:01:00.0 CAP_EXP\+8.w reads 2950 "
                                             r"\(pcilib: sysfs_write: write failed: Operation not permitted\)"):
        runtime.pci_change(refused, change)


@pytest.mark.parametrize("value", ["6.14'; touch /tmp/x; '", "6.14$(id)", "6.14 linux-image-rt", "latest"])
def test_an_inventory_kernel_series_that_is_not_a_version_never_reaches_apt(seed_facts, value):
    finding = controls.evaluate(copy.deepcopy(seed_facts), {"kernel_min_version": value,
                                                            "controls": ["kernel.version"]})["kernel.version"]
    assert finding["status"] == "error" and "not a kernel version" in finding["message"]
    assert "fix" not in finding or not finding["fix"]


def test_no_task_hands_a_string_to_a_shell():
    """Replaces a check that could not fail (no fix ever had a "commands" key): every task of
    the roles and playbooks runs a command as argv, and none uses shell, raw or script, so no
    value (a host's, an inventory's) is ever parsed by a shell on a host."""
    import yaml

    from gpuhost import COLLECTION as root
    shells = {"shell", "ansible.builtin.shell", "raw", "ansible.builtin.raw", "script", "ansible.builtin.script"}
    commands = {"command", "ansible.builtin.command"}

    def tasks(items):
        for t in items or []:
            if isinstance(t, dict):
                yield t
                for key in ("block", "rescue", "always"):
                    yield from tasks(t.get(key))

    seen = 0
    for path in sorted(list(root.glob("roles/*/tasks/*.yml")) + list(root.glob("playbooks/*.yml"))
                       + list(root.glob("roles/*/handlers/*.yml"))):
        data = yaml.safe_load(path.read_text()) or []
        plays = [p for p in data if isinstance(p, dict) and ("tasks" in p or "hosts" in p)]
        items = [t for p in plays for key in ("tasks", "handlers", "pre_tasks", "post_tasks") for t in p.get(key) or []] \
            if plays else data
        for task in tasks(items):
            seen += 1
            used = set(task) & shells
            assert not used, f"{path.relative_to(root)}: {task.get('name')}: {used} parses a string with a shell"
            for key in set(task) & commands:
                assert isinstance(task[key], dict) and "argv" in task[key], \
                    f"{path.relative_to(root)}: {task.get('name')}: a command must be argv, not a string"
    assert seen > 50


class SmiRecorder:
    """Just enough of AnsibleModule to see how gpuhost.stack.runtime calls nvidia-smi for a
    power limit; the GPU drops a limit set without persistence mode, as the driver does."""

    check_mode = False

    def __init__(self, limit: float, persistence: bool):
        self.calls, self.limit, self.persistence = [], limit, persistence

    def run_command(self, argv, **kw):
        self.calls.append(argv)
        if "-pl" in argv:
            bus, watts = argv[argv.index("-i") + 1], float(argv[-1])
            if self.persistence:
                self.limit = watts
            return 0, (f"Power limit for GPU {bus} was set to {watts:.2f} W from {self.limit:.2f} W.\n"
                       + ("" if self.persistence else "Warning: persistence mode is disabled on this device.\n")
                       + "All done.\n"), ""
        return 0, f"{self.limit:.2f}\n", ""

    def fail_json(self, **kw):
        raise AssertionError(kw["msg"])


def test_the_runtime_module_sets_a_power_limit_as_argv_and_reads_it_back():
    change = {"gpu": "00000000:01:00.0", "power_limit_w": 600}
    m = SmiRecorder(300.0, persistence=True)
    assert runtime.power_limit_change(m, change) == [("00000000:01:00.0 power limit: 300.00 W",
                                                      "00000000:01:00.0 power limit: 600.00 W")]
    read = ["nvidia-smi", "-i", "00000000:01:00.0", "--query-gpu=power.limit", "--format=csv,noheader,nounits"]
    assert m.calls == [read, ["nvidia-smi", "-i", "00000000:01:00.0", "-pl", "600"], read], "set, then read back"
    done = SmiRecorder(600.0, persistence=True)
    assert runtime.power_limit_change(done, change) == [] and len(done.calls) == 1, "already 600 W: nothing set"
    # nvidia-smi says "was set" and exits 0; without persistence the limit is gone as it exits
    dropped = SmiRecorder(300.0, persistence=False)
    with pytest.raises(AssertionError, match=r"did not take: power.limit reads 300.00 W .*persistence mode is disabled"):
        runtime.power_limit_change(dropped, change)
    with pytest.raises(AssertionError, match="not a GPU bus id"):
        runtime.power_limit_change(SmiRecorder(300.0, True), {"gpu": "0; reboot", "power_limit_w": 600})
