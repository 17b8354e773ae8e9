"""The CLI closes ansible-playbook's pty without ptyprocess's 0.1 s sleep once the play has
exited, and with it (and its SIGHUP, SIGKILL) while the play is still alive."""
from __future__ import annotations

import ptyprocess
import ptyprocess.ptyprocess as ptymodule

from gpuhost.runner import no_close_delay_after_exit


def sleeps_while_closing(monkeypatch, proc) -> list:
    slept, sleep = [], ptymodule.time.sleep
    # recorded, and still slept: terminate() waits on the child between its signals
    monkeypatch.setattr(ptymodule.time, "sleep", lambda s: (slept.append(s), sleep(s)))
    with no_close_delay_after_exit():
        proc.close(force=True)
    monkeypatch.undo()
    return slept


def test_a_child_that_has_exited_is_closed_without_the_sleep(monkeypatch):
    proc = ptyprocess.PtyProcess.spawn(["/bin/true"])
    proc.wait()
    assert sleeps_while_closing(monkeypatch, proc) == [0]
    assert proc.closed and proc.exitstatus == 0


def test_a_child_still_running_keeps_the_delay_and_is_ended(monkeypatch):
    proc = ptyprocess.PtyProcess.spawn(["/bin/sleep", "30"])
    assert proc.isalive()
    slept = sleeps_while_closing(monkeypatch, proc)
    assert slept[0] == 0.1, slept          # ptyprocess's own delay, before it looks
    assert not proc.isalive()              # and its SIGHUP (or SIGKILL) ended it


def test_the_block_puts_ptyprocess_back():
    before = ptyprocess.PtyProcess.close
    with no_close_delay_after_exit():
        assert ptyprocess.PtyProcess.close is not before
    assert ptyprocess.PtyProcess.close is before
