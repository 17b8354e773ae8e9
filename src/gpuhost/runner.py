"""Running gpuhost's playbooks through ansible-runner.

One ``PlaybookRun`` builds the runner arguments once, runs in its own private data
directory with its own ident, and collects results from events: per-host findings from
``set_stats`` (the stats event's artifact data), unreachable hosts and failed tasks from
their events. Nothing is read from the printed log.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import ansible_runner
import ptyprocess          # pexpect's, which ansible-runner runs ansible-playbook through

from ansible_collections.gpuhost.stack.plugins.module_utils.failure import BAD_INPUT_MARK, describe

from . import COLLECTION, COLLECTIONS
from .ansiblecfg import callbacks_enabled, merged_config

# the collection's root: the checkout itself, or the wheel's copy of it
PROJECT = COLLECTION
PLAYBOOKS = PROJECT / "playbooks"
CHECK_TASK = "Check the inventory"
AUDIT_TASK = "Read and judge the host"      # the audit action's task in the roles' common
LOCK_TASK = "Wait for and take the host's lock"
TRY_LOCK_TASK = "Take the host's lock if it is free"
LOCAL_INVENTORY = {"all": {"hosts": {"localhost": {
    "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}}}}


@contextlib.contextmanager
def no_close_delay_after_exit():
    """ptyprocess's close() sleeps delayafterclose (0.1 s), "to give the kernel time to
    update process status", before it checks that the child is gone. ansible-runner closes
    the play's pty only after its loop has seen the play exit and read its output to EOF, so
    on every run that sleep is dead time (a third of the CLI's own time on one host). Within
    this block a child that has already exited is closed without it; one still alive keeps
    ptyprocess's delay and its SIGHUP-then-SIGKILL as they are."""
    original = ptyprocess.PtyProcess.close

    def close(self, force=True):
        if not self.isalive():
            self.delayafterclose = 0
        return original(self, force=force)

    ptyprocess.PtyProcess.close = close
    try:
        yield
    finally:
        ptyprocess.PtyProcess.close = original


# an unreachable task whose connection could not even be made changed nothing; any other may
# have ("Data could not be sent" is also what a connection that dropped while the module ran
# says, with pipelining)
NEVER_SENT = re.compile(r"Failed to connect to the host|Could not resolve hostname|Connection refused|No route to host")


def known_controls() -> dict:
    """The controls by ID. The registry (every control's module, some 30 ms) is imported when
    first asked for, from an event once ansible-playbook is running, not before it starts."""
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls import BY_ID

    return BY_ID


def control_of(task: str) -> str:
    """The control a task works on: its name ends in the control ID ("Apply it now | pcie.mrrs")."""
    return task.rsplit(" | ", 1)[-1].strip()


@dataclass
class RunResult:
    status: str                                  # successful | failed | timeout | canceled
    rc: int
    reports: dict[str, dict] = field(default_factory=dict)      # host -> {findings, changed, facts}
    unreachable: dict[str, str] = field(default_factory=dict)   # host -> reason
    failed: dict[str, str] = field(default_factory=dict)        # host -> "task: reason"
    # host -> control -> "task: reason": a control's fix step failed (its rescue reports it)
    control_failed: dict[str, dict[str, str]] = field(default_factory=dict)
    # host -> controls a task changed, as the events said: kept for a host that goes away
    # before its report (its set_stats never runs)
    changes: dict[str, list[str]] = field(default_factory=dict)
    # host -> [(task, diff)]: what each task changed or, in check mode, would change
    diffs: dict[str, list[tuple[str, dict]]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    # host -> the task that was running on it when it went away: it may have changed the host
    in_flight: dict[str, str] = field(default_factory=dict)
    bad_input: str | None = None                                # the inventory check's one line


@dataclass
class PlaybookRun:
    playbook: str
    inventory: str | dict
    check: bool = False
    diff: bool = False
    limit: str | None = None
    extravars: dict = field(default_factory=dict)
    on_event: Callable[[dict], None] | None = None
    timeout: int | None = None
    task_timeout: int = 120          # every task (ANSIBLE_TASK_TIMEOUT); 0: none
    # None: ansible-runner's own SIGINT/SIGTERM handling (kills the play); a callable is
    # asked instead, so a run that changes hosts is never killed mid-change
    cancel: Callable[[], bool] | None = None
    flags: list[str] = field(default_factory=list)     # more ansible-playbook flags (-u, -b, -e ...)

    @staticmethod
    def _keep_diffs(result: RunResult, host: str, task: str, res: dict) -> None:
        parts = [res] + [r for r in res.get("results") or [] if isinstance(r, dict)]
        for part in parts:
            diff = part.get("diff")
            for d in (diff if isinstance(diff, list) else [diff] if diff else []):
                if isinstance(d, dict) and (d.get("before") != d.get("after") or d.get("prepared")):
                    result.diffs.setdefault(host, []).append((task, d))
            if part is res and res.get("msg") and str(res.get("msg")).startswith("would "):
                result.diffs.setdefault(host, []).append((task, {"prepared": str(res["msg"]) + "\n"}))

    def run(self) -> RunResult:
        from ansible_collections.gpuhost.stack.plugins.module_utils.runs import scratch_dir, sweep
        sweep()         # what killed runs left in $TMPDIR (a SIGKILL runs no cleanup)
        private = Path(scratch_dir("gpuhost-run-"))
        ident = uuid.uuid4().hex[:12]
        result = RunResult(status="failed", rc=-1)
        seen_hosts: list[str] = []
        running: dict[str, str] = {}
        # audit.yml: each host's report is its audit task's result (site.yml's come through the stats)
        audit, judged = self.playbook == "audit.yml", {}

        def handler(event: dict) -> bool:
            data = event.get("event_data") or {}
            kind = event.get("event")
            host = data.get("host")
            msg = str((data.get("res") or {}).get("msg") or "") if kind == "runner_on_failed" else ""
            if data.get("task") == CHECK_TASK or BAD_INPUT_MARK in msg:
                # the inventory check (site.yml) or the audit action's own check of its host's variables
                if kind == "runner_on_failed" and not result.bad_input:
                    result.bad_input = msg.split(BAD_INPUT_MARK, 1)[-1].strip().splitlines()[0] if msg else "bad inventory"
                return False        # said once, in its own one line
            if result.bad_input:
                return False        # the run is being stopped: bad input is all it says
            if host and host not in seen_hosts and kind in ("runner_on_start", "runner_on_ok", "runner_on_unreachable"):
                seen_hosts.append(host)
            if host and kind == "runner_on_start":
                running[host] = str(data.get("task") or "")
            elif host and kind == "runner_on_unreachable" and not self.check and running.get(host) == data.get("task") \
                    and control_of(running[host]) in known_controls() and not NEVER_SENT.search(str((data.get("res") or {}).get("msg"))):
                result.in_flight[host] = running[host]       # it started and its host went: maybe done
            elif host and kind in ("runner_on_ok", "runner_on_failed", "runner_on_skipped"):
                running.pop(host, None)
            if kind == "runner_on_unreachable" and host and data.get("task") in (LOCK_TASK, TRY_LOCK_TASK):
                pass        # another run rebooted the host while this one waited: the lock tasks wait for it
            elif kind == "runner_on_unreachable" and host:
                res = data.get("res") or {}
                msg = str(res.get("msg") or "unreachable")
                if "IDENTIFICATION HAS CHANGED" in msg:
                    msg = f"host key for {host} does not match known_hosts (refused: check the key before trusting it)"
                elif re.search(r"No \S+ host key is known for", msg):
                    # OpenSSH sshconnect.c, strict checking with no entry: a host never seen, not a changed key
                    msg = (f"no host key for {host} in known_hosts (refused: check its fingerprint, then add it, "
                           "e.g. ssh-keyscan)")
                elif "Host key verification failed" in msg:
                    msg = f"host key for {host} could not be verified against known_hosts (refused)"
                result.unreachable[host] = msg.strip().splitlines()[0]
            elif kind == "runner_on_failed" and host and not data.get("ignore_errors"):
                task = str(data.get("task") or "?")
                # a control's fix task fails into its rescue, which records it in the report
                # and lets the host's other controls go on: that is not the host failing
                cid, why = control_of(task), f"{task}: {describe(data.get('res'))}"
                if cid in known_controls():
                    result.control_failed.setdefault(host, {}).setdefault(cid, why)
                else:
                    result.failed.setdefault(host, why)
            elif kind == "runner_on_ok" and host and audit and data.get("task") == AUDIT_TASK:
                # gpuhost_report_json: the findings and summary as one JSON string (App.play)
                try:
                    got = json.loads((data.get("res") or {})["gpuhost_report"])
                except (KeyError, TypeError, ValueError):
                    got = None      # no report from the host: App.hosts_from says so
                if isinstance(got, dict):
                    judged[host] = {"changed": [], "failed": {}, "findings": got.get("findings") or {},
                                    "facts": got.get("summary") or {},
                                    **({"proof": got["proof"]} if "proof" in got else {})}
            elif kind == "runner_on_ok" and host and (data.get("res") or {}).get("changed"):
                self._keep_diffs(result, host, str(data.get("task") or ""), data["res"])
                cid = control_of(str(data.get("task") or ""))
                if cid in known_controls() and cid not in result.changes.setdefault(host, []):
                    result.changes[host].append(cid)
            elif kind == "playbook_on_stats":
                stats = (data.get("artifact_data") or {}).get("gpuhost") or {}
                result.reports.update(stats)
            if self.on_event:
                self.on_event(event)
            return False        # keep no per-event files: the handler has what we need

        cmdline = list(self.flags)
        if self.check:
            cmdline.append("--check")
        if self.diff:
            cmdline.append("--diff")
        config = merged_config(private)
        env = {"ANSIBLE_CONFIG": str(config),
               # the run guard whatever the operator's environment says: ANSIBLE_CALLBACKS_ENABLED
               # (common in CI) would otherwise replace the config's list and drop it
               "ANSIBLE_CALLBACKS_ENABLED": callbacks_enabled(config),
               # ansible-runner turns host key checking off unless told: a GPU host whose key
               # changed is someone else's until an operator says otherwise
               "ANSIBLE_HOST_KEY_CHECKING": "True",
               # a hung tool on one host (nvidia-smi on a wedged GPU) fails that host, not the run
               "ANSIBLE_TASK_TIMEOUT": str(self.task_timeout),
               # gpuhost.stack from this package first, then wherever the operator keeps collections
               "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(
                   [str(COLLECTIONS)] + [p for p in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep) if p]
                   + [str(Path.home() / ".ansible/collections"), "/usr/share/ansible/collections"]),
               "ANSIBLE_NOCOLOR": "1",
               # the run guard callback: keep this run's host locks live, stop when gpuhost is gone
               "GPUHOST_RUN_FILE": str((self.extravars.get("gpuhost_run") or {}).get("file") or ""),
               "GPUHOST_STOP_FILE": str(self.extravars.get("gpuhost_stop_file") or ""),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
        def cancel() -> bool:
            # bad input on any host stops a read-only run (the audit action checks each host's
            # own variables), which its caller may also cut short; a fix is never killed here
            # (its inventory check stops it before any host is touched)
            return self.check and (bool(result.bad_input) or bool(self.cancel and self.cancel()))

        try:
            with no_close_delay_after_exit():
                r = ansible_runner.run(
                    private_data_dir=str(private), ident=ident, project_dir=str(PLAYBOOKS),
                    playbook=str(PLAYBOOKS / self.playbook), inventory=self.inventory,
                    limit=self.limit, extravars=self.extravars or None, cmdline=shlex.join(cmdline) or None,
                    envvars=env, event_handler=handler, quiet=True, timeout=self.timeout,
                    suppress_env_files=True, rotate_artifacts=1, cancel_callback=cancel)
            result.status, result.rc = r.status, r.rc
        finally:
            shutil.rmtree(private, ignore_errors=True)
        result.hosts = seen_hosts
        for host, report in judged.items():
            result.reports.setdefault(host, report)
        return result
