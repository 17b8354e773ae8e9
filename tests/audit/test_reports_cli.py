"""The reports from a real audit of the seed host: `--json -` on standard output alone
(valid against its schema, with a record per GPU), the tables on standard error, the
Prometheus file and JUnit next to it, one line a host with --format oneline."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import xmlschema
from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT
from test_seed import SEED_EXPECTED


def cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuhost.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def test_json_to_stdout_alone_with_gpu_records_and_the_other_reports_beside_it(seed_lab, tmp_path):
    run = cli("audit", "-i", str(seed_lab.inventory), "--json", "-", "--prom", "m.prom", "--junit", "r.xml",
              "--no-color", cwd=tmp_path, env={"COLUMNS": "80"})
    assert run.returncode == 2, run.stderr[-2000:]
    report = json.loads(run.stdout)                        # nothing else on standard output
    jsonschema.validate(report, json.loads((ROOT / "docs/report.schema.json").read_text()))
    assert not (tmp_path / "-").exists()
    assert {f["control"]: f["status"] for f in report["hosts"]["pve-gpu1"]["findings"]} == SEED_EXPECTED
    gpus = report["hosts"]["pve-gpu1"]["gpus"]
    # the seed spec: eight RTX PRO 6000 Blackwell at 01:00.0 ... e1:00.0, MaxReadReq stuck at 512
    assert len(gpus) == 8 and all(g["max_read_request_bytes"] == 512 for g in gpus)
    assert gpus[0]["bdf"] == "0000:01:00.0" and "RTX PRO 6000" in gpus[0]["name"] and gpus[0]["compute_capability"]
    assert gpus[0]["link"]["width"] == 16 and gpus[0]["persistence"] is False
    assert report["hosts"]["llm-two"]["gpus"] == [] or all(g["bdf"] for g in report["hosts"]["llm-two"]["gpus"])
    # the people's report went to standard error, in 80 columns, without colour
    assert "pcie.mrrs" in run.stderr and "\x1b[3" not in run.stderr
    assert max(len(line) for line in run.stderr.splitlines()) <= 80
    families = {f.name: f for f in text_string_to_metric_families((tmp_path / "m.prom").read_text())}
    drifted = {s.labels["control"] for s in families["gpuhost_control_status"].samples
               if s.labels["host"] == "pve-gpu1" and s.labels["status"] == "drift" and s.value == 1}
    assert drifted == {c for c, s in SEED_EXPECTED.items() if s == "drift"}
    xmlschema.XMLSchema(str(ROOT / "tests/real_data/junit/junit-10.xsd")).validate(str(tmp_path / "r.xml"))


def test_oneline_is_one_line_a_host(seed_lab, tmp_path):
    run = cli("audit", "-i", str(seed_lab.inventory), "--format", "oneline", cwd=tmp_path)
    assert run.returncode == 2, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("pve-gpu1: FAIL 13 pass, 10 drift, 16 na: ") and "pcie.mrrs=drift" in lines[0]
    assert lines[1].startswith("llm-two: OK 2 pass, 37 na")
