"""Each measured path against its physical limit, what bears on a shortfall, and the one
sentence a host's proof ends with (module_utils/pathproof.py), every branch at unit speed.
The facts are a host's as the probe reads them: the seed's Gen5 x16 links, 256-byte payloads."""
from __future__ import annotations

import copy

import pytest

from ansible_collections.gpuhost.stack.plugins.module_utils import pathproof

SEED_LIMIT = 57.6       # Gen5 x16 at a 256-byte payload (test_limits)


def link(bdf, parent=None, gen=5, width=16, mps=256, port_type=0):
    return {"bdf": bdf, "parent": parent, "port_type": port_type, "mps": mps,
            "link_cap": {"gen": gen, "width": width}, "link_sta": {"gen": 1, "width": width}}


FACTS = {"pci": [link("0000:00:01.1", port_type=4), link("0000:01:00.0", "0000:00:01.1"),
                 link("0000:80:01.1", port_type=4), link("0000:81:00.0", "0000:80:01.1")]}
GPUS = [{"index": 0, "bus_id": "0000:01:00.0", "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "numa_node": 0},
        {"index": 1, "bus_id": "0000:81:00.0", "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "numa_node": 1}]


# two GPUs below one PCIe switch (upstream port 01:00.0, downstream ports 02:00.0 and 02:01.0)
SWITCH = {"pci": [link("0000:00:01.1", port_type=4), link("0000:01:00.0", "0000:00:01.1", port_type=5),
                  link("0000:02:00.0", "0000:01:00.0", port_type=6), link("0000:02:01.0", "0000:01:00.0", port_type=6),
                  link("0000:03:00.0", "0000:02:00.0"), link("0000:04:00.0", "0000:02:01.0")]}
SWITCH_GPUS = [dict(GPUS[0], bus_id="0000:03:00.0"), dict(GPUS[1], index=1, bus_id="0000:04:00.0", numa_node=0)]


def row(path, gpu=0, samples=(55.0, 55.1, 54.9, 55.2, 55.0), unit="GB/s", **extra):
    out = {"path": path, "gpu": gpu, "bus_id": GPUS[gpu]["bus_id"] if gpu is not None else None, "unit": unit,
           "samples": list(samples), **extra}
    return out


def measured(*rows, gpus=GPUS, method="measured"):
    return {"method": method, "gpus": copy.deepcopy(gpus), "paths": list(rows), "repeats": 5}


def test_the_link_limit_is_what_both_ends_can_negotiate_not_the_idle_link():
    lim = pathproof.link_limit(FACTS, "0000:01:00.0")
    # LnkSta reads Gen1 (an idle GPU): the limit is still Gen5 x16's
    assert round(lim["gbs"], 1) == SEED_LIMIT and (lim["gen"], lim["width"], lim["payload"]) == (5, 16, 256)
    slower_port = {"pci": [link("0000:00:01.1", gen=4, port_type=4), link("0000:01:00.0", "0000:00:01.1")]}
    assert round(pathproof.link_limit(slower_port, "0000:01:00.0")["gbs"], 1) == 28.8
    unreadable = {"pci": [link("0000:01:00.0", mps=None)]}
    assert pathproof.link_limit(unreadable, "0000:01:00.0")["payload"] == 128      # the smallest: no guess upward
    assert pathproof.link_limit({"pci": [link("0000:01:00.0", gen=6)]}, "0000:01:00.0") is None   # flit mode
    assert pathproof.link_limit(FACTS, "0000:99:00.0") is None


def test_host_copies_ok_and_below_with_what_bears_on_them():
    findings = {"pcie.link": {"status": "manual", "observed": "0000:81:00.0 runs x8, both ends support x16"},
                "iommu.mode": {"status": "pass"}}
    proof = pathproof.judge(measured(row("host_to_gpu", 0, numa="local", cpu_node=0),
                                     row("host_to_gpu", 1, samples=(27.5,) * 5, numa="local", cpu_node=1)),
                            FACTS, findings)
    ok, short = proof["paths"]
    assert ok["verdict"] == "ok" and round(ok["fraction"], 2) == 0.95 and ok["attribution"] == []
    assert ok["limit"]["formula"].startswith("32 GT/s x 16 lanes x 128b/130b = 63.0 GB/s")
    assert short["verdict"] == "below" and round(short["fraction"], 2) == 0.48
    assert short["attribution"] == [{"control": "pcie.link", "status": "manual",
                                     "why": "0000:81:00.0 runs x8, both ends support x16"}]
    assert proof["conclusion"] == "below 85% of the limit: host_to_gpu 1 of 2 (GPU1)"
    assert ok["method"] == proof["method"] == "measured"


def test_a_per_device_finding_bears_only_on_its_own_gpus_paths():
    findings = {"pcie.link": {"status": "manual", "observed": "0000:81:00.0 runs x8"}}
    proof = pathproof.judge(measured(row("host_to_gpu", 0, samples=(30.0,) * 5, numa="local")), FACTS, findings)
    assert proof["paths"][0]["verdict"] == "below" and proof["paths"][0]["attribution"] == []


def test_a_remote_copy_is_shown_with_its_placement_and_left_out_of_the_conclusion():
    proof = pathproof.judge(measured(row("host_to_gpu", 0, numa="local", cpu_node=0),
                                     row("host_to_gpu", 0, samples=(40.0,) * 5, numa="remote", cpu_node=1)), FACTS, {})
    remote = proof["paths"][1]
    assert remote["verdict"] == "below" and remote["attribution"][0]["fact"] == "numa"
    assert "node 1" in remote["attribution"][0]["why"]
    assert proof["conclusion"] == pathproof.SOFTWARE_SENTENCE


def test_launch_paths_have_no_limit_and_name_the_cpu_controls_that_fail():
    findings = {"cpu.driver": {"status": "drift", "observed": "acpi-cpufreq"}, "cpu.governor": {"status": "pass"},
                "cpu.cstates": {"status": "pending_reboot", "observed": "C2 enabled"}}
    proof = pathproof.judge(measured(row("launch", samples=(4.1, 4.0, 4.2, 4.0, 4.1), unit="us"),
                                     row("host_to_gpu", 0, numa="local")), FACTS, findings)
    launch = proof["paths"][0]
    assert launch["verdict"] == "not judged" and launch["limit"] is None and "fraction" not in launch
    assert [a["control"] for a in launch["attribution"]] == ["cpu.driver", "cpu.cstates"]
    # a latency is not judged, so the host's one judged path decides the sentence
    assert proof["conclusion"] == pathproof.SOFTWARE_SENTENCE


def test_gpu_memory_is_held_at_its_own_threshold_against_the_datasheet():
    # 1271 of 1597 GB/s (0.80): below the PCIe paths' 0.85, within what healthy GPUs copy (0.70)
    proof = pathproof.judge(measured(row("gpu_memory", samples=(1271.0,) * 5)), FACTS, {})
    mem = proof["paths"][0]
    assert mem["limit"]["value"] == 1597.0 and "rtx-pro-6000-blackwell-server-edition" in mem["limit"]["source"]
    assert mem["verdict"] == "ok" and round(mem["fraction"], 2) == 0.80
    low = pathproof.judge(measured(row("gpu_memory", samples=(1000.0,) * 5)), FACTS, {}, memory_threshold=0.7)
    assert low["paths"][0]["verdict"] == "below"
    unknown = [dict(GPUS[0], name="NVIDIA Some Future GPU")]
    assert pathproof.judge(measured(row("gpu_memory"), gpus=unknown), FACTS, {})["paths"][0]["verdict"] == "not judged"


def test_pairs_through_the_host_name_the_p2p_controls():
    findings = {"pcie.acs": {"status": "drift", "observed": "ACS redirect on 0000:02:00.0"},
                "nvidia.p2p": {"status": "manual", "observed": "P2P disabled by regkey"}}
    proof = pathproof.judge(measured(row("gpu_to_gpu", 0, samples=(42.5,) * 5, peer=1, peer_bus_id="0000:81:00.0",
                                         via="host")), FACTS, findings)
    pair = proof["paths"][0]
    assert pair["verdict"] == "below" and pair["limit"]["formula"].startswith("the slower link: ")
    # two GPUs on root ports of their own: an ACS redirect on some switch turns none of their traffic back
    assert [a.get("fact") or a.get("control") for a in pair["attribution"]] == ["p2p", "nvidia.p2p"]
    assert proof["conclusion"] == "below 85% of the limit: gpu_to_gpu 1 of 1 (GPU0-GPU1), all through the host"


def test_acs_redirect_bears_on_a_pair_below_one_switch():
    facts, gpus = SWITCH, SWITCH_GPUS
    findings = {"pcie.acs": {"status": "drift", "observed": "ACS redirect on 0000:02:00.0, 0000:02:01.0"}}
    pair = dict(row("gpu_to_gpu", 0, samples=(27.7,) * 5, peer=1, peer_bus_id="0000:04:00.0", via="peer"),
                bus_id="0000:03:00.0")
    proof = pathproof.judge(measured(pair, gpus=gpus), facts, findings)
    assert [a["control"] for a in proof["paths"][0]["attribution"]] == ["pcie.acs"]


def test_a_peer_copy_whose_bytes_did_not_arrive_is_wrong_however_fast():
    findings = {"iommu.mode": {"status": "drift", "observed": "the IOMMU translates host DMA"}}
    lost = row("gpu_to_gpu", 0, samples=(55.5,) * 5, peer=1, peer_bus_id="0000:81:00.0", via="peer", delivered=False)
    proof = pathproof.judge(measured(lost, row("host_to_gpu", 0, numa="local")), FACTS, findings)
    pair = proof["paths"][0]
    assert pair["verdict"] == "wrong data" and pair["fraction"] > 0.95
    assert [a.get("fact") or a.get("control") for a in pair["attribution"]] == ["lost data", "iommu.mode"]
    assert proof["conclusion"] == "peer copies lost their data: gpu_to_gpu 1 of 1 (GPU0-GPU1)"
    fixed = dict(lost, delivered=True)
    moved = pathproof.compare(proof, pathproof.judge(measured(fixed), FACTS, {}))
    assert [m["verdict"] for m in moved] == ["now delivers its data"]


def test_a_path_without_a_usable_sample_is_an_error_of_its_own():
    proof = pathproof.judge(measured(row("host_to_gpu", 0, samples=(None, 0.0, None, None, None), numa="local"),
                                     row("host_to_gpu", 1, numa="local")), FACTS, {})
    assert [p["verdict"] for p in proof["paths"]] == ["error", "ok"]
    assert proof["paths"][0]["error"].startswith("no figure from the repeats")


def test_the_memory_threshold_is_named_where_a_copy_inside_gpu_memory_falls_short():
    proof = pathproof.judge(measured(row("gpu_memory", samples=(1000.0,) * 5)), FACTS, {})
    assert proof["conclusion"] == "below 85% of the limit: gpu_memory 1 of 1 (GPU0) (below 70%)"


def test_all_gpus_at_once_against_the_sum_and_a_shared_switch_link():
    facts, gpus = SWITCH, SWITCH_GPUS
    both = row("host_to_all_gpus", None, samples=(55.0,) * 5, members=[0, 1])
    proof = pathproof.judge(measured(both, gpus=gpus), facts, {})
    agg = proof["paths"][0]
    assert round(agg["limit"]["value"], 1) == round(2 * SEED_LIMIT, 1) and agg["verdict"] == "below"
    assert agg["attribution"] == [{"fact": "shared link", "why": "0000:03:00.0, 0000:04:00.0 share the upstream "
                                   "link of switch 0000:01:00.0: their copies split it"}]
    assert proof["conclusion"] == "below 85% of the limit: host_to_all_gpus 1 of 1"


def test_refused_failed_and_unmeasured_hosts_say_so():
    gpus = copy.deepcopy(GPUS)
    gpus[1]["refused"] = "process 4242 (python3) uses it"
    proof = pathproof.judge(measured(row("host_to_gpu", 0, numa="local"), gpus=gpus), FACTS, {})
    refused = proof["paths"][-1]
    assert refused == {"path": "all", "gpu": 1, "bus_id": "0000:81:00.0", "method": "measured",
                       "verdict": "refused", "error": "not measured: process 4242 (python3) uses it"}
    assert proof["conclusion"] == "every path measured is within its limit; 1 could not be measured"
    failed = pathproof.judge(measured({"path": "gpu_memory", "gpu": 0, "bus_id": "0000:01:00.0", "unit": "GB/s",
                                       "error": "cuMemcpyDtoDAsync_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"}), FACTS, {})
    assert failed["paths"][0]["verdict"] == "error" and failed["conclusion"] == "nothing was measured"
    na = pathproof.judge({"na": "no NVIDIA driver library: cannot load libcuda.so.1", "paths": [], "gpus": []}, FACTS, {})
    assert na["conclusion"] == na["na"] and na["paths"] == []


def test_modelled_figures_stay_modelled():
    proof = pathproof.judge(measured(row("host_to_gpu", 0, numa="local"), method="modelled"), FACTS, {})
    assert proof["method"] == "modelled" and proof["paths"][0]["method"] == "modelled"


@pytest.mark.parametrize("before, after, unit, word", [
    ((9.4, 9.5, 9.3, 9.4, 9.6), (4.1, 4.0, 4.2, 4.1, 4.0), "us", "better"),           # a latency down
    ((55.0, 55.2, 54.8, 55.1, 55.0), (55.1, 54.9, 55.0, 55.2, 55.0), "GB/s", "no measurable effect"),
    ((55.0, 55.2, 54.8, 55.1, 55.0), (40.0, 40.2, 39.8, 40.1, 40.0), "GB/s", "worse"),
])
def test_before_and_after_a_fix_path_by_path(before, after, unit, word):
    # (runs of different GPUs at once are different paths: see the members test below)
    then = {"method": "modelled", "paths": [{"path": "p", "gpu": 0, "numa": "local", "unit": unit, "samples": list(before)}]}
    now = {"method": "modelled", "paths": [{"path": "p", "gpu": 0, "numa": "local", "unit": unit, "samples": list(after)},
                                           {"path": "q", "gpu": 0, "unit": unit, "samples": list(after)}]}
    moved = pathproof.compare(then, now)
    assert len(moved) == 1, "a path measured only once has no before and after"
    assert moved[0]["verdict"] == word and moved[0]["method"] == "modelled"


def test_all_gpus_at_once_over_other_gpus_is_another_path():
    then = {"paths": [{"path": "host_to_all_gpus", "gpu": None, "members": [0, 1, 2, 3], "unit": "GB/s",
                       "samples": [200.0] * 5}]}
    now = {"paths": [{"path": "host_to_all_gpus", "gpu": None, "members": [0, 1], "unit": "GB/s", "samples": [100.0] * 5}]}
    assert pathproof.compare(then, now) == []
