# -*- coding: utf-8 -*-
"""How gpuhost's modules change a file on a host: a copy of the old one in the backup
directory (never beside the file), then an atomic replace under a hidden temporary name."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import time

BACKUP_DIR = "/var/backups/gpuhost"


def backup(path, backup_dir=BACKUP_DIR):
    """Copy *path* (content, mode, times) to *backup_dir* under a timestamped name; return it.
    A second change in the same second keeps the first copy."""
    if not os.path.isdir(backup_dir):
        os.makedirs(backup_dir, 0o700)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name = os.path.join(backup_dir, "%s.%s" % (os.path.basename(path), stamp))
    target, n = name, 1
    while os.path.exists(target):
        target, n = "%s.%d" % (name, n), n + 1
    shutil.copy2(path, target)
    return target


def write_atomic(module, path, content, new_mode=None):
    """Write beside the file under a hidden name no consumer reads (GRUB's grub.d/*.cfg,
    systemd, sysctl.d and pve-container read only their own names), flushed to disk, then
    renamed over it: atomic_move keeps the old file's owner, mode and SELinux context. The
    temporary file never outlives a failure, which matters most in /etc/pve, whose every
    file Proxmox replicates to the cluster. *new_mode*: the mode of a file made new."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory)
    existed = os.path.exists(path)
    tmp = os.path.join(directory, ".%s.gpuhost-tmp" % os.path.basename(path))
    try:
        with open(tmp, "w") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        module.atomic_move(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    if not existed and new_mode is not None:
        os.chmod(path, new_mode)
