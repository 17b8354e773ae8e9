"""Real copy figures from public posts (tests/real_data/bandwidth/, sources in SOURCES.md)
held against gpuhost's limits and verdicts: nvbandwidth's host_to_device_memcpy_ce and
device_to_host_memcpy_ce matrices and CUDA samples' bandwidthTest, read off the posted text.

None of the posts gives the link's Max Payload Size: each test says which it assumes, and the
RTX 5090 figures show which it cannot have been (a measured copy above the limit would make
the limit wrong)."""
from __future__ import annotations

import re
from pathlib import Path

from ansible_collections.gpuhost.stack.plugins.module_utils import limits, pathproof

DATA = Path(__file__).resolve().parents[1] / "real_data/bandwidth"


def nvbandwidth(name: str, testcase: str) -> list[float]:
    """One testcase's row of GB/s, GPU 0 first, as nvbandwidth prints it."""
    text = (DATA / name).read_text()
    block = text.split(f"Running {testcase}.", 1)[1].split("SUM", 1)[0]
    row = next(line for line in block.splitlines() if re.match(r"^\s*0\s+\d+\.\d", line))
    return [float(x) for x in row.split()[1:]]


def bandwidth_test(name: str) -> list[tuple[str, float]]:
    """bandwidthTest's (direction, MB/s) pairs in order; its MB is 2^20 bytes."""
    text = (DATA / name).read_text()
    out = []
    for direction, figure in re.findall(r"(Host to Device|Device to Host) Bandwidth.*?\n\s+\d+\s+([\d.]+)", text, re.S):
        out.append((direction, float(figure)))
    return out


def judged(figures: list[float], gen: int, width: int, mps: int, path: str = "host_to_gpu") -> dict:
    bdfs = [f"0000:{i + 1:02x}:00.0" for i in range(len(figures))]
    facts = {"pci": [{"bdf": b, "parent": None, "mps": mps, "link_cap": {"gen": gen, "width": width}} for b in bdfs]}
    gpus = [{"index": i, "bus_id": b, "name": "?"} for i, b in enumerate(bdfs)]
    rows = [{"path": path, "gpu": i, "bus_id": b, "unit": "GB/s", "numa": "local", "samples": [f] * 5}
            for i, (b, f) in enumerate(zip(bdfs, figures))]
    return pathproof.judge({"method": "measured", "gpus": gpus, "paths": rows}, facts, {})


def test_eight_rtx_5090_on_gen5_x16_within_the_limit_and_a_payload_of_at_least_256():
    h2d = nvbandwidth("nvbandwidth-tinygrad_open-gpu-kernel-modules-29.txt", "host_to_device_memcpy_ce")
    d2h = nvbandwidth("nvbandwidth-tinygrad_open-gpu-kernel-modules-29.txt", "device_to_host_memcpy_ce")
    assert h2d == [56.30, 56.33, 56.35, 56.35, 56.33, 56.38, 56.40, 56.41]
    assert d2h == [57.32, 57.33, 57.34, 57.35, 57.29, 57.31, 57.34, 57.33]
    proof = judged(h2d, 5, 16, 256)
    assert {p["verdict"] for p in proof["paths"]} == {"ok"} and proof["conclusion"] == pathproof.SOFTWARE_SENTENCE
    assert all(0.97 < p["fraction"] < 0.99 for p in proof["paths"])
    # GPU-to-host at 57.35 of 57.6: 99.6 %, under the limit, as a measured figure must be
    assert all(f < limits.pcie_copy_limit(5, 16, 256)["gbs"] for f in d2h)
    # with 128-byte packets the link could carry 53.1 GB/s at most: the payload was larger
    assert all(f > limits.pcie_copy_limit(5, 16, 128)["gbs"] for f in h2d + d2h)


def test_eight_rtx_4090_on_gen4_x16_two_of_them_below_85_percent():
    h2d = nvbandwidth("nvbandwidth-NVIDIA_nvbandwidth-15.txt", "host_to_device_memcpy_ce")
    assert h2d == [25.50, 24.26, 23.90, 26.30, 26.28, 26.38, 26.09, 26.31]
    # the RTX 4090's link is Gen4 x16; at a 256-byte payload (assumed) the limit is 28.8 GB/s
    proof = judged(h2d, 4, 16, 256)
    below = [p["gpu"] for p in proof["paths"] if p["verdict"] == "below"]
    assert below == [1, 2]                  # 24.26 and 23.90: 84 % and 83 %
    assert proof["conclusion"] == "below 85% of the limit: host_to_gpu 2 of 8 (GPU1, GPU2)"
    # nothing gpuhost read explains it here (no facts were posted): no attribution is made up
    assert all(p["attribution"] == [] for p in proof["paths"])


def test_an_a10_on_a_gen4_x16_slot_its_post_names():
    # "LnkCap: Port #0, Speed 16GT/s, Width x16" in the post
    h2d = nvbandwidth("nvbandwidth-sscargal_stevescargall.com.v2-blog-2024-08.txt", "host_to_device_memcpy_ce")
    assert h2d == [25.17]
    proof = judged(h2d, 4, 16, 256)
    assert proof["paths"][0]["verdict"] == "ok" and round(proof["paths"][0]["fraction"], 2) == 0.87


def test_a_p100_from_its_own_node_and_from_the_other():
    runs = bandwidth_test("bandwidthTest-mpicbg-scicomp_gearshifft-82.txt")
    assert runs == [("Host to Device", 12150.7), ("Device to Host", 12890.6),
                    ("Host to Device", 3783.4), ("Device to Host", 2539.2)]
    gbs = [mb * 2**20 / 1e9 for _, mb in runs]          # bandwidthTest's MB is 2^20 bytes
    # the P100 PCIe's link is Gen3 x16: 14.4 GB/s at a 256-byte payload (assumed)
    local = judged(gbs[:1], 3, 16, 256)["paths"][0]
    assert local["verdict"] == "ok" and round(local["fraction"], 2) == 0.88
    # the other node's memory: 31 % of the local host-to-GPU figure, 20 % of the GPU-to-host
    assert round(gbs[2] / gbs[0], 2) == 0.31 and round(gbs[3] / gbs[1], 2) == 0.2
