# -*- coding: utf-8 -*-
"""Which gpuhost runs of this controller are alive, so a host's lock left by a dead one is
stale at once, not after hours.

A run registers a file in a directory of its user's own (mode 0700) and holds a shared
``flock`` on it for as long as it lives; the ansible-playbook it starts takes one too
(the callback gpuhost.stack.run_guard), and so do that process's forked workers, which
inherit the descriptor. The kernel drops a flock when the last descriptor holding it
closes, whatever killed the process (SIGKILL included), so "nobody holds it" means the run
and every process of it are gone: no pid that could be reused, no clock to trust.

The registry is one place for every run of this user on this controller, whatever its
$TMPDIR (cron, PrivateTmp, pam_tmpdir and CI each give another): /run/gpuhost-runs for root,
$XDG_RUNTIME_DIR/gpuhost-runs (systemd's /run/user/UID) or else ~/.cache/gpuhost/runs for
others. A run also names its processes by PID and start time (/proc/PID/stat, field 22): a
file removed from the registry is no proof that the run is gone, so a run is gone only when
nobody holds its file's flock and none of its processes lives.

Controller side only (the CLI, the lock action plugin, the callback); standard library.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import os
import socket
import stat
import uuid

from ansible_collections.gpuhost.stack.plugins.module_utils.bootid import boot_id


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


def _home_dir():
    if os.getuid() == 0:
        return "/run/gpuhost-runs"
    runtime = os.environ.get("XDG_RUNTIME_DIR") or ""
    try:
        st = os.stat(runtime) if runtime.startswith("/") else None
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
        return os.path.join(runtime, "gpuhost-runs")
    return os.path.join(os.path.expanduser("~"), ".cache", "gpuhost", "runs")


def registry_dir():
    """The user's own directory of live runs, the same for every run of this user whatever
    its $TMPDIR: made 0700, refused when it is a link or another user's (a file there decides
    whether a host's lock is taken over)."""
    path = _home_dir()
    try:
        os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError("%s is not this user's own private directory: gpuhost keeps no run record there" % path)
    return path


def start_time(pid):
    """A process's start time in clock ticks since boot (/proc/PID/stat, field 22: proc(5)),
    as a string; None when there is no such process. A PID and its start time together name
    one process for the whole boot."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except (OSError, ValueError):
        return None
    # the command name (field 2) may hold spaces and parentheses: count from its last ')'
    fields = text[text.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def process(pid):
    """[pid, start time] of a live process, as a run names its processes."""
    return [pid, start_time(pid)]


def lives(proc):
    """Whether the process a run named ([pid, start time]) still lives: the same PID with the
    same start time (a PID used again by a later process starts later)."""
    try:
        pid, started = int(proc[0]), proc[1]
    except (TypeError, ValueError, IndexError, KeyError):
        return False
    return started is not None and pid > 0 and start_time(pid) == started


def register():
    """Start a run: return (run, descriptor). *run* names it in host locks; keep the
    descriptor open for the run's life (closing it ends the run)."""
    run_id = uuid.uuid4().hex
    path = os.path.join(registry_dir(), run_id)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return {"controller": controller_id(), "boot": boot_id(), "uid": os.getuid(), "id": run_id, "file": path,
            "procs": [process(os.getpid())]}, fd


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
    """A run of this registry in this boot of the controller: only then do its file and its
    processes say whether it lives."""
    return (isinstance(run, dict) and run.get("controller") == controller_id() and run.get("uid") == os.getuid()
            and run.get("boot", boot_id()) == boot_id())


def gone(run):
    """True when *run* was registered in this registry (this controller, user and boot) and
    the kernel says no process of it lives: nobody holds its file's flock (or the file is
    gone) and none of the processes it named lives. False when it lives or cannot be judged
    from here (another controller or user: then the lock is judged by its boot ID and age, as
    any other)."""
    if not is_ours(run) or not isinstance(run.get("id"), str) or not run["id"].isalnum():
        return False
    if any(lives(proc) for proc in run.get("procs") or []):
        return False            # a process of the run lives, whatever became of its file
    path = os.path.join(registry_dir(), run["id"])
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        # removed (it ended, or someone cleared the registry): its processes are gone too
        return bool(run.get("procs"))
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


OWNER = ".gpuhost-owner"        # in a run's scratch directory: [pid, start time] of the process it is for


def scratch_dir(prefix):
    """A private scratch directory in $TMPDIR (mkdtemp: 0700) that names its owner, so a later
    run can remove it once that process is gone (a SIGKILL leaves it behind)."""
    import json
    import tempfile
    path = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(path, OWNER), "w") as f:
        json.dump(process(os.getpid()), f)
    return path


def sweep(prefixes=("gpuhost-run-", "gpuhost-stop-"), older_than_s=86400):
    """Remove this user's scratch directories in $TMPDIR whose owner is gone (the kernel says
    so: no live process with its PID and start time), and, of those that name no owner (an
    older gpuhost's), the ones untouched for a day. Never a link, never another user's."""
    import json
    import shutil
    import tempfile
    import time
    if start_time(os.getpid()) is None:
        return              # no /proc to ask: nobody is judged gone
    base = tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        if not name.startswith(tuple(prefixes)):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        try:
            with open(os.path.join(path, OWNER)) as f:
                owner = json.load(f)
            dead = not lives(owner)
        except (OSError, ValueError):
            dead = time.time() - st.st_mtime > older_than_s
        if dead:
            shutil.rmtree(path, ignore_errors=True)
