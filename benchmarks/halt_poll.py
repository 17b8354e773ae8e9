"""The benchmarks' view of a VM's guest halt polling, which decides how fast the lab's /sys is.

Every sysfs or procfs file a lab host reads is a round trip to the lab's FUSE daemon. On a KVM
guest whose cpuidle driver is haltpoll, an idle vCPU polls for up to guest_halt_poll_ns before
it halts (drivers/cpuidle/cpuidle-haltpoll.c, drivers/cpuidle/governors/haltpoll.c; the
kernel's default is 200000 ns, Documentation/virt/guest-halt-polling.rst). Where a VM image
sets it to 0, each round trip waits for a halted vCPU to be woken: 1-2.5 ms a read instead of
some 150 us, which a real host's in-kernel sysfs never pays. The audit reads some 1,300 such
files; `setup` (min) few, so the lab would measure that VM rather than gpuhost.

`--halt-poll-ns N` sets it for the benchmark's run and puts the old value back after (root
only, as the lab is); without it the VM is measured as it is. Either way the value is printed.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

PARAM = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
KERNEL_DEFAULT_NS = 200000


def current() -> int | None:
    try:
        return int(PARAM.read_text().strip())
    except (OSError, ValueError):
        return None          # not a KVM guest with the haltpoll driver


def describe(value: int | None) -> str:
    if value is None:
        return "guest halt polling: none on this machine (no haltpoll cpuidle driver)"
    note = "off: every lab /sys read waits for a halted vCPU" if value == 0 else \
        "the kernel's default" if value == KERNEL_DEFAULT_NS else "set on this VM"
    return f"guest halt polling: guest_halt_poll_ns={value} ({note})"


@contextlib.contextmanager
def halt_poll(ns: int | None):
    """Run the body with guest_halt_poll_ns at *ns* (None: as the machine has it)."""
    before = current()
    if ns is None or before is None or ns == before:
        yield before
        return
    PARAM.write_text(f"{ns}\n")
    try:
        yield ns
    finally:
        PARAM.write_text(f"{before}\n")
