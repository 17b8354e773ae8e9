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
    proof_gauges(report, reg)
    return reg


def path_label(p: dict) -> str:
    """A path as a label value: host_to_gpu_remote, gpu_to_gpu_host (a pair through the host)."""
    name = p["path"]
    if p.get("numa") == "remote":
        name += "_remote"
    if p.get("via") == "host":
        name += "_via_host"
    return name


def proof_gauges(report: dict, reg: CollectorRegistry) -> None:
    """gpuhost prove: what each path delivers and its share of the limit, so that a drift
    watch alerts on lost capability, not only on settings. One series per host, path and GPU
    (pair: gpu="0-1"; every GPU at once: gpu="all"); method says measured or modelled."""
    rows = [(host, p, h["proof"].get("method", "measured")) for host, h in report["hosts"].items()
            if h.get("proof") for p in h["proof"].get("paths") or [] if p.get("median") is not None]
    if not rows:
        return
    labels = ["host", "path", "gpu", "method"]
    bandwidth = Gauge("gpuhost_path_bandwidth_bytes", "What a path delivers, bytes per second (the median of the repeats)",
                      labels, registry=reg)
    latency = Gauge("gpuhost_path_latency_seconds", "A path's latency, seconds (the median of the repeats)",
                    labels, registry=reg)
    fraction = Gauge("gpuhost_path_fraction_of_limit", "A path's median over its physical limit",
                     labels, registry=reg)
    for host, p, method in rows:
        gpu = ("all" if p.get("gpu") is None else
               f"{p['gpu']}-{p['peer']}" if p.get("peer") is not None else str(p["gpu"]))
        key = dict(host=host, path=path_label(p), gpu=gpu, method=method)
        if p.get("unit") == "GB/s":
            bandwidth.labels(**key).set(p["median"] * 1e9)
        elif p.get("unit") == "us":
            latency.labels(**key).set(p["median"] / 1e6)
        if p.get("fraction") is not None:
            fraction.labels(**key).set(p["fraction"])


def write(report: dict, path: str) -> None:
    write_to_textfile(path, registry(report))
