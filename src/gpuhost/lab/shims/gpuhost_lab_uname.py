"""os.uname() on a lab host: the running kernel is the lab's, as the `uname` shim says.

A UTS namespace gives a host its own hostname but not its own kernel release, so Python
(Ansible's setup module, platform.release(), testinfra) would report the lab machine's
kernel. The host's site-packages loads this through gpuhost_lab_uname.pth.
"""
import os

_real_uname = os.uname


def _lab_uname():
    real = _real_uname()
    try:
        with open("/proc/sys/kernel/osrelease") as f:
            release = f.read().strip()
    except OSError:
        return real
    return os.uname_result((real.sysname, real.nodename, release or real.release, real.version, real.machine))


os.uname = _lab_uname
