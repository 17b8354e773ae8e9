#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The documentation of the action plugin gpuhost.stack.audit (plugins/action/audit.py),
where ansible-doc and ansible-test look for it: an action plugin that has no module of its
own keeps its docs in a module file of the same name, which never runs (the action does)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: audit
short_description: Read a GPU host and judge every gpuhost control, in one task
description:
  - Runs M(gpuhost.stack.facts) on the host and judges its facts on the controller.
  - Returns the findings as the fact C(gpuhost_findings), a summary of the host (kernel, CPU,
    GPUs, OS) as C(gpuhost_summary), and C(gpuhost_reboot_required), whether a finding waits
    for a reboot. With I(facts), also everything the facts module read, as C(gpuhost).
  - With I(report), also hands the host's report to the play's stats (what C(set_stats)
    does), so the audit needs no second task per host.
  - Read-only; supports check mode (which is how gpuhost audits).
  - Without I(settings), the settings come from the host's own C(gpuhost_*) variables
    (the role gpuhost.stack.common's, see its argument_specs), each checked exactly first;
    bad input fails the host with one line naming the variable, and nothing is read.
options:
  settings:
    description:
      - The judgement's settings (kernel_min_version, cstate_max_latency_us, waivers, controls...).
      - Given, they are used as they are and the host's C(gpuhost_*) variables are not read.
    type: dict
  report:
    description:
      - Put the host's report into the play's stats under C(gpuhost).
      - Not given, it follows the host's C(gpuhost_apply) (true, the role's default, means
        fixes follow, so no report); a play that only audits sets C(gpuhost_apply=false).
    type: bool
  facts:
    description: Also return everything the facts module read, as the fact C(gpuhost).
    type: bool
    default: false
  prove:
    description:
      - After the audit, measure the host's paths with M(gpuhost.stack.measure) (its options
        gpus, repeats, bytes, time_limit, force, busy_percent) and hold each against its
        physical limit (I(threshold), 0.85, for the PCIe paths; I(memory_threshold), 0.70, for a
        copy inside a GPU's memory), returned as the fact C(gpuhost_proof) (docs/report.schema.json,
        a host's C(proof)). Without it, the host variable C(gpuhost_prove) (what C(gpuhost
        prove) sets) says the same; an audit alone never measures.
    type: dict
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read and judge the host
  gpuhost.stack.audit:
    settings: {kernel_min_version: "6.14", controls: [pcie.mrrs]}
  register: audit
"""

RETURN = r"""
ansible_facts:
  description:
    - gpuhost_findings (control ID -> status, observed, expected, message, fix), gpuhost_summary,
      gpuhost_reboot_required, gpuhost_reboot_record.
    - With the host variable C(gpuhost_fix_plans=false) (what C(gpuhost audit) sets), the
      findings come without C(fix), the plan a fix would follow.
  returned: success, unless C(gpuhost_report_json)
  type: dict
gpuhost_report:
  description:
    - With the host variable C(gpuhost_report_json=true) (what gpuhost's CLI sets for its runs
      of playbooks/audit.yml), instead of the facts, one JSON string of C(findings),
      C(summary) and C(reboot_required), for a caller that reads the task's result itself.
  returned: success, with gpuhost_report_json
  type: str
"""
