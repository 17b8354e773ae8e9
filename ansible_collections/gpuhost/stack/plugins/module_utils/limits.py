# -*- coding: utf-8 -*-
"""What each path of a GPU host can carry at most: the physical limit a measured figure is
held against, with the formula and the source it comes from (issue 38, "Prove it").

Nothing here measures anything: a figure gpuhost reports says whether it was measured on a
real machine or modelled in the lab, and is compared with these limits.

Standard library only (Python 3.7+).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# The data rate of one lane after line encoding, in Mb/s: drivers/pci/pci.h PCIE_SPEED2MBS_ENC
# (2.5 and 5 GT/s use 8b/10b, 8 to 32 GT/s 128b/130b; 64 GT/s is flit mode, 1b/1b: "Unlike the
# lower rates, the PCIe 64GT/s Data Rate uses 1b/1b encoding", commit ac4f1897fa54).
LANE_MBPS = {1: 2500 * 8 / 10, 2: 5000 * 8 / 10, 3: 8000 * 128 / 130, 4: 16000 * 128 / 130,
             5: 32000 * 128 / 130, 6: 64000 * 1 / 1}
ENCODING = {1: "8b/10b", 2: "8b/10b", 3: "128b/130b", 4: "128b/130b", 5: "128b/130b", 6: "1b/1b (flit)"}
RAW_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}

# What a posted memory write (a DMA copy's TLPs) carries besides its payload, in bytes: framing
# (2), sequence number (2) and LCRC (4) around a 3-DW header, 20 bytes in all (Intel AN 456,
# "Throughput for Posted Writes": "(256/(256+20)), or 92%"), and a 4-DW header where the
# address is above 4 GiB, as a GPU host's pinned buffers are: 24. Acknowledgement DLLPs and
# SKP ordered sets are left out, so the limit is an upper bound.
TLP_OVERHEAD = {32: 20, 64: 24}

PCIE_SOURCE = ("Linux drivers/pci/pci.h PCIE_SPEED2MBS_ENC (rate after encoding); Intel AN 456 "
               "'Throughput for Posted Writes' (per-TLP overhead)")


def pcie_link_gbs(gen, width):
    """One direction of a PCIe link after line encoding, in GB/s (10^9 bytes): lane rate x
    lanes / 8."""
    return LANE_MBPS[gen] * width / 8 / 1000


def posted_write_efficiency(payload, address_bits=64):
    """The share of a link's bytes that are payload when every TLP carries *payload* bytes
    (the link's negotiated Max Payload Size)."""
    return payload / (payload + TLP_OVERHEAD[address_bits])


def pcie_copy_limit(gen, width, payload, address_bits=64):
    """The most a host-to-GPU (or GPU-to-host) copy can move over a link of *gen* and *width*
    at a Max Payload Size of *payload* bytes: {gbs, formula, source}; None for a rate whose
    packets this formula does not describe (64 GT/s packs TLPs into flits)."""
    if gen not in LANE_MBPS or width < 1 or payload not in (128, 256, 512, 1024, 2048, 4096):
        raise ValueError("not a PCIe link: Gen%r x%r, payload %r" % (gen, width, payload))
    if gen >= 6:
        return None
    link = pcie_link_gbs(gen, width)
    eff = posted_write_efficiency(payload, address_bits)
    return {"gbs": link * eff,
            "formula": "%g GT/s x %d lanes x %s = %.1f GB/s, x %d/(%d+%d) TLP payload = %.1f GB/s" % (
                RAW_GTS[gen], width, ENCODING[gen].split(" ")[0], link, payload, payload,
                TLP_OVERHEAD[address_bits], link * eff),
            "source": PCIE_SOURCE}


# Each GPU's own memory bandwidth (GB/s) and dense tensor throughput (TFLOPS; None where the
# datasheet gives none, or does not say whether its figure is dense), keyed by the name
# nvidia-smi reports (a pattern), each with the page it is read from. Datasheets that print
# "with sparsity" (2:4) figures say the dense ones are half: those are halved here.
GPUS = (
    (r"^NVIDIA RTX PRO 6000 Blackwell Server Edition$", {
        "memory_gbs": 1597, "bf16": None, "fp8": None, "fp4": None,
        "source": "nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/ (1597 GB/s; its tensor "
                  "figures are not marked dense or sparse: none taken)"}),
    (r"^NVIDIA RTX PRO 6000 Blackwell (Workstation|Max-Q Workstation) Edition$", {
        "memory_gbs": 1792, "bf16": None, "fp8": None, "fp4": None,
        "source": "nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/ (1,792 GB/s)"}),
    (r"^NVIDIA H100 PCIe$", {
        "memory_gbs": 2000, "bf16": 756.5, "fp8": 1513, "fp4": None,
        "source": "NVIDIA H100 datasheet (2,000 GB/s; BF16 1,513* and FP8 3,026* TFLOPS, *with sparsity)"}),
    (r"^NVIDIA H100 80GB HBM3$", {
        "memory_gbs": 3350, "bf16": 989.5, "fp8": 1979, "fp4": None,
        "source": "nvidia.com/en-us/data-center/h100/ (H100 SXM: 3.35 TB/s; BF16 1,979* and FP8 3,958* TFLOPS)"}),
    (r"^NVIDIA H100 NVL$", {
        "memory_gbs": 3900, "bf16": 835.5, "fp8": 1670.5, "fp4": None,
        "source": "nvidia.com/en-us/data-center/h100/ (H100 NVL: 3.9 TB/s; BF16 1,671* and FP8 3,341* TFLOPS)"}),
    (r"^NVIDIA H200( NVL)?$", {
        "memory_gbs": 4800, "bf16": None, "fp8": None, "fp4": None,
        "source": "nvidia.com/en-us/data-center/h200/ (4.8 TB/s, SXM and NVL; tensor figures differ by form "
                  "factor: none taken)"}),
    (r"^NVIDIA B200$", {
        "memory_gbs": 7700, "bf16": 2250, "fp8": 4500, "fp4": 9000,
        "source": "NVIDIA Blackwell datasheet, HGX B200 (7.7 TB/s; FP16/BF16 4.5, FP8 9, FP4 18 PFLOPS, all "
                  "with sparsity)"}),
    (r"^NVIDIA L40S$", {
        "memory_gbs": 864, "bf16": 362.05, "fp8": 733, "fp4": None,
        "source": "NVIDIA L40S datasheet (864 GB/s; BF16 362.05 and FP8 733 TFLOPS dense)"}),
    (r"^NVIDIA A100-PCIE-40GB$", {
        "memory_gbs": 1555, "bf16": 312, "fp8": None, "fp4": None,
        "source": "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf: 1,555 GB/s; "
                  "BF16 312 TFLOPS)"}),
    (r"^NVIDIA A100 80GB PCIe$", {
        "memory_gbs": 1935, "bf16": 312, "fp8": None, "fp4": None,
        "source": "NVIDIA A100 datasheet (nvidia-a100-datasheet-nvidia-us-2188504-web.pdf: 1,935 GB/s; BF16 312)"}),
    (r"^NVIDIA A100-SXM4-80GB$", {
        "memory_gbs": 2039, "bf16": 312, "fp8": None, "fp4": None,
        "source": "NVIDIA A100 datasheet (nvidia-a100-datasheet-nvidia-us-2188504-web.pdf: 2,039 GB/s; BF16 312)"}),
    (r"^NVIDIA GeForce RTX 5090$", {
        "memory_gbs": 1792, "bf16": 209.5, "fp8": 419, "fp4": 1676,
        "source": "NVIDIA RTX Blackwell GPU architecture whitepaper (1,792 GB/s; dense, FP32 accumulate)"}),
    (r"^NVIDIA GeForce RTX 4090$", {
        "memory_gbs": 1008, "bf16": 165.2, "fp8": 330.3, "fp4": None,
        "source": "NVIDIA Ada GPU architecture whitepaper (1008 GB/sec; dense, FP32 accumulate)"}),
    (r"^Tesla T4$", {
        "memory_gbs": 300, "bf16": None, "fp8": None, "fp4": None,
        "source": "NVIDIA T4 datasheet (t4-tensor-core-datasheet-951643.pdf: 300 GB/sec; no BF16 on Turing)"}),
)


def gpu_limits(name):
    """The datasheet's figures for a GPU that nvidia-smi names *name*; None for a GPU not in
    the table (never a guess from a similar name)."""
    for pattern, figures in GPUS:
        if re.match(pattern, name or ""):
            return dict(figures)
    return None


def verdict(measured, limit, threshold=0.85):
    """A measured figure against its limit: (share of the limit, "ok" at *threshold* or more,
    else "below"). The threshold is the operator's (0.85 by default, issue 38)."""
    if limit is None or limit <= 0:
        return None, "no limit"
    share = measured / limit
    return share, ("ok" if share >= threshold else "below")
