"""The machine-read reports on a synthetic fleet (the seed host's real judgement on N
hosts): JUnit valid against Jenkins' junit-10.xsd with na/waived skipped, Prometheus text
that prometheus_client parses, JSON valid against docs/report.schema.json; the one-line
output; the catalog as JSON; the version; shell completion."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import jsonschema
import pytest
import xmlschema
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

import fleet
from gpuhost import __version__, junit, metrics, terminal
from gpuhost import report as rep
from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG

ROOT = Path(__file__).resolve().parents[2]
XSD = ROOT / "tests/real_data/junit/junit-10.xsd"
SCHEMA = json.loads((ROOT / "docs/report.schema.json").read_text())


def fleet_report(n: int, mode: str = "audit") -> dict:
    before = fleet.fleet_hosts(n, "audit") if mode == "fix" else None
    report = rep.build(mode, "2026-12-01T10:00:00Z", fleet.fleet_hosts(n, mode), before)
    first = next(iter(report["hosts"].values()))
    first["findings"][1].update(status="waived", message="waived until 2027-01-01: vendor ticket 4411")
    return report


@pytest.mark.parametrize("mode", ["audit", "fix"])
def test_junit_is_valid_against_the_schema_jenkins_reads_and_counts_na_and_waived_as_skipped(tmp_path, mode):
    report = fleet_report(7, mode)
    junit.write(report, tmp_path / "r.xml")
    xmlschema.XMLSchema(str(XSD)).validate(str(tmp_path / "r.xml"))
    root = ET.parse(tmp_path / "r.xml").getroot()
    statuses = [f["status"] for h in report["hosts"].values() for f in h["findings"]]
    assert len(root.findall(".//testcase/skipped")) == statuses.count("na") + statuses.count("waived") > 0
    failures = root.findall(".//testcase/failure")
    assert len(failures) == sum(statuses.count(s) for s in ("drift", "manual", "pending_reboot"))
    f = failures[0]
    assert f.get("message").startswith(f.get("type") + ": ") and "observed: " in f.text and "expected: " in f.text
    unreachable = [s for s in root.iter("testsuite") if s.find("testcase[@name='reachable']") is not None]
    assert len(unreachable) == sum(1 for h in report["hosts"].values() if not h["reachable"] or h.get("error"))
    assert root.get("tests") == str(sum(int(s.get("tests")) for s in root.iter("testsuite")))


def test_the_prometheus_file_parses_and_says_every_hosts_every_control(tmp_path):
    report = fleet_report(6)
    path = tmp_path / "gpuhost.prom"
    metrics.write(report, str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpuhost.prom"], "written atomically: no temporary left"
    families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    status = families["gpuhost_control_status"].samples
    current = {(s.labels["host"], s.labels["control"]): s.labels["status"]
               for s in status if s.value == 1}
    expected = {(h, f["control"]): f["status"] for h, e in report["hosts"].items() for f in e["findings"]}
    assert current == expected
    assert len(status) == len(expected), "one series a host and control, labelled with its status"
    # health findings apart from settings, for alerts that page someone to the hardware
    kinds = {s.labels["control"]: s.labels["kind"] for s in status}
    assert kinds["health.gpu"] == "health" and kinds["pcie.mrrs"] == "setting", kinds
    up = {s.labels["host"]: s.value for s in families["gpuhost_host_reachable"].samples}
    assert up == {h: 0.0 if not e["reachable"] or e.get("error") else 1.0 for h, e in report["hosts"].items()}
    counts = {s.labels["status"]: s.value for s in families["gpuhost_findings"].samples}
    assert counts["drift"] == sum(1 for s in expected.values() if s == "drift")
    stamp = families["gpuhost_last_run_timestamp_seconds"].samples[0]
    assert stamp.labels == {"mode": "audit"} and stamp.value > 1.7e9
    assert "gpuhost_last_run_duration_seconds" in families


@pytest.mark.parametrize("mode, n", [("audit", 1), ("audit", 50), ("fix", 6)])
def test_the_json_report_is_valid_against_its_schema(mode, n):
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    report = json.loads(json.dumps(fleet_report(n, mode)))
    jsonschema.validate(report, SCHEMA)
    bad = json.loads(json.dumps(report))
    next(iter(bad["hosts"].values()))["findings"][0]["status"] = "drifted"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_oneline_says_each_host_in_one_line_for_a_health_check():
    report = fleet_report(6)
    out = io.StringIO()
    terminal.oneline(report, Console(file=out, width=80, no_color=True))
    lines = out.getvalue().splitlines()
    assert len(lines) == len(report["hosts"])
    by_host = dict(line.split(": ", 1) for line in lines)
    assert by_host[fleet.host_name(2)].startswith("FAIL ") and "pcie.mrrs=manual" in by_host[fleet.host_name(2)]
    assert by_host[fleet.host_name(5)].startswith("ERROR unreachable: ssh")
    assert by_host[fleet.host_name(0)].startswith("FAIL ") and "cpu.driver=drift" in by_host[fleet.host_name(0)]


def gpuhost_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "gpuhost"), *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_the_cli_explains_itself():
    listed = json.loads(gpuhost_cli("controls", "--json").stdout)
    assert [c["id"] for c in listed] == [c.id for c in CATALOG]
    mrrs = next(c for c in listed if c["id"] == "pcie.mrrs")
    assert mrrs["fixable"] is True and mrrs["rationale"] and mrrs["references"]
    assert gpuhost_cli("--version").stdout.strip() == f"gpuhost {__version__}"
    bash = gpuhost_cli("--print-completion", "bash").stdout
    assert "audit" in bash and "--controls" in bash and "--prom" in bash
    zsh = gpuhost_cli("--print-completion", "zsh").stdout
    assert zsh.startswith("#compdef gpuhost")


def test_host_data_never_drives_the_terminal_nor_breaks_junit(tmp_path):
    """An idle-state name or driver version with ESC[1A ESC[2K, a title-setting OSC, NUL,
    DEL and an 8-bit CSI reach the screen and the JUnit file as visible text."""
    from gpuhost.app import App, Options

    hostile = "C6\x1b[1A\x1b[2K\x1b]0;pwned\x07 \x00\x7f\x9b31m"
    hosts = fleet.fleet_hosts(1, "audit")
    name = next(iter(hosts))
    hosts[name]["findings"]["cpu.cstates"].update(status="drift", message=f"{hostile} enabled", observed=hostile)
    out = io.StringIO()
    console = Console(file=out, width=160, color_system=None)
    app = App(Options(json=str(tmp_path / "r.json"), junit=str(tmp_path / "r.xml")), console=console,
              err=Console(file=io.StringIO()))
    app.finish("audit", hosts)
    screen = out.getvalue()
    assert not any(c in screen for c in "\x1b\x00\x07\x7f\x9b"), repr(screen)
    assert "C6\\x1b[1A\\x1b[2K" in screen
    xmlschema.XMLSchema(str(XSD)).validate(str(tmp_path / "r.xml"))
    assert "\\x1b]0;pwned\\x07" in (tmp_path / "r.xml").read_text()
    raw = json.loads((tmp_path / "r.json").read_text())
    messages = [f["message"] for f in raw["hosts"][name]["findings"]]
    assert f"{hostile} enabled" in messages, "the JSON report keeps what the host said (JSON escapes it)"


def test_every_finding_says_its_kind_and_a_health_finding_after_a_reboot_stops_the_rollout():
    from gpuhost.app import App

    report = fleet_report(2)
    kinds = {f["control"]: f["kind"] for h in report["hosts"].values() for f in h["findings"]}
    assert kinds["health.gpu"] == "health" and {k for c, k in kinds.items() if c != "health.gpu"} == {"setting"}
    gpu_dead = {"status": "manual", "message": "0000:01:00.0 does not answer"}
    before = {"findings": {"health.gpu": gpu_dead, "pcie.link": {"status": "manual", "message": "x8"}}}
    # a setting that was manual before the reboot and still is: no reason to stop; a GPU
    # whose health is manual after gpuhost's reboot stops the roll-out, whatever it was before
    assert App.worse_after_reboot(before, {"findings": {"pcie.link": before["findings"]["pcie.link"]}}) == ""
    assert App.worse_after_reboot(before, before) == "health.gpu is manual (0000:01:00.0 does not answer)"
