"""The report as one self-contained HTML page, made from a Jinja2 template (autoescaped;
no network: styles and the filter script are inline).

The fleet summary (controls by status counts) fits one screen at 2 or 500 hosts; then the
problems worst first with what to do, filters by status, control and host, each host's
details folded, and each control's rationale and references from the catalog."""
from __future__ import annotations

from pathlib import Path

import jinja2

from . import report as rep
from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG, STATUSES

COUNTED = ("pass", "drift", "manual", "pending_reboot", "error", "na", "waived")
_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
                          autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def facts_line(h: dict) -> str:
    f = h.get("facts") or {}
    parts = [f.get("cpu"), f"kernel {f['kernel']}" if f.get("kernel") else None,
             f"{f['gpus']} GPUs" if f.get("gpus") else None, f.get("container") and f"in {f['container']}"]
    return " · ".join(str(p) for p in parts if p)


def context(report: dict) -> dict:
    hosts = report["hosts"]
    summary = rep.control_summary(report)
    controls = [r["id"] for r in summary]
    view = {}
    for name, h in hosts.items():
        counts = dict(rep.status_counts(h))
        if rep.host_failed(h):      # the host itself: it could not be read, or its fix stopped
            key = "unreachable" if not h["reachable"] else "error"
            counts[key] = counts.get(key, 0) + 1
        view[name] = {**h, "gpus": h.get("gpus") or [], "error": h.get("error"), "facts_line": facts_line(h),
                      "counts": [(s, counts[s]) for s in (*STATUSES, "unreachable") if s in counts],
                      "statuses": sorted(counts)}
    s = report["summary"]
    problems = rep.problems(report)
    return {"report": {**report, "hosts": view}, "colours": (*STATUSES, "unreachable"), "counted": COUNTED,
            "labels": {**{k: k for k in COUNTED}, "pending_reboot": "reboot", "na": "n/a"},
            "summary": summary, "problems": problems, "controls": controls, "catalog": CATALOG,
            "problem_statuses": sorted({p["status"] for p in problems}, key=rep.SEVERITY.index),
            "totals": [(k, s[k]) for k in (*STATUSES, "unreachable") if s.get(k)]}


def render(report: dict) -> str:
    return _ENV.get_template("report.html.j2").render(**context(report))


def write(report: dict, path: str | Path) -> None:
    Path(path).write_text(render(report))
