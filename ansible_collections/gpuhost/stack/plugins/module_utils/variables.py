# -*- coding: utf-8 -*-
"""gpuhost's inventory variables, checked exactly before any host is touched.

A wrong type, a number out of bounds, an unknown variable or control ID, a malformed or
duplicate waiver, or null where a value is required is bad input: one line naming the
host and the variable. Used by the playbooks' inventory check (the action check_inventory),
the audit action and the CLI.
"""
from __future__ import annotations

import copy
import datetime as _dt
import difflib
import re

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import DEFAULT as REGISTRY

# Every variable the controls and the framework declare (their Param): site.yml checks them
# all here (one line, before any host is touched) and so turns the roles' own validation off.
CHECKED_VARS = tuple(p.name for p in REGISTRY.params if p.checked)


# set by gpuhost itself or its lab, never a user's typo
INTERNAL_VARS = ("gpuhost_apply", "gpuhost_inventory_checked", "gpuhost_stop_file", "gpuhost_reboot_timeout",
                 "gpuhost_lock_timeout", "gpuhost_run_holder", "gpuhost_run", "gpuhost_report_stats",
                 "gpuhost_fix_plans", "gpuhost_report_json", "gpuhost_prove",
                 # what the roles set (facts of the audit action, a fix include's control)
                 "gpuhost_findings", "gpuhost_summary", "gpuhost_reboot_required", "gpuhost_reboot_record",
                 "gpuhost_control")
INTERNAL_PREFIXES = ("gpuhost_lab_",)
# what ansible.module_utils.parsing.convert_bool reads as true or false (1 and 0 as words too)
BOOL_WORDS = ("true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f")


class InventoryError(ValueError):
    """Bad input in an inventory; the message is one line."""


def cannot_render(host: str, name: str, exc: Exception) -> InventoryError:
    """A gpuhost variable whose template cannot be rendered (an undefined variable in
    "{{ }}"): bad input naming the host, the variable and why."""
    text = str(getattr(exc, "message", exc)).strip()
    why = text.splitlines()[0] if text else type(exc).__name__
    return InventoryError(f"host {host}: {name}: cannot be rendered: {why}")


def _is_str(v) -> bool:
    return isinstance(v, str)


def param_problem(p, v) -> str | None:
    """What is wrong with *v* as the value of the declared variable *p*, in a few words."""
    if p.type == "str":
        if not _is_str(v):
            return f"must be a string (quote it: \"{v}\"), not {type(v).__name__}"
        if v and p.pattern and not re.match(p.pattern, v):
            return f"not {p.what}: {v!r}"
    elif p.type == "int":
        low, high = p.bounds or (None, None)
        if isinstance(v, bool) or not isinstance(v, int) or (p.bounds and not low <= v <= high):
            return f"must be {p.what} from {low} to {high}, not {v!r}" if p.bounds else f"must be a whole number, not {v!r}"
    elif p.type == "bool":
        # `-e gpuhost_reboot_ok=true` is a string: the words Ansible's `bool` filter reads count
        if not isinstance(v, bool) and not (isinstance(v, str) and v.strip().lower() in BOOL_WORDS):
            return f"must be true or false, not {v!r}"
    elif p.type == "raw":
        # an optional bool: true or false when the operator wants one, "" when not
        if v != "" and not isinstance(v, bool) and not (isinstance(v, str) and v.strip().lower() in BOOL_WORDS):
            return f"must be true, false or \"\" (not judged), not {v!r}"
    elif p.type == "list" and p.elements == "str":
        if not isinstance(v, list) or not all(_is_str(x) for x in v):
            return f"must be a list of strings, not {v!r}"
        for x in v:
            if p.choices and x not in p.choices:
                return f"unknown control {x!r}"
    return None


def check_vars(host: str, hv: dict, registry=None) -> None:
    """Raise InventoryError for the first bad gpuhost variable of *host* (the variables
    *registry*'s controls declare; by default the shipped ones)."""
    registry = registry or REGISTRY
    checked = tuple(p.name for p in registry.params if p.checked)

    def bad(var: str, why: str) -> InventoryError:
        return InventoryError(f"host {host}: {var}: {why}")

    for var in sorted(hv):
        if var in checked or var in INTERNAL_VARS or var.startswith(INTERNAL_PREFIXES):
            continue
        close = difflib.get_close_matches(var, checked, n=1)
        raise bad(var, "unknown gpuhost variable" + (f" (did you mean {close[0]}?)" if close else ""))
    for var in checked:
        # `gpuhost_x:` with nothing after it is YAML null: it would replace the default with nothing
        if var in hv and hv[var] is None:
            raise bad(var, "has no value (null): give one, or remove the line to keep the default")
    for p in registry.params:
        if p.checked and p.name in hv and p.name != "gpuhost_waivers":
            why = param_problem(p, hv[p.name])
            if why:
                raise bad(p.name, why)
    waivers = hv.get("gpuhost_waivers")
    if waivers is None:
        return
    if not isinstance(waivers, list):
        raise bad("gpuhost_waivers", "must be a list of {control, reason, expires}")
    seen: dict[str, int] = {}
    for i, w in enumerate(waivers):
        where = f"gpuhost_waivers[{i}]"
        if not isinstance(w, dict):
            raise bad(where, "must be a mapping {control, reason, expires}")
        unknown = set(w) - {"control", "reason", "expires"}
        if unknown:
            raise bad(where, f"unknown key {sorted(unknown)[0]!r}")
        if w.get("control") not in registry.by_id:
            raise bad(where, f"unknown control {w.get('control')!r}")
        if w["control"] in seen:
            raise bad(where, f"a second waiver for {w['control']} (the first is gpuhost_waivers[{seen[w['control']]}])")
        seen[w["control"]] = i
        if not _is_str(w.get("reason")) or not w["reason"].strip():
            raise bad(where, "a waiver needs a reason")
        exp = w.get("expires")
        if isinstance(exp, _dt.date):
            exp = exp.isoformat()
        if not _is_str(exp) or not re.match(r"^\d{4}-\d{2}-\d{2}$", exp):
            raise bad(where, f"expires must be a date YYYY-MM-DD, not {w.get('expires')!r}")
        try:
            _dt.date.fromisoformat(exp)
        except ValueError:
            raise bad(where, f"expires is not a real date: {exp}") from None


def controls_for_tags(run_tags) -> list:
    """The controls `--tags` selects (a control ID, or a role's tag: pcie for pcie.*), so the
    judgement covers what the run fixes; no control tag (all, always): every control."""
    tags = {str(t) for t in run_tags or []}
    return [c.id for c in REGISTRY.catalog if c.id in tags or c.role in tags]


def settings_from(values: dict, run_tags=()) -> dict:
    """The judgement's settings from a host's checked gpuhost_* variables; a variable not set
    takes its Param's default, as the role's defaults (made from the same Params) would give
    it: playbooks/audit.yml calls the audit action without the role."""
    # the defaults are the registry's own objects, shared by every host: each gets a copy; a
    # host's values are its own already (checked and made plain for this call)
    settings = {p.key: values[p.name] if p.name in values else copy.deepcopy(p.default)
                for p in REGISTRY.params if p.key}
    # a lab container names its host itself; an operator's gpuhost_container_host comes first
    settings["container_host"] = values.get("gpuhost_container_host") or values.get("gpuhost_lab_parent") or ""
    # --controls (gpuhost_controls), else the controls `--tags` selects, else all of them
    settings["controls"] = values.get("gpuhost_controls") or controls_for_tags(run_tags)
    return settings


def render_waivers(raw, render):
    """gpuhost_waivers as the judgement reads them: each field rendered by *render* (Ansible's
    templar) but the reason, the operator's prose, which is kept as written: `{{ 7*7 }}` or
    `see {{ JIRA-123 }}` in it is text, never a template to render or to fail on. A list
    given by a template ("{{ site_waivers }}") is rendered whole."""
    if not isinstance(raw, list):
        return render(raw)
    out = []
    for waiver in raw:
        if isinstance(waiver, dict):
            out.append(dict((k, v if k == "reason" and isinstance(v, str) else render(v)) for k, v in waiver.items()))
        else:
            out.append(render(waiver))
    return out
