"""gpuhost.stack's filters: the steps of a fix, and the lines a failed or interrupted fix
leaves (the judgement itself is the action gpuhost.stack.audit, the inventory check the
action gpuhost.stack.check_inventory).

The logic is the collection's module_utils, which the gpuhost CLI imports too: the CLI,
the roles and the tests judge a host the same way, and a controller with only
ansible-core and this collection (a stock execution environment) runs it all.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import plain
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import steps


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
        return {"stopped": gpuhost_stopped, "failure": gpuhost_failure, "fix_steps": gpuhost_fix_steps}
