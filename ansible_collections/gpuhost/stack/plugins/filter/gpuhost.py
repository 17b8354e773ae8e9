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


# worst first: what needs a person before what gpuhost fixes (as the CLI's report orders them)
SEVERITY = ("error", "manual", "drift", "pending_reboot", "waived")
# gpuhost_audit_fail_on: a finding at this level or a worse one fails the host
FAIL_ON = {"none": (), "error": ("error",), "manual": ("error", "manual"),
           "drift": ("error", "manual", "drift", "pending_reboot")}


def gpuhost_noteworthy(findings):
    """The findings that are neither pass nor n/a, worst first: [{control, status, message}]."""
    rows = [f for f in (plain(findings or {}) or {}).values() if f.get("status") in SEVERITY]
    return [{"control": f.get("control"), "status": f["status"], "message": f.get("message") or ""}
            for f in sorted(rows, key=lambda f: (SEVERITY.index(f["status"]), str(f.get("control"))))]


def gpuhost_at_or_above(findings, level):
    """"control: status" for each finding at *level* (gpuhost_audit_fail_on: none, drift,
    manual or error) or a worse one; a waived finding never counts."""
    if level not in FAIL_ON:
        raise AnsibleFilterError(f"gpuhost: gpuhost_audit_fail_on must be none, drift, manual or error, not {level!r}")
    return [f"{f['control']}: {f['status']}" for f in gpuhost_noteworthy(findings) if f["status"] in FAIL_ON[level]]


class FilterModule:
    def filters(self):
        return {"stopped": gpuhost_stopped, "failure": gpuhost_failure, "fix_steps": gpuhost_fix_steps,
                "noteworthy": gpuhost_noteworthy, "at_or_above": gpuhost_at_or_above}
