"""gpuhost prove on a lab host with a shortfall of every kind (tests/specs/prove-shortfalls.yml):
two GPUs whose peer traffic a switch's ACS redirects to the root complex (and who split its
one upstream link), one whose link trained to x8, one a process is using. Every path with its modelled figure, limit,
share, verdict and what bears on it; the exit status and the report as for an audit; nothing
written to the host. The lab's figures are modelled (its libcuda.so.1): these tests check
gpuhost's bookkeeping, never that a setting helps a real host."""
from __future__ import annotations

import json
from xml.etree import ElementTree as ET

import jsonschema
import xmlschema
from prometheus_client.parser import text_string_to_metric_families

import pytest

from conftest import ROOT, SPECS, LabHandle, gpuhost
from gpuhost.lab import manager

SCHEMA = json.loads((ROOT / "docs/report.schema.json").read_text())


def paths(report: dict, host: str, path: str, **where) -> list[dict]:
    return [p for p in report["hosts"][host]["proof"]["paths"]
            if p["path"] == path and all(p.get(k) == v for k, v in where.items())]


@pytest.fixture(scope="module")
def shortfalls(tmp_path_factory):
    """The lab host of every shortfall, shared: prove changes nothing on it."""
    directory = tmp_path_factory.mktemp("prove") / "lab"
    inventory = manager.up([str(SPECS / "prove-shortfalls.yml")], directory)
    yield LabHandle(directory, inventory)
    manager.down(directory)


def test_every_shortfall_with_what_bears_on_it(shortfalls, tmp_path):
    lab = shortfalls
    disk = lab.disk("prove-shortfalls")
    run = gpuhost("prove", "-i", str(lab.inventory), "--html", str(tmp_path / "r.html"),
                  "--prom", str(tmp_path / "m.prom"), "--junit", str(tmp_path / "r.xml"))
    assert run.rc == 2, run.stderr[-2000:]
    report = run.report
    jsonschema.validate(report, SCHEMA)
    assert report["mode"] == "prove"
    proof = report["hosts"]["prove-shortfalls"]["proof"]
    assert proof["method"] == "modelled" and all(p["method"] == "modelled" for p in proof["paths"])
    # the switch's pair: peer access, its traffic turned back at the root complex by ACS
    # redirect (half the rate, in the lab's model), pcie.acs named; the bytes arrive
    pair = paths(report, "prove-shortfalls", "gpu_to_gpu", gpu=0, peer=1)[0]
    assert pair["via"] == "peer" and pair["verdict"] == "below" and pair["delivered"] is True
    assert [a.get("control") or a.get("fact") for a in pair["attribution"]] == ["pcie.acs"]
    # GPUs that meet only at the root complex keep their peer access, at the narrow link's pace
    cross = paths(report, "prove-shortfalls", "gpu_to_gpu", gpu=0, peer=2)[0]
    assert cross["via"] == "peer" and [a["control"] for a in cross["attribution"]] == ["pcie.link"]
    # the x8 link: half the limit of what both ends can do, pcie.link named for that GPU alone
    narrow = paths(report, "prove-shortfalls", "host_to_gpu", gpu=2, numa="local")[0]
    assert narrow["verdict"] == "below" and 0.45 < narrow["fraction"] < 0.5
    assert narrow["limit"]["formula"].startswith("32 GT/s x 16 lanes")
    assert [a["control"] for a in narrow["attribution"]] == ["pcie.link"]
    assert paths(report, "prove-shortfalls", "host_to_gpu", gpu=0, numa="local")[0]["attribution"] == []
    # all GPUs at once: the two below the switch split its link
    both = paths(report, "prove-shortfalls", "host_to_all_gpus")[0]
    assert both["members"] == [0, 1, 2] and both["verdict"] == "below"
    assert both["attribution"][0]["fact"] == "shared link"
    # a copy from the other socket is shown, and left out of the sentence
    assert paths(report, "prove-shortfalls", "host_to_gpu", gpu=0, numa="remote")[0]["cpu_node"] == 1
    # the busy GPU: refused, named, untouched
    assert paths(report, "prove-shortfalls", "all", gpu=3)[0]["error"] == "not measured: process 4242 (python3) uses it"
    assert not [p for p in proof["paths"] if p.get("gpu") == 3 and p["path"] != "all"]
    assert proof["conclusion"] == ("below 85% of the limit: gpu_to_gpu 3 of 3 (GPU0-GPU1, GPU0-GPU2, GPU1-GPU2); "
                                   "gpu_to_host 1 of 3 (GPU2); host_to_all_gpus 1 of 1; host_to_gpu 1 of 3 (GPU2)")
    # the terminal's table: path, measured, limit, %, verdict, what bears on it
    assert "path" in run.stdout and "bears on it" in run.stdout
    assert "gpu_to_gpu GPU0→GPU1" in run.stdout and "(modelled)" in run.stdout
    assert "prove-shortfalls: below 85% of the limit" in run.stdout
    assert lab.disk("prove-shortfalls") == disk, "prove writes nothing on the host"
    # the other forms: a bar a path, gauges a drift watch alerts on, a testcase a path
    html = (tmp_path / "r.html").read_text()
    # six paths below, and GPU2's two copies from the other node (a reference)
    assert "Paths against their limits (modelled)" in html and html.count('<div class="bar v-below"') == 8
    gauges = {(s.name, s.labels["path"], s.labels["gpu"]): s for f in text_string_to_metric_families(
        (tmp_path / "m.prom").read_text()) for s in f.samples if s.name.startswith("gpuhost_path_")}
    narrow_gauge = gauges[("gpuhost_path_fraction_of_limit", "host_to_gpu", "2")]
    assert narrow_gauge.labels["method"] == "modelled" and narrow_gauge.value == narrow["fraction"]
    assert gauges[("gpuhost_path_bandwidth_bytes", "gpu_to_gpu", "0-1")].value == pair["median"] * 1e9
    assert ("gpuhost_path_latency_seconds", "launch", "0") in gauges
    xmlschema.XMLSchema(str(ROOT / "tests/real_data/junit/junit-10.xsd")).validate(str(tmp_path / "r.xml"))
    cases = ET.parse(tmp_path / "r.xml").getroot().findall(".//testcase[@classname='prove-shortfalls.proof']")
    failed = sorted(c.get("name") for c in cases if c.find("failure") is not None)
    assert failed == ["gpu_to_gpu GPU0-GPU1", "gpu_to_gpu GPU0-GPU2", "gpu_to_gpu GPU1-GPU2",
                      "gpu_to_host GPU2", "host_to_all_gpus all", "host_to_gpu GPU2"], failed

    forced = gpuhost("prove", "-i", str(lab.inventory), "--force", "--gpus", "3")
    gpus = forced.report["hosts"]["prove-shortfalls"]["proof"]["gpus"]
    assert [g["index"] for g in gpus] == [3] and gpus[0]["forced"] == "process 4242 (python3) uses it"
    assert paths(forced.report, "prove-shortfalls", "host_to_gpu", gpu=3, numa="local")[0]["verdict"] == "ok"


def test_bad_input_is_one_line_and_touches_no_host(tmp_path):
    for args, line in ((["--repeats", "3"], "--repeats: at least 5, not 3"),
                       (["--threshold", "1.5"], "--threshold: a share of the limit above 0 and at most 1, not 1.5"),
                       (["--gpus", "0,,1"], "--gpus: empty item in '0,,1'"),
                       (["--gpus", "GPU0"], "--gpus: not a GPU index or PCI bus id: 'gpu0'")):
        run = gpuhost("prove", "-i", str(tmp_path / "none.yml"), *args)
        assert run.rc == 1 and run.stderr.strip().splitlines() == [f"error: {line}"], run.stderr


def test_sigint_stops_the_measurements_and_says_so(shortfalls, tmp_path):
    """SIGINT mid-measurement: the read-only play is cut short, each host's measurement sees its
    SSH session close and stops, the command says so in one line and exits 3."""
    import os
    import signal
    import subprocess
    import sys
    import time

    lab = shortfalls
    report = tmp_path / "r.json"
    # 3,000 repeats of each launch path: some 20 s of launches, cut after the audit
    proc = subprocess.Popen([sys.executable, "-m", "gpuhost.cli", "prove", "-i", str(lab.inventory), "--repeats", "3000",
                             "--json", str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
    time.sleep(3.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err[-2000:]
    assert ("gpuhost prove: interrupted (SIGINT): the measurements stopped and gave their buffers back; "
            "nothing was changed") in err
    host = json.loads(report.read_text())["hosts"]["prove-shortfalls"]
    assert "proof" not in host and host["error"] == "no report from the host (the play did not finish)"
