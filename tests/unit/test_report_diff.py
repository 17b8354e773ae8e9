"""gpuhost diff OLD NEW (and audit --baseline): what is new, resolved, worse or better since an
earlier report, the hosts that came, went or stopped answering, and the paths that lost or
regained their limit; exit 2 when anything is new or worse; a file that is no report is one
line, exit 1."""
from __future__ import annotations

import copy
import json
import subprocess
import sys

from gpuhost import reportdiff


def report(hosts: dict, mode="audit") -> dict:
    out = {"schema": "gpuhost.report/v1", "mode": mode, "started": "2026-12-06T03:00:00Z",
           "finished": "2026-12-06T03:00:04Z", "hosts": {}, "summary": {}}
    for name, statuses in hosts.items():
        if statuses is None:
            out["hosts"][name] = {"reachable": False, "error": "unreachable: ssh: connect timed out", "facts": {},
                                  "findings": []}
            continue
        out["hosts"][name] = {"reachable": True, "facts": {}, "findings": [
            {"control": c, "status": s, "message": f"{c} {s}"} for c, s in statuses.items()]}
    return out


YESTERDAY = report({"gpu1": {"cpu.driver": "drift", "pcie.mrrs": "pass", "pcie.link": "manual", "health.gpu": "pass",
                             "numa.balancing": "drift"},
                    "gpu2": {"cpu.driver": "pass"}, "gpu3": {"cpu.driver": "pass"}})
TODAY = report({"gpu1": {"cpu.driver": "pass", "pcie.mrrs": "drift", "pcie.link": "error", "health.gpu": "pass",
                         "numa.balancing": "pending_reboot"},
                "gpu2": None, "gpu4": {"cpu.driver": "pass"}})


def test_new_resolved_worse_better_and_the_hosts():
    d = reportdiff.compare(YESTERDAY, TODAY)
    pick = {k: [(r["host"], r["control"], r["was"], r["now"]) for r in d[k]] for k in ("new", "resolved", "worse", "better")}
    assert pick == {"new": [("gpu1", "pcie.mrrs", "pass", "drift"), ("gpu2", "(host)", "pass", "unreachable")],
                    "resolved": [("gpu1", "cpu.driver", "drift", "pass")],
                    "worse": [("gpu1", "pcie.link", "manual", "error")],
                    "better": [("gpu1", "numa.balancing", "drift", "pending_reboot")]}
    assert d["hosts_added"] == ["gpu4"] and d["hosts_gone"] == ["gpu3"]
    assert reportdiff.exit_code(d) == 2
    same = reportdiff.compare(YESTERDAY, copy.deepcopy(YESTERDAY))
    assert reportdiff.exit_code(same) == 0 and not any(same[k] for k in ("new", "resolved", "worse", "better"))


def test_paths_that_lose_or_regain_their_limit():
    old, new = report({"gpu1": {}}, "prove"), report({"gpu1": {}}, "prove")
    old["hosts"]["gpu1"]["proof"] = {"paths": [{"path": "host_to_gpu", "gpu": 0, "numa": "local", "verdict": "ok"},
                                               {"path": "gpu_to_gpu", "gpu": 0, "peer": 1, "verdict": "wrong data"}]}
    new["hosts"]["gpu1"]["proof"] = {"paths": [{"path": "host_to_gpu", "gpu": 0, "numa": "local", "verdict": "below"},
                                               {"path": "gpu_to_gpu", "gpu": 0, "peer": 1, "verdict": "ok"}]}
    d = reportdiff.compare(old, new)
    assert [(r["path"], r["was"], r["now"]) for r in d["paths_lost"]] == [("host_to_gpu GPU0", "ok", "below")]
    assert [(r["path"], r["was"], r["now"]) for r in d["paths_regained"]] == [("gpu_to_gpu GPU0-GPU1", "wrong data", "ok")]
    assert reportdiff.exit_code(d) == 2


def test_the_command(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps(YESTERDAY))
    (tmp_path / "new.json").write_text(json.dumps(TODAY))
    run = subprocess.run([sys.executable, "-m", "gpuhost.cli", "diff", "old.json", "new.json", "--json", "d.json",
                          "--no-color"], cwd=tmp_path, capture_output=True, text=True, timeout=60, env={"COLUMNS": "120",
                          "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2, run.stderr
    assert run.stdout.splitlines()[0] == "changes from old.json to new.json"
    assert "  gpu1  pcie.link: manual → error  pcie.link error" in run.stdout
    assert run.stdout.splitlines()[-1] == "diff: 2 new since then, 1 worse, 1 resolved, 1 better"
    assert json.loads((tmp_path / "d.json").read_text())["worse"][0]["control"] == "pcie.link"
    (tmp_path / "bad.json").write_text('{"schema": "other"}')
    bad = subprocess.run([sys.executable, "-m", "gpuhost.cli", "diff", "old.json", "bad.json"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and bad.stderr == "error: bad.json: not a gpuhost report (schema gpuhost.report/v1)\n"
    same = subprocess.run([sys.executable, "-m", "gpuhost.cli", "diff", "old.json", "old.json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert same.returncode == 0 and "nothing changed" in same.stdout
