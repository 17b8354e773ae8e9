# -*- coding: utf-8 -*-
"""Which gpuhost runs of this controller are alive, so a host's lock left by a dead one is
stale at once, not after hours.

A run registers a file in a directory of its user's own (mode 0700) and holds a shared
``flock`` on it for as long as it lives; the ansible-playbook it starts takes one too
(the callback gpuhost.stack.run_guard), and so do that process's forked workers, which
inherit the descriptor. The kernel drops a flock when the last descriptor holding it
closes, whatever killed the process (SIGKILL included), so "nobody holds it" means the run
and every process of it are gone: no pid that could be reused, no clock to trust.

Controller side only (the CLI, the lock action plugin, the callback); standard library.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import os
import socket
import tempfile
import uuid


def controller_id():
    """This controller's registry, as host locks name it: a random ID kept in the registry
    directory itself. Not the machine-id, which cloned VMs and containers built from one
    image share: a run is judged gone only by the registry that holds (or held) its file."""
    path = os.path.join(registry_dir(), "controller")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(uuid.uuid4().hex + "\n")
    except FileExistsError:
        pass
    with open(path) as f:
        return f.read().strip() or socket.gethostname()


def registry_dir():
    """The user's own directory of live runs: made 0700, refused when it is a link or
    another user's (a file there decides whether a host's lock is taken over)."""
    path = os.path.join(tempfile.gettempdir(), "gpuhost-runs-%d" % os.getuid())
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    import stat
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError("%s is not this user's own private directory: gpuhost keeps no run record there" % path)
    return path


def register():
    """Start a run: return (run, descriptor). *run* names it in host locks; keep the
    descriptor open for the run's life (closing it ends the run)."""
    run_id = uuid.uuid4().hex
    path = os.path.join(registry_dir(), run_id)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return {"controller": controller_id(), "uid": os.getuid(), "id": run_id, "file": path}, fd


def hold(run):
    """Join *run* (another process of it): a shared flock on its file. None when the run's
    file is gone (the run ended) or is not a plain file of ours."""
    try:
        fd = os.open(run["file"], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, KeyError, TypeError):
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def end(run, fd):
    """A run that ends normally removes its file."""
    try:
        os.unlink(run["file"])
    except OSError:
        pass
    os.close(fd)


def is_ours(run):
    return isinstance(run, dict) and run.get("controller") == controller_id() and run.get("uid") == os.getuid()


def gone(run):
    """True when *run* was registered in this registry (this controller, this user, since
    its /tmp was last emptied) and no process of it lives; False when it lives or cannot be
    judged from here (another controller, user, or a registry since emptied: then the lock
    is judged by its boot ID and age, as any other)."""
    if not is_ours(run) or not isinstance(run.get("id"), str) or not run["id"].isalnum():
        return False
    path = os.path.join(registry_dir(), run["id"])
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return True             # ended: its file removed (this registry's ID is the one in the lock)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False            # a process of the run still holds it
    finally:
        os.close(fd)
    try:
        os.unlink(path)         # nobody holds it: a killed run's leftover
    except OSError:
        pass
    return True
