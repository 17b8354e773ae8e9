"""Where a lab keeps its files. One directory holds everything of one lab."""
from __future__ import annotations

import os
from pathlib import Path


def default_dir() -> Path:
    env = os.environ.get("GPUHOST_LAB_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local/state")) / "gpuhost/lab"


class LabLayout:
    def __init__(self, directory: Path | str):
        self.dir = Path(directory).absolute()

    state_file = property(lambda self: self.dir / "lab.json")
    socket = property(lambda self: self.dir / "supervisor.sock")
    pid_file = property(lambda self: self.dir / "supervisor.pid")
    fs = property(lambda self: self.dir / "fs")
    inventory = property(lambda self: self.dir / "inventory.yml")
    ssh_dir = property(lambda self: self.dir / "ssh")
    client_key = property(lambda self: self.dir / "ssh/id_ed25519")
    known_hosts = property(lambda self: self.dir / "ssh/known_hosts")
    ssh_config = property(lambda self: self.dir / "ssh/config")

    def host_dir(self, name: str) -> Path:
        return self.dir / "hosts" / name

    def host_key(self, name: str) -> Path:
        return self.host_dir(name) / "ssh_host_ed25519_key"

    def spec_copy(self, name: str) -> Path:
        return self.dir / "specs" / f"{name}.yml"

    def repo(self, name: str) -> Path:
        return self.dir / "repo" / name

    def disk(self, name: str) -> Path:
        """The host's disk: its overlay's upper layer."""
        return self.host_dir(name) / "disk/upper"
