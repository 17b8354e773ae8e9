"""One FUSE filesystem per lab: ``/<host>/sys``, ``/<host>/proc/...`` and ``/<host>/ctl``.

Each host's directories are bind-mounted into its namespace. One daemon serves every
host, so a host costs the lab a tree in memory, not a process.
"""
from __future__ import annotations

import errno
import stat

import mfusepy as fuse

from .tree import Attr, Blob, Link, Tree

PCI_UNPRIVILEGED_BYTES = 64
_DIR = dict(st_mode=stat.S_IFDIR | 0o755, st_nlink=2, st_size=0)


class LabFS(fuse.Operations):
    use_ns = True

    def __init__(self) -> None:
        self.trees: dict[str, Tree] = {}

    def _locate(self, path: str) -> tuple[Tree | None, str]:
        host, _, rest = path.lstrip("/").partition("/")
        if not host:
            return None, ""
        tree = self.trees.get(host)
        if tree is None:
            raise fuse.FuseOSError(errno.ENOENT)
        return tree, rest

    def getattr(self, path, fh=None):
        tree, rel = self._locate(path)
        if tree is None or rel in tree.dirs:
            return dict(_DIR)
        node = tree.nodes.get(rel)
        if node is None:
            raise fuse.FuseOSError(errno.ENOENT)
        if isinstance(node, Link):
            return dict(st_mode=stat.S_IFLNK | 0o777, st_nlink=1, st_size=len(node.target))
        if isinstance(node, Blob):
            return dict(st_mode=stat.S_IFREG | 0o644, st_nlink=1, st_size=len(node.data))
        mode = 0o644 if node.put is not None else 0o444
        return dict(st_mode=stat.S_IFREG | mode, st_nlink=1, st_size=node.size)

    def readdir(self, path, fh):
        tree, rel = self._locate(path)
        names = sorted(self.trees) if tree is None else sorted(tree.dirs.get(rel, ()))
        return [".", ".."] + names

    def readlink(self, path):
        tree, rel = self._locate(path)
        node = tree.nodes.get(rel) if tree else None
        if not isinstance(node, Link):
            raise fuse.FuseOSError(errno.EINVAL)
        return node.target

    def _node(self, path):
        tree, rel = self._locate(path)
        node = tree.nodes.get(rel) if tree else None
        if node is None:
            raise fuse.FuseOSError(errno.EISDIR if tree is None or rel in tree.dirs else errno.ENOENT)
        return tree, node

    def open(self, path, flags):
        tree, node = self._node(path)
        writing = flags & (0o1 | 0o2)
        if writing and isinstance(node, Attr) and node.put is None:
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def read(self, path, size, offset, fh):
        _, node = self._node(path)
        try:
            data = bytes(node.data) if isinstance(node, Blob) else node.read()
        except OSError as exc:
            raise fuse.FuseOSError(exc.errno) from None
        if path.endswith("/config") and "/devices/pci" in path and fuse.fuse_get_context()[0] != 0:
            # pci_read_config (drivers/pci/pci-sysfs.c): without CAP_SYS_ADMIN only the
            # first 64 bytes of config space (the header) are readable
            data = data[:PCI_UNPRIVILEGED_BYTES]
        return data[offset: offset + size]

    def write(self, path, data, offset, fh):
        tree, node = self._node(path)
        with tree.lock:
            try:
                if isinstance(node, Blob):
                    return node.write_at(offset, data)
                if node.put is None:
                    raise fuse.FuseOSError(errno.EACCES)
                node.put(bytes(data))
            except OSError as exc:
                raise fuse.FuseOSError(exc.errno) from None
        return len(data)

    def truncate(self, path, length, fh=None):
        # `echo x > file` truncates first; sysfs ignores that, and so do we
        self._node(path)
        return 0

    def create(self, path, mode, fi=None):
        raise fuse.FuseOSError(errno.EACCES)

    def mkdir(self, path, mode):
        raise fuse.FuseOSError(errno.EACCES)

    def unlink(self, path):
        raise fuse.FuseOSError(errno.EACCES)

    def chmod(self, path, mode):
        raise fuse.FuseOSError(errno.EPERM)

    def chown(self, path, uid, gid):
        raise fuse.FuseOSError(errno.EPERM)

    def utimens(self, path, times=None):
        return 0

    def statfs(self, path):
        return dict(f_bsize=4096, f_blocks=0, f_bavail=0, f_bfree=0, f_files=0, f_ffree=0, f_namemax=255)


def serve(fs: LabFS, mountpoint: str) -> None:
    """Run the filesystem in the foreground until unmounted.

    Lookups and attributes are cached for a second (reads never are: direct_io), which
    makes a walk of a host's thousands of sysfs files cheap; a tree that changes shape
    (a reboot, an amd_pstate mode switch) is seen within that second.
    """
    # every user of a lab host reads /sys and /proc as on a real host (a sudo user's audit
    # without become); the kernel checks each file's mode, so only root writes
    fuse.FUSE(fs, mountpoint, foreground=True, nothreads=True, direct_io=True,
              attr_timeout=1.0, entry_timeout=1.0, negative_timeout=0, default_permissions=True,
              allow_other=True, fsname="gpuhost-lab", subtype="gpuhost-lab")
