"""gpuhost.stack as an AWX/AAP project runs it: a stock execution environment (ansible-core,
ansible-runner and the collection from its tarball; no gpuhost package), the project's
audit playbook in check mode, findings in the job's artifacts (set_stats) and task results."""
from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

from conftest import COLLECTION, gpuhost

PROJECT_CFG = """[defaults]
# an audit leaves nothing on the host's disk: module files go to tmpfs
remote_tmp = /tmp/.ansible-${USER}
interpreter_python = /usr/bin/python3
host_key_checking = True
[ssh_connection]
pipelining = True
"""


def test_the_collection_runs_under_ansible_runner_without_the_gpuhost_package(seed_lab, tmp_path):
    bindir = Path(sys.executable).parent
    built = subprocess.run([str(bindir / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path), str(COLLECTION)],
                           capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stderr
    (tarball,) = tmp_path.glob("gpuhost-stack-*.tar.gz")
    collections = tmp_path / "collections"
    # as an EE build installs it: from the tarball, seeing no other copy (not the checkout's)
    alone = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), "ANSIBLE_COLLECTIONS_PATH": str(collections)}
    installed = subprocess.run([str(bindir / "ansible-galaxy"), "collection", "install", "-p", str(collections),
                                str(tarball)], capture_output=True, text=True, timeout=300, env=alone, cwd=tmp_path,
                               stdin=subprocess.DEVNULL)
    assert installed.returncode == 0, installed.stderr
    assert (collections / "ansible_collections/gpuhost/stack/playbooks/site.yml").is_file(), installed.stdout
    # the built collection on its own, without the checkout's .ansible-lint: production profile, clean
    lint = subprocess.run([str(bindir / "ansible-lint"), "--profile", "production", "--offline"],
                          cwd=collections / "ansible_collections/gpuhost/stack", capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL,
                          env={**alone, "NO_COLOR": "1", "PATH": f"{bindir}:/usr/bin:/bin"})
    assert lint.returncode == 0 and "Profile 'production' was required, and it passed." in lint.stderr, \
        lint.stdout[-3000:] + lint.stderr[-2000:]
    # the execution environment: ansible-core and ansible-runner, and no gpuhost package
    ee = tmp_path / "ee"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(ee)], check=True, timeout=120)
    (next((ee / "lib").glob("python3*/site-packages")) / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    for tool in bindir.glob("ansible*"):
        (ee / "bin" / tool.name).write_text(f"#!{ee / 'bin/python'}\n" + tool.read_text().split("\n", 1)[1])
        (ee / "bin" / tool.name).chmod(0o755)
    assert subprocess.run([str(ee / "bin/python"), "-c", "import gpuhost"], capture_output=True,
                          stdin=subprocess.DEVNULL).returncode != 0
    # the AWX project: its own playbook and ansible.cfg
    project = tmp_path / "private/project"
    project.mkdir(parents=True)
    (project / "audit.yml").write_text("- name: gpuhost audit\n  ansible.builtin.import_playbook: gpuhost.stack.site\n")
    (project / "ansible.cfg").write_text(PROJECT_CFG)
    env = {"PATH": f"{ee / 'bin'}:/usr/bin:/bin", "ANSIBLE_COLLECTIONS_PATH": str(collections),
           "ANSIBLE_CONFIG": str(project / "ansible.cfg"), "HOME": str(tmp_path)}

    def job(playbook: str, ident: str, cmdline: str, rc: int = 0) -> list[dict]:
        """The project's *playbook* run as a job; its events."""
        run = subprocess.run([str(ee / "bin/python"), "-m", "ansible_runner", "run", str(tmp_path / "private"),
                              "-p", playbook, "--inventory", str(seed_lab.inventory), "--limit", "pve-gpu1",
                              f"--cmdline={cmdline}", "--ident", ident],
                             env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        assert run.returncode == rc, run.stdout[-3000:] + run.stderr[-2000:]
        return [json.loads(p.read_text()) for p in (tmp_path / f"private/artifacts/{ident}/job_events").glob("*.json")]

    events = job("audit.yml", "job1", "--check")
    stats = next(e for e in events if e["event"] == "playbook_on_stats")["event_data"]["artifact_data"]["gpuhost"]
    task = next(e for e in events if e["event"] == "runner_on_ok"
                and e["event_data"].get("task") == "Read and judge the host")["event_data"]["res"]
    cli = gpuhost("audit", "-i", str(seed_lab.inventory), "--limit", "pve-gpu1")
    want = {f["control"]: f["status"] for f in cli.report["hosts"]["pve-gpu1"]["findings"]}
    assert {c: f["status"] for c, f in stats["pve-gpu1"]["findings"].items()} == want
    assert {c: f["status"] for c, f in task["ansible_facts"]["gpuhost_findings"].items()} == want
    assert "drift" in want.values()
    # a fix could follow this audit: each drift finding carries the plan its fix follows
    assert all(f.get("fix") for f in task["ansible_facts"]["gpuhost_findings"].values() if f["status"] == "drift")

    # the collection's own audit playbook, as `gpuhost audit` runs it (no fix plans asked for,
    # the report as one JSON string): the same judgement, its inventory check an action that
    # needs no gpuhost package either
    (project / "audit_only.yml").write_text("- name: gpuhost audit\n  ansible.builtin.import_playbook: gpuhost.stack.audit\n")
    events = job("audit_only.yml", "job2", "--check -e gpuhost_fix_plans=false -e gpuhost_report_json=true")
    checked = sorted(e["event"] for e in events if e.get("event_data", {}).get("task") == "Check the inventory"
                     and e["event"].startswith("runner_on_"))
    assert checked == ["runner_on_ok", "runner_on_start"], checked      # once, and it passed
    res = next(e for e in events if e["event"] == "runner_on_ok"
               and e["event_data"].get("task") == "Read and judge the host")["event_data"]["res"]
    assert "gpuhost_findings" not in (res.get("ansible_facts") or {}), "the report is not also a fact"
    report = json.loads(res["gpuhost_report"])
    assert {c: f["status"] for c, f in report["findings"].items()} == want
    assert not any("fix" in f for f in report["findings"].values())
    assert report["summary"]["gpus"] == 8 and report["reboot_required"] is False

    # the play's own output says what was found: a line per finding that is not pass or n/a,
    # each drifted control "changed" as a fix's check-mode task reports it (what an AWX job's
    # output and its host summary show), and gpuhost_audit_fail_on fails the host
    (project / "audit_plain.yml").write_text("- name: gpuhost audit\n  ansible.builtin.import_playbook: gpuhost.stack.audit\n")
    events = job("audit_plain.yml", "job3", "--check")
    said = [e["event_data"] for e in events if e["event"] == "runner_item_on_ok"
            and e["event_data"].get("task") == "Say what the judgement found"]
    drifted = {c for c, s in want.items() if s == "drift"}
    assert {d["res"]["item"]["control"] for d in said} == {c for c, s in want.items() if s not in ("pass", "na")}
    assert {d["res"]["item"]["control"] for d in said if d["res"]["changed"]} == drifted
    stats = next(e for e in events if e["event"] == "playbook_on_stats")["event_data"]
    assert stats["changed"] == {"pve-gpu1": 1} and not stats["failures"]
    events = job("audit_plain.yml", "job4", "--check -e gpuhost_audit_fail_on=drift", rc=2)
    failed = next(e for e in events if e["event"] == "runner_on_failed")["event_data"]
    assert failed["task"] == "Fail the host on findings at or above gpuhost_audit_fail_on"
    assert failed["res"]["msg"].startswith(f"{len(drifted)} finding(s) at or above drift: ")
    assert all(f"{c}: drift" in failed["res"]["msg"] for c in drifted)
