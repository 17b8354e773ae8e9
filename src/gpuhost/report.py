"""The report (contract ``gpuhost.report/v1``) and its renderings: JSON, JUnit, HTML, terminal."""
from __future__ import annotations

import datetime as _dt
import html
import json
from pathlib import Path

from .controls import BY_ID, CATALOG, FAILING, STATUSES

SCHEMA = "gpuhost.report/v1"
COLOURS = {"pass": "green", "drift": "yellow", "manual": "magenta", "pending_reboot": "cyan",
           "na": "dim", "waived": "blue", "error": "red", "unreachable": "red"}
HTML_COLOURS = {"pass": "#2e7d32", "drift": "#b26a00", "manual": "#8e24aa", "pending_reboot": "#00838f",
                "na": "#9e9e9e", "waived": "#1565c0", "error": "#c62828", "unreachable": "#c62828"}
EXIT_OK, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_UNREACHABLE = 0, 1, 2, 3


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def public(finding: dict, changed: bool = False) -> dict:
    """A finding as the report shows it: no internal fix plan."""
    out = {k: finding.get(k) for k in ("control", "status", "observed", "expected", "reboot_required", "message")}
    out["changed"] = bool(changed or finding.get("changed"))
    return out


def build(mode: str, started: str, hosts: dict[str, dict], before: dict[str, dict] | None = None) -> dict:
    """*hosts*: name -> {reachable, facts, findings: {id: finding}, changed: [ids], error?}.
    *before*: the same from the audit a fix started with; each finding then also carries
    ``before``, its status then."""
    report_hosts = {}
    summary = {"hosts": len(hosts), **{s: 0 for s in STATUSES}, "unreachable": 0}
    for name, h in hosts.items():
        facts = dict(h.get("facts") or {})
        entry: dict = {"reachable": h.get("reachable", True), "facts": facts}
        if "gpu_devices" in facts:     # one record per GPU: BDF, name, compute capability, link, MaxReadReq
            entry["gpus"] = facts.pop("gpu_devices")
        if h.get("error"):
            entry["error"] = h["error"]
        changed = set(h.get("changed") or [])
        findings = [public(f, f["control"] in changed) for f in (h.get("findings") or {}).values()]
        if before is not None:
            was = (before.get(name) or {}).get("findings") or {}
            for f in findings:
                f["before"] = (was.get(f["control"]) or {}).get("status")
        findings.sort(key=lambda f: [c.id for c in CATALOG].index(f["control"]) if f["control"] in BY_ID else 99)
        entry["findings"] = findings
        if not entry["reachable"]:
            summary["unreachable"] += 1
        for f in findings:
            summary[f["status"]] = summary.get(f["status"], 0) + 1
        report_hosts[name] = entry
    return {"schema": SCHEMA, "mode": mode, "started": started, "finished": now(),
            "hosts": report_hosts, "summary": summary}


def exit_code(report: dict) -> int:
    hosts = report["hosts"].values()
    if any(not h["reachable"] or h.get("error") for h in hosts):
        return EXIT_UNREACHABLE
    statuses = {f["status"] for h in hosts for f in h["findings"]}
    if "error" in statuses:
        return EXIT_UNREACHABLE
    if statuses & set(FAILING):
        return EXIT_FINDINGS
    return EXIT_OK


def render_diffs(diffs: dict[str, list[tuple[str, dict]]], console) -> None:
    """The changes a fix made (or, in an audit's preview, would make), as unified diffs."""
    import difflib

    for host, items in diffs.items():
        for task, d in items:
            console.print(f"[bold]{host}[/]: {task}", highlight=False)
            if d.get("prepared"):
                console.print(str(d["prepared"]).rstrip("\n"), markup=False, highlight=False)
                continue
            before, after = str(d.get("before") or ""), str(d.get("after") or "")
            lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                         fromfile=f"{host}:{d.get('before_header') or ''}",
                                         tofile=f"{host}:{d.get('after_header') or ''}")
            for line in lines:
                style = {"+": "green", "-": "red", "@": "cyan"}.get(line[:1]) if line[:3] not in ("---", "+++") else "bold"
                console.print(line.rstrip("\n"), style=style, markup=False, highlight=False)


def write_json(report: dict, path: str | Path) -> None:
    """The report as JSON; "-" is standard output (everything else goes to standard error)."""
    text = json.dumps(report, indent=2, default=str) + "\n"
    if str(path) == "-":
        import sys
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(path).write_text(text)


def write_html(report: dict, path: str | Path) -> None:
    e = html.escape
    hosts = report["hosts"]
    controls = [c.id for c in CATALOG if any(f["control"] == c.id for h in hosts.values() for f in h["findings"])]
    head = "".join(f"<th title='{e(BY_ID[c].title)}'>{e(c)}</th>" for c in controls)
    rows = []
    for name, h in hosts.items():
        by = {f["control"]: f for f in h["findings"]}
        if not h["reachable"] or h.get("error"):
            cells = f"<td colspan='{len(controls)}' class='s-unreachable'>{e(h.get('error') or 'unreachable')}</td>"
        else:
            cells = "".join(
                f"<td class='s-{by[c]['status']}' title='{e(by[c]['message'] or '')}'>{e(by[c]['status'])}"
                f"{' &#9998;' if by[c]['changed'] else ''}</td>" if c in by else "<td></td>" for c in controls)
        rows.append(f"<tr><th class='host'>{e(name)}<div class='facts'>{e(_facts_line(h))}</div></th>{cells}</tr>")
    details = []
    for name, h in hosts.items():
        items = "".join(
            f"<tr class='s-{f['status']}-row'><td><code>{e(f['control'])}</code></td><td class='s-{f['status']}'>{e(f['status'])}</td>"
            f"<td>{e(str(f['observed']))}</td><td>{e(str(f['expected']))}</td><td>{e(f['message'] or '')}"
            f"{' <b>(changed)</b>' if f['changed'] else ''}{' <b>(reboot)</b>' if f['reboot_required'] else ''}</td></tr>"
            for f in h["findings"])
        details.append(f"<h2 id='{e(name)}'>{e(name)}</h2><table class='detail'><tr><th>control</th><th>status</th>"
                       f"<th>observed</th><th>expected</th><th>what it means</th></tr>{items}</table>")
    summary = " &middot; ".join(f"<span class='s-{k}'>{v} {e(k)}</span>" for k, v in report["summary"].items()
                                if k != "hosts" and v)
    css = "".join(f".s-{k}{{color:{v};font-weight:600}}" for k, v in HTML_COLOURS.items())
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpuhost {e(report['mode'])} report</title>
<style>
body{{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#222}}
table{{border-collapse:collapse;margin:1rem 0}} td,th{{border:1px solid #ddd;padding:.35rem .6rem;text-align:left;vertical-align:top}}
th.host{{white-space:nowrap}} .facts{{font-weight:400;color:#666;font-size:.8rem}} code{{font-size:.9rem}}
.grid td{{text-align:center}} {css}
</style></head><body>
<h1>gpuhost {e(report['mode'])}</h1>
<p>{e(report['started'])} &ndash; {e(report['finished'])} &middot; {report['summary']['hosts']} hosts &middot; {summary}</p>
<table class="grid"><tr><th>host</th>{head}</tr>{''.join(rows)}</table>
{''.join(details)}
</body></html>
"""
    Path(path).write_text(page)


def _facts_line(h: dict) -> str:
    f = h.get("facts") or {}
    parts = [f.get("cpu"), f"kernel {f['kernel']}" if f.get("kernel") else None,
             f"{f['gpus']} GPUs" if f.get("gpus") else None, f.get("container") and f"in {f['container']}"]
    return " · ".join(str(p) for p in parts if p)
