# -*- coding: utf-8 -*-
"""The CPUs: vendor and firmware features, cpufreq policies, idle states, NUMA nodes.
"""
from __future__ import absolute_import, division, print_function

import os
import re

from ansible_collections.gpuhost.stack.plugins.module_utils.cpulist import parse_cpulist

__metaclass__ = type


class CpuProbe:
    """Probe sections: probe_cpu, probe_cpufreq, probe_cpuidle, probe_numa (a part of probe.Probe)."""

    def probe_cpu(self):
        text = self.read("/proc/cpuinfo")
        if text is None:
            raise IOError("/proc/cpuinfo unreadable")
        first = {}
        count = 0
        for block in text.split("\n\n"):
            if not block.strip():
                continue
            count += 1
            if not first:
                for line in block.splitlines():
                    k, dummy, v = line.partition(":")
                    first[k.strip()] = v.strip()
        flags = first.get("flags", "").split()
        return {"vendor": first.get("vendor_id"), "family": int(first.get("cpu family", "0") or 0),
                "model_name": first.get("model name"), "logical_cpus": count,
                # _CPC parsed by drivers/acpi/cppc_acpi.c shows as cpuN/acpi_cppc/; the cpuinfo
                # flag marks only the MSR interface (EPYC 7002/7003 use shared memory, no flag)
                "cppc": os.path.isdir(self.p("/sys/devices/system/cpu/cpu0/acpi_cppc")), "cppc_msr": "cppc" in flags,
                "hwp": "hwp" in flags, "hypervisor": "hypervisor" in flags,
                "pm_profile": int(self.read1("/sys/firmware/acpi/pm_profile", "0") or 0),
                # Documentation/ABI/testing/sysfs-devices-system-cpu: offline, present; smt/control
                "offline": parse_cpulist(self.read1("/sys/devices/system/cpu/offline", "") or ""),
                "present": len(parse_cpulist(self.read1("/sys/devices/system/cpu/present", "") or "")),
                "present_cpus": parse_cpulist(self.read1("/sys/devices/system/cpu/present", "") or ""),
                "possible": len(parse_cpulist(self.read1("/sys/devices/system/cpu/possible", "") or "")),
                "smt_control": self.read1("/sys/devices/system/cpu/smt/control")}

    def probe_cpufreq(self):
        policies = []
        dirs = self.glob("/sys/devices/system/cpu/cpufreq/policy*")
        # what a policy offers is the driver's, the same for all: read it once
        first = self.rel(dirs[0]) if dirs else None
        driver = self.read1(first + "/scaling_driver") if first else None
        governors = (self.read1(first + "/scaling_available_governors") or "").split() if first else []
        # a policy's optional files are the same on every policy: the driver's attributes and
        # the per-policy boost file are created for each policy alike (drivers/cpufreq/cpufreq.c,
        # cpufreq_add_dev_interface), so one the first policy lacks is not looked for again
        optional = [name for name in ("energy_performance_preference", "boost")
                    if first and os.path.exists(self.p(first + "/" + name))]
        for d in dirs:
            rel = self.rel(d)
            pol = {"id": _number(d),
                   "governor": self.read1(rel + "/scaling_governor")}
            epp = self.read1(rel + "/energy_performance_preference") if "energy_performance_preference" in optional else None
            if epp is not None:
                pol["epp"] = epp
            # boost per policy (6.3+) and the frequency cap: a scaling_max_freq below the
            # hardware's cpuinfo_max_freq (Documentation/admin-guide/pm/cpufreq.rst)
            boost = _int(self.read1(rel + "/boost")) if "boost" in optional else None
            if boost is not None:
                pol["boost"] = boost
            pol["max_khz"] = _int(self.read1(rel + "/scaling_max_freq"))
            pol["cpuinfo_max_khz"] = _int(self.read1(rel + "/cpuinfo_max_freq"))
            policies.append(pol)
        policies.sort(key=lambda x: x["id"])
        # driver and governors once, not per policy: on a 256-CPU host they were most of the facts
        return {"driver": driver, "governors": governors,
                "amd_pstate_status": self.read1("/sys/devices/system/cpu/amd_pstate/status"), "policies": policies,
                # the boost switches: cpufreq/boost (drivers with set_boost), intel_pstate/no_turbo
                "boost": _int(self.read1("/sys/devices/system/cpu/cpufreq/boost")),
                "no_turbo": _int(self.read1("/sys/devices/system/cpu/intel_pstate/no_turbo"))}

    def probe_cpuidle(self):
        driver = self.read1("/sys/devices/system/cpu/cpuidle/current_driver")
        states = {}
        for rel, indexes in self._cpuidle_states():
            for idx in indexes:
                d = "%s/cpuidle/state%d" % (rel, idx)
                disable = self.read1(d + "/disable")
                if disable is None:
                    continue        # no such state on this CPU (offline: no cpuidle device)
                st = states.get(idx)
                if st is None:   # a state's name and latency are the idle driver's, the same on every CPU
                    st = states[idx] = {"index": idx, "name": self.read1(d + "/name"),
                                        "latency_us": int(self.read1(d + "/latency", "0") or 0), "cpus": 0, "disabled": 0}
                st["cpus"] += 1
                if disable != "0":
                    st["disabled"] += 1
        return {"driver": driver, "states": [states[k] for k in sorted(states)]}

    def _cpuidle_states(self):
        """[(cpuN, state indexes to read)]. A CPU's idle states are its driver's, state0 to
        state_count-1 (drivers/cpuidle/sysfs.c, cpuidle_add_state_sysfs): with one driver for
        all CPUs, the first CPU's list is every CPU's, and no CPU's directory is listed again.
        A kernel that can give CPUs drivers of their own (CONFIG_CPU_IDLE_MULTIPLE_DRIVERS,
        which adds cpuidle/driver/) has each CPU's own list read."""
        cpus = sorted((self.rel(d) for d in self.glob("/sys/devices/system/cpu/cpu[0-9]*")),
                      key=_number)

        def listed(rel):
            return sorted(_number(d) for d in self.glob(rel + "/cpuidle/state[0-9]*"))

        for i, rel in enumerate(cpus):
            indexes = listed(rel)
            if not indexes:
                continue        # offline, or no idle driver: the next CPU says what the states are
            if os.path.isdir(self.p(rel + "/cpuidle/driver")):
                return [(r, listed(r)) for r in cpus]
            return [(r, indexes) for r in cpus[i:]]
        return []

    def probe_numa(self):
        nodes = [os.path.basename(n) for n in self.glob("/sys/devices/system/node/node[0-9]*")]
        # nodes with CPUs per package, as the firmware's NUMA-per-socket setting makes them
        # (sysfs-devices-node: has_cpu, nodeX/cpulist; a CPU's topology/physical_package_id):
        # the first and last CPU of each node name the packages it spans, two reads a node
        cpu_nodes, packages = 0, set()
        for node in nodes:
            cpus = parse_cpulist(self.read1("/sys/devices/system/node/%s/cpulist" % node, "") or "")
            if not cpus:
                continue
            cpu_nodes += 1
            for cpu in sorted({cpus[0], cpus[-1]}):
                package = _int(self.read1("/sys/devices/system/cpu/cpu%d/topology/physical_package_id" % cpu))
                if package is not None:
                    packages.add(package)
        return {"nodes": len(nodes) or 1, "cpu_nodes": cpu_nodes, "packages": len(packages)}


def _number(path):
    """The number a sysfs entry's name ends in: policy12 -> 12, cpu3 -> 3, state2 -> 2."""
    return int(re.sub(r"\D", "", os.path.basename(path)) or 0)


def _int(text):
    """A sysfs number, or None where the file is absent or holds no number."""
    return int(text) if text is not None and text.isdigit() else None
