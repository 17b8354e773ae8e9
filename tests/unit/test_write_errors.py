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


def run_module(name: str, args: dict) -> dict:
    """A gpuhost module run as Ansible runs it on a host: its arguments in a JSON file."""
    import json
    import sys
    import tempfile

    from gpuhost import COLLECTION, COLLECTIONS

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
    res = subprocess.run([sys.executable, str(COLLECTION / f"plugins/modules/{name}.py"), f.name],
                         capture_output=True, text=True, env=env, timeout=60)
    os.unlink(f.name)
    return json.loads(res.stdout)


def test_a_sysctl_file_that_changed_since_the_audit_is_not_written_over(tmp_path):
    """Issue 19: numa.balancing's edit of another sysctl file was computed from the audit's read
    and written later: a line added meanwhile was lost. The write now refuses a file that
    changed, and writes one that did not."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls import content_sha256

    conf = tmp_path / "sysctl.conf"
    read = "kernel.numa_balancing = 1\n"
    conf.write_text(read + "vm.swappiness = 10\n")          # a line added after the audit read it
    out = run_module("file", {"path": str(conf), "content": "# disabled\n#kernel.numa_balancing = 1\n",
                              "expect_sha256": content_sha256(read)})
    assert out.get("failed") and out["msg"] == (f"{conf} changed since the audit read it: nothing written "
                                                "(run the fix again to judge it as it is now)"), out
    assert conf.read_text() == read + "vm.swappiness = 10\n"
    conf.write_text(read)
    out = run_module("file", {"path": str(conf), "content": "#kernel.numa_balancing = 1\n",
                              "expect_sha256": content_sha256(read)})
    assert out["changed"] and conf.read_text() == "#kernel.numa_balancing = 1\n", out
