"""Load an inventory and check gpuhost's variables on every host before anything runs.

A wrong type, an unknown control ID or a malformed waiver is bad input: one line naming
the variable and the host, exit 1, and no host is touched.
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

from ansible_collections.gpuhost.stack.plugins.module_utils.variables import CHECKED_VARS, INTERNAL_VARS, InventoryError, check_vars  # noqa: F401


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
        raise InventoryError(f"inventory {path}: {first}" + yaml_error_at(path)) from None


def yaml_error_at(path: str) -> str:
    """Where a YAML inventory fails to parse, as the YAML parser says it (Ansible's own line
    for a source none of its plugins could read names no line): ": line N, column M: problem",
    or "" where the file is not YAML that fails (an INI file, a script, a directory)."""
    import os

    import yaml

    if not path.endswith((".yml", ".yaml")) or not os.path.isfile(path):
        return ""
    class Loader(yaml.SafeLoader):
        pass

    # Ansible's own tags (!vault, !unsafe) are no YAML error
    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            yaml.load(f, Loader=Loader)  # noqa: S506 (a SafeLoader that ignores tags)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        return f" ({where}: {exc.problem or exc.context or 'not valid YAML'})"
    except yaml.YAMLError as exc:
        return f" ({str(exc).splitlines()[0]})"
    return ""


def load_and_check(path: str, limit: str | None = None) -> list[Target]:
    targets = _load(path, limit)
    if not targets:
        raise InventoryError(f"inventory {path}: no hosts" + (f" match --limit {limit}" if limit else ""))
    for t in targets:
        check_vars(t.name, t.vars)
    return targets
