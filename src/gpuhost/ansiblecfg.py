"""The ansible.cfg a gpuhost run uses: the operator's own (connection, become, SSH, forks
as they already run Ansible), with gpuhost's settings that keep a run safe on top.

The operator's file is found the way Ansible finds it: $ANSIBLE_CONFIG (a directory: its
ansible.cfg), ./ansible.cfg unless the working directory is world-writable, ~/.ansible.cfg,
/etc/ansible/ansible.cfg, the first that exists and can be read (ansible-core's
config/manager.py find_ini_config_file; tests/unit/test_ansible_config.py holds this to that
function, which is not imported here: some 50 ms of every run). Its relative paths (a key
file beside it) are made absolute, as Ansible reads them relative to the file.
"""
from __future__ import annotations

import configparser
import os
import stat
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


def _unfrack(path: str) -> Path:
    """ansible.utils.path.unfrackpath(path, follow=False): variables and ~ expanded, absolute."""
    return Path(os.path.normpath(os.path.abspath(os.path.expanduser(os.path.expandvars(path)))))


def operator_config(cwd: Path | None = None) -> Path | None:
    """The ansible.cfg Ansible itself would read (None: none; gpuhost's own is never the
    operator's)."""
    candidates = []
    env = os.environ.get("ANSIBLE_CONFIG")
    if env is not None:
        path = _unfrack(env)
        candidates.append(path / "ansible.cfg" if path.is_dir() else path)
    here = cwd or Path.cwd()
    try:
        if not os.stat(here).st_mode & stat.S_IWOTH:     # a world-writable directory's file is anyone's
            candidates.append(here / "ansible.cfg")
    except OSError:
        pass
    candidates += [_unfrack("~/.ansible.cfg"), Path("/etc/ansible/ansible.cfg")]
    found = next((p for p in candidates if p.exists() and os.access(p, os.R_OK)), None)
    if found is None or found.resolve() == GPUHOST_CFG.resolve():
        return None
    return found.resolve()


def inventory_sources(cwd: Path | None = None) -> list[str] | None:
    """Where Ansible would take its inventory from without -i: $ANSIBLE_INVENTORY, else the
    operator's ansible.cfg ([defaults] inventory, or its old name hostfile), each a list of
    comma-separated sources, a file's relative to the ansible.cfg. None: neither names one
    (gpuhost then works on this machine, not on /etc/ansible/hosts)."""
    env = os.environ.get("ANSIBLE_INVENTORY")
    if env:
        return [s.strip() for s in env.split(",") if s.strip()]
    cfg = operator_config(cwd)
    if cfg is None:
        return None
    p = _parser()
    try:
        p.read(cfg)
    except configparser.Error:
        return None
    value = p.get("defaults", "inventory", fallback=None) or p.get("defaults", "hostfile", fallback=None)
    if not value:
        return None
    return [_absolute(s.strip(), cfg.parent) for s in value.split(",") if s.strip()]


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
