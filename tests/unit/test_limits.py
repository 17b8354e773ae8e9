"""The physical limits a measured figure is held against (issue 38's first step): PCIe from
the negotiated generation, width and payload size, and each GPU's datasheet figures."""
from __future__ import annotations

import pytest

from ansible_collections.gpuhost.stack.plugins.module_utils import limits


def test_pcie_links_after_encoding_are_the_kernels_rates():
    # drivers/pci/pci.h PCIE_SPEED2MBS_ENC, per lane: 2000, 4000, 7877, 15754, 31508, 64000 Mb/s
    assert round(limits.pcie_link_gbs(1, 1), 3) == 0.25
    assert round(limits.pcie_link_gbs(3, 16), 2) == 15.75
    # the seed's Gen5 x16: the "63.0 GB/s link" the rtx6kpro wiki measured 55.08 GB/s against
    assert round(limits.pcie_link_gbs(5, 16), 1) == 63.0
    assert round(limits.pcie_link_gbs(6, 16), 1) == 128.0


def test_a_copy_limit_counts_each_packets_overhead_at_the_negotiated_payload():
    # Intel AN 456: a 256-byte payload with a 3-DW header moves at most 256/(256+20), "92%"
    assert round(limits.posted_write_efficiency(256, address_bits=32), 2) == 0.93
    seed = limits.pcie_copy_limit(5, 16, 256)
    assert round(seed["gbs"], 1) == 57.6, seed
    assert seed["formula"] == "32 GT/s x 16 lanes x 128b/130b = 63.0 GB/s, x 256/(256+24) TLP payload = 57.6 GB/s"
    assert "PCIE_SPEED2MBS_ENC" in seed["source"] and "AN 456" in seed["source"]
    # a smaller payload size is a lower limit; a wider link a higher one
    assert limits.pcie_copy_limit(5, 16, 128)["gbs"] < seed["gbs"] < limits.pcie_copy_limit(5, 16, 512)["gbs"]
    assert round(limits.pcie_copy_limit(4, 16, 256)["gbs"], 1) == 28.8
    # 64 GT/s packs TLPs into flits: not this formula's, said as None, never a guess
    assert limits.pcie_copy_limit(6, 16, 256) is None
    with pytest.raises(ValueError):
        limits.pcie_copy_limit(5, 16, 300)


def test_the_community_figures_for_the_seeds_gpus_read_against_the_limit():
    """The rtx6kpro wiki's host-to-GPU 55.08 GB/s on Gen5 x16 (issue 38): 87 % of the link
    after encoding, and 96 % of what 256-byte packets can carry."""
    share, word = limits.verdict(55.08, limits.pcie_link_gbs(5, 16))
    assert round(share, 2) == 0.87 and word == "ok"
    share, word = limits.verdict(55.08, limits.pcie_copy_limit(5, 16, 256)["gbs"])
    assert round(share, 2) == 0.96 and word == "ok"
    assert limits.verdict(40.0, 63.0) == (40.0 / 63.0, "below")
    assert limits.verdict(40.0, 63.0, threshold=0.6)[1] == "ok"
    assert limits.verdict(1.0, None) == (None, "no limit")


@pytest.mark.parametrize("name, gbs", [
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 1597),
    ("NVIDIA H100 PCIe", 2000),
    ("NVIDIA H100 80GB HBM3", 3350),
    ("NVIDIA H200", 4800),
    ("NVIDIA L40S", 864),
    ("NVIDIA A100-SXM4-80GB", 2039),
    ("NVIDIA GeForce RTX 4090", 1008),
    ("Tesla T4", 300),
])
def test_each_gpu_has_its_datasheets_memory_bandwidth_and_source(name, gbs):
    got = limits.gpu_limits(name)
    assert got["memory_gbs"] == gbs and got["source"]


def test_a_gpu_not_in_the_table_has_no_limit_rather_than_a_neighbours():
    assert limits.gpu_limits("NVIDIA H100 PCIe 2") is None
    assert limits.gpu_limits("NVIDIA GeForce RTX 4090 D") is None
    assert limits.gpu_limits("") is None
    # sparse datasheet figures are halved: the H100 SXM's 1,979 TFLOPS BF16 "with sparsity"
    assert limits.gpu_limits("NVIDIA H100 80GB HBM3")["bf16"] == 989.5
