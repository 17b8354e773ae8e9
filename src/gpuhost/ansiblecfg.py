"""The ansible.cfg a gpuhost run uses: the operator's own (connection, become, SSH, forks
as they already run Ansible), with gpuhost's settings that keep a run safe on top.

The operator's file is found the way Ansible finds it: $ANSIBLE_CONFIG, ./ansible.cfg,
~/.ansible.cfg, /etc/ansible/ansible.cfg. Its relative paths (a key file beside it) are
made absolute, as Ansible reads them relative to the file.
"""
from __future__ import annotations

import configparser
import os
from pathlib import Path

from . import COLLECTION

GPUHOST_CFG = COLLECTION / "ansible.cfg"
# never the operator's to change in a gpuhost run: host keys are checked, an audit leaves
# nothing on a host's disk (module files on tmpfs), facts are gpuhost's own, results come
# back as events
ENFORCED = {"defaults": {"host_key_checking": "True", "remote_tmp": "/tmp/.ansible-${USER}", "gathering": "explicit",
                         "retry_files_enabled": "False", "stdout_callback": "default"},
            "ssh_connection": {"pipelining": "True"}}
RUN_GUARD = "gpuhost.stack.run_guard"
PATH_KEYS = {"private_key_file", "inventory", "roles_path", "collections_path", "collections_paths",
             "vault_password_file", "log_path", "local_tmp", "control_path_dir", "become_password_file",
             "connection_password_file"}


def operator_config(cwd: Path | None = None) -> Path | None:
    env = os.environ.get("ANSIBLE_CONFIG")
    candidates = [Path(env).expanduser()] if env else []
    candidates += [(cwd or Path.cwd()) / "ansible.cfg", Path.home() / ".ansible.cfg", Path("/etc/ansible/ansible.cfg")]
    for path in candidates:
        if path.is_file() and path.resolve() != GPUHOST_CFG.resolve():
            return path.resolve()
    return None


def _parser() -> configparser.ConfigParser:
    p = configparser.ConfigParser(interpolation=None, strict=False)
    p.optionxform = str         # Ansible's keys are case-sensitive
    return p


def _absolute(value: str, base: Path) -> str:
    parts = []
    for item in value.split(os.pathsep):
        item = item.strip()
        if item and not item.startswith(("/", "~", "$")):
            item = str((base / item).resolve())
        parts.append(item)
    return os.pathsep.join(parts)


def merged_config(directory: Path, cwd: Path | None = None) -> Path:
    """Write the run's ansible.cfg into *directory* and return its path."""
    cfg = _parser()
    cfg.read(GPUHOST_CFG)
    mine = operator_config(cwd)
    if mine is not None:
        theirs = _parser()
        theirs.read(mine)
        for section in theirs.sections():
            if not cfg.has_section(section):
                cfg.add_section(section)
            for key, value in theirs.items(section):
                cfg.set(section, key, _absolute(value, mine.parent) if key in PATH_KEYS else value)
    cfg.remove_option("defaults", "collections_path")      # the runner's ANSIBLE_COLLECTIONS_PATH says it
    for section, values in ENFORCED.items():
        if not cfg.has_section(section):
            cfg.add_section(section)
        for key, value in values.items():
            cfg.set(section, key, value)
    # the operator's callbacks stay; gpuhost's run guard ties the play to its gpuhost process
    callbacks = [c.strip() for c in cfg.get("defaults", "callbacks_enabled", fallback="").split(",") if c.strip()]
    cfg.set("defaults", "callbacks_enabled", ", ".join(dict.fromkeys(callbacks + [RUN_GUARD])))
    out = directory / "ansible.cfg"
    with open(out, "w") as f:
        f.write(f"# gpuhost's run settings over {mine or 'no ansible.cfg of the operator'}\n")
        cfg.write(f)
    return out


def callbacks_enabled(config: Path) -> str:
    """The callbacks a run enables: the operator's (environment, then their ansible.cfg, as
    merged into *config*) and gpuhost's run guard, which must never be left out."""
    cfg = _parser()
    cfg.read(config)
    names = [c.strip() for c in os.environ.get("ANSIBLE_CALLBACKS_ENABLED", "").split(",") if c.strip()]
    names += [c.strip() for c in cfg.get("defaults", "callbacks_enabled", fallback="").split(",") if c.strip()]
    return ",".join(dict.fromkeys(names + [RUN_GUARD]))
