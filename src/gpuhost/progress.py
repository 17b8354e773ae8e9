"""Progress while a play runs: a live line per host on a terminal, a line per event in a log."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .runner import CHECK_TASK, LOCK_TASK, TRY_LOCK_TASK

if TYPE_CHECKING:       # rich loads with the first progress shown, once the play has started (app.py)
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table


def shown(value) -> str:
    """Text from a host or an inventory as the terminal shows it: control characters as \\xHH
    (report.printable), rich's markup escaped (a file name `[tuned]`, a message with `[/x]`)."""
    from rich.markup import escape

    from .report import printable

    return escape(printable(str(value)))


class Progress:
    """Per-host progress from runner events, cheap in the event handler.

    On a terminal: a line with how many hosts are done of those started, how many failed,
    and an estimate of the time left, then each host's current task; a fleet that does not
    fit the terminal shows the hosts still running (and the failed ones) only. Elsewhere (a
    CI log): one line per host when it is done (beyond FLEET hosts, a count at every tenth
    of them instead), and one for each change, failure or unreachable host, so a long fleet
    run shows it is moving without flooding the log.
    """

    FLEET = 50          # more hosts than this: counts, not a line per host, in a log

    REPORT_TASK = "Report the findings"

    def __init__(self, console: Console, title: str, done_task: str = REPORT_TASK, check: bool = False):
        self.console = console
        self.title = title
        # a play in check mode (audit --diff, the fix's own audit) changes nothing: a task's
        # "changed" there is what a fix would change, and is said so
        self.changed_word = "would change" if check else "changed"
        self.done_task = done_task          # the task whose result is a host's report
        self.hosts: dict[str, str] = {}
        self.live: Live | None = None
        # a host's lock was busy when the run tried them all: only then does the run wait
        # (the waiting task starts, and is skipped, on every fix)
        self.contended = False
        self.started = time.monotonic()
        self.next_count = 0.1           # in a log with a fleet: the next tenth to say

    def __enter__(self):
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(self._render(), console=self.console, refresh_per_second=6, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live:
            self.live.__exit__(*exc)

    def counts(self) -> tuple[int, int, int]:
        """(done, failed or unreachable, started)."""
        done = sum(1 for v in self.hosts.values() if v == "done")
        bad = sum(1 for v in self.hosts.values() if v.startswith("[red]"))
        return done, bad, len(self.hosts)

    def headline(self) -> str:
        """"12/500 done, 1 failed, about 3m left": the hosts that ended over the time they took
        so far, for those still to end (of the hosts started: a fleet larger than the forks
        starts more as others end)."""
        done, bad, n = self.counts()
        text = f"{done}/{n} done"
        if bad:
            text += f", {bad} failed or unreachable"
        ended = done + bad
        if 0 < ended < n:
            left = (time.monotonic() - self.started) / ended * (n - ended)
            text += ", about " + (f"{int(left // 60)}m{int(left % 60):02d}s" if left >= 60 else f"{int(left)}s") + " left"
        return text

    def _render(self) -> Table:
        from rich.table import Table

        t = Table.grid(padding=(0, 2))
        t.add_row(f"[bold]{self.title}[/]" + (f"  [dim]{self.headline()}[/]" if len(self.hosts) > 1 else ""))
        room = max(3, self.console.height - 3)
        rows = list(self.hosts.items())
        if len(rows) > room:
            # the hosts still running and the failed ones; the done ones are in the count
            busy = [(h, v) for h, v in rows if v != "done"]
            more = len(busy) - (room - 1)
            rows = busy[:room - 1] if more > 0 else busy
            for host, task in rows:
                t.add_row(f"  {shown(host)}", f"[dim]{task}[/]")
            if more > 0:
                t.add_row(f"  [dim]and {more} more hosts running[/]")
            return t
        for host, task in rows:
            t.add_row(f"  {shown(host)}", f"[dim]{task}[/]")
        return t

    def event(self, ev: dict) -> None:
        data = ev.get("event_data") or {}
        host, kind, task = data.get("host"), ev.get("event"), data.get("task", "")
        if not host or task == CHECK_TASK:      # bad input is said once, in its own one line
            return
        line = None
        task = shown(task)          # its name holds inventory values ({{ gpuhost_control }})
        if kind == "runner_on_start":
            self.hosts[host] = task
            if task == LOCK_TASK and self.contended:
                line = "waiting for another run's lock (hosts are taken in name order)"
        elif kind == "runner_on_unreachable":
            self.hosts[host] = "[red]unreachable[/]"
            line = self.hosts[host]
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            self.hosts[host] = f"[red]failed: {task}[/]"
            line = self.hosts[host]
        elif kind == "runner_on_ok" and task == TRY_LOCK_TASK and (data.get("res") or {}).get("busy"):
            self.contended = True
        elif kind == "runner_on_ok" and (data.get("res") or {}).get("changed"):
            line = f"{self.changed_word}: {task}"
        elif kind == "runner_on_ok" and (task == self.done_task or (data.get("res") or {}).get("ansible_stats")):
            self.hosts[host] = "done"
            line = "done"
        if self.live:
            self.live.update(self._render())
            return
        if line == "done" and len(self.hosts) > self.FLEET:
            done, bad, n = self.counts()
            if (done + bad) / n >= self.next_count:
                while (done + bad) / n >= self.next_count:
                    self.next_count += 0.1
                self.console.print(f"[dim]{self.title}:[/] {self.headline()}", highlight=False)
            return
        if line:
            self.console.print(f"[dim]{self.title}:[/] {shown(host)}: {line}", highlight=False)
