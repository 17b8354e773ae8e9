#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: measure what a GPU host delivers on each path inference uses."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: measure
short_description: Measure a GPU host's data paths through the NVIDIA driver's own library
description:
  - Times, through C(libcuda.so.1) (ctypes; no CUDA toolkit needed), pinned host-to-GPU and
    GPU-to-host copies from a CPU on each GPU's NUMA node and from one on the farthest other
    node, an empty kernel's launch and launch plus synchronize, a copy inside each GPU's
    memory, every GPU pair (peer access where the driver allows it, else through the host),
    and every GPU at once from host memory. Each path is warmed up, then timed I(repeats) times.
  - Changes no setting and supports check mode. A GPU with a compute process on it or busier
    than I(busy_percent) is refused unless I(force). The whole run stops at I(time_limit)
    seconds, what is left reported as not measured; pinned host memory is at most two copy
    buffers a GPU; every buffer is given back on every way out, SIGINT and SIGTERM included;
    when the controller goes away (its SSH session closes), the measurement stops there.
  - The judgement against each path's physical limit is the action M(gpuhost.stack.audit)'s,
    with its I(prove) option (C(gpuhost prove)).
options:
  gpus:
    description: GPUs to measure, by index or PCI bus id; all when empty.
    type: list
    elements: str
    default: []
  repeats: {description: Timed repeats a path (at least 5)., type: int, default: 5}
  bytes: {description: Bytes a copy (1 MiB to 512 MiB)., type: int, default: 268435456}
  time_limit: {description: Seconds the whole measurement may take., type: float, default: 60}
  force: {description: Measure GPUs that are in use too (named in the result)., type: bool, default: false}
  busy_percent: {description: Utilisation above which a GPU counts as in use., type: int, default: 5}
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Measure every GPU path of the host
  gpuhost.stack.measure:
    repeats: 5
  register: paths
"""

RETURN = r"""
measurement:
  description: method (measured, or modelled where the library is the lab's), gpus (index,
    bus_id, name, numa_node, refused or forced or error), paths (path, gpu, unit, samples or
    error, and per path cpu_node and numa, peer and via, bytes), cpus (node -> CPUs this
    process may use), pinned_peak_bytes, elapsed_s, out_of_time; na with the reason where
    the host has no NVIDIA driver library or no GPU it can use.
  returned: always
  type: dict
"""

import os
import signal

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.stack.plugins.module_utils import cudadrv, measure as m


def main():
    module = AnsibleModule(argument_spec=dict(
        gpus=dict(type="list", elements="str", default=[]),
        repeats=dict(type="int", default=m.MIN_REPEATS),
        bytes=dict(type="int", default=m.DEFAULT_BYTES),
        time_limit=dict(type="float", default=60.0),
        force=dict(type="bool", default=False),
        busy_percent=dict(type="int", default=5),
    ), supports_check_mode=True)
    p = module.params
    if p["repeats"] < m.MIN_REPEATS:
        module.fail_json(msg="repeats: at least %d, not %d" % (m.MIN_REPEATS, p["repeats"]))
    if not m.MIB <= p["bytes"] <= m.MAX_BYTES:
        module.fail_json(msg="bytes: from %d to %d, not %d" % (m.MIB, m.MAX_BYTES, p["bytes"]))
    if not 0 < p["time_limit"] <= 3600:
        module.fail_json(msg="time_limit: above 0 and at most 3600 seconds, not %g" % p["time_limit"])
    # before the library loads: the driver numbers GPUs in PCI order as nvidia-smi does (not
    # fastest first) and sees all of them whatever the login's CUDA_VISIBLE_DEVICES says, and
    # it keeps no compiled kernel in the user's ~/.nv/ComputeCache (measuring writes nothing)
    os.environ.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_CACHE_DISABLE="1")
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        drv = cudadrv.Driver()
    except cudadrv.NoDriver as exc:
        module.exit_json(changed=False, measurement={"na": "no NVIDIA driver library: %s" % exc, "paths": [], "gpus": []})

    stopping = []

    def stop(signum, frame):
        if stopping:            # a second signal while the first one's clean-up runs: let it finish
            return
        stopping.append(signum)
        raise m.Interrupted(signal.Signals(signum).name)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)

    def run(argv):
        try:
            return module.run_command(argv, environ_update={"LC_ALL": "C"}, handle_exceptions=False)
        except OSError as exc:          # no nvidia-smi: the measurement says it cannot tell, and goes on
            return 127, "", str(exc)
    try:
        out = m.measure(drv, wanted=[w.lower() for w in p["gpus"]], repeats=p["repeats"], nbytes=p["bytes"],
                        time_limit=p["time_limit"], force=p["force"], busy_percent=p["busy_percent"], run=run,
                        alive=m.stdout_open)
    except cudadrv.CudaError as exc:
        module.exit_json(changed=False, measurement={"error": str(exc), "paths": [], "gpus": []})
    except m.Interrupted as exc:        # one that arrived outside the measurement's own loop
        module.fail_json(msg="measurement interrupted by %s" % exc)
    if out.get("interrupted"):
        module.fail_json(msg="measurement interrupted by %s; pinned memory still held: %d bytes" % (
            out["interrupted"], out["pinned_left_bytes"]), measurement=out)
    module.exit_json(changed=False, measurement=out)


if __name__ == "__main__":
    main()
