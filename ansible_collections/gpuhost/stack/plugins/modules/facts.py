#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: everything gpuhost's controls need from a host, in one call."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: facts
short_description: Read the system stack under a GPU host in one round trip
description:
  - Reads CPU frequency scaling, idle states, NUMA, sysctls, the live and persisted
    kernel command line, installed and default kernels, IOMMU mode, PCI devices with
    their PCIe registers (from config space), NVIDIA driver and GPUs, Proxmox container
    configs, block devices and gpuhost's own boot units.
  - Takes no action and supports check mode. Parts that cannot be read (for example PCI
    config space without root) are listed in C(gpuhost.errors) with the reason.
options:
  cuda_paths:
    description: Python environments (or site-packages directories) to look for CUDA runtimes in, besides the
      usual places (gpuhost_guest_cuda_paths).
    type: list
    elements: str
    default: []
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the host
  gpuhost.stack.facts:

- name: Show the cpufreq driver
  ansible.builtin.debug:
    var: ansible_facts.gpuhost.cpufreq.driver
"""

RETURN = r"""
ansible_facts:
  description: Facts under the key C(gpuhost).
  returned: always
  type: dict
  contains:
    gpuhost:
      description: One key per section (os, container, cpu, cpufreq, cpuidle, numa, sysctl, boot,
        iommu, pci, lockdown, nvidia, kernel_log, lxc, uvm_boot, vms, block, units, apt, zfs, fabricmanager,
        cuda), plus errors
        and is_root.
      type: dict
      sample:
        cpufreq: {driver: acpi-cpufreq, amd_pstate_status: null, policies: [{id: 0, governor: performance}]}
        boot: {cmdline: "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve quiet", running_kernel: 6.8.12-4-pve}
        errors: {}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.stack.plugins.module_utils.probe import Probe, start_process


def main():
    module = AnsibleModule(argument_spec=dict(cuda_paths=dict(type="list", elements="str", default=[])),
                           supports_check_mode=True)

    def run(argv):
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        return rc, out, err

    facts = Probe("/", run=run, cuda_paths=module.params["cuda_paths"], start=start_process).gather()
    module.exit_json(changed=False, ansible_facts={"gpuhost": facts})


if __name__ == "__main__":
    main()
