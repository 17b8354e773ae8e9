"""The report as Prometheus metrics, for node_exporter's textfile collector.

Written atomically (prometheus_client's write_to_textfile: a temporary file in the same
directory, then a rename), so the collector never reads half a file. Names follow
Prometheus' conventions: a gpuhost_ prefix, base units (_seconds). A control's status is
one series labelled with the current status (value 1), not a full state set: seven series
per host and control would be 98,000 at 1,000 hosts (10.7 MB a scrape); a status that
changes ends its old series, which resolves an alert on it."""
from __future__ import annotations

import datetime as _dt

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import STATUSES


def _seconds(stamp: str) -> float:
    return _dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc).timestamp()


def registry(report: dict) -> CollectorRegistry:
    reg = CollectorRegistry()
    status = Gauge("gpuhost_control_status", "A control's status on a host, from gpuhost's last run "
                   "(1, labelled with the status; kind: setting or health)", ["host", "control", "status", "kind"],
                   registry=reg)
    reachable = Gauge("gpuhost_host_reachable", "1 if gpuhost read and judged the host, 0 if not",
                      ["host"], registry=reg)
    findings = Gauge("gpuhost_findings", "Findings of the last run, by status", ["status"], registry=reg)
    for s in STATUSES:
        findings.labels(status=s).set(0)
    for host, h in report["hosts"].items():
        reachable.labels(host=host).set(0 if not h["reachable"] or h.get("error") else 1)
        for f in h["findings"]:
            status.labels(host=host, control=f["control"], status=f["status"], kind=f.get("kind", "setting")).set(1)
            findings.labels(status=f["status"]).inc()
    Gauge("gpuhost_last_run_timestamp_seconds", "When gpuhost's last run finished (Unix time)",
          ["mode"], registry=reg).labels(mode=report["mode"]).set(_seconds(report["finished"]))
    Gauge("gpuhost_last_run_duration_seconds", "How long gpuhost's last run took",
          ["mode"], registry=reg).labels(mode=report["mode"]).set(
        max(0.0, _seconds(report["finished"]) - _seconds(report["started"])))
    Gauge("gpuhost_hosts", "Hosts in gpuhost's last run", registry=reg).set(len(report["hosts"]))
    return reg


def write(report: dict, path: str) -> None:
    write_to_textfile(path, registry(report))
