# -*- coding: utf-8 -*-
"""Callback gpuhost.stack.run_guard: ties an ansible-playbook to the gpuhost run that started it.

- It joins the run's registry entry (a shared flock, module_utils/runs), so a host lock in
  this run's name stays live while this process (or a worker of it) still works, and is
  stale at once when every process of the run is gone.
- When the gpuhost process that started it is gone (killed, even by SIGKILL, which it
  cannot catch), it touches the run's stop file before the next task: the change in flight
  has finished, no new change starts, the locks are given back, and the play ends, instead
  of an orphan changing hosts with nobody to report to.

Both come from the environment the CLI sets (GPUHOST_RUN_FILE, GPUHOST_STOP_FILE); a play
run without them is left alone.
"""
from __future__ import annotations

DOCUMENTATION = r"""
---
name: run_guard
type: aggregate
short_description: Stop a gpuhost play whose gpuhost process is gone; keep its host locks live while it runs
description:
  - Reads GPUHOST_RUN_FILE and GPUHOST_STOP_FILE from the environment; does nothing without them.
requirements: []
author: gpuhost maintainers (!UNKNOWN)
"""

import os
from pathlib import Path

from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

from ansible_collections.gpuhost.stack.plugins.module_utils import runs
# Imported here, in ansible-playbook's own process, so that the worker forked for every task
# and host inherits it: ansible's collection loader compiles a collection's Python from
# source at each import (it keeps no .pyc), and the filters and the audit action import the
# controls' registry, which a worker would otherwise compile again for each task.
from ansible_collections.gpuhost.stack.plugins.module_utils import controls

PRELOADED = (controls,)

display = Display()


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuhost.stack.run_guard"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._parent = os.getppid()
        self._stop = os.environ.get("GPUHOST_STOP_FILE") or ""
        self._fd = runs.hold({"file": os.environ["GPUHOST_RUN_FILE"]}) if os.environ.get("GPUHOST_RUN_FILE") else None
        self._said = False

    def _parent_gone(self) -> bool:
        return os.getppid() != self._parent

    def v2_playbook_on_task_start(self, task, is_conditional):
        if self._stop and not self._said and self._parent_gone():
            try:
                Path(self._stop).touch()
            except OSError:
                pass
            self._said = True
            display.warning("the gpuhost run that started this play is gone: no new change starts")

    v2_playbook_on_handler_task_start = v2_playbook_on_task_start
