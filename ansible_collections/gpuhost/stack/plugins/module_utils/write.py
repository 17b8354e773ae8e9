# -*- coding: utf-8 -*-
"""How gpuhost's modules change a file on a host: a copy of the old one in the backup
directory (never beside the file), then an atomic replace under a hidden temporary name."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import time

BACKUP_DIR = "/var/backups/gpuhost"


def link_refusal(path):
    """Why gpuhost must not write *path* (None when it may): a symbolic link there is an
    administrator's decision (a unit masked with a link to /dev/null, a file that lives
    elsewhere) and writing through or over it would change what it points to or undo it."""
    if os.path.islink(path):
        target = os.readlink(path)
        unit = path.endswith((".service", ".socket", ".timer", ".target", ".mount", ".path")) and \
            "/systemd/" in path
        kind = "a masked unit" if unit and target == "/dev/null" else "a file kept elsewhere"
        return "%s is a symbolic link to %s (%s): gpuhost does not write through or over it" % (path, target, kind)
    return None


def safe_dir(directory, mode=0o700):
    """*directory*, made if missing, refused when it is a symbolic link or not root's own:
    root never writes into a place another user can redirect."""
    if os.path.islink(directory):
        raise OSError("%s is a symbolic link: gpuhost does not write through it" % directory)
    if not os.path.isdir(directory):
        os.makedirs(directory, mode)
    st = os.lstat(directory)
    if os.geteuid() == 0 and (st.st_uid != 0 or st.st_mode & 0o022):
        raise OSError("%s is not root's own (owner %d, mode %o): gpuhost does not write there"
                      % (directory, st.st_uid, st.st_mode & 0o7777))
    return directory


def backup(path, backup_dir=BACKUP_DIR):
    """Copy *path* (content, mode, times) to *backup_dir* under a timestamped name; return it.
    A second change in the same second keeps the first copy. The copy is a new file
    (O_EXCL|O_NOFOLLOW): a link planted at its name is never written through."""
    safe_dir(backup_dir)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name = os.path.join(backup_dir, "%s.%s" % (os.path.basename(path), stamp))
    target, n = name, 1
    while os.path.lexists(target):
        target, n = "%s.%d" % (name, n), n + 1
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
        shutil.copyfileobj(src, out)
    shutil.copystat(path, target)
    return target


def write_atomic(module, path, content, new_mode=None):
    """Write beside the file under a hidden name no consumer reads (GRUB's grub.d/*.cfg,
    systemd, sysctl.d and pve-container read only their own names), flushed to disk, then
    renamed over it: atomic_move keeps the old file's owner, mode and SELinux context. The
    temporary file never outlives a failure, which matters most in /etc/pve, whose every
    file Proxmox replicates to the cluster. *new_mode*: the mode of a file made new."""
    refusal = link_refusal(path)
    if refusal:
        module.fail_json(msg=refusal, path=path)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory)
    existed = os.path.exists(path)
    tmp = os.path.join(directory, ".%s.gpuhost-tmp" % os.path.basename(path))
    try:
        _write_and_move(module, path, tmp, content, existed)
    except OSError as exc:
        module.fail_json(msg="cannot write %s: %s" % (path, why_not_written(path, exc)), path=path)
    if not existed and new_mode is not None:
        os.chmod(path, new_mode)


def why_not_written(path, exc):
    """The cause of a failed write in the operator's terms, not "One or more items failed"."""
    import errno
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EROFS and path.startswith("/etc/pve/"):
        return reason + " (/etc/pve is read-only while this Proxmox VE node has no quorum: see `pvecm status`)"
    if exc.errno == errno.ENOSPC:
        return reason + " (the file system holding it is full)"
    if exc.errno == errno.EDQUOT:
        return reason + " (a disk quota is exhausted)"
    if exc.errno == errno.EPERM:
        return reason + " (an immutable file or directory? see `lsattr -d`)"
    return reason


def _write_and_move(module, path, tmp, content, existed):
    try:
        if os.path.lexists(tmp):
            os.unlink(tmp)          # a leftover, or a link planted at the name: never written through
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", newline="", encoding="utf-8", errors="surrogateescape") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        if existed:
            st = os.stat(path)
            os.chmod(tmp, st.st_mode & 0o7777)
        module.atomic_move(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
