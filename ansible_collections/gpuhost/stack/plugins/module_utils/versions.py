"""Version strings as kernels and drivers write them: compared part by part, and the flavour a
kernel release was built as. Host-safe (the kernel_boot module imports it).
"""
from __future__ import annotations

import re


def vkey(version: str | None) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", version or ""))


def at_least(version: str | None, minimum: str) -> bool:
    have, want = vkey(version), vkey(minimum)
    return have[: len(want)] >= want if have else False


# <version>[-<abi>][+<debian tag>][-bpo<N>]-<flavour>: PVE 8's opt-in kernels are backports
# named 6.14.8-2-bpo12-pve (pve-kernel's bookworm backports), Debian's 6.12.12+bpo-amd64;
# a backport tag is not part of the flavour.
# (Debian's backports before 6.6 put the tag in the ABI: 6.5.0-0.deb12.4-amd64)
FLAVOR_RE = re.compile(r"^\d+(?:\.\d+)*(?:-\d+(?:\.[0-9a-z]+)*)?(?:\+[a-z0-9.~]+)?(?:-bpo\d+)?-([a-z][a-z0-9-]*)$")


def kernel_flavor(release: str | None) -> str | None:
    """The flavour a release was built as (Debian -amd64, -cloud-amd64, -rt-amd64; Ubuntu
    -generic, -aws, -lowlatency; Proxmox -pve, also for its -bpo12-pve backports): the new
    kernel must be the same one."""
    m = FLAVOR_RE.match(release or "")
    return m.group(1) if m else None
