"""The report as one self-contained HTML page, made from a Jinja2 template (autoescaped;
no network: styles and the filter script are inline).

It opens with what needs doing: the problems worst first, with what to do (the first few;
filters by status, control and host), then a picture that reads at a glance (a host x
control map, inline SVG), the summary per control (counts and a bar by status), each host's
details folded, and each control's rationale and references from the catalog, each
reference a link to its public home where one is known (references.py)."""
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


def proof_view(proof: dict) -> dict:
    """A host's proof for the page: per path a bar against its limit (the threshold marked),
    and each fix's before and after as two bars on one scale."""
    from .terminal import _figure, effect_groups, path_name

    rows = []
    for p in proof.get("paths") or []:
        unit = p.get("unit") or ""
        lim = p.get("limit") or {}
        rows.append({"name": path_name(p), "verdict": p["verdict"], "measured": _figure(p.get("median"), unit),
                     "limit": _figure(lim.get("value"), lim.get("unit") or ""), "formula": lim.get("formula") or "",
                     "pct": None if p.get("fraction") is None else round(p["fraction"] * 100),
                     "bar": None if p.get("fraction") is None else min(100.0, p["fraction"] * 100),
                     "threshold": round(100 * (proof.get("memory_threshold", 0.7) if p["path"] == "gpu_memory"
                                               else proof.get("threshold", 0.85))),
                     "why": p.get("error") or "; ".join(a.get("why") or a.get("control", "") for a in p.get("attribution") or [])})
    effects = []
    for g in effect_groups(proof):
        top = max(g["before"], g["after"]) or 1
        effects.append({**g, "before_text": _figure(g["before"], g["unit"]), "after_text": _figure(g["after"], g["unit"]),
                        "before_bar": 100 * g["before"] / top, "after_bar": 100 * g["after"] / top,
                        "verdict_text": ", ".join(f"{w} on {n}" for w, n in g["verdicts"])})
    return {"method": proof.get("method", "measured"), "conclusion": proof.get("conclusion") or "", "rows": rows,
            "effects": effects, "unmeasured": proof.get("unmeasured_fixes") or []}


FIRST_PROBLEMS = 3          # shown at once: the page opens with what needs doing, then the map
MAP_WIDTH = 1150            # the host x control map's cells at most, in pixels


def host_map(report: dict, controls: list[str]) -> dict:
    """An inline SVG's cells: a column a host (a host that could not be read is all
    "unreachable"), a row a control, coloured by status; cells narrow with the fleet."""
    hosts = list(report["hosts"])
    label_width = 150
    cell_w = max(3, min(24, MAP_WIDTH // max(1, len(hosts))))
    cell_h = 8 if len(controls) > 20 else 12
    cells, seen = [], set()
    for x, name in enumerate(hosts):
        h = report["hosts"][name]
        found = {f["control"]: f["status"] for f in h.get("findings") or []}
        for y, cid in enumerate(controls):
            status = "unreachable" if not h.get("reachable", True) else found.get(cid)
            if status is None:
                continue
            seen.add(status)
            cells.append({"x": label_width + x * cell_w, "y": y * cell_h, "status": status, "host": name, "control": cid})
    return {"hosts": hosts, "controls": controls, "cells": cells, "cell_w": cell_w, "cell_h": cell_h,
            "label_width": label_width, "width": label_width + cell_w * len(hosts) + 4,
            "height": cell_h * len(controls) + 2, "seen": seen}


def status_bar(counts: dict, width: int = 140) -> str:
    """A control's hosts by status as one stacked bar (inline SVG, escaped numbers only)."""
    total = sum(counts.values()) or 1
    x, parts = 0.0, []
    for status in (*STATUSES, "unreachable"):
        n = counts.get(status, 0)
        if not n:
            continue
        w = width * n / total
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="10" class="c-{status}"><title>{n} {status}</title></rect>')
        x += w
    return f'<svg width="{width}" height="10" viewBox="0 0 {width} 10">{"".join(parts)}</svg>'


def context(report: dict) -> dict:
    hosts = report["hosts"]
    summary = [{**r, "bar": status_bar(r["counts"])} for r in rep.control_summary(report)]
    controls = [r["id"] for r in summary]
    view = {}
    for name, h in hosts.items():
        counts = dict(rep.status_counts(h))
        if rep.host_failed(h):      # the host itself: it could not be read, or its fix stopped
            key = "unreachable" if not h["reachable"] else "error"
            counts[key] = counts.get(key, 0) + 1
        view[name] = {**h, "gpus": h.get("gpus") or [], "error": h.get("error"), "facts_line": facts_line(h),
                      "proof_view": proof_view(h["proof"]) if h.get("proof") else None,
                      "counts": [(s, counts[s]) for s in (*STATUSES, "unreachable") if s in counts],
                      "statuses": sorted(counts)}
    s = report["summary"]
    problems = rep.problems(report)
    from .references import link

    return {"report": {**report, "hosts": view}, "colours": (*STATUSES, "unreachable"), "counted": COUNTED, "link": link,
            "labels": {**{k: k for k in COUNTED}, "pending_reboot": "reboot", "na": "n/a"},
            "summary": summary, "problems": problems, "controls": controls, "catalog": CATALOG,
            "first_problems": FIRST_PROBLEMS, "map": host_map(report, controls),
            "problem_statuses": sorted({p["status"] for p in problems}, key=rep.SEVERITY.index),
            "totals": [(k, s[k]) for k in (*STATUSES, "unreachable") if s.get(k)]}


def render(report: dict) -> str:
    return _ENV.get_template("report.html.j2").render(**context(report))


def write(report: dict, path: str | Path) -> None:
    Path(path).write_text(render(report))
