"""What the collection's audit says to Ansible (roles/common/tasks/summary.yml): the filters
that pick the findings worth a line, worst first, and those at or above
gpuhost_audit_fail_on; and the variable's values as the inventory check takes them."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.stack.plugins.filter.gpuhost import gpuhost_at_or_above, gpuhost_noteworthy
from ansible_collections.gpuhost.stack.plugins.module_utils.variables import InventoryError, check_vars

FINDINGS = {c: {"control": c, "status": s, "message": f"{c} is {s}"} for c, s in (
    ("cpu.driver", "drift"), ("pcie.link", "manual"), ("health.gpu", "error"), ("kernel.version", "pending_reboot"),
    ("numa.balancing", "pass"), ("storage.zfs_arc", "na"), ("pcie.mrrs", "waived"))}


def test_the_lines_are_every_finding_neither_pass_nor_na_worst_first():
    assert [(f["control"], f["status"]) for f in gpuhost_noteworthy(FINDINGS)] == [
        ("health.gpu", "error"), ("pcie.link", "manual"), ("cpu.driver", "drift"), ("kernel.version", "pending_reboot"),
        ("pcie.mrrs", "waived")]
    assert gpuhost_noteworthy({}) == [] and gpuhost_noteworthy(None) == []


@pytest.mark.parametrize("level, failing", [
    ("none", []),
    ("error", ["health.gpu: error"]),
    ("manual", ["health.gpu: error", "pcie.link: manual"]),
    ("drift", ["health.gpu: error", "pcie.link: manual", "cpu.driver: drift", "kernel.version: pending_reboot"]),
])
def test_a_level_fails_on_itself_and_worse_never_on_a_waiver(level, failing):
    assert gpuhost_at_or_above(FINDINGS, level) == failing


def test_a_level_that_is_not_one_is_an_error():
    with pytest.raises(AnsibleFilterError, match="gpuhost_audit_fail_on must be none, drift, manual or error, not 'warn'"):
        gpuhost_at_or_above(FINDINGS, "warn")


def test_the_inventory_check_takes_the_four_levels_and_nothing_else():
    for level in ("none", "drift", "manual", "error"):
        check_vars("h1", {"gpuhost_audit_fail_on": level})
    with pytest.raises(InventoryError, match="^host h1: gpuhost_audit_fail_on: not none, drift, manual or error: 'warn'$"):
        check_vars("h1", {"gpuhost_audit_fail_on": "warn"})
