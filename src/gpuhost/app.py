"""gpuhost audit / fix: the flows behind the command line (the options they take in
options.py, their progress lines in progress.py, gpuhost verify in verify.py).

What only the report and the terminal need (rich, the controls' registry, the report's
modules: some 60 ms of imports) loads once ansible-playbook has started, with the play's first
event or later, so that an audit's play does not wait for it: see ``play``.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .runner import AUDIT_TASK, LOCAL_INVENTORY, PlaybookRun, RunResult, known_controls
from ansible_collections.gpuhost.stack.plugins.module_utils.runs import end as end_run, register as register_run
from .options import BadInput, Options, parse_controls, parse_limit
from .progress import Progress, shown
from .verify import run_verify

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["App", "BadInput", "Options", "Progress", "parse_controls", "parse_limit", "run_verify", "shown"]


class App:
    def __init__(self, opts: Options, console: Console | None = None, err: Console | None = None):
        self.o = opts
        self._console, self._err = console, err
        self.started_at = _dt.datetime.now(_dt.timezone.utc)

    def _new_console(self, **how) -> Console:
        from rich.console import Console

        return Console(**({"no_color": True} if self.o.no_color else {}), **how)

    @property
    def console(self) -> Console:
        """The report's console, made when first used."""
        if self._console is None:
            # --json -: the JSON alone on standard output, the rest on standard error
            self._console = self._new_console(stderr=self.o.json == "-")
        return self._console

    @property
    def err(self) -> Console:
        """Progress and messages, on standard error, made when first used."""
        if self._err is None:
            # line-oriented messages (the plan, progress in a log): never wrapped mid-sentence
            self._err = self._new_console(stderr=True, soft_wrap=True)
        return self._err

    # ---- input -----------------------------------------------------------------------------
    def inventory(self) -> str | dict | list:
        """The inventory to run on: -i, else what Ansible would use ($ANSIBLE_INVENTORY, the
        operator's ansible.cfg), else this machine. Its variables are checked by the playbook's
        first play, which stops the run before any host is touched; see ``play``."""
        self.check_outputs()
        if self.o.inventory is not None:
            return self.inventory_source(self.o.inventory, "-i")
        from .ansiblecfg import inventory_sources

        sources = inventory_sources()
        if not sources:
            return LOCAL_INVENTORY
        where = "ANSIBLE_INVENTORY" if os.environ.get("ANSIBLE_INVENTORY") else "ansible.cfg's inventory"
        return [self.inventory_source(s, where) for s in sources]

    @staticmethod
    def inventory_source(source: str, where: str) -> str | list:
        """One inventory source as Ansible takes it: a path (made absolute: ansible-runner runs
        from a directory of its own), or a host list ("a,b," or "a,": a comma and no such path)."""
        if not Path(source).exists():
            if "," in source:
                return [source] if where == "-i" else source
            raise BadInput(f"{where}: no inventory at {source}")
        return str(Path(source).resolve())

    def check_outputs(self) -> None:
        """Every report path is writable before a host is touched: a fix whose report cannot
        be written would leave no record of what it changed."""
        paths = {"--json": self.o.json or os.environ.get("GPUHOST_REPORT") or "gpuhost-report.json",
                 "--junit": self.o.junit, "--html": self.o.html, "--prom": self.o.prom}
        for flag, path in paths.items():
            if not path or (flag == "--json" and path == "-"):
                continue
            target = Path(path)
            parent = target.parent if str(target.parent) else Path(".")
            if target.is_dir():
                raise BadInput(f"{flag}: {path} is a directory")
            if not parent.is_dir():
                raise BadInput(f"{flag}: no directory {parent} for {path}")
            if not os.access(target if target.exists() else parent, os.W_OK):
                raise BadInput(f"{flag}: cannot write {path}")

    def extravars(self) -> dict:
        ev = {"gpuhost_controls": self.o.controls} if self.o.controls else {}
        # the CLI reboots hosts itself, one at a time and only with --reboot if-needed: the
        # roles' handler (gpuhost_reboot_ok, for playbooks of the user's own) never does here
        ev["gpuhost_reboot_ok"] = False
        return ev

    # ---- running ----------------------------------------------------------------------------
    def play(self, title: str, inventory, check: bool, limit: str | None, extra: dict | None = None,
             playbook: str = "audit.yml", tags: list[str] | None = None, forks: int | None = None) -> RunResult:
        """Run one of gpuhost's playbooks: audit.yml (read and judge, one task per host),
        site.yml (with check, every fix previewed; without, applied) or reboot.yml."""
        audit = playbook == "audit.yml"
        if audit:
            # the audit task's own results are the reports, as one JSON string each (nothing in
            # the play reads them as facts): no second copy through the stats
            extra = {"gpuhost_report_stats": False, "gpuhost_report_json": True, **(extra or {})}
        done_task = AUDIT_TASK if audit else Progress.REPORT_TASK
        self._progress = None
        with contextlib.ExitStack() as stack:
            def on_event(event: dict) -> None:
                # the progress display starts with the play's first event: rich and the report's
                # modules load while ansible-playbook runs, not before it starts
                if self._progress is None:
                    self._progress = stack.enter_context(Progress(self.err, title, done_task=done_task, check=check))
                self._progress.event(event)

            # under an interruptible fix: a read-only play may be cut short, one that changes hosts never
            cancel = None if self._handling is None else ((lambda: bool(self.interrupted)) if check else (lambda: False))
            # the play's own summary of the findings and gpuhost_audit_fail_on are for Ansible's
            # output and AWX (roles/common/tasks/summary.yml): the CLI reports the findings itself
            flags = list(self.o.connection) + (["--forks", str(forks)] if forks else []) + ["--skip-tags", "gpuhost_report"]
            tags = tags or (self.o.controls if playbook == "site.yml" else None)
            if tags:
                # each control's tasks carry its ID as a tag (and everything else is `always`):
                # Ansible drops the other controls' tasks when it reads the play, where each would
                # otherwise start a worker per host only to be skipped
                flags += ["--tags", ",".join(tags)]
            run = PlaybookRun(playbook, inventory, check=check, diff=self.o.diff, limit=limit,
                              extravars={**self.extravars(), **(extra or {})}, on_event=on_event,
                              task_timeout=self.o.task_timeout, cancel=cancel, flags=flags)
            result = run.run()
        if result.bad_input:
            raise BadInput(result.bad_input)
        if result.status == "canceled" and self.interrupted:
            return result           # a read-only play cut short by SIGINT/SIGTERM: nothing was changed
        if result.status in ("timeout", "canceled"):
            raise RuntimeError(f"the run was {result.status}")
        if not result.hosts and not result.reports:
            # nothing ran: say why in one line (an inventory that does not parse, a limit that matches nothing)
            if isinstance(inventory, str):
                from .inventory import InventoryError, load_and_check

                try:
                    load_and_check(inventory, limit)
                except InventoryError as exc:
                    raise BadInput(str(exc)) from None
            raise BadInput(f"no host ran the play (ansible-playbook exited {result.rc})")
        return result

    @staticmethod
    def hosts_from(result: RunResult, names: list[str]) -> dict[str, dict]:
        out = {}
        for name in names:
            r = result.reports.get(name)
            if name in result.unreachable:
                out[name] = {"reachable": False, "error": f"unreachable: {result.unreachable[name]}", "findings": {},
                             "changed": list(result.changes.get(name, []))}
            elif r is None:
                err = (result.failed.get(name) or next(iter(result.control_failed.get(name, {}).values()), None)
                       or "no report from the host (the play did not finish)")
                out[name] = {"reachable": True, "error": err, "findings": {}, "changed": list(result.changes.get(name, []))}
            else:
                failed = dict(r.get("failed") or {})
                out[name] = {"reachable": True, "facts": r.get("facts"),
                             "findings": App.with_failures(r.get("findings") or {}, failed),
                             "changed": r.get("changed") or [], "failed": failed,
                             **({"proof": r["proof"]} if r.get("proof") is not None else {})}
                if name in result.failed:
                    out[name]["error"] = result.failed[name]
        return out

    def finish(self, mode: str, hosts: dict[str, dict], before: dict[str, dict] | None = None) -> int:
        from . import junit, terminal
        from . import report as rep

        report = rep.build(mode, rep.stamp(self.started_at), hosts, before)
        since = None
        if self.o.baseline:
            from . import reportdiff

            since = reportdiff.compare(reportdiff.load(self.o.baseline), report)
            report["since_baseline"] = {"file": str(self.o.baseline), **since}
        shown = rep.printable(report)       # host data never drives the terminal nor breaks XML
        if self.o.format == "oneline":
            terminal.oneline(shown, self.console)
        else:
            terminal.render(shown, self.console)
        if since is not None:
            from . import reportdiff

            self.console.print()
            for line in reportdiff.lines(rep.printable(since), str(self.o.baseline), "this run"):
                self.console.print(line, soft_wrap=True, highlight=False)
        json_path = self.o.json or os.environ.get("GPUHOST_REPORT") or "gpuhost-report.json"
        # every form is written whatever another one's fate: a full disk or a bad path costs
        # that one file (one line, exit 3), never the others nor the run's result
        forms = [("JSON report", json_path, lambda p: rep.write_json(report, p))]
        if self.o.junit:
            forms.append(("JUnit report", self.o.junit, lambda p: junit.write(shown, p)))
        if self.o.html:
            from . import htmlreport    # jinja2 only when asked for
            forms.append(("HTML report", self.o.html, lambda p: htmlreport.write(shown, p)))
        if self.o.prom:
            from . import metrics       # prometheus_client only when asked for
            forms.append(("Prometheus textfile", self.o.prom, lambda p: metrics.write(report, p)))
        unwritten = []
        for what, path, write in forms:
            try:
                write(path)
            except (OSError, ValueError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                unwritten.append(what)
                self.err.print(f"gpuhost: the {what} was not written to {path}: {why}", markup=False, highlight=False)
        if json_path != "-" and self.o.format != "oneline" and "JSON report" not in unwritten:
            self.err.print(f"report: {json_path}", style="dim", markup=False, highlight=False)
        if unwritten:
            return max(rep.exit_code(report), rep.EXIT_UNREACHABLE)
        return rep.exit_code(report)

    # ---- verbs -----------------------------------------------------------------------------------
    def audit(self) -> int:
        inventory = self.inventory()
        # --diff: site.yml in check mode, every fix step previewed with its diff
        # no fix follows an audit, nor a plan of one: the findings come back without fix plans
        result = self.play("gpuhost audit", inventory, check=True, limit=self.o.limit,
                           playbook="site.yml" if self.o.diff else "audit.yml",
                           extra=None if self.o.diff else {"gpuhost_fix_plans": False})
        hosts = self.hosts_from(result, result.hosts)
        for h in hosts.values():
            h["changed"] = []           # an audit changes nothing, even the preview's "would change"
        if self.o.diff:
            from .report import render_diffs

            render_diffs(result.diffs, self.console)
        return self.finish("audit", hosts)

    def measure(self, title: str, inventory, limit: str | None) -> dict[str, dict]:
        """Audit and measure every host (audit.yml with gpuhost_prove): host -> its report.

        Hosts first, then the containers among them one at a time: a container shares its
        host's GPUs, and two measurements of one GPU at once would each see half of it
        (neither can see the other's process through nvidia-smi across PID namespaces)."""
        # the measurement's own bound, and a minute for the audit before it and the way back
        self.o.task_timeout = max(self.o.task_timeout, int(self.o.prove.get("time_limit", 60)) + 60) if self.o.task_timeout else 0
        result = self.play(title, inventory, check=True, limit=limit,
                           extra={"gpuhost_fix_plans": False, "gpuhost_prove": {**self.o.prove, "where": "hosts"}})
        hosts = self.hosts_from(result, result.hosts)
        guests = sorted(n for n, h in hosts.items() if (h.get("facts") or {}).get("container") and h.get("proof"))
        if guests and not self.interrupted:
            again = self.play(f"{title} (containers)", inventory, check=True, limit=",".join(guests), forks=1,
                              extra={"gpuhost_fix_plans": False, "gpuhost_prove": {**self.o.prove, "where": "containers"}})
            hosts.update(self.hosts_from(again, guests))
        for h in hosts.values():
            h["changed"] = []
        return hosts

    def prove(self) -> int:
        """gpuhost prove: the audit, then every path of every host against its limit. SIGINT or
        SIGTERM cuts the read-only play short: each host's measurement sees its SSH session
        close, stops and gives its buffers back; the report says what was measured."""
        inventory = self.inventory()
        with self.interruptible("prove"):
            hosts = self.measure("gpuhost prove", inventory, self.o.limit)
        code = self.finish("prove", hosts)
        if self.interrupted:
            self.err.print(f"gpuhost prove: interrupted ({self.interrupted}): the measurements stopped and gave their "
                           "buffers back; nothing was changed")
            return 3
        return code

    @staticmethod
    def with_effects(after: dict[str, dict], before: dict[str, dict], proved: dict[str, dict]) -> None:
        """fix --prove: each host's proof after the fix, the one before it, and per fix that ran
        the paths it bears on, before and after with the spread (pathproof.compare)."""
        from ansible_collections.gpuhost.stack.plugins.module_utils.pathproof import BEARING, compare

        for name, h in after.items():
            then, now = (before.get(name) or {}).get("proof"), (proved.get(name) or {}).get("proof")
            if now is None:
                continue
            h["proof"] = dict(now)
            if then is None:
                continue
            h["proof"]["before"] = {"conclusion": then.get("conclusion"), "paths": then.get("paths")}
            moved = compare(then, now)
            effects, unmeasured = [], []
            for cid in sorted(set(h.get("changed") or [])):
                rows = [{"control": cid, **row} for row in moved if cid in BEARING.get(row["path"], ())]
                effects += rows
                if not rows:
                    unmeasured.append(cid)
            h["proof"]["effects"] = effects
            h["proof"]["unmeasured_fixes"] = unmeasured
            h["proof"]["paths_moved"] = moved

    def fix(self) -> int:
        inventory = self.inventory()
        with self.interruptible(), self.registered():
            # fix --prove: the paths as they are, before anything is planned or changed
            measured_before = self.measure("gpuhost fix: measure", inventory, self.o.limit) if self.o.prove else {}
            first = self.play("gpuhost fix: audit", inventory, check=True, limit=self.o.limit)
            before = self.hosts_from(first, first.hosts)
            plan = {n: [f for f in h["findings"].values() if f["status"] == "drift"] for n, h in before.items()
                    if h.get("reachable") and not h.get("error")}
            plan = {n: fs for n, fs in plan.items() if fs}
            self.print_plan(plan, before)
            after = dict(before)
            if plan and not self.interrupted:
                if not self.confirm(plan):
                    self.err.print("nothing changed")
                    return self.finish("fix", before, before)
                limit = ",".join(plan)
                # the fix applies what was planned (and confirmed): only the planned controls'
                # tasks run (--tags); the judgement, under the host's lock before the fixes and
                # again after them, still covers every control the run selected (--tags alone
                # would narrow it to the tagged ones; --controls already names them)
                planned = sorted({f["control"] for fs in plan.values() for f in fs})
                judged = {} if self.o.controls else {"gpuhost_controls": list(known_controls())}
                result = self.play("gpuhost fix: apply", inventory, check=False, limit=limit,
                                   extra={**self.lock_vars(), **judged}, playbook="site.yml", tags=planned)
                after.update(self.applied(before, self.hosts_from(result, list(plan)), result.in_flight))
                if self.o.diff:
                    from .report import render_diffs

                    render_diffs(result.diffs, self.console)
            if self.o.reboot == "if-needed" and not self.interrupted:
                after = self.reboot_rollout(inventory, after)
            if self.o.prove and not self.interrupted:
                # after the last reboot, on the same paths with the same repeats
                self.with_effects(after, measured_before, self.measure("gpuhost fix: measure again", inventory, self.o.limit))
        code = self.finish("fix", after, before)
        if self.interrupted:
            self.err.print(f"gpuhost fix: interrupted ({self.interrupted}): the report lists every change made")
            return 3
        return code

    def lock_vars(self) -> dict:
        """The variables of a play that changes hosts: how long to wait for another run's lock
        and for a rebooted host, and who this run is, as a second run waiting for it is told."""
        import getpass
        import socket

        return {"gpuhost_lock_timeout": self.o.lock_timeout, "gpuhost_reboot_timeout": self.o.reboot_timeout,
                "gpuhost_run_holder": f"gpuhost fix by {getpass.getuser()}@{socket.gethostname()} (pid {os.getpid()})",
                **({"gpuhost_stop_file": self._handling} if self._handling else {}),
                **({"gpuhost_run": self._run} if self._run else {})}

    _run: dict | None = None

    @contextlib.contextmanager
    def registered(self):
        """This run, registered on the controller for as long as it lives: a host lock it
        leaves behind when it is killed is stale for the next run at once (module_utils/runs)."""
        try:
            run, fd = register_run()
        except OSError as exc:
            # a registry that is a link, another user's or open to others: one line, no host touched
            raise BadInput(f"cannot register this run: {exc.strerror or exc}"
                           + (f" ({exc.filename})" if getattr(exc, "filename", None) else "")) from None
        self._run = run
        try:
            yield run
        finally:
            self._run = None
            end_run(run, fd)

    @staticmethod
    def with_failures(findings: dict, failed: dict[str, str]) -> dict:
        """Each control whose fix failed is ``error``: why it failed, and the host as it is now."""
        out = dict(findings)
        for cid, why in failed.items():
            now = out.get(cid) or {"control": cid, "observed": None, "expected": None}
            out[cid] = {**now, "status": "error", "reboot_required": False,
                        "message": f"the fix failed: {why} (now: {now.get('message') or now.get('status')})"}
        return out

    @staticmethod
    def applied(before: dict[str, dict], hosts: dict[str, dict], in_flight: dict[str, str] | None = None) -> dict[str, dict]:
        """A host that went away (or failed) during the fix before it reported keeps what the
        audit found and the changes its events showed, so the report says what was done."""
        out = {}
        for name, h in hosts.items():
            if h.get("findings") or name not in before:
                out[name] = h
                continue
            changed = h.get("changed") or []
            task = (in_flight or {}).get(name)
            if changed:
                note = f"during the fix, after changing {', '.join(changed)}"
            else:
                note = "during the fix, before any change it reported"
            if task:
                note += f"; `{task}` was running and may have changed the host"
            out[name] = {**before[name], "reachable": h.get("reachable", True), "changed": changed,
                         "error": f"{h.get('error')} ({note}; the findings are the audit's, not judged again)"}
        return out

    interrupted: str = ""
    _handling: str | None = None      # the stop file while fix handles SIGINT/SIGTERM itself
    _progress: "Progress | None" = None

    def still_running(self) -> list[str]:
        """What each host is doing now, as the play's events said: the changes a stop waits for."""
        hosts = self._progress.hosts if self._progress else {}
        return [f"{shown(h)}: {t}" for h, t in hosts.items() if t != "done" and not t.startswith("[red]")]

    def load_for_signals(self) -> None:
        """Make the signal handler's console and load what shown() uses before the handler can
        run: a signal that came while the play's first event imported rich would import it
        again, half-loaded (ImportError: partially initialized module)."""
        self.err            # noqa: B018 (the property makes it)
        shown("")

    @contextlib.contextmanager
    def interruptible(self, verb: str = "fix"):
        """SIGINT and SIGTERM during a fix stop it from starting new changes: the change in
        flight finishes (dpkg is never killed; ansible-playbook runs in a session of its own
        and never sees the signal), no host is rebooted, and the report still gets written.
        A read-only play (an audit, a measurement) is cut short at once."""
        from ansible_collections.gpuhost.stack.plugins.module_utils.runs import scratch_dir
        tmp = scratch_dir("gpuhost-stop-")
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(shutil.rmtree, tmp, True)
            stop = os.path.join(tmp, "stop")

            def handler(signum, frame):
                if not self.interrupted:
                    self.interrupted = signal.Signals(signum).name
                    Path(stop).touch()
                    self.err.print(f"gpuhost fix: {self.interrupted}: finishing the change in flight, starting no new one"
                                   if verb == "fix" else f"gpuhost {verb}: {self.interrupted}: stopping")
                else:
                    # again: never a kill mid-change (dpkg, a boot-loader refresh), but say what it waits for
                    left = self.still_running()
                    self.err.print(f"gpuhost fix: {signal.Signals(signum).name} again: stopping as soon as "
                                   + ("; ".join(left) if left else "the step in flight") + " ends; no new change "
                                   "starts (SIGKILL would leave that step half-made)", highlight=False)
                if getattr(self, "prompting", False):
                    raise KeyboardInterrupt

            self.load_for_signals()
            old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
            self._handling = stop
            try:
                yield stop
            finally:
                self._handling = None
                for sig, h in old.items():
                    signal.signal(sig, h)

    def print_plan(self, plan: dict, before: dict) -> None:
        from .plan import changes as plan_changes

        if not plan:
            self.err.print("nothing to fix" + ("" if all(h.get("reachable") for h in before.values()) else
                                              " on the reachable hosts"))
            return
        for host, findings in plan.items():
            self.err.print(f"[bold]{shown(host)}[/]: will change", highlight=False)
            for f in findings:
                self.err.print(f"  {shown(f['control'])}: {shown(f['message'])}", highlight=False)
                for line in plan_changes(f):
                    self.err.print(f"    - {line}", highlight=False, markup=False)

    def confirm(self, plan: dict) -> bool:
        if self.o.yes:
            return True
        if not sys.stdin.isatty():
            raise BadInput("fix changes hosts: confirm with --yes (no terminal to ask at)")
        self.prompting = True
        try:
            answer = input(f"Apply these changes to {len(plan)} host(s)? [y/N] ")
        finally:
            self.prompting = False
        return answer.strip().lower() in ("y", "yes")

    def reboot_rollout(self, inventory, hosts: dict[str, dict]) -> dict[str, dict]:
        """Reboot hosts that need it, one at a time; stop at the first that does not come back healthy."""
        needing = [n for n, h in hosts.items() if h.get("reachable") and not h.get("error")
                   and any(f["status"] == "pending_reboot" for f in h["findings"].values())]
        for i, host in enumerate(needing):
            if self.interrupted:
                self.err.print(f"[red]roll-out stopped ({self.interrupted}): {shown(', '.join(needing[i:]))} not rebooted[/]")
                break
            self.err.print(f"rebooting {shown(host)} ({i + 1}/{len(needing)})")
            with self.waiting_line(host):
                result = self.play(f"gpuhost fix: reboot {host}", inventory, check=False, limit=host,
                                   playbook="reboot.yml",
                                   extra=self.lock_vars())
            if host in result.unreachable or host in result.failed:
                hosts[host] = {**hosts[host], "error": f"reboot failed: {result.unreachable.get(host) or result.failed.get(host)}"}
                self._stop_rollout(hosts, needing[i + 1:])
                break
            changed = hosts[host].get("changed") or []
            # the reboot play's last task judged the host as it came back
            check = self.hosts_from(result, [host])
            check[host]["changed"] = changed
            # a fix that failed before the reboot still failed: the report keeps saying so
            check[host]["failed"] = hosts[host].get("failed") or {}
            check[host]["findings"] = self.with_failures(check[host]["findings"], check[host]["failed"])
            worse = self.worse_after_reboot(hosts[host], check[host])
            hosts[host] = check[host]
            if worse:
                hosts[host]["error"] = hosts[host].get("error") or f"did not come back healthy after the reboot: {worse}"
                self.err.print(f"[red]{shown(host)}: {shown(hosts[host]['error'])}[/]")
                self._stop_rollout(hosts, needing[i + 1:])
                break
        return hosts

    WAIT_LINE_S = 15

    @contextlib.contextmanager
    def waiting_line(self, host: str):
        """A line every WAIT_LINE_S seconds while a rebooted host is awaited, so a long wait
        (firmware POST on a GPU server takes minutes) reads as progress, not a hang."""
        import threading
        import time

        done = threading.Event()
        start = time.monotonic()

        def tick():
            while not done.wait(self.WAIT_LINE_S):
                self.err.print(f"[dim]waiting for {shown(host)} to come back: {int(time.monotonic() - start)} s "
                               f"of {self.o.reboot_timeout} s[/]", highlight=False)

        thread = threading.Thread(target=tick, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    @staticmethod
    def worse_after_reboot(before: dict, after: dict) -> str:
        """What makes a rebooted host unhealthy: an error, a fix still waiting for a boot, a
        control that passed (or waited for this boot) and now fails, like a GPU driver lost
        with a new kernel, or any health finding (a GPU that did not come back well)."""
        if after.get("error"):
            return after["error"]
        bad, controls = [], known_controls()
        for cid, f in after["findings"].items():
            if cid in (after.get("failed") or {}):
                continue                # its fix failed before the reboot: said already
            was = (before["findings"].get(cid) or {}).get("status")
            if f["status"] in ("pending_reboot", "error"):
                bad.append(f"{cid} {f['status']}")
            elif f["status"] in ("drift", "manual") and was in ("pass", "pending_reboot", "na", "waived"):
                bad.append(f"{cid} is {f['status']} ({f['message']})")
            elif f["status"] == "manual" and cid in controls and controls[cid].kind == "health":
                bad.append(f"{cid} is {f['status']} ({f['message']})")
        return "; ".join(bad)

    def _stop_rollout(self, hosts: dict, rest: list[str]) -> None:
        for other in rest:
            self.err.print(f"[red]roll-out stopped: {shown(other)} was not rebooted[/]")
