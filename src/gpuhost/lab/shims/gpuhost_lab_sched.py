"""os.sched_getaffinity and os.sched_setaffinity on a lab host: the lab's CPUs.

A lab host shows its own CPUs in /sys (128 on the seed host) while its processes run on the
lab machine's few. Python's affinity calls here answer in the host's CPUs instead, per
thread as the kernel's do: a thread may run on the host's online CPUs (a container's on its
CPU set) until it is placed,
and placing it on CPUs the host does not have fails with EINVAL as sched_setaffinity(2)
does. The lab's libcuda.so.1 is told the first CPU of the new set, which is where the
measurement's copies and launches then come from. The host's site-packages loads this
through gpuhost_lab_sched.pth.
"""
import errno
import os
import threading

_placed = threading.local()
_real_get, _real_set = os.sched_getaffinity, os.sched_setaffinity


def _online():
    """The CPUs this host's threads may run on: a container's CPU set (the lab writes it to
    /run/gpuhost-lab/cpuset), else the host's online CPUs."""
    text = None
    for path in ("/run/gpuhost-lab/cpuset", "/sys/devices/system/cpu/online"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text:
            break
    if not text:
        return None
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus or None


def _mine(pid):
    return pid in (0, os.getpid(), threading.get_native_id())


def sched_getaffinity(pid):
    if not _mine(pid):
        return _real_get(pid)
    placed = getattr(_placed, "cpus", None)
    return set(placed) if placed is not None else (_online() or _real_get(pid))


def sched_setaffinity(pid, mask):
    if not _mine(pid):
        return _real_set(pid, mask)
    cpus = {int(c) for c in mask}
    online = _online()
    if online is None:
        return _real_set(pid, mask)
    if not cpus & online:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    _placed.cpus = cpus & online
    import ctypes       # here, not at every start of the host's Python
    try:
        ctypes.CDLL("libcuda.so.1").gpuhost_lab_set_cpu(min(_placed.cpus))
    except (OSError, AttributeError):
        pass            # no lab GPU library on this host: nothing else to tell
    return None


os.sched_getaffinity = sched_getaffinity
os.sched_setaffinity = sched_setaffinity
