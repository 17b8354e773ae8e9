"""Every control's scenarios (tests/controls/<id>.yml), the way ComplianceAsCode tests a
rule with *.pass / *.fail scenarios: each puts the base host in one state (laid out and
booted by the lab's own provisioning and kernel model into a directory), probes it and
judges it in milliseconds, and says the status the judgement must reach and, where it
matters, a word its message, observation or fix must have."""
from __future__ import annotations

import pytest

import scenarios
from ansible_collections.gpuhost.stack.plugins.module_utils import controls

SCENARIOS = scenarios.control_scenarios()
IDS = [f"{cid}/{name}" for cid, name, _ in SCENARIOS]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """Each scenario laid out once per worker: judging reads the tree, never writes it."""
    cache: dict = {}

    def get(cid: str, name: str, sc: dict) -> scenarios.Rendered:
        if (cid, name) not in cache:
            cache[cid, name] = scenarios.render_scenario(sc, tmp_path_factory.mktemp("scenario"))
        return cache[cid, name]
    return get


@pytest.mark.parametrize("cid, name, sc", SCENARIOS, ids=IDS)
def test_scenario(rendered, cid, name, sc):
    host = rendered(cid, name, sc)
    f = host.finding(cid, **(sc.get("settings") or {}))
    assert f["status"] == sc["expect"], f
    if sc.get("says"):
        assert sc["says"] in f["message"] + str(f["observed"]) + repr(f["fix"]), f
    assert "/bin/sh" not in repr(f["fix"]), "a control's fix is data and programs, never shell"


CYCLES = [(cid, name, sc) for cid, name, sc in SCENARIOS if sc.get("cycle")]


@pytest.mark.parametrize("cid, name, sc", CYCLES, ids=[f"{cid}/{name}" for cid, name, _ in CYCLES])
def test_a_cycle_scenario_is_fixed_kept_and_survives_a_boot(tmp_path, cid, name, sc):
    """A scenario marked `cycle: true`, through the whole cycle at unit speed: found, its fix
    applied as the roles apply its kinds, judged again (pass), judged again (nothing left to
    fix: the disk keeps every byte), booted from the disk as it is, and judged once more."""
    settings = sc.get("settings") or {}
    host = scenarios.render_scenario(sc, tmp_path)
    found = host.finding(cid, **settings)
    assert found["status"] == "drift" and found["fix"], found
    assert host.apply_fix(found["fix"])
    after = host.finding(cid, **settings)
    # pass, or (after_fix: pending_reboot) a value the next boot applies, such as the firmware's
    assert after["status"] == sc.get("after_fix", "pass") and not after["fix"], after
    assert host.finding(cid, **settings) == after, "a second audit judges the same"
    host.reboot()
    assert host.boot_failures == [], "a boot unit's write the kernel refused"
    booted = host.finding(cid, **settings)
    assert booted["status"] == "pass", booted


class Reads(dict):
    """A facts dict that notes which sections are read."""

    def __init__(self, data: dict, seen: set):
        super().__init__(data)
        self.seen = seen

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)


@pytest.mark.parametrize("cid, name, sc", SCENARIOS, ids=IDS)
def test_a_judgement_reads_only_the_facts_its_control_declares(rendered, cid, name, sc):
    """CONTROL.facts is what judge() reads: a section it does not declare is never touched."""
    host = rendered(cid, name, sc)
    seen: set = set()
    h = controls.Host(Reads(controls.plain(host.facts()), seen), sc.get("settings") or {})
    finding = controls.DEFAULT_REGISTRY.judges[cid](h)      # before the gates (masks, reboot holds)
    assert finding.control == cid and finding.status in controls.STATUSES and seen
    declared = set(controls.BY_ID[cid].facts) | {"errors"}
    assert seen <= declared, f"{cid} reads {sorted(seen - declared)} but declares {sorted(declared)}"


def test_every_scenario_is_well_formed():
    for cid, name, sc in SCENARIOS:
        stem, _, suffix = name.rpartition(".")
        assert stem and suffix in scenarios.SUFFIX, f"{cid}/{name}: name it <what>.pass, <what>.fail or <what>.na"
        assert sc["expect"] in scenarios.SUFFIX[suffix], f"{cid}/{name}: expects {sc['expect']}"
        assert set(sc) <= scenarios.KEYS, f"{cid}/{name}: unknown keys {sorted(set(sc) - scenarios.KEYS)}"
        assert set(sc.get("use") or []) <= set(scenarios.FRAGMENTS), f"{cid}/{name}: unknown fragment"


def test_every_control_has_a_passing_and_a_failing_scenario():
    have: dict[str, set] = {}
    for cid, name, _ in SCENARIOS:
        assert cid in controls.BY_ID, f"tests/controls/{cid}.yml: no such control"
        have.setdefault(cid, set()).add(name.rpartition(".")[2])
    for c in controls.CATALOG:
        assert {"pass", "fail"} <= have.get(c.id, set()), f"{c.id}: needs a .pass and a .fail scenario"


def test_the_base_host_passes_every_control_but_numa_balancing(tmp_path):
    host = scenarios.render_scenario({}, tmp_path)
    statuses = {cid: f["status"] for cid, f in host.judge().items()}
    assert {s for cid, s in statuses.items()
            if cid not in ("numa.balancing", "nvidia.p2p", "nvidia.driver_pinned", "storage.zfs_arc",
                           "nvidia.fabricmanager", "guest.cuda") and not cid.startswith("bios.")} == {"pass"}, statuses
    assert {s for cid, s in statuses.items() if cid.startswith("bios.")} == {"na"}, "no BMC in the inventory"
    assert statuses["nvidia.p2p"] == "na", "one GPU: no pair (its scenarios add a second)"
    assert statuses["nvidia.driver_pinned"] == "na", "no dpkg on the bare layout (its scenarios install one)"
    assert statuses["storage.zfs_arc"] == "na", "no zfs module (its scenarios load one)"
    assert statuses["nvidia.fabricmanager"] == "na", "a PCIe card, no NVSwitch (its scenarios add them)"
    assert statuses["guest.cuda"] == "na", "no CUDA runtime on the disk (its scenarios lay them out)"
    # with two NUMA nodes and nothing on the disk that turns balancing off, the next boot has the kernel default
    assert statuses["numa.balancing"] == "drift"


def test_every_fix_is_made_of_kinds_the_roles_apply_and_the_plan_names(rendered):
    """A fix is data from the closed set of kinds (controls/fixes.py): read back into kinds it
    is the same fix, every kind has a plan line, and the step files of roles/common/tasks read
    exactly the kinds' keys (no key the plan would not name, no kind the roles would not apply)."""
    import re

    from conftest import COLLECTION
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls import fixes

    seen_kinds: set = set()
    for cid, name, sc in SCENARIOS:
        f = rendered(cid, name, sc).finding(cid, **(sc.get("settings") or {}))
        if not f["fix"]:
            continue
        kinds = fixes.kinds_of(f["fix"])
        assert fixes.fix_of(*kinds) == f["fix"], f"{cid}/{name}: the fix is not what its kinds make"
        assert len(fixes.plan(f["fix"])) >= 1, f"{cid}/{name}: a fix with no plan line"
        seen_kinds |= {type(k) for k in kinds}
    # the scenarios reach every kind
    assert set(fixes.KINDS) - seen_kinds <= set(), sorted(k.__name__ for k in set(fixes.KINDS) - seen_kinds)
    # each kind's step file (roles/common/tasks/fix_<step>.yml) reads exactly its kinds' keys
    tasks = COLLECTION / "roles/common/tasks"
    assert {p.name for p in tasks.glob("fix_*.yml")} - {"fix_all.yml"} == {f"fix_{s}.yml" for s in fixes.STEPS}
    for step in fixes.STEPS:
        read = set(re.findall(r"__fix\.([a-z_]+)", (tasks / f"fix_{step}.yml").read_text()))
        owned = {key for key, kind in fixes.KEYS.items() if kind.STEP == step} - set(fixes.INFORMATIONAL)
        if step == "series":
            owned.add("pin")        # the series' module check pins the running kernel where the module did not build
        assert read == owned, (step, sorted(read - owned), sorted(owned - read))
    assert "__fix." not in (tasks / "fix.yml").read_text().replace("__fix | gpuhost.stack.fix_steps", ""), \
        "fix.yml itself reads no key: it includes the steps"
    # the steps of a fix follow its kinds, in the one order
    assert fixes.steps(fixes.fix_of(fixes.RuntimeWrite("0", path="/proc/sys/kernel/numa_balancing"),
                                    fixes.FileContent("/etc/sysctl.d/x.conf", "y\n"))) == ["file", "runtime"]
    assert fixes.steps(fixes.fix_of(fixes.UnitRemoval("old.service"))) == ["remove_unit", "daemon_reload"], \
        "systemd reads its units again after one is taken out"
    assert fixes.steps(fixes.fix_of(fixes.BootUnit("gpuhost-x.service", "[Unit]\n"))) == ["unit"], \
        "a unit's own step makes systemd read it (the file module's daemon_reload): no second task"
    assert "daemon_reload: true" in (tasks / "fix_unit.yml").read_text()
    with pytest.raises(ValueError, match="a fix key no kind owns: reboot_now"):
        fixes.kinds_of({"reboot_now": True})


def test_under_kernel_lockdown_no_fix_writes_pci_config_space(rendered):
    """Kernel lockdown (Secure Boot) refuses user space's config writes with EPERM
    (drivers/pci/pci-sysfs.c, LOCKDOWN_PCI_ACCESS): under it no fix holds a PCI register
    write, in a boot unit or now; pcie.acs goes by the command line alone and says so with
    a reboot, pcie.mrrs is a firmware setting (manual)."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls import fixes

    seen = {}
    for cid, name, sc in SCENARIOS:
        if "lockdown" not in name:
            continue
        f = rendered(cid, name, sc).finding(cid, **(sc.get("settings") or {}))
        kinds = fixes.kinds_of(f["fix"] or {})
        assert not any(isinstance(k, (fixes.PciRegister, fixes.BootUnit)) for k in kinds), (cid, name, kinds)
        seen[cid, name] = (f["status"], [type(k).__name__ for k in kinds], f["reboot_required"])
    assert seen == {
        ("pcie.mrrs", "lockdown-512.fail"): ("manual", [], False),
        ("pcie.mrrs", "lockdown-4096.pass"): ("pass", [], False),
        ("pcie.acs", "switch-lockdown-command-line-only.fail"): ("drift", ["CmdlineSet"], True),
        ("pcie.acs", "switch-lockdown-persisted.fail"): ("pending_reboot", [], True),
    }


def test_a_fix_never_enables_or_installs_a_unit_the_administrator_masked():
    """gates.respect_masks, for any control: a fix that would install a masked unit, or
    `systemctl enable` a masked vendor unit (which systemctl refuses), becomes manual with
    the way out named, and holds no change."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls import fixes, gates
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Finding, Host

    masked = {"path": "/etc/systemd/system/vendor.service", "masked": True, "content": ""}
    host = Host({"units": {"vendor.service": masked, "other.service": {"enabled": False}}}, {})
    for kind in (fixes.UnitEnable(("other.service", "vendor.service")), fixes.BootUnit("vendor.service", "[Unit]\n")):
        f = Finding("demo.sample", "drift", "off", "on", "not started at boot", fix=fixes.fix_of(kind))
        gates.respect_masks(host, f)
        assert f.status == "manual" and f.fix == {}, kind
        assert f.message.endswith("(`systemctl unmask vendor.service` lets gpuhost fix it)"), f.message
    free = Finding("demo.sample", "drift", "off", "on", "not started at boot",
                   fix=fixes.fix_of(fixes.UnitEnable(("other.service",))))
    gates.respect_masks(host, free)
    assert free.status == "drift" and free.fix == {"enable": ["other.service"]}
