#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The documentation of the action plugin gpuhost.stack.check_inventory (plugins/action/check_inventory.py),
where ansible-doc and ansible-test look for it: an action plugin that has no module of its
own keeps its docs in a module file of the same name, which never runs (the action does)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: check_inventory
short_description: Check every host's gpuhost variables before any host is touched
description:
  - Renders and checks every C(gpuhost_*) variable of every host in the inventory (types,
    bounds, control IDs, waivers, misspelt names), on the controller; no host is contacted.
  - Fails with one line naming the first bad host and variable, and how many other hosts
    have bad gpuhost variables, so a fleet is mended in one pass.
  - Meant to run once (C(run_once), C(any_errors_fatal)) as a play's first task; a waiver's
    reason is kept as written, never rendered.
options: {}
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the inventory
  gpuhost.stack.check_inventory: {}
  run_once: true
  any_errors_fatal: true
"""

RETURN = r"""
checked:
  description: how many hosts' variables were checked
  returned: success
  type: int
"""
