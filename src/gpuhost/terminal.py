"""The report on a terminal or in a log, at any width from 80 columns and any number of hosts.

No control ID or host name is ever cut: for a few hosts, a matrix (controls as rows) when it
fits the width; otherwise a summary per control (hosts by status, which ones fail), then one
line per problem, worst first, each with what to do. Colour follows the console (NO_COLOR,
--no-color); the width follows it too (COLUMNS, or the terminal's).
"""
from __future__ import annotations

import textwrap

from rich.text import Text

from . import report as rep
from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG
from .report import SEVERITY, host_failed

STYLES = {"pass": "green", "drift": "yellow", "manual": "magenta", "pending_reboot": "cyan",
          "na": "dim", "waived": "blue", "error": "red", "unreachable": "red", "changed": "bold green"}
COUNTED = (("pass", "pass"), ("drift", "drift"), ("manual", "manual"), ("pending_reboot", "reboot"),
           ("error", "error"), ("na", "n/a"))
GAP = 2


def cell(f: dict | None, judged: bool) -> Text:
    """One host's state of one control: its status (before -> after in a fix), ✎ if changed.
    A control with no finding is "-", or "·" on a host that was not judged (unreachable from
    the start: not "failed" in every cell; the problem lines below say why). A host that
    failed during a fix keeps the audit's findings, its changes marked ✎."""
    if f is None:
        return Text("-" if judged else "·", style="dim")
    t = Text()
    was = f.get("before")
    if was and was != f["status"]:
        t.append(was, style=STYLES.get(was, "dim")).append(" → ")
    t.append(f["status"], style=STYLES.get(f["status"], ""))
    if f.get("changed"):
        t.append(" ✎")
    return t


def matrix(report: dict, controls: list[str], width: int) -> list[Text] | None:
    """Controls as rows, hosts as columns; None when that does not fit *width*."""
    hosts = report["hosts"]
    found = [({f["control"]: f for f in h["findings"]}, not host_failed(h)) for h in hosts.values()]
    rows = [[cell(by.get(cid), judged) for by, judged in found] for cid in controls]
    first = max([len("control")] + [len(c) for c in controls])
    widths = [max([len(name)] + [r[i].cell_len for r in rows]) for i, name in enumerate(hosts)]
    if first + sum(w + GAP for w in widths) > width:
        return None
    head = Text("control".ljust(first), style="bold")
    for name, w in zip(hosts, widths):
        head.append(" " * GAP).append(name.ljust(w), style="bold")
    lines = [head]
    for cid, cells in zip(controls, rows):
        line = Text(cid.ljust(first))
        for c, w in zip(cells, widths):
            line.append(" " * GAP).append_text(c).append(" " * (w - c.cell_len))
        lines.append(line)
    return lines


def names_that_fit(names: list[str], room: int) -> str:
    """As many whole host names as fit *room* columns, then "+N more"."""
    shown: list[str] = []
    used = 0
    for i, name in enumerate(names):
        rest = len(names) - i - 1
        tail = len(f" +{rest} more") if rest else 0
        if used + len(name) + (1 if shown else 0) + tail > room and shown:
            break
        shown.append(name)
        used += len(name) + (1 if len(shown) > 1 else 0)
    more = len(names) - len(shown)
    return " ".join(shown) + (f" +{more} more" if more else "")


def fleet(report: dict, controls: list[str], width: int) -> list[Text]:
    """A row per control: how many hosts are in each status, and which hosts fail."""
    rows = {r["id"]: r for r in rep.control_summary(report)}
    first = max([len("control")] + [len(c) for c in controls])
    cols = [len(label) + 1 for _, label in COUNTED]
    head = Text("control".ljust(first), style="bold")
    for (_, label), col in zip(COUNTED, cols):
        head.append(label.rjust(col), style="bold")
    room = width - first - sum(cols) - GAP
    inline = room >= 20
    if inline:
        head.append(" " * GAP).append("hosts that fail", style="bold")
    lines = [head]
    for cid in controls:
        line = Text(cid.ljust(first))
        row = rows.get(cid) or {"counts": {}, "failing": []}
        for (status, _), col in zip(COUNTED, cols):
            n = row["counts"].get(status, 0)
            line.append(str(n).rjust(col) if n else "·".rjust(col), style=STYLES[status] if n else "dim")
        if row["failing"]:
            if inline:
                line.append(" " * GAP).append(names_that_fit(row["failing"], room))
            else:
                lines.append(line)
                line = Text("  " + names_that_fit(row["failing"], width - 2), style="dim")
        lines.append(line)
    return lines


def problems(report: dict, width: int) -> list[Text]:
    """One line per problem, worst first; the same problem on many hosts is one line."""
    groups = rep.problems(report)
    lines = []
    label = max((len(g["status"]) for g in groups), default=0)
    idw = max((len(g["control"]) for g in groups), default=0)
    for g in groups:
        line = Text(g["status"].ljust(label), style=STYLES.get(g["status"], ""))
        line.append(f"  {g['control'].ljust(idw)}", style="bold")
        line.append(f"  {names_that_fit(g['hosts'], max(20, width - label - idw - 4))}")
        lines.append(line)
        lines += indented(g["message"], label + 2, width)
        lines += indented("→ " + g["remedy"], label + 2, width, style="dim")
    return lines


def not_applicable(report: dict, width: int) -> list[Text]:
    """Why a host's controls are n/a, said once per reason (inside a container, no GPU, not
    Proxmox VE) instead of leaving a column of bare "na" cells to be guessed at."""
    lines = []
    for name, h in report["hosts"].items():
        reasons: dict[str, list[str]] = {}
        for f in h.get("findings") or []:
            if f["status"] == "na" and f.get("message"):
                reasons.setdefault(f["message"], []).append(f["control"])
        for message, cids in reasons.items():
            if len(cids) < 2:
                continue
            head = Text("n/a", style=STYLES["na"]).append(f"  {name}: {len(cids)} controls", style="bold")
            lines.append(head)
            lines += indented(message, 5, width, style="dim")
    return lines


def indented(text: str, indent: int, width: int, style: str = "") -> list[Text]:
    """*text* wrapped at spaces under a hanging indent; a word (a path, a host name) is never split."""
    pad = " " * indent
    return [Text(line, style=style) for line in
            textwrap.wrap(text, width=max(width, indent + 20), initial_indent=pad, subsequent_indent=pad + "  ",
                          break_long_words=False, break_on_hyphens=False)] or [Text(pad)]


def summary_line(report: dict) -> Text:
    s = report["summary"]
    t = Text(f"{report['mode']}: {s['hosts']} host{'s' if s['hosts'] != 1 else ''}")
    for status in ("pass", "drift", "manual", "pending_reboot", "error", "na", "waived", "unreachable"):
        if s.get(status):
            t.append(", ")
            t.append(f"{s[status]} {status}", style=STYLES[status])
    return t


def render(report: dict, console) -> None:
    width = max(40, console.width)
    hosts = report["hosts"]
    controls = [r["id"] for r in rep.control_summary(report)]
    if not controls and any(host_failed(h) for h in hosts.values()):
        controls = [c.id for c in CATALOG]
    body = matrix(report, controls, width) or fleet(report, controls, width)
    for line in body:
        console.print(line, soft_wrap=True, highlight=False)
    trouble = problems(report, width) + not_applicable(report, width)
    if trouble:
        console.print()
        for line in trouble:
            console.print(line, highlight=False)
    console.print(summary_line(report), highlight=False)


def oneline(report: dict, console) -> None:
    """One line per host, for a scheduler's health check (Slurm's HealthCheckProgram, NHC):
    OK or FAIL, the counts, and which controls fail. The exit code says the same."""
    for name, h in report["hosts"].items():
        if host_failed(h):
            why = (h.get("error") or "unreachable").splitlines()[0]
            console.print(Text(f"{name}: ERROR {why}"), soft_wrap=True, highlight=False)
            continue
        bad = [f for f in h["findings"] if f["status"] in SEVERITY and f["status"] != "waived"]
        tally = ", ".join(f"{n} {s}" for s, n in rep.status_counts(h))
        word = "ERROR" if any(f["status"] == "error" for f in bad) else ("FAIL" if bad else "OK")
        failing = " ".join(f"{f['control']}={f['status']}" for f in bad)
        console.print(Text(f"{name}: {word} {tally}" + (f": {failing}" if failing else "")),
                      soft_wrap=True, highlight=False)
