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
  - C(state=acquired) creates I(path) exclusively (C(O_CREAT|O_EXCL)) and returns a
    I(token) that C(state=released) must present, so a run only ever gives back its own
    lock. It never waits: a lock another run holds comes back as C(busy), with its record.
    Waiting is the action plugin of the same name's, on the controller (I(wait)), so a run
    that dies leaves nothing waiting on the host.
  - "The lock lives under C(/run), a tmpfs: a reboot clears it. A lock recorded under
    another boot ID, or older than I(max_age) seconds (its run died without giving it
    back), is stale and taken over."
  - "The caller can take over a lock whose run it knows is gone (I(take_over))."
  - Taking or giving back the lock changes nothing gpuhost reports (C(changed) is false).
options:
  state: {description: acquired or released, type: str, choices: [acquired, released], required: true}
  path: {description: The lock file, type: path, default: /run/gpuhost/fix.lock}
  holder: {description: Who takes it, as other runs will be told, type: str, default: gpuhost}
  wait: {description: "Seconds to wait for another run's lock, on the controller (the action plugin); 0: return busy at once", type: int, default: 1800}
  try_only: {description: "Try once and return C(busy) with the holder, never failing (the action plugin)", type: bool, default: false}
  stop_file: {description: "The action plugin stops waiting, having changed nothing, once this file exists (the run was told to stop)", type: path}
  max_age: {description: Seconds after which a lock whose run never gave it back is stale, type: int, default: 14400}
  token: {description: The token acquired returned (state=released), type: str}
  run: {description: "The run taking the lock (controller, uid, id), recorded so that its controller can tell when it is gone", type: dict}
  take_over: {description: "The id of a run its controller found gone: its lock is stale and replaced", type: str}
author: gpuhost
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
held: {description: the lock's record (holder, since, run), returned: when busy, type: dict}
"""

import json
import os
import time
import uuid

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.stack.plugins.module_utils.write import safe_dir

def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def read_lock(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}           # half-written or foreign: judged by its age alone


def stale(lock, path, max_age):
    if lock.get("boot_id") and lock["boot_id"] != boot_id():
        return True
    try:
        age = time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return False
    return age > max_age


def try_create(path, record):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)


def acquire(module):
    p = module.params
    path = p["path"]
    try:
        # root never creates its lock in a directory another user can redirect (a link at /run/gpuhost)
        safe_dir(os.path.dirname(path))
    except OSError as exc:
        module.fail_json(msg=str(exc))
    token = uuid.uuid4().hex
    record = {"token": token, "holder": p["holder"], "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "boot_id": boot_id()}
    if p["run"]:
        record["run"] = p["run"]
    took_over = None
    while True:
        try:
            try_create(path, record)
            return dict(changed=False, token=token, busy=False, **({"took_over": took_over} if took_over else {}))
        except FileExistsError:
            pass
        held = read_lock(path)
        if held is None:
            continue                    # given back between the two calls: try again now
        if stale(held, path, p["max_age"]) or (p["take_over"] and (held.get("run") or {}).get("id") == p["take_over"]):
            took_over = {k: held.get(k) for k in ("holder", "since")}
            try:
                os.unlink(path)         # two runs that both see it stale: O_EXCL lets one win
            except FileNotFoundError:
                pass
            continue
        return dict(changed=False, busy=True, held={k: held.get(k) for k in ("holder", "since", "run")})


def release(module):
    path, token = module.params["path"], module.params["token"]
    held = read_lock(path)
    if held and held.get("token") == token:
        os.unlink(path)
    # anything else is not ours: a reboot cleared /run, or a stale-lock takeover replaced it
    return dict(changed=False)


def main():
    module = AnsibleModule(
        argument_spec=dict(state=dict(type="str", required=True, choices=["acquired", "released"]),
                           path=dict(type="path", default="/run/gpuhost/fix.lock"),
                           holder=dict(type="str", default="gpuhost"),
                           max_age=dict(type="int", default=14400),
                           token=dict(type="str", no_log=False),
                           run=dict(type="dict"),
                           take_over=dict(type="str")),
        required_if=[("state", "released", ("token",))],
        supports_check_mode=True)
    if module.check_mode:
        module.exit_json(changed=False, token="", busy=False)     # an audit holds no lock
    result = acquire(module) if module.params["state"] == "acquired" else release(module)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
