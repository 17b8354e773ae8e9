"""PCI functions as fixes name them: by address AND vendor:device, never a stranger on a renumbered bus.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import PciRegister

import re
import shlex
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Host


# A PCI function's address as sysfs names it (domain:bus:device.function, lower-case hex):
# a value that is anything else never goes into a command or a unit.
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def sh(*words: str) -> str:
    """A shell command line whose every word is quoted: no value from an inventory or a host
    is ever read by a shell as anything but one word."""
    return shlex.join(str(w) for w in words)


def setpci_args(d: dict, register: str) -> tuple:
    """setpci's arguments, selecting by address AND vendor:device (a renumbered bus writes
    nothing to a stranger)."""
    return ("-s", d["bdf"], "-d", f"{d['vendor']:04x}:{d['device']:04x}", register)


def setpci(d: dict, register: str) -> str:
    """The same as a command line a person can type (for a finding's manual advice)."""
    return sh("setpci", *setpci_args(d, register))


def pci_change(d: dict, register: str, value: int, mask: int) -> PciRegister:
    """A PCI register change for gpuhost.stack.runtime: bits *mask* of *register* set to
    *value*, on the function at this address only if it still has this vendor:device."""
    return PciRegister(d["bdf"], f"{d['vendor']:04x}:{d['device']:04x}", register, f"{value:04x}", f"{mask:04x}")


def config_writes_refused(h: Host) -> str | None:
    """The kernel lockdown level that refuses every config-space write from user space
    (drivers/pci/pci-sysfs.c: security_locked_down(LOCKDOWN_PCI_ACCESS), from integrity on;
    Secure Boot turns lockdown on in Debian's, Ubuntu's and Proxmox's kernels), or None."""
    level = h.f.get("lockdown")
    return level if level in ("integrity", "confidentiality") else None


def strange_addresses(devices: list[dict]) -> list[str]:
    return [repr(d.get("bdf")) for d in devices if not PCI_ADDRESS.match(str(d.get("bdf")))]


def dead_gpus(h: Host, devices: list[dict]) -> str | None:
    """The functions among *devices* that do not answer (config space all ones: a GPU fallen
    off the bus, Xid 79), named with the link state of the port above them: a dead device
    has no register to fix."""
    dead = [d for d in devices if d.get("dead")]
    if not dead:
        return None
    parts = []
    for d in dead:
        up = h.path_up(d["bdf"])
        port = up[0] if up else None
        if port and port.get("link_sta"):
            sta = port["link_sta"]
            link = f"port {port['bdf']} link x{sta['width']} Gen{sta['gen']}" if sta.get("width") else \
                f"port {port['bdf']} link down"
        else:
            link = f"port {port['bdf']}" if port else "no port found"
        parts.append(f"{d['bdf']} ({link})")
    return ("does not answer (config space reads all ones: fallen off the bus, Xid 79): " + ", ".join(parts)
            + "; reset or reseat it, check power and the kernel log; nothing to set on a device that does not answer")
