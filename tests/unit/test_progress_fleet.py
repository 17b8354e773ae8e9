"""Progress for a fleet: how many hosts are done of those started, how many failed, the time
left; a terminal shows only the hosts still running when they do not all fit; a log says a
count at every tenth of a large fleet instead of a line per host."""
from __future__ import annotations

import io

from rich.console import Console

from gpuhost import progress as prog
from gpuhost.progress import Progress


def ev(kind: str, host: str, task: str = "Read and judge the host", **res) -> dict:
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res}}


def test_the_headline_counts_and_estimates_the_time_left(monkeypatch):
    clock = iter([100.0, 160.0])
    monkeypatch.setattr(prog.time, "monotonic", lambda: next(clock))
    p = Progress(Console(file=io.StringIO()), "gpuhost audit", done_task="Read and judge the host")
    for i in range(10):
        p.event(ev("runner_on_start", f"h{i}"))
    for i in range(3):
        p.event(ev("runner_on_ok", f"h{i}"))
    p.event(ev("runner_on_unreachable", "h3"))
    # 4 of 10 ended in 60 s: 15 s each, 6 to go
    assert p.headline() == "3/10 done, 1 failed or unreachable, about 1m30s left"


def test_a_fleet_larger_than_the_terminal_shows_the_hosts_still_running():
    console = Console(file=io.StringIO(), width=100, height=12)
    p = Progress(console, "gpuhost audit", done_task="Read and judge the host")
    for i in range(100):
        p.event(ev("runner_on_start", f"host{i:03d}"))
    for i in range(60):
        p.event(ev("runner_on_ok", f"host{i:03d}"))
    out = io.StringIO()
    Console(file=out, width=100).print(p._render())         # noqa: SLF001 (what the live display shows)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("gpuhost audit  60/100 done") and len(lines) <= 12
    assert "host000" not in out.getvalue() and "host060" in out.getvalue()
    assert lines[-1].strip() == "and 32 more hosts running"


def test_a_log_says_a_count_at_every_tenth_of_a_large_fleet():
    out = io.StringIO()
    p = Progress(Console(file=out, width=200), "gpuhost audit", done_task="Read and judge the host")
    for i in range(200):
        p.event(ev("runner_on_start", f"h{i}"))
    for i in range(200):
        p.event(ev("runner_on_ok", f"h{i}"))
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and lines[0].startswith("gpuhost audit: 20/200 done")
    assert lines[-1].startswith("gpuhost audit: 200/200 done")
    small = io.StringIO()
    q = Progress(Console(file=small, width=200), "gpuhost audit", done_task="Read and judge the host")
    for i in range(3):
        q.event(ev("runner_on_start", f"h{i}"))
        q.event(ev("runner_on_ok", f"h{i}"))
    assert small.getvalue().splitlines() == [f"gpuhost audit: h{i}: done" for i in range(3)]
