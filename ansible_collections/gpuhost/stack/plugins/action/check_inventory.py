# -*- coding: utf-8 -*-
"""Action plugin gpuhost.stack.check_inventory: every host's gpuhost_* variables, checked on
the controller before any host is touched.

An action, not a filter in a set_fact: the strategy imports an action plugin in the main
process when it queues the task, so the judgement's modules (which the check needs for the
control IDs and each variable's type and bounds) are imported once there and every worker
forked after it, the audit's included, has them; a filter was imported again in the check's
own worker. And it returns no fact to copy to every host. Its documentation is
plugins/modules/check_inventory.py, where ansible-doc reads it.
"""
from __future__ import annotations


from ansible.plugins.action import ActionBase

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import plain
from ansible_collections.gpuhost.stack.plugins.module_utils.failure import BAD_INPUT_MARK
from ansible_collections.gpuhost.stack.plugins.module_utils.variables import (
    InventoryError, cannot_render, check_vars, render_waivers)


def host_value(hostvars, name, host):
    """One gpuhost variable of *host*, templated; a template that cannot be rendered (an
    undefined variable in "{{ }}") is bad input naming the host and the variable."""
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


def check_hosts(hosts, hostvars) -> int:
    """Check gpuhost's variables on every host in *hosts*; raise InventoryError with one line
    naming the first bad one and how many other hosts are bad too. Returns how many were checked."""
    first, others = None, 0
    for host in hosts:
        hv = hostvars[host]
        # every gpuhost_* variable: a misspelt one is bad input too, not silently ignored
        try:
            values = {str(k): host_value(hv, k, host) for k in list(hv.keys()) if str(k).startswith("gpuhost_")}
            check_vars(str(host), values)
        except InventoryError as exc:
            if first is None:
                first = exc
            else:
                others += 1
    if first is not None:
        more = f" (and {others} other host{'s' if others > 1 else ''} with bad gpuhost variables)" if others else ""
        raise InventoryError(f"{first}{more}")
    return len(hosts)


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False
    _requires_connection = False        # the inventory only: no host is contacted

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        try:
            # groups['all']: every host of the inventory, whatever --limit or the play's hosts say
            checked = check_hosts(list(task_vars["groups"]["all"]), task_vars["hostvars"])
        except InventoryError as exc:
            return {**result, "failed": True, "msg": f"{BAD_INPUT_MARK}{exc}"}
        return {**result, "changed": False, "checked": checked}
