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
    """Why each n/a control is n/a, said once per reason and set of controls (inside a
    container, no GPU, not Proxmox VE), with the hosts that share it, instead of a column of
    bare "na" cells to be guessed at: a reason of one control too (no CUDA runtime found)."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for name, h in report["hosts"].items():
        reasons: dict[str, list[str]] = {}
        for f in h.get("findings") or []:
            if f["status"] == "na" and f.get("message"):
                reasons.setdefault(f["message"], []).append(f["control"])
        for message, cids in reasons.items():
            groups.setdefault((message, tuple(cids)), []).append(name)
    lines = []
    for (message, cids), hosts in sorted(groups.items(), key=lambda kv: (-len(kv[0][1]), kv[0][1])):
        what = f"{len(cids)} controls" if len(cids) > 1 else cids[0]
        room = max(20, width - len(what) - 8)
        head = Text("n/a", style=STYLES["na"]).append(f"  {names_that_fit(hosts, room)}: {what}", style="bold")
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


VERDICT_STYLES = {"ok": "green", "below": "yellow", "not judged": "dim", "error": "red", "refused": "magenta",
                  "wrong data": "red", "better": "green", "worse": "red", "no measurable effect": "dim",
                  "now delivers its data": "green", "now loses its data": "red"}


def _figure(value, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.1f} {unit}" if value >= 10 else f"{value:.2f} {unit}"


def path_name(p: dict) -> str:
    """A path as the table names it: host_to_gpu GPU0 (node 1, remote), gpu_to_gpu GPU0→GPU3 (host)."""
    gpu = p.get("gpu")
    where = "all GPUs" if gpu is None and p.get("path") != "all" else f"GPU{gpu}"
    if p.get("peer") is not None:
        where += f"→GPU{p['peer']}"
    extra = [f"node {p['cpu_node']}" + (f", {p['numa']}" if p.get("numa") in ("remote", "unknown") else "")
             if p.get("cpu_node") is not None and p["path"] in ("host_to_gpu", "gpu_to_host") else None,
             p.get("via") if p.get("via") == "host" else None]
    extra = [e for e in extra if e]
    return f"{p['path']} {where}" + (f" ({'; '.join(extra)})" if extra else "")


def effect_groups(proof: dict) -> list[dict]:
    """fix --prove: per fix that ran, each kind of path it bears on, its GPUs together: the
    medians before and after (the median over GPUs) and how many GPUs got each verdict."""
    groups: dict[tuple, list[dict]] = {}
    for e in proof.get("effects") or []:
        groups.setdefault((e["control"], e["path"], e.get("numa"), e.get("unit")), []).append(e)
    out = []
    for (cid, path, numa, unit), rows in groups.items():
        before = sorted(r["before"] for r in rows)[len(rows) // 2]
        after = sorted(r["after"] for r in rows)[len(rows) // 2]
        count = len({(r.get("gpu"), r.get("peer")) for r in rows})
        which = ("all GPUs" if path == "host_to_all_gpus" else
                 f"{count} {'pair' if path.startswith('gpu_to_gpu') else 'GPU'}{'s' if count != 1 else ''}")
        verdicts: dict[str, int] = {}
        for r in rows:
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        out.append({"control": cid, "path": path + (f" ({numa})" if numa == "remote" else ""), "which": which,
                    "unit": unit or "", "before": before, "after": after, "change": (after - before) / before,
                    "verdicts": sorted(verdicts.items(), key=lambda kv: -kv[1])})
    return out


def effect_lines(proof: dict) -> list[Text]:
    """e.g. "cpu.cstates: launch_sync, 8 GPUs: 25.1 us → 8.46 us (-66%): better on 8"."""
    groups = effect_groups(proof)
    out = [Text("effect of each fix (before → after, the median over GPUs; within the noise: no measurable effect)",
                style="dim")] if groups else []
    for g in groups:
        t = Text(f"  {g['control']}: {g['path']}, {g['which']}: {_figure(g['before'], g['unit'])} → "
                 f"{_figure(g['after'], g['unit'])} ({g['change'] * 100:+.0f}%): ")
        for i, (word, n) in enumerate(g["verdicts"]):
            if i:
                t.append(", ")
            t.append(f"{word} on {n}", style=VERDICT_STYLES.get(word, ""))
        out.append(t)
    for cid in proof.get("unmeasured_fixes") or []:
        out.append(Text(f"  {cid}: no measured path bears on it", style="dim"))
    return out


def proof_lines(name: str, proof: dict, width: int) -> list[Text]:
    """One host's proof: path, measured (median ± spread), limit, share, verdict, and what bears
    on a path that falls short; then the before/after of each fix, and the conclusion."""
    out = [Text(f"{name}: paths against their limits ({proof.get('method', 'measured')})", style="bold")]
    rows = []
    for p in proof.get("paths") or []:
        unit = p.get("unit") or ""
        # the median, and ± half the range of the repeats around it
        measured = (_figure(p.get("median"), unit) + (f" ±{p['spread'] * 50:.0f}%" if p.get("spread") is not None else "")
                    if p.get("median") is not None else "-")
        lim = p.get("limit") or {}
        share = f"{p['fraction'] * 100:.0f}%" if p.get("fraction") is not None else "-"
        why = p.get("error") or "; ".join(a.get("control", a.get("fact", "")) + (f" {a['status']}" if a.get("status") else "")
                                          for a in p.get("attribution") or [])
        rows.append((path_name(p), measured, _figure(lim.get("value"), lim.get("unit") or ""), share, p["verdict"], why))
    heads = ("path", "measured", "limit", "%", "verdict", "bears on it (or why not measured)")
    cols = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads[:5])]
    line = "  ".join(h.ljust(cols[i]) for i, h in enumerate(heads[:5])) + "  " + heads[5]
    out.append(Text(line, style="dim"))
    for r in rows:
        t = Text("  ".join(r[i].ljust(cols[i]) for i in range(4)) + "  ")
        t.append(r[4].ljust(cols[4]), style=VERDICT_STYLES.get(r[4], ""))
        if r[5]:
            t.append("  " + r[5])
        out.append(t)
    out += effect_lines(proof)
    if proof.get("conclusion"):
        out += indented(f"{name}: {proof['conclusion']}", 0, width, style="bold")
    return out


def render(report: dict, console) -> None:
    width = max(40, console.width)
    hosts = report["hosts"]
    controls = [r["id"] for r in rep.control_summary(report)]
    if not controls and any(host_failed(h) for h in hosts.values()):
        controls = [c.id for c in CATALOG]
    body = matrix(report, controls, width) or fleet(report, controls, width)
    for line in body:
        console.print(line, soft_wrap=True, highlight=False)
    for name, h in hosts.items():
        if h.get("proof"):
            console.print()
            for line in proof_lines(name, h["proof"], width):
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
        proof = h.get("proof") or {}
        if proof and not proof.get("deferred"):
            failing += ("; " if failing else ": ") + f"paths ({proof.get('method', 'measured')}): {proof.get('conclusion', '')}"
            if word == "OK" and rep.exit_code({"hosts": {name: h}}) != rep.EXIT_OK:
                word = "FAIL"
        console.print(Text(f"{name}: {word} {tally}" + (f": {failing}" if failing and not failing.startswith(": ") else failing)),
                      soft_wrap=True, highlight=False)
