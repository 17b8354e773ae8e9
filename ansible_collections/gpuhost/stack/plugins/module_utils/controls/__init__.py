"""The controls: one module each (``CONTROL``, its declaration, and ``judge(host)``), and
``evaluate``, the one place a host's facts are judged.

``evaluate`` takes a host's facts (the ``gpuhost.stack.facts`` module's output) and the
inventory settings, and returns one finding per control: its status, what was observed
and expected, and, where the fix can repair it, the exact change the role makes (a
kernel parameter, a register, a file with its content). The roles act on ``fix``; the
audit is the same play in check mode, so each judgement exists once, in its module.
"""
from __future__ import annotations

import datetime as _dt

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import fixes
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.gates import (
    hold_reboot, reboot_record, respect_masks, respect_refusals)
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.kargs import _comparable, kernel_args, params
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import (
    FAILING, STATUSES, Control, Finding, Host, Param, error, na)
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import content_sha256, unit
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.registry import DEFAULT, Registry
from ansible_collections.gpuhost.stack.plugins.module_utils.versions import at_least, kernel_flavor, vkey

CATALOG = DEFAULT.catalog
BY_ID = DEFAULT.by_id
HOST_LEVEL = DEFAULT.host_level
DEFAULT_REGISTRY = DEFAULT

__all__ = ["fixes", "CATALOG", "DEFAULT_REGISTRY", "BY_ID", "HOST_LEVEL", "FAILING", "STATUSES", "Control", "Finding", "Host", "Param", "Registry",
           "evaluate", "plain", "reboot_record", "fix_units", "error", "na", "params", "kernel_args", "_comparable",
           "content_sha256", "unit", "at_least", "kernel_flavor", "vkey"]


_PLAIN_SCALARS = (str, int, float, bool, type(None))


def plain(value):
    """Plain Python containers and scalars (Ansible 2.19 hands plugins tagged ones: subclasses
    of dict, list, str, int and float)."""
    # a host's facts are some 3,000 values, judged for every host: the exact types, by far the
    # most common, are recognised without the isinstance() chain below
    kind = type(value)
    if kind is dict:
        # exactly str: Ansible's unsafe strings subclass it and become plain ones here
        return {k if type(k) is str else str(k): plain(v) for k, v in value.items()}  # pylint: disable=unidiomatic-typecheck
    if kind is list:
        return [plain(v) for v in value]
    if kind in _PLAIN_SCALARS:
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    for kind in (bool, int, float):         # bool first: it is an int too
        if isinstance(value, kind):
            return kind(value)
    return value


def fix_units(fix: dict) -> set[str]:
    """The systemd units a fix installs, enables or removes, read through its kinds."""
    names: set[str] = set()
    for kind in fixes.kinds_of(fix):
        if isinstance(kind, (fixes.BootUnit, fixes.UnitRemoval)):
            names.add(kind.name)
        elif isinstance(kind, fixes.UnitEnable):
            names.update(kind.names)
    return names


def judge_one(control: Control, judge, h: Host) -> Finding:
    """One control's finding; a judgement that cannot be made is an error, never a guess."""
    try:
        finding = judge(h)
        units = fix_units(finding.fix or {})      # a fix key no kind owns is an error too
    except Exception as exc:
        return error(control.id, f"{type(exc).__name__}: {exc}")
    undeclared = sorted(units - set(control.units))
    if undeclared:
        # the probe reads back only declared units: one it never read would drift for ever
        return error(control.id, f"its fix touches {', '.join(undeclared)}, which {control.id} does not declare "
                                 "(CONTROL.units): the audit would never read it back")
    return finding


def evaluate(facts: dict, settings: dict, registry: Registry | None = None) -> dict[str, dict]:
    """One finding per control, in catalog order, as plain dicts."""
    registry = registry or DEFAULT
    facts, settings = plain(facts), plain(settings)
    h = Host(facts, settings)
    selected = settings.get("controls") or [c.id for c in registry.catalog]
    skip = set(settings.get("controls_skip") or [])
    # a waiver's `expires` is a UTC date, so every controller (and AWX, whatever its zone)
    # agrees on the day it ends: it holds through that day
    today = settings.get("today") or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    waivers = {w["control"]: w for w in settings.get("waivers") or []}
    out: dict[str, dict] = {}
    for control in registry.catalog:
        cid = control.id
        if cid not in selected:
            continue
        if cid in skip:
            finding = na(cid, "left out by gpuhost_controls_skip")
        elif h.container and cid in registry.host_level:
            parent = settings.get("container_host")
            finding = na(cid, f"host-level control: this runs inside a {h.container} container; audit its host"
                              + (f" {parent}" if parent else ""))
        else:
            finding = judge_one(control, registry.judges[cid], h)
        if finding.status == "pending_reboot":
            hold_reboot(h, finding)
        if finding.status == "drift":
            respect_masks(h, finding)
        if finding.status == "drift":
            respect_refusals(h, finding)
        w = waivers.get(cid)
        if w and finding.status in FAILING + ("error",):
            if str(w.get("expires", "9999-12-31")) >= today:
                finding.message = f"waived until {w['expires']}: {w['reason']} (finding: {finding.message})"
                finding.status = "waived"
                finding.fix = {}
        out[cid] = finding.as_dict()
    return out
