# -*- coding: utf-8 -*-
"""gpuhost's inventory variables, checked exactly before any host is touched.

A wrong type, a number out of bounds, an unknown variable or control ID, a malformed or
duplicate waiver, or null where a value is required is bad input: one line naming the
host and the variable. Used by the playbooks' inventory check (a filter) and the CLI.
"""
from __future__ import annotations

import datetime as _dt
import difflib
import re

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import BY_ID, CATALOG

BAD_INPUT_MARK = "gpuhost bad input: "

# Every variable common's argument_specs declares. site.yml checks them all here
# (one line, before any host is touched) and so turns the role's own validation off.
CHECKED_VARS = ("gpuhost_kernel_min_version", "gpuhost_nvidia_min_driver", "gpuhost_container_host",
                "gpuhost_cstate_max_latency_us", "gpuhost_controls_skip", "gpuhost_pcie_mrrs_devices",
                "gpuhost_waivers", "gpuhost_lxc_restart", "gpuhost_reboot_ok", "gpuhost_controls")


# set by gpuhost itself or its lab, never a user's typo
INTERNAL_VARS = ("gpuhost_apply", "gpuhost_inventory_checked", "gpuhost_stop_file", "gpuhost_reboot_timeout",
                 "gpuhost_lock_timeout", "gpuhost_run_holder", "gpuhost_run", "gpuhost_report_stats",
                 # what the roles set (facts of the audit action, a fix include's control)
                 "gpuhost_findings", "gpuhost_summary", "gpuhost_reboot_required", "gpuhost_reboot_record",
                 "gpuhost_control")
INTERNAL_PREFIXES = ("gpuhost_lab_",)
# what ansible.module_utils.parsing.convert_bool reads as true or false (1 and 0 as words too)
BOOL_WORDS = ("true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f")
CSTATE_LATENCY_MAX_US = 100000      # 0.1 s: no idle state the kernel knows exits slower


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


def check_vars(host: str, hv: dict) -> None:
    """Raise InventoryError for the first bad gpuhost variable of *host*."""
    def bad(var: str, why: str) -> InventoryError:
        return InventoryError(f"host {host}: {var}: {why}")

    for var in sorted(hv):
        if var in CHECKED_VARS or var in INTERNAL_VARS or var.startswith(INTERNAL_PREFIXES):
            continue
        close = difflib.get_close_matches(var, CHECKED_VARS, n=1)
        raise bad(var, "unknown gpuhost variable" + (f" (did you mean {close[0]}?)" if close else ""))
    for var in CHECKED_VARS:
        # `gpuhost_x:` with nothing after it is YAML null: it would replace the default with nothing
        if var in hv and hv[var] is None:
            raise bad(var, "has no value (null): give one, or remove the line to keep the default")
    for var in ("gpuhost_kernel_min_version", "gpuhost_nvidia_min_driver", "gpuhost_container_host"):
        v = hv.get(var)
        if v is not None and not _is_str(v):
            raise bad(var, f"must be a string (quote it: \"{v}\"), not {type(v).__name__}")
    v = hv.get("gpuhost_kernel_min_version")
    if v and not re.match(r"^\d+(\.\d+){0,2}$", v):
        raise bad("gpuhost_kernel_min_version", f"not a kernel version like \"6.14\": {v!r}")
    v = hv.get("gpuhost_nvidia_min_driver")
    if v and not re.match(r"^\d+(\.\d+){0,2}$", v):
        raise bad("gpuhost_nvidia_min_driver", f"not a driver version like \"570.124.06\": {v!r}")
    v = hv.get("gpuhost_cstate_max_latency_us")
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= CSTATE_LATENCY_MAX_US):
        raise bad("gpuhost_cstate_max_latency_us",
                  f"must be a whole number of microseconds from 0 to {CSTATE_LATENCY_MAX_US}, not {v!r}")
    for var in ("gpuhost_lxc_restart", "gpuhost_reboot_ok"):
        v = hv.get(var)
        # `-e gpuhost_reboot_ok=true` is a string: the words Ansible's `bool` filter reads count
        if isinstance(v, str) and v.strip().lower() in BOOL_WORDS:
            continue
        if v is not None and not isinstance(v, bool):
            raise bad(var, f"must be true or false, not {v!r}")
    for var in ("gpuhost_controls_skip", "gpuhost_pcie_mrrs_devices", "gpuhost_controls"):
        v = hv.get(var)
        if v is not None and (not isinstance(v, list) or not all(_is_str(x) for x in v)):
            raise bad(var, f"must be a list of strings, not {v!r}")
    for var in ("gpuhost_controls_skip", "gpuhost_controls"):
        for cid in hv.get(var) or []:
            if cid not in BY_ID:
                raise bad(var, f"unknown control {cid!r}")
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
        if w.get("control") not in BY_ID:
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
    return [c.id for c in CATALOG if c.id in tags or c.role in tags]


def settings_from(values: dict, run_tags=()) -> dict:
    """The judgement's settings from a host's checked gpuhost_* variables (a variable not
    set keeps the judgement's own default)."""
    settings = {key: values[var] for key, var in (
        ("kernel_min_version", "gpuhost_kernel_min_version"), ("cstate_max_latency_us", "gpuhost_cstate_max_latency_us"),
        ("nvidia_min_driver", "gpuhost_nvidia_min_driver"), ("controls_skip", "gpuhost_controls_skip"),
        ("waivers", "gpuhost_waivers"), ("pcie_mrrs_devices", "gpuhost_pcie_mrrs_devices")) if var in values}
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
