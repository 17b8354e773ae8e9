# -*- coding: utf-8 -*-
"""Reading a sysfs attribute the way the kernel serves it."""
from __future__ import absolute_import, division, print_function

import os

__metaclass__ = type


def read_attribute(path, limit=None):
    """A sysfs file's bytes with as few read(2) calls as the kernel allows: one for a value.

    kernfs hands a text attribute's whole value (at most a page) to the first read, and a
    binary attribute min(count, PAGE_SIZE, what is left) per read (fs/kernfs/file.c,
    kernfs_fop_read_iter and kernfs_file_read_iter), so a read shorter than 4096 bytes, the
    smallest page, is the end. A buffered open() reads once more to see the end (and a
    probe reads about ten files a CPU). The same rule holds for a regular file.
    """
    fd = os.open(path, os.O_RDONLY)       # not inherited: Python opens every fd close-on-exec (PEP 446)
    try:
        chunks = []
        size = 0
        while limit is None or size < limit:
            chunk = os.read(fd, 65536 if limit is None else min(65536, limit - size))
            chunks.append(chunk)
            size += len(chunk)
            if len(chunk) < 4096:
                break
        return b"".join(chunks)
    finally:
        os.close(fd)
