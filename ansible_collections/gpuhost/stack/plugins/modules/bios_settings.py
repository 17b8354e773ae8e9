#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The documentation of the action plugin gpuhost.stack.bios_settings
(plugins/action/bios_settings.py), where ansible-doc and ansible-test look for it; this
file never runs (the action does, on the controller)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: bios_settings
short_description: Write a host's BIOS settings for the next reset through its BMC, in one request
description:
  - Runs on the controller and reaches the host's BMC over Redfish (HTTPS, HTTP Basic) with the
    host's C(gpuhost_bmc_*) variables; the host itself is not contacted.
  - Reads the Bios resource again first. A value already current, or already pending, is not
    written again. Every other value is checked before anything is sent. The firmware must
    still have the attribute, and its attribute registry must list it as writable and offer the
    value. Otherwise nothing is written and the task fails with one line naming the BMC.
  - Writes the rest in one PATCH to the Bios resource's settings object (DMTF DSP0266), with
    the apply time C(OnReset) where the BMC lists it, and If-Match where it gives an ETag. On a
    Dell iDRAC that lists no apply time, it also asks for the BIOS configuration job. It then
    reads the settings object back. A value that is not pending fails the task, naming what is
    pending now.
  - The values apply at the host's next reset. gpuhost's reboot contract carries them with
    the OS's own pending changes, in one reboot.
  - Supports check mode, which sends GET requests only and says what would be written.
options:
  staged:
    description:
      - What the bios controls' fixes staged, by control ID, each the C(bios) part of its
        finding's fix (C(attributes), the firmware's attribute names and values; C(bmc)).
    type: dict
    required: true
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Write the staged BIOS settings in one request
  gpuhost.stack.bios_settings:
    staged:
      bios.cppc: {attributes: {Processors_CPPC: Enabled}, bmc: 192.0.2.10}
"""

RETURN = r"""
written:
  description: The attributes written (or, in check mode, that would be), with their values.
  returned: success
  type: dict
controls:
  description: The control IDs whose values were written.
  returned: success
  type: list
  elements: str
skipped:
  description: The staged attributes already set or already pending, each with the reason.
  returned: success
  type: list
  elements: str
apply_time:
  description: The apply time asked for (C(OnReset)), or null where the BMC lists none.
  returned: success
  type: str
job:
  description: The Dell configuration job created for the pending values, where one was needed.
  returned: success
  type: str
settings_object:
  description: The settings object written to.
  returned: success
  type: str
bmc:
  description: The BMC's address.
  returned: always
  type: str
"""
