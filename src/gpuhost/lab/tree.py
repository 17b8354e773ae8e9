"""An in-memory file tree with kernel semantics, served over FUSE.

Files are either constant bytes or attributes with a getter and, if writable, a setter
that validates the way the kernel does (raising ``OSError(EINVAL)`` and friends). Each
simulated host has one tree holding its ``sys/``, the ``proc/`` files the model owns and
``ctl/``, the lab's control files.
"""
from __future__ import annotations

import errno
import threading
from typing import Callable, Union

Getter = Union[bytes, Callable[[], bytes]]
Setter = Callable[[bytes], None]


class Attr:
    __slots__ = ("get", "put", "size")

    def __init__(self, get: Getter, put: Setter | None = None, size: int = 4096):
        self.get = get
        self.put = put
        self.size = size

    def read(self) -> bytes:
        return self.get if isinstance(self.get, bytes) else self.get()


class Blob:
    """A binary attribute written at offsets (PCI config space)."""

    __slots__ = ("data", "write_at")

    def __init__(self, data: bytearray, write_at: Callable[[int, bytes], int]):
        self.data = data
        self.write_at = write_at


class Link:
    __slots__ = ("target",)

    def __init__(self, target: str):
        self.target = target


Node = Union[Attr, Blob, Link]


def text(value: object) -> bytes:
    return f"{value}\n".encode()


def einval() -> OSError:
    return OSError(errno.EINVAL, "Invalid argument")


class Tree:
    """Paths are relative ('sys/kernel/mm/...'); directories exist implicitly."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.dirs: dict[str, set[str]] = {"": set()}
        self.lock = threading.RLock()

    def _mkdirs(self, path: str) -> None:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.dirs:
                self.dirs[d] = set()
                self.dirs["/".join(parts[: i - 1])].add(parts[i - 1])

    def mkdir(self, path: str) -> None:
        with self.lock:
            self._mkdirs(path)

    def add(self, path: str, node: Node) -> None:
        with self.lock:
            parent, _, name = path.rpartition("/")
            if parent:
                self._mkdirs(parent)
            self.dirs[parent].add(name)
            self.nodes[path] = node

    def attr(self, path: str, get: Getter, put: Setter | None = None) -> None:
        self.add(path, Attr(get, put))

    def link(self, path: str, target: str) -> None:
        self.add(path, Link(target))

    def remove_tree(self, prefix: str) -> None:
        with self.lock:
            for p in [p for p in self.nodes if p == prefix or p.startswith(prefix + "/")]:
                del self.nodes[p]
            for d in [d for d in self.dirs if d == prefix or d.startswith(prefix + "/")]:
                del self.dirs[d]
            parent, _, name = prefix.rpartition("/")
            if parent in self.dirs:
                self.dirs[parent].discard(name)

    def snapshot(self) -> dict[str, bytes | str]:
        """Every file's content and every link's target: the 'rendered /sys' of a host."""
        with self.lock:
            out: dict[str, bytes | str] = {}
            for path, node in self.nodes.items():
                if isinstance(node, Link):
                    out[path] = "-> " + node.target
                elif isinstance(node, Blob):
                    out[path] = bytes(node.data)
                else:
                    try:
                        out[path] = node.read()
                    except OSError as exc:  # a file that errors on read, as some sysfs files do
                        out[path] = f"<{errno.errorcode.get(exc.errno, exc.errno)}>"
            return out
