# -*- coding: utf-8 -*-
"""Action plugin gpuhost.stack.lock: wait for a host's lock on the controller, not on the host.

The module only ever tries once; the waiting is this loop, so:
- a run that is killed stops waiting with it: no module left on the host to take the lock
  later in a dead run's name;
- a run that is told to stop (its stop file: SIGINT/SIGTERM, or its gpuhost process gone)
  stops waiting within a poll, having changed nothing;
- a lock held by a run of this controller whose every process is gone (module_utils/runs:
  nobody holds its flock) is taken over at once, not after ``max_age``.
"""
from __future__ import annotations

import os
import time

from ansible.plugins.action import ActionBase

from ansible_collections.gpuhost.stack.plugins.module_utils import runs

POLL_S = 1.0
MODULE = "gpuhost.stack.lock"


def busy_line(held: dict, path: str, wait: int) -> str:
    """One line for a lock still held after the wait: whose, since when, and what the operator
    can do; a file that is no gpuhost lock, and a record dated ahead of the clock, said so."""
    if held.get("foreign"):
        when = "and never becomes stale" if held["foreign"] == "not a plain file" else \
            "and is not yet old enough to be stale"
        return ("%s is not a gpuhost lock (%s) %s (waited %d s): remove it if no gpuhost run is changing this host"
                % (path, held["foreign"], when, wait))
    run = held.get("run") or {}
    line = "another gpuhost run changes this host: %s holds %s since %s (waited %d s)" % (
        held.get("holder") or "?", path, held.get("since") or "?", wait)
    if held.get("note"):
        line += "; " + held["note"]
    if run and not runs.is_ours(run):
        line += ("; its run is of another controller or user, so gpuhost cannot tell whether it lives: if it does "
                 "not, remove %s on the host" % path)
    return line


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("state", "path", "holder", "wait", "max_age", "token", "run", "take_over", "stop_file",
                             "try_only"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        stop_file = args.pop("stop_file", None) or ""
        try_only = bool(args.pop("try_only", False))        # busy is an answer, not a failure
        wait = int(args.pop("wait", 1800) or 0)
        if args.get("state") != "acquired" or self._task.check_mode:
            return {**result, **self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)}
        if isinstance(args.get("run"), dict):
            # the run names ansible-playbook's own process too (this worker's parent): while it
            # lives, its lock is never taken over, whatever became of the run's registry file
            run = dict(args["run"])
            run["procs"] = list(run.get("procs") or []) + [runs.process(os.getppid())]
            args["run"] = run
        start, took_over, take_over = time.monotonic(), None, None
        while True:
            tried = dict(args, **({"take_over": take_over} if take_over else {}))
            res = self._execute_module(module_name=MODULE, module_args=tried, task_vars=task_vars)
            if res.get("failed") or not res.get("busy"):
                res["waited"] = round(time.monotonic() - start, 1)
                if took_over:
                    res["took_over"] = took_over
                return {**result, **res}
            held = res.get("held") or {}
            if runs.gone(held.get("run")) and take_over != held["run"]["id"]:
                # its run and every process of it are gone from this controller: stale now
                # (asked once per run: a lock the module would not hand over is waited for, never spun on)
                take_over = held["run"]["id"]
                took_over = {"holder": held.get("holder"), "since": held.get("since"), "why": "its run is gone"}
                continue
            if try_only:
                return {**result, **res}        # tried once: the caller decides (lock.yml gives back the rest)
            if stop_file and os.path.exists(stop_file):
                return {**result, "failed": True, "stopped": True,
                        "msg": "stopped while waiting for the host's lock (%s holds it): nothing was changed"
                               % (held.get("holder") or "?")}
            if time.monotonic() - start >= wait:
                return {**result, "failed": True, "msg": busy_line(held, args.get("path") or "/run/gpuhost/fix.lock", wait)}
            time.sleep(POLL_S)
