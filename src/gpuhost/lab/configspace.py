"""PCI configuration space, as a device's firmware leaves it at boot.

The layout follows the PCI Local Bus and PCIe Base specifications closely enough that
the real ``lspci -vv`` decodes it and the real ``setpci CAP_EXP+8.w=...`` finds and
writes the registers. Writes are masked the way hardware masks them: read-only
registers and bits keep their value.
"""
from __future__ import annotations

import struct

from .spec import PciDevice

SIZE_PCIE = 4096          # sysfs `config` of a PCIe function (extended config space)
SIZE_CONVENTIONAL = 256
CAP_PM = 0x40
CAP_EXP = 0x50            # PCI Express capability
EXP_DEVCAP = 0x04
EXP_DEVCTL = 0x08
EXP_LNKCAP = 0x0C
EXP_LNKSTA = 0x12
ECAP_ACS = 0x100
ACS_CAP_BITS = 0x005F     # SV TB RR CR UF DT (no egress control vector)

PORT_TYPE = {"endpoint": 0x0, "root_port": 0x4, "switch_up": 0x5, "switch_down": 0x6}
SIZE_CODE = {128: 0, 256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
CODE_SIZE = {v: k for k, v in SIZE_CODE.items()}


def _put16(buf: bytearray, off: int, val: int) -> None:
    struct.pack_into("<H", buf, off, val & 0xFFFF)


def _put32(buf: bytearray, off: int, val: int) -> None:
    struct.pack_into("<I", buf, off, val & 0xFFFFFFFF)


ECAP_ID_REBAR = 0x0015   # Resizable BAR (include/uapi/linux/pci_regs.h: PCI_EXT_CAP_ID_REBAR)
ECAP_REBAR = 0x200


def build(dev: PciDevice, secondary: int = 0, subordinate: int = 0,
          rebar: tuple[int, list[int], int] | None = None,
          bars: list[tuple[int, int, int]] = ()) -> tuple[bytearray, bytearray]:
    """Return (config bytes, write mask) for *dev* as firmware leaves it; *rebar*: a
    Resizable BAR capability for one BAR (its index, the sizes it offers and its current
    size, in MiB); *bars*: the memory BARs firmware placed, (index, address, resource flags)."""
    size = SIZE_PCIE if dev.is_pcie else SIZE_CONVENTIONAL
    cfg = bytearray(size)
    mask = bytearray(size)
    _put16(cfg, 0x00, dev.vendor)
    _put16(cfg, 0x02, dev.device)
    _put16(cfg, 0x04, 0x0406 if dev.is_bridge else 0x0006)     # bus master, memory space
    _put16(mask, 0x04, 0x0547)                                 # Command is writable
    _put16(cfg, 0x06, 0x0010)                                  # Status: capability list
    cfg[0x08] = 0x00                                           # revision
    cfg[0x09] = dev.pci_class & 0xFF
    _put16(cfg, 0x0A, dev.pci_class >> 8)
    cfg[0x0E] = 0x01 if dev.is_bridge else 0x00                # header type
    if dev.is_bridge:
        bus = int(dev.bdf[5:7], 16)
        cfg[0x18], cfg[0x19], cfg[0x1A] = bus, secondary, subordinate
        _put16(cfg, 0x3E, 0x0010)                              # bridge control
    else:
        _put16(cfg, 0x2C, dev.vendor)                          # subsystem vendor
        _put16(cfg, 0x2E, dev.device)
    cfg[0x3D] = 0x01 if not dev.is_bridge else 0x00            # INTA
    for index, address, flags in bars:
        # a memory BAR: bit 3 prefetchable, bits 2:1 10b for a 64-bit one (whose upper half is
        # the next register); lspci reads the type from here, the size from sysfs
        low = (0x8 if flags & 0x2000 else 0) | (0x4 if flags & 0x100000 else 0)
        _put32(cfg, 0x10 + 4 * index, (address & 0xFFFFFFF0) | low)
        if low & 0x4:
            _put32(cfg, 0x14 + 4 * index, address >> 32)
    # power management capability, then PCI Express
    cfg[0x34] = CAP_PM
    cfg[CAP_PM] = 0x01
    cfg[CAP_PM + 1] = CAP_EXP if dev.is_pcie else 0x00
    _put16(cfg, CAP_PM + 2, 0x0003)                            # PM version 1.2
    _put16(mask, CAP_PM + 4, 0x0003)                           # PowerState
    if not dev.is_pcie:
        return cfg, mask
    assert dev.link_cap and dev.link_sta and dev.mps and dev.mps_supported and dev.mrrs
    cap = CAP_EXP
    cfg[cap] = 0x10
    cfg[cap + 1] = 0x00
    port_type = PORT_TYPE[dev.type]
    slot = 0x0100 if dev.type in ("root_port", "switch_down") else 0
    _put16(cfg, cap + 0x02, 0x0002 | (port_type << 4) | slot)
    _put32(cfg, cap + EXP_DEVCAP, SIZE_CODE[dev.mps_supported] | (1 << 15) | (0x7 << 6 if not dev.is_bridge else 0))
    # Device Control: MPS in 7:5, MRRS in 14:12, relaxed ordering, no snoop, error reporting
    devctl = (SIZE_CODE[dev.mrrs] << 12) | (SIZE_CODE[dev.mps] << 5) | 0x0800 | 0x0010 | 0x000F
    _put16(cfg, cap + EXP_DEVCTL, devctl)
    _put16(mask, cap + EXP_DEVCTL, 0x7FFF)
    port_no = int(dev.bdf[8:10], 16) if dev.is_bridge else 0
    lnkcap = dev.link_cap.gen | (dev.link_cap.width << 4) | (0x3 << 10) | (0x7 << 12) | (0x7 << 15) | (port_no << 24)
    if dev.is_bridge:
        lnkcap |= 1 << 20                                       # data link layer active reporting
    _put32(cfg, cap + EXP_LNKCAP, lnkcap)
    _put16(cfg, cap + 0x10, 0x0040 if not dev.is_bridge else 0x0000)   # LnkCtl: common clock
    _put16(mask, cap + 0x10, 0x0FFB)
    lnksta = dev.link_sta.gen | (dev.link_sta.width << 4) | 0x1000   # slot clock
    if dev.is_bridge:
        lnksta |= 0x2000                                        # DLActive
    _put16(cfg, cap + EXP_LNKSTA, lnksta)
    if slot:
        _put32(cfg, cap + 0x14, (int(dev.bdf[5:7], 16) + 1) << 19)  # SltCap: physical slot number
        _put16(cfg, cap + 0x1A, 0x0040)                         # SltSta: presence detect
    _put32(cfg, cap + 0x24, 0x0000001F | (1 << 11))            # DevCap2: completion timeouts, LTR
    _put32(cfg, cap + 0x2C, ((1 << dev.link_cap.gen) - 1) << 1)   # LnkCap2: supported speeds vector
    _put16(cfg, cap + 0x30, dev.link_cap.gen)                  # LnkCtl2: target link speed
    _put16(mask, cap + 0x30, 0x0FFF)
    _put16(cfg, cap + 0x32, 0x0001 if dev.link_sta.gen >= 3 else 0)
    if dev.acs_ctrl is not None:
        _put32(cfg, ECAP_ACS, 0x000D | (1 << 16))                   # ACS, version 1, last
        _put16(cfg, ECAP_ACS + 4, ACS_CAP_BITS | dev.acs_ctrl)
        _put16(cfg, ECAP_ACS + 6, dev.acs_ctrl)
        _put16(mask, ECAP_ACS + 6, ACS_CAP_BITS | dev.acs_ctrl)
    if rebar is not None:
        if dev.acs_ctrl is not None:
            _put32(cfg, ECAP_ACS, 0x000D | (1 << 16) | (ECAP_REBAR << 20))
            at = ECAP_REBAR
        else:
            at = 0x100
        bar, sizes, current = rebar
        # PCI_REBAR_CAP: bit 4 + n offers 2^n MiB; PCI_REBAR_CTRL: BAR index (2:0), number of
        # resizable BARs (7:5), current size as n of 2^n MiB (13:8)
        _put32(cfg, at, ECAP_ID_REBAR | (1 << 16))
        _put32(cfg, at + 4, sum(1 << (4 + (s.bit_length() - 1)) for s in sizes))
        _put32(cfg, at + 8, bar | (1 << 5) | ((current.bit_length() - 1) << 8))
    if dev.config_size is not None and dev.config_size < len(cfg):
        # the kernel reads no further: the extended capabilities are there but out of its reach
        return cfg[:dev.config_size], mask[:dev.config_size]
    return cfg, mask


def masked_write(cfg: bytearray, mask: bytearray, offset: int, data: bytes) -> int:
    """Apply a write at *offset* as hardware would; return the bytes accepted."""
    end = min(len(cfg), offset + len(data))
    for i in range(offset, end):
        m = mask[i]
        cfg[i] = (cfg[i] & ~m & 0xFF) | (data[i - offset] & m)
    return max(0, end - offset)


def mrrs(cfg: bytes) -> int:
    devctl = struct.unpack_from("<H", cfg, CAP_EXP + EXP_DEVCTL)[0]
    return CODE_SIZE.get((devctl >> 12) & 0x7, 0)


def mps(cfg: bytes) -> int:
    """The Max Payload Size the Device Control register sets (bits 7:5)."""
    devctl = struct.unpack_from("<H", cfg, CAP_EXP + EXP_DEVCTL)[0]
    return CODE_SIZE.get((devctl >> 5) & 0x7, 0)


def acs_ctrl(cfg: bytes) -> int | None:
    if len(cfg) <= ECAP_ACS or struct.unpack_from("<H", cfg, ECAP_ACS)[0] != 0x000D:
        return None
    return struct.unpack_from("<H", cfg, ECAP_ACS + 6)[0]
