"""The report as JUnit XML, as Jenkins and GitLab read it (checked against Jenkins' xunit
junit-10.xsd): a testsuite per host, a testcase per control; drift, manual and
pending_reboot fail, error is an error, na and waived are skipped, pass passes."""
from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import FAILING


def detail(f: dict) -> str:
    return f"{f['message']}\nobserved: {f['observed']}\nexpected: {f['expected']}"


def testcase(suite: ET.Element, host: str, f: dict) -> str:
    """One finding as a testcase; returns what it counts as."""
    case = ET.SubElement(suite, "testcase", classname=host, name=f["control"])
    status = f["status"]
    if status in FAILING:
        ET.SubElement(case, "failure", type=status, message=f"{status}: {f['message']}").text = detail(f)
        return "failures"
    if status == "error":
        ET.SubElement(case, "error", type="error", message=f["message"] or "error").text = detail(f)
        return "errors"
    if status in ("na", "waived"):
        ET.SubElement(case, "skipped", type=status, message=f"{status}: {f['message']}")
        return "skipped"
    return "passed"


def path_case(suite: ET.Element, host: str, p: dict, in_container: bool = False) -> str:
    """gpuhost prove: one path as a testcase (below its limit fails, not measured is an
    error, refused or not judged is skipped, and so is a copy from a CPU off the GPU's node
    on a host: a reference, as in the conclusion and the exit status)."""
    where = "all" if p.get("gpu") is None else (f"GPU{p['gpu']}" + (f"-GPU{p['peer']}" if p.get("peer") is not None else ""))
    name = f"{p['path']} {where}" + (f" {p['numa']}" if p.get("numa") in ("remote", "unknown") else "") + \
        (" via host" if p.get("via") == "host" else "")
    case = ET.SubElement(suite, "testcase", classname=f"{host}.proof", name=name)
    figure = (f"{p['median']:.3g} {p.get('unit', '')} of {p['limit']['value']:.3g} ({p['fraction'] * 100:.0f}%)"
              if p.get("fraction") is not None else "")
    why = "; ".join(a.get("control", a.get("fact", "")) + (f" {a['status']}" if a.get("status") else "")
                    for a in p.get("attribution") or [])
    if p["verdict"] == "below" and p.get("numa") == "remote" and not in_container:
        ET.SubElement(case, "skipped", type="reference", message=f"a CPU off the GPU's node, for reference: {figure}")
        return "skipped"
    if p["verdict"] == "wrong data":
        ET.SubElement(case, "failure", type="wrong_data", message="the peer copy's bytes did not arrive").text = why
        return "failures"
    if p["verdict"] == "below":
        ET.SubElement(case, "failure", type="below", message=f"below its limit: {figure}").text = \
            f"{figure}\n{p['limit']['formula']}\nbears on it: {why or 'nothing gpuhost checks'}"
        return "failures"
    if p["verdict"] == "error":
        ET.SubElement(case, "error", type="error", message=p.get("error") or "error").text = p.get("error") or ""
        return "errors"
    if p["verdict"] in ("refused", "not judged"):
        ET.SubElement(case, "skipped", type=p["verdict"].replace(" ", "_"),
                      message=p.get("error") or f"{p['verdict']}: no physical limit to hold it against")
        return "skipped"
    return "passed"


def document(report: dict) -> ET.Element:
    suites = ET.Element("testsuites", name=f"gpuhost {report['mode']}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for host, h in report["hosts"].items():
        suite = ET.SubElement(suites, "testsuite", name=host, hostname=host, timestamp=report["started"])
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "passed": 0}
        if not h["reachable"] or h.get("error"):
            case = ET.SubElement(suite, "testcase", classname=host, name="reachable")
            why = h.get("error") or "unreachable"
            ET.SubElement(case, "error", type="unreachable" if not h["reachable"] else "failed", message=why).text = why
            counts["tests"] += 1
            counts["errors"] += 1
        for f in h["findings"]:
            counts["tests"] += 1
            counts[testcase(suite, host, f)] += 1
        for p in (h.get("proof") or {}).get("paths") or []:
            counts["tests"] += 1
            counts[path_case(suite, host, p, bool(h["proof"].get("in_container")))] += 1
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
            totals[key] += counts[key]
    for key in ("tests", "failures", "errors"):     # the schema's testsuites has no skipped
        suites.set(key, str(totals[key]))
    return suites


def write(report: dict, path: str | Path) -> None:
    root = document(report)
    ET.indent(root)
    Path(path).write_text('<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n")
