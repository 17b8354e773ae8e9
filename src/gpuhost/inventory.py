"""Load an inventory and check gpuhost's variables on every host before anything runs.

A wrong type, an unknown control ID or a malformed waiver is bad input: one line naming
the variable and the host, exit 1, and no host is touched.
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

from ansible_collections.gpuhost.stack.plugins.module_utils.variables import BAD_INPUT_MARK, CHECKED_VARS, INTERNAL_VARS, InventoryError, check_vars  # noqa: F401


@dataclass
class Target:
    name: str
    vars: dict


def _load(path: str, limit: str | None) -> list[Target]:
    # Ansible's own warnings would say the same as our one line, at length
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return _load_quietly(path, limit)


def _load_quietly(path: str, limit: str | None) -> list[Target]:
    from ansible import constants as C
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    C.INVENTORY_UNPARSED_IS_FAILED = True
    C.INVENTORY_ANY_UNPARSED_IS_FAILED = True
    loader = DataLoader()
    try:
        inv = InventoryManager(loader=loader, sources=[path])
        if limit:
            inv.subset(limit)
        hosts = inv.get_hosts()
        vm = VariableManager(loader=loader, inventory=inv)
        out = []
        for host in hosts:
            hv = vm.get_vars(host=host, include_hostvars=False)
            out.append(Target(host.name, {k: v for k, v in hv.items() if str(k).startswith("gpuhost_")}))
        return out
    except AnsibleError as exc:
        first = str(exc.message if hasattr(exc, "message") else exc).strip().splitlines()[0]
        raise InventoryError(f"inventory {path}: {first}") from None


def load_and_check(path: str, limit: str | None = None) -> list[Target]:
    targets = _load(path, limit)
    if not targets:
        raise InventoryError(f"inventory {path}: no hosts" + (f" match --limit {limit}" if limit else ""))
    for t in targets:
        check_vars(t.name, t.vars)
    return targets
