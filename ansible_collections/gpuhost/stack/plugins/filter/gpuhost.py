"""gpuhost.stack's filters: the inventory check, the steps of a fix, and the lines a failed or
interrupted fix leaves (the judgement itself is the action gpuhost.stack.audit).

The logic is the collection's module_utils, which the gpuhost CLI imports too: the CLI,
the roles and the tests judge a host the same way, and a controller with only
ansible-core and this collection (a stock execution environment) runs it all.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import plain
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import steps
from ansible_collections.gpuhost.stack.plugins.module_utils.variables import (
    BAD_INPUT_MARK, InventoryError, cannot_render, check_vars, render_waivers)


def _value(hostvars, name, host):
    """One gpuhost variable, templated; a template that cannot be rendered (an undefined
    variable in "{{ }}") is bad input naming the host and the variable."""
    from jinja2 import Undefined

    try:
        raw = getattr(hostvars, "_vars", None)      # HostVarsVars: the variables before templating
        if name == "gpuhost_waivers" and raw is not None and name in raw:
            value = render_waivers(raw[name], getattr(hostvars, "_templar").template)
        else:
            value = hostvars[name]
        if isinstance(value, Undefined):
            str(value)                  # raises, saying which variable is undefined
        return plain(value)
    except Exception as exc:            # AnsibleUndefinedVariable and template errors alike
        raise cannot_render(host, name, exc) from None


def gpuhost_check_inventory(hosts, hostvars):
    """Check gpuhost's variables on every host; one line naming the first bad one and how
    many other hosts are bad too (so a fleet is fixed in one pass, not one host per run)."""
    first, others = None, 0
    for host in hosts:
        hv = hostvars[host]
        # every gpuhost_* variable: a misspelt one is bad input too, not silently ignored
        try:
            values = {str(k): _value(hv, k, host) for k in list(hv.keys()) if str(k).startswith("gpuhost_")}
            check_vars(str(host), values)
        except InventoryError as exc:
            if first is None:
                first = exc
            else:
                others += 1
    if first is not None:
        more = f" (and {others} other host{'s' if others > 1 else ''} with bad gpuhost variables)" if others else ""
        raise AnsibleFilterError(f"{BAD_INPUT_MARK}{first}{more}")
    return True


def gpuhost_failure(result):
    """Why a fix step failed, in one line: the command and the last line it printed."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.failure import describe
    return describe(plain(result) if isinstance(result, dict) else {"msg": str(result)})


def gpuhost_stopped(path):
    """Whether the gpuhost run was interrupted: its CLI creates this file on SIGINT/SIGTERM,
    and each control's fix checks it before it starts (the change in flight finishes)."""
    import os
    return bool(path) and os.path.exists(str(path))


def gpuhost_fix_steps(fix):
    """The fix task files (roles/common/tasks/fix_<step>.yml) that apply a finding's fix, in
    the order they run: the kinds the judgement built it from (controls/fixes.py)."""
    try:
        return steps(plain(fix or {}))
    except ValueError as exc:       # a key no kind owns: the judgement already reports it
        raise AnsibleFilterError(f"gpuhost: {exc}") from None


class FilterModule:
    def filters(self):
        return {"check_inventory": gpuhost_check_inventory,
                "stopped": gpuhost_stopped, "failure": gpuhost_failure, "fix_steps": gpuhost_fix_steps}
