"""The shipped systemd units (src/gpuhost/systemd/): systemd's own verifier takes them, and
the service's command, expanded as systemd expands it, writes a Prometheus textfile that
prometheus_client's parser reads, with exit 2 (drift found) counted a success of the unit."""
from __future__ import annotations

import configparser
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, SPECS

UNITS = ROOT / "src/gpuhost/systemd"


def unit(name: str) -> configparser.ConfigParser:
    p = configparser.ConfigParser(strict=False, interpolation=None)
    p.optionxform = str
    p.read(UNITS / name)
    return p


def test_systemd_verifies_the_service_and_the_timer(tmp_path):
    # the verifier needs the command to exist: the same units, naming this installation's gpuhost
    gpuhost = Path(sys.executable).parent / "gpuhost"
    for name in ("gpuhost-audit.service", "gpuhost-audit.timer"):
        (tmp_path / name).write_text((UNITS / name).read_text().replace("/usr/local/bin/gpuhost", str(gpuhost)))
    run = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "gpuhost-audit.service"),
                          str(tmp_path / "gpuhost-audit.timer")], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 0 and not run.stderr.strip(), run.stderr
    timer = unit("gpuhost-audit.timer")
    assert timer["Timer"]["OnCalendar"] == "hourly" and timer["Install"]["WantedBy"] == "timers.target"
    assert unit("gpuhost-audit.service")["Service"]["SuccessExitStatus"] == "2"


def expand(command: str, env: dict) -> list[str]:
    """ExecStart as systemd.service(5) expands it: ${VAR} into one word, $VAR split at whitespace."""
    words = []
    for word in shlex.split(command):
        if re.fullmatch(r"\$[A-Za-z_]\w*", word):
            words += env.get(word[1:], "").split()
        else:
            words.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))
    return words


def test_the_service_writes_a_textfile_prometheus_reads(make_lab, tmp_path):
    lab = make_lab(SPECS / "switch-host.yml")      # a small host: its switch's ports redirect ACS (drift)
    service = unit("gpuhost-audit.service")["Service"]
    # Environment= is given twice (configparser keeps only the last): read both from the file
    env = dict(re.findall(r"^Environment=(\w+)=(.*)$", (UNITS / "gpuhost-audit.service").read_text(), re.M))
    assert env == {"GPUHOST_ARGS": "", "GPUHOST_PROM": "/var/lib/prometheus/node-exporter/gpuhost.prom"}
    env.update(GPUHOST_ARGS=f"-i {lab.inventory}", GPUHOST_PROM=str(tmp_path / "gpuhost.prom"),
               STATE_DIRECTORY=str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    argv = expand(service["ExecStart"], env)
    assert argv[0] == "/usr/local/bin/gpuhost"
    argv[0] = str(Path(sys.executable).parent / "gpuhost")
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                         env={**os.environ, "NO_COLOR": "1"}, cwd=tmp_path)
    assert run.returncode == 2, run.stderr[-2000:]          # drift found: SuccessExitStatus=2
    assert run.stdout.startswith("switch-host: FAIL ")
    families = {f.name: f for f in text_string_to_metric_families((tmp_path / "gpuhost.prom").read_text())}
    drifted = {s.labels["control"] for s in families["gpuhost_control_status"].samples if s.labels["status"] == "drift"}
    assert "pcie.acs" in drifted and (tmp_path / "state/last-audit.json").is_file()
