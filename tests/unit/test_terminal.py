"""The terminal report at 80 and 200 columns, for 1, 6 and 50 hosts: no line wider than
the terminal, no control ID or host name cut, a matrix when it fits, a fleet summary when
not, problems worst first with what to do."""
from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

import fleet
from gpuhost import report as rep
from gpuhost import terminal
from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG

IDS = {c.id for c in CATALOG}


def rendered(n: int, width: int, mode: str = "audit", **console) -> tuple[str, dict]:
    hosts = fleet.fleet_hosts(n, mode)
    before = fleet.fleet_hosts(n, "audit") if mode == "fix" else None
    report = rep.build(mode, rep.now(), hosts, before)
    out = io.StringIO()
    terminal.render(report, Console(file=out, width=width, **({"no_color": True} | console)))
    return out.getvalue(), report


def cut_words(text: str, whole: set[str]) -> set[str]:
    """Words that are a strict prefix of a host name or control ID: something was cut."""
    words = set(re.findall(r"[A-Za-z0-9][\w.\-]*", text))
    return {w for w in words - whole for name in whole if name.startswith(w) and len(w) >= 6
            and not any(name.startswith(w + sep) for sep in ".-")}


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("n", [1, 6, 50])
def test_no_line_is_wider_than_the_terminal_and_no_name_is_cut(n, width):
    text, report = rendered(n, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, max(lines, key=len)
    names = set(report["hosts"])
    assert not cut_words(text, names | IDS)
    # every control with a finding is there by its whole ID, as a row of the matrix or the summary
    assert {c for c in IDS if re.search(rf"^{re.escape(c)}\s", text, re.M)} == IDS
    # every failing host is named in full somewhere, or counted in a "+N more"
    shown = {h for h in names if re.search(rf"(?<![\w.-]){re.escape(h)}(?![\w.-])", text)}
    failing = {h for h, e in report["hosts"].items() if not e["reachable"] or e.get("error")
               or any(f["status"] in ("drift", "manual", "error") for f in e["findings"])}
    assert failing - shown == set() or "more" in text


def test_a_few_hosts_get_a_matrix_with_every_host_as_a_column():
    text, report = rendered(6, 200)
    header = text.splitlines()[0].split()
    assert header == ["control", *report["hosts"]]


def test_a_fleet_gets_a_summary_per_control_and_its_problems_worst_first():
    text, report = rendered(50, 80)
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["control", "pass", "drift", "manual"], lines[0]
    row = next(line for line in lines if line.startswith("pcie.mrrs "))
    passing = sum(1 for h in report["hosts"].values() for f in h["findings"]
                  if f["control"] == "pcie.mrrs" and f["status"] == "pass")
    drifting = sum(1 for h in report["hosts"].values() for f in h["findings"]
                   if f["control"] == "pcie.mrrs" and f["status"] == "drift")
    assert row.split()[1:3] == [str(passing) if passing else "·", str(drifting)], row
    kinds = [line.split()[0] for line in lines if re.match(r"^(unreachable|error|manual|drift|pending_reboot)\s", line)]
    assert kinds == sorted(kinds, key=terminal.SEVERITY.index) and kinds[0] == "unreachable" and "drift" in kinds
    drift = next(i for i, line in enumerate(lines) if line.startswith("drift ") and " pcie.mrrs " in line)
    block = " ".join(lines[drift + 1:next(i for i in range(drift + 1, len(lines)) if not lines[i].startswith(" "))])
    assert "→ gpuhost fix --controls pcie.mrrs" in block, block
    assert len(lines) < 120, "a fleet's report stays a page or two: the same problem on many hosts is one line"
    assert lines[-1].startswith("audit: 50 hosts, ")


def test_a_failed_host_shows_what_changed_not_failed_in_every_cell():
    text, report = rendered(3, 200, mode="fix")
    failed = fleet.host_name(1)
    col = text.splitlines()[0].index(failed)
    cells = {line.split()[0]: line[col:].split("  ")[0].strip() for line in text.splitlines()[1:15]}
    assert cells["numa.balancing"] == "drift ✎" and cells["cpu.cstates"] == "drift ✎"
    assert cells["pcie.mrrs"] == "drift" and "failed" not in text.splitlines()[1]
    assert re.search(rf"^error\s+\(host\)\s+{re.escape(failed)}", text, re.M)
    assert "setpci exited 1" in text and "changed: cpu.cstates, numa.balancing" in " ".join(text.split())


def test_colour_only_on_a_terminal_that_wants_it():
    coloured, _ = rendered(1, 120, force_terminal=True, no_color=False, color_system="standard")
    assert "\x1b[" in coloured
    assert "\x1b[33m" in coloured, "drift in yellow"
    plain, _ = rendered(1, 120, force_terminal=True, no_color=True)       # NO_COLOR, --no-color
    assert not re.search(r"\x1b\[[0-9;]*(3[0-7]|9[0-7])m", plain), "bold may stay, colour may not"


def test_why_a_hosts_controls_are_na_is_said_once_per_reason():
    """Issue 16 (small things): a local audit inside a container showed fourteen bare "na"
    cells; the reason shared by several controls is said once, under the problems. Issue 39:
    a reason of one control is said too (make audit's three that had none), and hosts that
    share a reason share its lines."""
    import io

    from rich.console import Console

    from gpuhost import terminal

    inside = "host-level control: this runs inside a docker container; audit its host"
    findings = [{"control": c, "status": "na", "message": inside} for c in ("cpu.driver", "cpu.governor", "numa.balancing")]
    findings.append({"control": "nvidia.driver", "status": "na", "message": "no NVIDIA GPU"})
    report = {"mode": "audit", "hosts": {"localhost": {"reachable": True, "findings": findings}}}
    report["hosts"]["other"] = {"reachable": True, "findings": [dict(f) for f in findings[3:]]}
    lines = [l.plain for l in terminal.not_applicable(report, 100)]
    assert lines == ["n/a  localhost: 3 controls", f"     {inside}",
                     "n/a  localhost other: nvidia.driver", "     no NVIDIA GPU"], lines
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=False)
    for line in terminal.not_applicable(report, 100):
        console.print(line)
    assert "no NVIDIA GPU" in out.getvalue()
