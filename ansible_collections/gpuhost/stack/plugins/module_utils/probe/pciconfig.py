# -*- coding: utf-8 -*-
"""PCI config space as the kernel exposes it in sysfs: the PCIe capability's registers and ACS.
"""
from __future__ import absolute_import, division, print_function

import struct

__metaclass__ = type

CAP_ID_EXP = 0x10

ECAP_ID_ACS = 0x000D
ECAP_ID_REBAR = 0x0015      # Physical Resizable BAR (include/uapi/linux/pci_regs.h: PCI_EXT_CAP_ID_REBAR)

MPS_SIZES = (128, 256, 512, 1024, 2048, 4096)


def parse_config(cfg):
    """Decode the registers the controls need from a config-space dump."""
    out = {}
    if len(cfg) >= 4 and cfg[:4] == b"\xff\xff\xff\xff":
        # a function that does not answer reads all ones (PCI: a master abort): a GPU fallen
        # off the bus (Xid 79) keeps its sysfs vendor/device from enumeration, never its registers
        return {"dead": True}
    if len(cfg) < 64:
        return out
    status = struct.unpack_from("<H", cfg, 0x06)[0]
    ptr = cfg[0x34] if status & 0x10 else 0
    seen = 0
    while ptr and ptr + 2 <= len(cfg) and seen < 48:
        cap_id, nxt = cfg[ptr], cfg[ptr + 1]
        if cap_id == CAP_ID_EXP and ptr + 0x14 <= len(cfg):
            flags = struct.unpack_from("<H", cfg, ptr + 2)[0]
            devcap = struct.unpack_from("<I", cfg, ptr + 4)[0]
            devctl = struct.unpack_from("<H", cfg, ptr + 8)[0]
            lnkcap = struct.unpack_from("<I", cfg, ptr + 0x0C)[0]
            lnksta = struct.unpack_from("<H", cfg, ptr + 0x12)[0]
            out.update({"pcie_cap": ptr, "port_type": (flags >> 4) & 0xF,
                        "mps_supported": MPS_SIZES[devcap & 0x7] if (devcap & 0x7) < 6 else None,
                        "mps": MPS_SIZES[(devctl >> 5) & 0x7] if ((devctl >> 5) & 0x7) < 6 else None,
                        "mrrs": MPS_SIZES[(devctl >> 12) & 0x7] if ((devctl >> 12) & 0x7) < 6 else None,
                        "link_cap": {"gen": lnkcap & 0xF, "width": (lnkcap >> 4) & 0x3F},
                        "link_sta": {"gen": lnksta & 0xF, "width": (lnksta >> 4) & 0x3F}})
        ptr = nxt
        seen += 1
    off = 0x100
    seen = 0
    while len(cfg) >= off + 8 and 0x100 <= off and seen < 64:
        header = struct.unpack_from("<I", cfg, off)[0]
        if header in (0, 0xFFFFFFFF):
            break
        if header & 0xFFFF == ECAP_ID_ACS:
            out["acs_cap"] = off
            out["acs_caps"] = struct.unpack_from("<H", cfg, off + 4)[0]     # ACS Capability register
            out["acs_ctrl"] = struct.unpack_from("<H", cfg, off + 6)[0]
        if header & 0xFFFF == ECAP_ID_REBAR and len(cfg) >= off + 16:
            out["rebar"] = _rebar(cfg, off)
        off = (header >> 20) & 0xFFC
        seen += 1
        if off == 0:
            break
    return out


def _rebar(cfg, off):
    """Each resizable BAR: its index, the sizes it offers and its current size, in MiB.
    PCI_REBAR_CAP (off + 4 + 8n): bit 4 + i offers 2^i MiB; PCI_REBAR_CTRL (off + 8 + 8n):
    BAR index in bits 2:0, the number of resizable BARs in 7:5 (first entry), the current
    size as i of 2^i MiB in 13:8 (include/uapi/linux/pci_regs.h; drivers/pci/rebar.c)."""
    first = struct.unpack_from("<I", cfg, off + 8)[0]
    count = min((first >> 5) & 0x7, 6) or 1
    bars = []
    for n in range(count):
        if len(cfg) < off + 16 + 8 * n:
            break
        cap = struct.unpack_from("<I", cfg, off + 4 + 8 * n)[0]
        ctrl = struct.unpack_from("<I", cfg, off + 8 + 8 * n)[0]
        sizes = [1 << i for i in range(28) if (cap >> 4) & (1 << i)]
        bars.append({"bar": ctrl & 0x7, "sizes_mib": sizes, "current_mib": 1 << ((ctrl >> 8) & 0x3F)})
    return bars


def _hex(text):
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None
