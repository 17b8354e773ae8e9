"""A host's lock and the controller's run registry against the third fault campaign (issue 37):
runs that take over one stale lock at once, a registry cleared under a live run, a killed
run seen from another $TMPDIR, and locks that are no gpuhost lock. The module's and the
registry's own code, in real processes."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

from ansible_collections.gpuhost.stack.plugins.action.lock import busy_line
from ansible_collections.gpuhost.stack.plugins.module_utils import runs
from ansible_collections.gpuhost.stack.plugins.modules import lock

ROUNDS = 300


def _contender(path, barrier, results, rounds, me):
    for n in range(rounds):
        barrier.wait()                       # every contender finds the same stale lock...
        record = {"token": f"{me}-{n}", "holder": f"run {me}", "since": "now", "boot_id": lock.boot_id()}
        res = lock.take(path, record, 14400)
        results.put((n, me, res["busy"], (res.get("held") or {}).get("holder")))
        barrier.wait()                       # ...and the next round starts from a stale one again
        if me == 0:
            with open(path, "w") as f:
                json.dump({"token": "dead", "holder": "a run of an earlier boot", "boot_id": "earlier"}, f)
        barrier.wait()


def test_simultaneous_takeovers_of_a_stale_lock_leave_exactly_one_holder(tmp_path):
    """Two, three and four runs taking over the same stale lock at the same moment, hundreds
    of rounds each: one takes it, every other is told that one holds it (before, 10 to 31 of
    150 rounds ended with two holders: each deleted the other's fresh lock)."""
    path = str(tmp_path / "fix.lock")
    ctx = multiprocessing.get_context("fork")
    for contenders in (2, 3, 4):
        with open(path, "w") as f:
            json.dump({"token": "dead", "holder": "a run of an earlier boot", "boot_id": "earlier"}, f)
        barrier, results = ctx.Barrier(contenders), ctx.Queue()
        procs = [ctx.Process(target=_contender, args=(path, barrier, results, ROUNDS // contenders + 50, me))
                 for me in range(contenders)]
        for p in procs:
            p.start()
        rounds = ROUNDS // contenders + 50
        seen = [results.get(timeout=60) for _ in range(rounds * contenders)]
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0
        for n in range(rounds):
            this = [r for r in seen if r[0] == n]
            winners = [me for _, me, busy, _ in this if not busy]
            assert len(winners) == 1, (contenders, n, this)
            assert all(holder == f"run {winners[0]}" for _, _, busy, holder in this if busy), this


def test_a_run_whose_registry_file_was_removed_lives_while_its_process_does(tmp_path):
    """`rm $TMPDIR/gpuhost-*` (or the registry) under a live run: its file is gone, its
    process is not, so its lock is not taken over."""
    run, fd = runs.register()
    try:
        os.unlink(run["file"])
        assert runs.gone(run) is False
    finally:
        os.close(fd)
    # the run's own process ended too: now it is gone
    dead = dict(run, procs=[[run["procs"][0][0], "1"]])        # the same PID, another start: not it
    assert runs.gone(dead) is True


def test_a_killed_runs_lock_is_stale_from_any_tmpdir(tmp_path):
    """A run started with one $TMPDIR and killed (SIGKILL) is gone at once to a run with
    another $TMPDIR (cron, PrivateTmp, pam_tmpdir, CI): the registry does not depend on it."""
    code = ("import json, sys, time\n"
            "from ansible_collections.gpuhost.stack.plugins.module_utils import runs\n"
            "run, fd = runs.register()\n"
            "print(json.dumps(run), flush=True)\n"
            "time.sleep(60)\n")
    (tmp_path / "a").mkdir()
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(tmp_path / "a")})
    try:
        run = json.loads(child.stdout.readline())
        assert runs.gone(run) is False                         # alive: never taken over
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    start = time.monotonic()
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp_path / "b")
    try:
        assert runs.gone(run) is True
    finally:
        if saved is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = saved
    assert time.monotonic() - start < 5


def test_a_lock_that_is_no_gpuhost_lock_is_named_in_one_line(tmp_path):
    """The campaign's poor messages: a lock file that is not gpuhost's ("None holds ... since
    None", "'list' object has no attribute 'get'"), one with a 2 MB holder, and one dated
    ahead of the host's clock."""
    path = str(tmp_path / "fix.lock")
    record = {"token": "mine", "holder": "me", "since": "now", "boot_id": lock.boot_id()}
    for content, said in ((b"[1, 2]", "not a gpuhost lock record (no token)"),
                          (b"\x00\x01garbage", "not a gpuhost lock record (not JSON)"),
                          (b"x" * (lock.RECORD_MAX + 1), "65537 bytes, not a lock record")):
        with open(path, "wb") as f:
            f.write(content)
        res = lock.take(path, record, 14400)
        assert res["busy"] and res["held"]["foreign"] == said, res
        line = busy_line(res["held"], path, 1800)
        assert line.startswith(f"{path} is not a gpuhost lock ({said})") and "\n" not in line
    with open(path, "w") as f:
        json.dump({"token": "t", "holder": "h" * 2_000_000, "since": "2026-12-07T00:00:00Z", "boot_id": lock.boot_id()}, f)
    res = lock.take(path, record, 14400)
    line = busy_line(res["held"], path, 1800)
    assert res["busy"] and len(line) < 400 and "(2000112 bytes, not a lock record)" in line, line
    with open(path, "w") as f:
        json.dump({"token": "t", "holder": "h" * 5000, "since": "2026-12-07T00:00:00Z", "boot_id": lock.boot_id()}, f)
    res = lock.take(path, record, 14400)
    line = busy_line(res["held"], path, 1800)
    assert res["busy"] and len(line) < 400 and "since 2026-12-07T00:00:00Z" in line, line
    future = time.time() + 3600
    os.utime(path, (future, future))
    res = lock.take(path, record, 14400)
    assert "ahead of this host's clock" in busy_line(res["held"], path, 1800)
    # a lock file another user could have written is no gpuhost lock either
    os.utime(path, None)
    os.chmod(path, 0o666)
    assert "mode 0666" in lock.take(path, record, 14400)["held"]["foreign"]


def test_scratch_directories_a_killed_run_left_are_swept_by_the_next(tmp_path, monkeypatch):
    """The fault campaign: gpuhost-run-* and gpuhost-stop-* stayed in $TMPDIR after a SIGKILL.
    Each names its owner; the next run removes those whose owner is gone, never a live one's,
    another user's or a link."""
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    code = ("from ansible_collections.gpuhost.stack.plugins.module_utils import runs\n"
            "import time\n"
            "print(runs.scratch_dir('gpuhost-run-'), runs.scratch_dir('gpuhost-stop-'), flush=True)\n"
            "time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    left = child.stdout.readline().split()
    mine = runs.scratch_dir("gpuhost-run-")                  # this live process's own
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "gpuhost-run-link").symlink_to(tmp_path / "elsewhere")
    runs.sweep()
    assert all(os.path.isdir(d) for d in left + [mine])      # alive: kept
    child.send_signal(signal.SIGKILL)
    child.wait()
    runs.sweep()
    assert not any(os.path.exists(d) for d in left) and os.path.isdir(mine)
    assert (tmp_path / "gpuhost-run-link").is_symlink() and (tmp_path / "elsewhere").is_dir()
