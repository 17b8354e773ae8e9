"""Controller-side judgement of gpuhost facts: the roles' `gpuhost_evaluate` filter.

The logic is the Python package's (gpuhost.controls), so the CLI, the roles and the
tests judge a host the same way.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from gpuhost.controls import evaluate
from gpuhost.inventory import BAD_INPUT_MARK, InventoryError, check_vars


def _plain(value):
    """Ansible 2.19 hands filters tagged containers; the evaluator wants plain ones."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    for kind in (bool, int, float):         # bool first: it is an int too
        if isinstance(value, kind):
            return kind(value)
    return value


def gpuhost_evaluate(facts, settings):
    return evaluate(_plain(facts), _plain(settings))


def _value(hostvars, name, host):
    """One gpuhost variable, templated; a template that cannot be rendered (an undefined
    variable in "{{ }}") is bad input naming the host and the variable."""
    from jinja2 import Undefined

    try:
        value = hostvars[name]
        if isinstance(value, Undefined):
            str(value)                  # raises, saying which variable is undefined
        return _plain(value)
    except Exception as exc:            # AnsibleUndefinedVariable and template errors alike
        why = str(getattr(exc, "message", exc)).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InventoryError(f"host {host}: {name}: cannot be rendered: {why}") from None


def gpuhost_check_inventory(hosts, hostvars):
    """Check gpuhost's variables on every host; one line naming the first bad one."""
    for host in hosts:
        hv = hostvars[host]
        # every gpuhost_* variable: a misspelt one is bad input too, not silently ignored
        try:
            values = {str(k): _value(hv, k, host) for k in list(hv.keys()) if str(k).startswith("gpuhost_")}
            check_vars(str(host), values)
        except InventoryError as exc:
            raise AnsibleFilterError(f"{BAD_INPUT_MARK}{exc}") from None
    return True


def gpuhost_failure(result):
    """Why a fix step failed, in one line: the command and the last line it printed."""
    from gpuhost.failure import describe
    return describe(_plain(result) if isinstance(result, dict) else {"msg": str(result)})


def gpuhost_stopped(path):
    """Whether the gpuhost run was interrupted: its CLI creates this file on SIGINT/SIGTERM,
    and each control's fix checks it before it starts (the change in flight finishes)."""
    import os
    return bool(path) and os.path.exists(str(path))


class FilterModule:
    def filters(self):
        return {"gpuhost_evaluate": gpuhost_evaluate, "gpuhost_check_inventory": gpuhost_check_inventory,
                "gpuhost_stopped": gpuhost_stopped, "gpuhost_failure": gpuhost_failure}
