#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: the host's gpuhost lock, so that one run at a time changes a host."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: lock
short_description: Take or give back the lock that lets one gpuhost run at a time change a host
description:
  - "C(state=acquired) writes I(path) (a hidden file renamed into place) while it holds an
    exclusive flock on the directory of I(path), so reading, judging and replacing a lock is one
    step, and of runs that take over the same stale lock at once, one wins. It returns a
    I(token) that C(state=released) must present, so a run only ever gives back its own
    lock. It never waits, and a lock another run holds comes back as C(busy), with its record.
    Waiting is the action plugin of the same name's, on the controller (I(wait)), so a run
    that dies leaves nothing waiting on the host."
  - "The lock lives under C(/run), a tmpfs: a reboot clears it. A lock recorded under
    another boot ID, or older than I(max_age) seconds (its run died without giving it
    back), is stale and taken over."
  - "The caller can take over a lock whose run it knows is gone (I(take_over))."
  - Taking or giving back the lock changes nothing gpuhost reports (C(changed) is false).
options:
  state: {description: acquired or released, type: str, choices: [acquired, released], required: true}
  path: {description: The lock file, type: path, default: /run/gpuhost/fix.lock}
  holder: {description: "Who takes it, as other runs will be told", type: str, default: gpuhost}
  wait: {description: "Seconds to wait for another run's lock, on the controller (the action plugin); 0: return busy at once", type: int, default: 1800}
  try_only: {description: "Try once and return C(busy) with the holder, never failing (the action plugin)", type: bool, default: false}
  stop_file: {description: "The action plugin stops waiting, having changed nothing, once this file exists (the run was told to stop)", type: path}
  max_age: {description: Seconds after which a lock whose run never gave it back is stale, type: int, default: 14400}
  token: {description: The token acquired returned (state=released), type: str}
  run: {description: "The run taking the lock (controller, uid, id), recorded so that its controller can tell when it is gone", type: dict}
  take_over: {description: "The id of a run its controller found gone: its lock is stale and replaced", type: str}
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: gpuhost | take the host's lock
  gpuhost.stack.lock: {state: acquired, holder: "gpuhost fix on ctl01"}
  register: lock
- name: gpuhost | give the lock back
  gpuhost.stack.lock: {state: released, token: "{{ lock.token }}"}
"""

RETURN = r"""
token: {description: the lock's token, returned: when acquired, type: str}
waited: {description: seconds spent waiting for another run (the action plugin), returned: when acquired, type: float}
took_over: {description: the stale lock that was replaced, returned: when one was, type: dict}
busy: {description: another run holds the lock, returned: always when acquiring, type: bool}
held:
  description: "the lock's record (holder, since, run; foreign: why the file is no gpuhost lock; note: a record dated
    ahead of the host's clock)"
  returned: when busy
  type: dict
"""

import fcntl
import json
import os
import stat
import time
import uuid

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.stack.plugins.module_utils.write import safe_dir
from ansible_collections.gpuhost.stack.plugins.module_utils.bootid import boot_id

RECORD_MAX = 65536      # a gpuhost lock record is a few hundred bytes: a bigger file is not one


def read_lock(path):
    """The lock's record; None when there is no lock. A file that is not a gpuhost lock (not its
    JSON mapping, too big, a link, not root's or writable by others) comes back as
    {"foreign": why}: judged by its age alone, and named as such."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return {"foreign": "not a plain file"}
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        return {"foreign": "owned by uid %d, mode %04o" % (st.st_uid, st.st_mode & 0o7777)}
    if st.st_size > RECORD_MAX:
        return {"foreign": "%d bytes, not a lock record" % st.st_size}
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"foreign": "not a gpuhost lock record (%s)" % (exc.strerror if isinstance(exc, OSError) else "not JSON")}
    if not isinstance(data, dict) or not isinstance(data.get("token"), str):
        return {"foreign": "not a gpuhost lock record (no token)"}
    return data


def age(path):
    try:
        return time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return None


def stale(lock, path, max_age):
    if lock.get("boot_id") and lock["boot_id"] != boot_id():
        return True
    seconds = age(path)
    return seconds is not None and seconds > max_age


def shown(lock, path):
    """What a busy answer tells of the lock: its holder, since when, its run, and what is
    strange about it, each a plain value."""
    out = {"holder": lock.get("holder") if isinstance(lock.get("holder"), str) else None,
           "since": lock.get("since") if isinstance(lock.get("since"), str) else None,
           "run": lock.get("run") if isinstance(lock.get("run"), dict) else None}
    if out["holder"] and len(out["holder"]) > 200:
        out["holder"] = out["holder"][:200] + "..."
    if lock.get("foreign"):
        out["foreign"] = lock["foreign"]
    seconds = age(path)
    if seconds is not None and seconds < -60:
        out["note"] = "its record is dated %d s ahead of this host's clock (it becomes stale only that much later)" % -seconds
    return out


def write_new(path, record):
    """The record, whole, under *path*: written to a hidden file beside it and renamed over
    whatever is there (the caller holds the directory's flock)."""
    tmp = os.path.join(os.path.dirname(path), ".%s.%s" % (os.path.basename(path), uuid.uuid4().hex))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class DirLock:
    """An exclusive flock on the lock's directory while a run reads, judges and replaces the
    lock: two runs that both find it stale take it over one after the other, and the second
    finds the first's fresh lock (one holder, whatever the timing). The kernel drops the flock
    when the module exits, however it exits."""

    def __init__(self, directory):
        self.directory = directory

    def __enter__(self):
        self.fd = os.open(self.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def take(path, record, max_age, take_over=None):
    """Take the lock for *record* (its token in it), or say who holds it. Must be called with
    the directory made safe (safe_dir)."""
    with DirLock(os.path.dirname(path)):
        held = read_lock(path)
        took_over = None
        if held is not None:
            by_run = take_over and isinstance(held.get("run"), dict) and held["run"].get("id") == take_over
            if not (stale(held, path, max_age) or by_run):
                return dict(changed=False, busy=True, held=shown(held, path))
            took_over = dict((k, held.get(k)) for k in ("holder", "since"))
        write_new(path, record)
        return dict(changed=False, token=record["token"], busy=False, **({"took_over": took_over} if took_over else {}))


def acquire(module):
    p = module.params
    path = p["path"]
    try:
        # root never creates its lock in a directory another user can redirect (a link at /run/gpuhost)
        safe_dir(os.path.dirname(path))
    except OSError as exc:
        module.fail_json(msg=str(exc))
    record = {"token": uuid.uuid4().hex, "holder": p["holder"],
              "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "boot_id": boot_id()}
    if p["run"]:
        record["run"] = p["run"]
    try:
        return take(path, record, p["max_age"], p["take_over"])
    except OSError as exc:
        module.fail_json(msg="cannot take the lock %s: %s" % (path, exc.strerror or exc))


def give_back(path, token):
    """Remove the lock if it is *token*'s; anything else is not ours (a reboot cleared /run, or
    a stale-lock takeover replaced it) and is left alone."""
    with DirLock(os.path.dirname(path)):
        held = read_lock(path)
        if held and not held.get("foreign") and held.get("token") == token:
            os.unlink(path)


def release(module):
    path, token = module.params["path"], module.params["token"]
    if not os.path.lexists(os.path.dirname(path)):
        return dict(changed=False)          # a reboot emptied /run: nothing of ours is there
    try:
        safe_dir(os.path.dirname(path))
        give_back(path, token)
    except OSError as exc:
        module.fail_json(msg="cannot give back the lock %s: %s" % (path, exc.strerror or exc))
    return dict(changed=False)


def main():
    module = AnsibleModule(
        argument_spec=dict(state=dict(type="str", required=True, choices=["acquired", "released"]),
                           path=dict(type="path", default="/run/gpuhost/fix.lock"),
                           holder=dict(type="str", default="gpuhost"),
                           max_age=dict(type="int", default=14400),
                           token=dict(type="str", no_log=False),
                           run=dict(type="dict"),
                           take_over=dict(type="str"),
                           # the action plugin's (it waits on the controller); documented here
                           # with the module, and never acted on on the host
                           wait=dict(type="int", default=1800),
                           try_only=dict(type="bool", default=False),
                           stop_file=dict(type="path")),
        required_if=[("state", "released", ("token",))],
        supports_check_mode=True)
    if module.check_mode:
        module.exit_json(changed=False, token="", busy=False)     # an audit holds no lock
    result = acquire(module) if module.params["state"] == "acquired" else release(module)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
