"""Issue 16: a control is one module; everything else that names it is made from its
declaration. The made files must be what the declarations make, a declaration that
changes makes them stale, and a control registered from one file shows up everywhere."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest
import yaml

from conftest import COLLECTION
from gpuhost import generate, plan
from ansible_collections.gpuhost.stack.plugins.module_utils import controls
from gpuhost.inventory import InventoryError, check_vars

FIXTURE = Path(__file__).parent / "fixtures" / "throwaway_control.py"


def throwaway() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("throwaway_control", FIXTURE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_made_file_is_what_the_declarations_make():
    assert generate.stale(COLLECTION) == [], "stale: run `make generate`"


def test_a_changed_declaration_makes_its_files_stale():
    """Change cpu.cstates' title and its default: the docs, the role's glue and the defaults
    no longer match, and the check names them."""
    mod = sys.modules["ansible_collections.gpuhost.stack.plugins.module_utils.controls.cpu_cstates"]
    param = dataclasses.replace(mod.CONTROL.params[0], default=20)
    changed = types.SimpleNamespace(CONTROL=dataclasses.replace(mod.CONTROL, title="Something else", params=(param,)),
                                    judge=mod.judge)
    modules = tuple(changed if m is mod else m for m in controls.DEFAULT_REGISTRY.modules)
    out = generate.stale(COLLECTION, controls.Registry(modules))
    for rel in ("docs/controls.md", "roles/cpu/README.md", "roles/cpu/tasks/cpu_cstates.yml",
                "roles/common/defaults/main.yml", "roles/common/meta/argument_specs.yml",
                "roles/cpu/meta/argument_specs.yml", "roles/common/README.md"):
        assert rel in out, rel
    assert "plugins/module_utils/watchlist.py" not in out


def test_a_control_registered_from_one_module_is_everywhere():
    demo = throwaway()
    registry = controls.DEFAULT_REGISTRY.with_control(demo, "the demo controls")
    assert registry.catalog[-1].id == "demo.sample" and registry.by_id["demo.sample"].role == "demo"
    made = generate.artefacts(COLLECTION, registry)
    # the probe's watch lists
    watch: dict = {}
    exec(made["plugins/module_utils/watchlist.py"], watch)
    assert "vm.demo_sample" in watch["WATCHED_SYSCTLS"] and "gpuhost-demo-sample.service" in watch["OWNED_UNITS"]
    # the argument specs: its variable, with its default, and its ID among the choices
    common = yaml.safe_load(made["roles/common/meta/argument_specs.yml"])["argument_specs"]["main"]["options"]
    assert common["gpuhost_demo_sample_level"] == {"type": "int", "default": 3, "description": "How much demo (0 to 9)."}
    assert "demo.sample" in common["gpuhost_controls"]["choices"]
    role = yaml.safe_load(made["roles/demo/meta/argument_specs.yml"])["argument_specs"]["main"]["options"]
    assert "gpuhost_demo_sample_level" in role and "gpuhost_cpu_cstates" not in role
    assert yaml.safe_load(made["roles/common/defaults/main.yml"])["gpuhost_demo_sample_level"] == 3
    # a role of its own, with a task file and a tag; the role alone runs them, the play imports them
    tasks = yaml.safe_load(made["roles/demo/tasks/controls.yml"])
    assert {"name": "Control | demo.sample", "ansible.builtin.import_tasks": "demo_sample.yml",
            "tags": ["demo.sample", "demo"]} in tasks
    assert {"name": "Each control of the role | demo",
            "ansible.builtin.import_tasks": "controls.yml"} in yaml.safe_load(made["roles/demo/tasks/main.yml"])
    fix = yaml.safe_load(made["roles/demo/tasks/demo_sample.yml"])[0]
    assert fix["vars"]["gpuhost_control"] == "demo.sample"
    fix_all = yaml.safe_load(made["roles/common/tasks/fix_all.yml"])[0]["block"]
    assert {"name": "gpuhost.stack.demo", "tasks_from": "controls", "rolespec_validate": False} in \
        [t.get("ansible.builtin.import_role") for t in fix_all]
    # the docs
    assert "## `demo.sample`" in made["docs/controls.md"] and "`demo.sample`" in made["README.md"]
    assert "`gpuhost_demo_sample_level`" in made["roles/demo/README.md"]
    # the inventory check knows its variable and its bounds
    check_vars("h1", {"gpuhost_demo_sample_level": 9}, registry)
    with pytest.raises(InventoryError, match=r"^host h1: gpuhost_demo_sample_level: must be a whole number of demos "
                                             r"from 0 to 9, not 12$"):
        check_vars("h1", {"gpuhost_demo_sample_level": 12}, registry)
    # judged, and its fix's plan says what it changes
    facts = {"sysctl": {"live": {"vm.demo_sample": "1"}}, "units": {}}
    finding = controls.evaluate(facts, {"controls": ["demo.sample"], "demo_sample_level": 4}, registry)["demo.sample"]
    assert finding["status"] == "drift" and finding["expected"] == "4"
    lines = plan.changes(finding)
    assert "install and enable the boot unit gpuhost-demo-sample.service" in lines
    assert "write 4 to /proc/sys/vm/demo_sample" in lines
    # the shipped registry does not have it
    assert "demo.sample" not in controls.BY_ID


def test_a_fix_that_touches_a_unit_its_control_does_not_declare_is_an_error():
    """The probe reads back only declared units: an undeclared one would drift for ever."""
    demo = throwaway()
    undeclared = types.SimpleNamespace(CONTROL=dataclasses.replace(demo.CONTROL, units=()), judge=demo.judge)
    registry = controls.DEFAULT_REGISTRY.with_control(undeclared)
    facts = {"sysctl": {"live": {"vm.demo_sample": "1"}}, "units": {}}
    finding = controls.evaluate(facts, {"controls": ["demo.sample"]}, registry)["demo.sample"]
    assert finding["status"] == "error" and "gpuhost-demo-sample.service" in finding["message"]
    assert finding["fix"] == {}


def test_a_registry_refuses_a_control_whose_id_does_not_start_with_its_role():
    demo = throwaway()
    odd = types.SimpleNamespace(CONTROL=dataclasses.replace(demo.CONTROL, id="other.sample"), judge=demo.judge)
    with pytest.raises(ValueError, match=r"other.sample: a control's ID starts with its role \(demo.\)"):
        controls.DEFAULT_REGISTRY.with_control(odd)


def test_the_cli_lists_the_declarations():
    from gpuhost.cli import main

    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["controls", "--json"]) == 0
    assert [c["id"] for c in json.loads(out.getvalue())] == [c.id for c in controls.CATALOG]


def test_a_control_without_a_fix_has_the_play_say_what_a_person_must_do():
    """Review of issue 16: the generated task file of a control with no fix (pcie.link,
    nvidia.driver, kernel.reboot_pending) says its manual or pending_reboot finding."""
    for c in controls.CATALOG:
        tasks = yaml.safe_load((COLLECTION / f"roles/{c.role}/tasks/{generate.module_name(c.id)}.yml").read_text())
        if c.fixable:
            assert tasks[0]["name"] == f"Fix | {c.id}", c.id
        else:
            assert [t["name"] for t in tasks] == [f"Say what a person must do | {c.id}"], c.id
            assert tasks[0]["when"][-1] == f"gpuhost_findings['{c.id}'].status in ['manual', 'pending_reboot']"


def test_a_fix_with_a_key_no_kind_owns_is_an_error():
    """The judgement's fix is read through the closed set of kinds: a key none owns never
    reaches the roles."""
    demo = throwaway()
    odd = types.SimpleNamespace(CONTROL=demo.CONTROL, judge=lambda h: controls.Finding(
        "demo.sample", "drift", "1", "3", "odd", fix={"reboot_now": True}))
    registry = controls.DEFAULT_REGISTRY.with_control(odd)
    finding = controls.evaluate({"sysctl": {}, "units": {}}, {"controls": ["demo.sample"]}, registry)["demo.sample"]
    assert finding["status"] == "error" and "a fix key no kind owns: reboot_now" in finding["message"]
    assert finding["fix"] == {}


def test_the_audit_without_the_role_judges_with_the_roles_defaults():
    """playbooks/audit.yml calls the audit action without gpuhost.stack.common, so no role
    default is among its host's variables: a variable not set must then give the judgement
    the very value the role's defaults give it, and a set one must still win."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.variables import settings_from
    defaults = yaml.safe_load((COLLECTION / "roles/common/defaults/main.yml").read_text())
    assert settings_from({}) == settings_from(defaults)
    assert settings_from({})["cstate_max_latency_us"] == defaults["gpuhost_cstate_max_latency_us"] == 10
    assert settings_from({"gpuhost_cstate_max_latency_us": 2})["cstate_max_latency_us"] == 2
    # each call has its own lists: a judgement that appended to one would not change the next
    first = settings_from({})
    first["pcie_mrrs_devices"].append("0000:01:00.0")
    assert settings_from({})["pcie_mrrs_devices"] == []
