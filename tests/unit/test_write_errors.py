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


def run_module(name: str, args: dict, path: str | None = None) -> dict:
    """A gpuhost module run as Ansible runs it on a host: its arguments in a JSON file (*path*:
    the PATH it finds its tools on)."""
    import json
    import sys
    import tempfile

    from gpuhost import COLLECTION, COLLECTIONS

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS), PATH=path or os.environ["PATH"])
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


@pytest.mark.parametrize("reload_rc", [0, 1])
def test_a_unit_written_is_read_by_systemd_in_the_same_call_and_only_when_it_changed(tmp_path, reload_rc):
    """A boot unit's step installs it and runs systemctl daemon-reload itself, once, after a
    change: a second run changes nothing and reloads nothing, check mode never reloads, and a
    reload that fails fails the step naming the file (it was written: changed)."""
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\necho 'Access denied' >&2\nexit {reload_rc}\n")
    fake.chmod(0o755)
    unit = tmp_path / "gpuhost-x.service"
    args = {"path": str(unit), "content": "[Unit]\nDescription=x\n", "daemon_reload": True}
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    check = run_module("file", {**args, "_ansible_check_mode": True}, path=path)
    assert check["changed"] and not check["daemon_reloaded"] and not calls.exists() and not unit.exists(), check
    out = run_module("file", args, path=path)
    assert unit.read_text() == "[Unit]\nDescription=x\n"
    assert calls.read_text() == "daemon-reload\n", "one reload, with argv (no shell)"
    if reload_rc:
        assert out.get("failed") and out["changed"], out
        assert out["msg"] == f"{unit} was written, but systemctl daemon-reload failed (rc 1): Access denied", out
        return
    assert out["changed"] and out["daemon_reloaded"], out
    again = run_module("file", args, path=path)
    assert not again["changed"] and not again["daemon_reloaded"], again
    assert calls.read_text() == "daemon-reload\n", "nothing changed: no second reload"


def test_a_link_is_named_for_what_it_is(tmp_path):
    """The fault campaign: the link refusal called every link "a masked unit". A unit linked to
    /dev/null is one; any other link is a file kept elsewhere."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.write import link_refusal

    unit = tmp_path / "etc/systemd/system/gpuhost-cpu-governor.service"
    unit.parent.mkdir(parents=True)
    unit.symlink_to("/dev/null")
    assert link_refusal(str(unit)).endswith("is a symbolic link to /dev/null (a masked unit): gpuhost does not write "
                                            "through or over it")
    conf = tmp_path / "etc/sysctl.d/90-gpuhost.conf"
    conf.parent.mkdir(parents=True)
    conf.symlink_to("/srv/config/90-gpuhost.conf")
    assert "(a file kept elsewhere)" in link_refusal(str(conf)) and "masked" not in link_refusal(str(conf))
    assert link_refusal(str(tmp_path)) is None
