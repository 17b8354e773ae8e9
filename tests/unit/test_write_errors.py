"""A write that the host refuses is one line naming the file and the cause in the operator's
terms (issue 19: an immutable file, a read-only /etc/pve, a full disk were all "One or more
items failed")."""
from __future__ import annotations

import errno
import os
import subprocess

import pytest

from ansible_collections.gpuhost.stack.plugins.module_utils import write


class Failed(Exception):
    pass


class Module:
    """What write_atomic uses of AnsibleModule: atomic_move and fail_json."""

    @staticmethod
    def atomic_move(src, dst):
        os.rename(src, dst)

    @staticmethod
    def fail_json(msg, **kw):
        raise Failed(msg)


def test_a_read_only_file_system_is_named_with_its_cause(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "129.conf").write_text("arch: amd64\n")
    subprocess.run(["mount", "--bind", str(ro), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        with pytest.raises(Failed) as failed:
            write.write_atomic(Module, str(ro / "129.conf"), "arch: amd64\ncores: 8\n")
    finally:
        subprocess.run(["umount", str(ro)], check=True)
    assert str(failed.value) == f"cannot write {ro}/129.conf: Read-only file system"
    assert (ro / "129.conf").read_text() == "arch: amd64\n"
    assert not list(ro.glob(".*gpuhost-tmp")), "no temporary file left"


@pytest.mark.parametrize("code, path, said", [
    (errno.EROFS, "/etc/pve/lxc/129.conf",
     "Read-only file system (/etc/pve is read-only while this Proxmox VE node has no quorum: see `pvecm status`)"),
    (errno.ENOSPC, "/etc/sysctl.d/99-gpuhost.conf", "No space left on device (the file system holding it is full)"),
    (errno.EPERM, "/etc/default/grub", "Operation not permitted (an immutable file or directory? see `lsattr -d`)"),
])
def test_each_cause_is_said_in_the_operators_terms(code, path, said):
    assert write.why_not_written(path, OSError(code, os.strerror(code))) == said
