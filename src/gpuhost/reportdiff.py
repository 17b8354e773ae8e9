"""What changed between two reports of the same fleet (`gpuhost diff OLD.json NEW.json`, and
`gpuhost audit --baseline OLD.json`): the findings that are new, resolved, worse or better,
the hosts that came or went or stopped answering, and the paths that lost or regained what
their hardware allows (a proof's verdicts).

Severity is the report's (report.SEVERITY, worst first: unreachable, error, manual, drift,
pending_reboot); pass, na and waived count as fine. Exit status: 0 when nothing is new or
worse, 2 when something is, 1 for a file that is not a gpuhost report."""
from __future__ import annotations

import json
from pathlib import Path

from rich.text import Text

from .report import SCHEMA, SEVERITY

FINE = ("pass", "na", "waived")
BAD_PATH = ("below", "wrong data", "error", "refused")


class NotAReport(ValueError):
    """One line: the file and why it is no gpuhost report."""


def load(path: str | Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise NotAReport(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise NotAReport(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("hosts"), dict):
        raise NotAReport(f"{path}: not a gpuhost report (schema {SCHEMA})")
    return data


def _rank(status: str) -> int:
    """Lower is worse; everything fine ranks alike."""
    return SEVERITY.index(status) if status in SEVERITY and status != "waived" else len(SEVERITY)


def _statuses(h: dict) -> dict[str, dict]:
    if not h.get("reachable", True):
        return {"(host)": {"status": "unreachable", "message": h.get("error") or "unreachable"}}
    return {f["control"]: f for f in h.get("findings") or []}


def _paths(h: dict) -> dict[tuple, dict]:
    out = {}
    for p in (h.get("proof") or {}).get("paths") or []:
        key = (p["path"], p.get("gpu"), p.get("peer"), p.get("numa"))
        out[key] = p
    return out


def _path_name(key: tuple) -> str:
    path, gpu, peer, numa = key
    where = "all GPUs" if gpu is None else f"GPU{gpu}" + (f"-GPU{peer}" if peer is not None else "")
    return f"{path} {where}" + (f" ({numa})" if numa in ("remote",) else "")


def compare(old: dict, new: dict) -> dict:
    """{new, resolved, worse, better, hosts_added, hosts_gone, paths_lost, paths_regained}:
    each a list of {host, control or path, was, now, message}."""
    out = {k: [] for k in ("new", "resolved", "worse", "better", "paths_lost", "paths_regained")}
    out["hosts_added"] = sorted(set(new["hosts"]) - set(old["hosts"]))
    out["hosts_gone"] = sorted(set(old["hosts"]) - set(new["hosts"]))
    for host in sorted(set(old["hosts"]) & set(new["hosts"])):
        before, after = _statuses(old["hosts"][host]), _statuses(new["hosts"][host])
        for control in sorted(set(before) | set(after)):
            was = (before.get(control) or {}).get("status", "pass")
            now = (after.get(control) or {}).get("status", "pass")
            if was == now:
                continue
            row = {"host": host, "control": control, "was": was, "now": now,
                   "message": (after.get(control) or before.get(control) or {}).get("message") or ""}
            if was in FINE and now not in FINE:
                out["new"].append(row)
            elif now in FINE and was not in FINE:
                out["resolved"].append(row)
            elif _rank(now) < _rank(was):
                out["worse"].append(row)
            elif _rank(now) > _rank(was):
                out["better"].append(row)
        then, now_paths = _paths(old["hosts"][host]), _paths(new["hosts"][host])
        for key in sorted(set(then) & set(now_paths), key=str):
            a, b = then[key]["verdict"], now_paths[key]["verdict"]
            row = {"host": host, "path": _path_name(key), "was": a, "now": b,
                   "message": now_paths[key].get("error") or ""}
            if a not in BAD_PATH and b in BAD_PATH:
                out["paths_lost"].append(row)
            elif a in BAD_PATH and b not in BAD_PATH:
                out["paths_regained"].append(row)
    return out


def exit_code(diff: dict) -> int:
    return 2 if diff["new"] or diff["worse"] or diff["paths_lost"] else 0


TITLES = (("new", "new since then", "yellow"), ("worse", "worse", "red"), ("paths_lost", "paths that lost their limit", "red"),
          ("resolved", "resolved", "green"), ("better", "better, still not fine", "cyan"),
          ("paths_regained", "paths back within their limit", "green"))


def lines(diff: dict, old_name: str, new_name: str) -> list[Text]:
    """The diff for a terminal or a log: a section per kind of change, a line per change."""
    out = [Text(f"changes from {old_name} to {new_name}", style="bold")]
    for key, title, style in TITLES:
        rows = diff[key]
        if not rows:
            continue
        out.append(Text(f"{title} ({len(rows)}):", style=style))
        for r in rows:
            what = r.get("control") or r.get("path")
            t = Text(f"  {r['host']}  {what}: {r['was']} → ")
            t.append(r["now"], style=style)
            if r.get("message"):
                t.append(f"  {r['message']}")
            out.append(t)
    for key, title in (("hosts_added", "hosts only in the new report"), ("hosts_gone", "hosts only in the old report")):
        if diff[key]:
            out.append(Text(f"{title}: {' '.join(diff[key])}", style="dim"))
    if len(out) == 1:
        out.append(Text("nothing changed", style="dim"))
    counts = ", ".join(f"{len(diff[k])} {t.split(',')[0]}" for k, t, _ in TITLES if diff[k])
    out.append(Text(f"diff: {counts or 'no change'}"))
    return out
