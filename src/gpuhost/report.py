"""The report (contract ``gpuhost.report/v1``, docs/report.schema.json): built from the runs' results,
its exit code, its problems worst first, and its JSON. The other renderings have modules of
their own: terminal, junit, htmlreport, metrics."""
from __future__ import annotations

import datetime as _dt
import json
import re
from collections import Counter
from pathlib import Path

from rich.markup import escape

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import BY_ID, CATALOG, FAILING, STATUSES

SCHEMA = "gpuhost.report/v1"
# worst first: what needs a person (error, manual) before what gpuhost fixes (drift)
SEVERITY = ("unreachable", "error", "manual", "drift", "pending_reboot", "waived")
EXIT_OK, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_UNREACHABLE = 0, 1, 2, 3


# What a host says (an idle-state name, a driver version, a config line) must not drive the
# operator's terminal (ESC sequences: cursor moves, erased lines, window titles) nor make a
# JUnit file that is not XML: C0 controls but tab and newline, DEL and the C1 range are shown
# as \xHH. The JSON report keeps the text as it was (JSON escapes every control character).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(value):
    """*value* (a report, or any part of it) with every string made safe to show."""
    if isinstance(value, str):
        return _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group()) if ord(m.group()) < 0x100
                            else "\\u%04x" % ord(m.group()), value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


def stamp(moment: _dt.datetime) -> str:
    """A moment as the report writes it: UTC, to the second."""
    return moment.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now() -> str:
    return stamp(_dt.datetime.now(_dt.timezone.utc))


def public(finding: dict, changed: bool = False) -> dict:
    """A finding as the report shows it: no internal fix plan."""
    out = {k: finding.get(k) for k in ("control", "status", "observed", "expected", "reboot_required", "message")}
    out["changed"] = bool(changed or finding.get("changed"))
    # health findings (the hardware's state, read-only) apart from settings, for alerts
    control = BY_ID.get(finding.get("control"))
    out["kind"] = control.kind if control else "setting"
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
        if h.get("proof") is not None:
            entry["proof"] = h["proof"]
        if not entry["reachable"]:
            summary["unreachable"] += 1
        for f in findings:
            summary[f["status"]] = summary.get(f["status"], 0) + 1
        report_hosts[name] = entry
    return {"schema": SCHEMA, "mode": mode, "started": started, "finished": now(),
            "hosts": report_hosts, "summary": summary}


def host_failed(h: dict) -> bool:
    return not h.get("reachable", True) or bool(h.get("error"))


def status_counts(h: dict) -> list[tuple[str, int]]:
    """A host's findings by status, in STATUSES order, only the statuses it has."""
    counts = Counter(f["status"] for f in h["findings"])
    return [(s, counts[s]) for s in STATUSES if counts[s]]


def remedy(f: dict) -> str:
    """What the operator does about one finding."""
    control = BY_ID.get(f["control"])
    status = f["status"]
    if status == "drift" and control and control.fixable:
        return f"gpuhost fix --controls {f['control']}" + (" (takes effect at the next reboot)"
                                                            if f.get("reboot_required") else "")
    if status == "pending_reboot":
        return "reboot the host: gpuhost fix --reboot if-needed"
    if status == "waived":
        return "waived in the inventory (gpuhost_waivers)"
    if status == "error":
        return "gpuhost could not judge this: see the message; nothing was changed for it"
    return "by hand: gpuhost does not change this (see the message)"


def problems(report: dict) -> list[dict]:
    """The run's problems, worst first: a host that could not be read or whose fix stopped,
    then each (status, control, message) with the hosts that have it and what to do."""
    groups: dict[tuple, list[str]] = {}
    for name, h in report["hosts"].items():
        if host_failed(h):
            status = "unreachable" if not h.get("reachable", True) else "error"
            done = ", ".join(f["control"] for f in h["findings"] if f.get("changed"))
            key = (status, "(host)", f"{h.get('error') or status}; " + (f"changed: {done}" if done else "changed nothing"))
            groups.setdefault(key, []).append(name)
        for f in h["findings"]:
            if f["status"] in SEVERITY and f["status"] != "waived":
                groups.setdefault((f["status"], f["control"], f.get("message") or ""), []).append(name)
    ids = [c.id for c in CATALOG]
    out = []
    for key in sorted(groups, key=lambda k: (SEVERITY.index(k[0]), ids.index(k[1]) if k[1] in BY_ID else -1, k[2])):
        status, cid, message = key
        names = groups[key]
        if cid in BY_ID:
            finding = next(f for f in report["hosts"][names[0]]["findings"] if f["control"] == cid)
            what = remedy(finding)
        elif status == "unreachable":
            what = "check the host and how gpuhost reaches it (SSH, its key, the inventory)"
        else:
            what = "see the error; `gpuhost audit` shows the host as it is now"
        out.append({"status": status, "control": cid, "message": message, "hosts": names, "remedy": what})
    return out


def control_summary(report: dict) -> list[dict]:
    """One row per control that has findings, in catalog order: how many hosts are in each
    status, and which hosts fail it (waived is accepted, not failing)."""
    hosts = report["hosts"]
    rows = {c.id: {"id": c.id, "title": c.title, "counts": dict.fromkeys(STATUSES, 0), "failing": []}
            for c in CATALOG}
    for name, h in hosts.items():
        for f in h["findings"]:
            row = rows.get(f["control"])
            if row is None:
                continue
            row["counts"][f["status"]] = row["counts"].get(f["status"], 0) + 1
            if f["status"] in SEVERITY and f["status"] != "waived":
                row["failing"].append(name)
    return [r for r in rows.values() if any(r["counts"].values())]


def exit_code(report: dict) -> int:
    hosts = report["hosts"].values()
    if any(not h["reachable"] or h.get("error") for h in hosts):
        return EXIT_UNREACHABLE
    statuses = {f["status"] for h in hosts for f in h["findings"]}
    # a proof: a path that could not be measured is a failed task; one below its limit, or a
    # GPU refused because it is in use, a finding
    verdicts = {p.get("verdict") for h in hosts for p in (h.get("proof") or {}).get("paths") or []
                if p.get("numa") != "remote" or (h.get("proof") or {}).get("in_container")}
    if "error" in statuses or "error" in verdicts or any((h.get("proof") or {}).get("error") for h in hosts):
        return EXIT_UNREACHABLE
    if statuses & set(FAILING) or verdicts & {"below", "refused", "wrong data"}:
        return EXIT_FINDINGS
    return EXIT_OK


def render_diffs(diffs: dict[str, list[tuple[str, dict]]], console) -> None:
    """The changes a fix made (or, in an audit's preview, would make), as unified diffs."""
    import difflib

    for host, items in diffs.items():
        for task, d in items:
            console.print(f"[bold]{escape(printable(str(host)))}[/]: {escape(printable(str(task)))}", highlight=False)
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
