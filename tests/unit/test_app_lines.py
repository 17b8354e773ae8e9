"""Lines the CLI prints while it waits, and the report of a fix whose steps failed."""
import io
import time

from rich.console import Console

from gpuhost.app import App, Options


def test_a_reboot_wait_prints_a_progress_line_while_it_waits():
    out = io.StringIO()
    app = App(Options(reboot_timeout=600), console=Console(file=io.StringIO()), err=Console(file=out, soft_wrap=True))
    app.WAIT_LINE_S = 0.05
    with app.waiting_line("pve-gpu1"):
        time.sleep(0.18)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2 and all(l.startswith("waiting for pve-gpu1 to come back: ") and l.endswith(" s of 600 s")
                                   for l in lines), lines


def test_a_failed_fix_is_its_controls_error_and_keeps_what_the_host_is_now():
    findings = {"iommu.mode": {"control": "iommu.mode", "status": "drift", "message": "add iommu=pt",
                               "observed": "DMA-FQ", "expected": "passthrough", "reboot_required": True},
                "numa.balancing": {"control": "numa.balancing", "status": "pass", "message": "off"}}
    out = App.with_failures(findings, {"iommu.mode": "Set kernel parameters | iommu.mode: refresh failed"})
    assert out["iommu.mode"]["status"] == "error" and out["iommu.mode"]["reboot_required"] is False
    assert out["iommu.mode"]["message"] == "the fix failed: Set kernel parameters | iommu.mode: refresh failed (now: add iommu=pt)"
    assert out["iommu.mode"]["observed"] == "DMA-FQ"
    assert out["numa.balancing"] == findings["numa.balancing"]


def test_a_host_gone_before_its_report_keeps_the_audit_and_the_changes():
    before = {"h": {"reachable": True, "findings": {"numa.balancing": {"control": "numa.balancing", "status": "drift"}}}}
    gone = {"h": {"reachable": False, "error": "unreachable: Connection refused", "findings": {}, "changed": ["numa.balancing"]}}
    out = App.applied(before, gone)["h"]
    assert out["reachable"] is False and out["findings"] == before["h"]["findings"]
    assert out["changed"] == ["numa.balancing"]
    assert out["error"] == ("unreachable: Connection refused (during the fix, after changing numa.balancing; "
                            "the findings are the audit's, not judged again)")


def test_a_report_that_cannot_be_written_is_one_line_and_exit_3_after_every_other_form(tmp_path):
    """Issue 19: `--json /dev/full` after a full fix was a 65-line traceback, exit 1 and no
    report at all. Each form is written on its own; the one that fails is one line, exit 3."""
    import xml.etree.ElementTree as ET

    err = io.StringIO()
    junit, html = tmp_path / "r.xml", tmp_path / "r.html"
    app = App(Options(json="/dev/full", junit=str(junit), html=str(html), prom=str(tmp_path / "no-such-dir" / "m.prom")),
              console=Console(file=io.StringIO()), err=Console(file=err, soft_wrap=True))
    hosts = {"h": {"reachable": True, "changed": [], "facts": {},
                   "findings": {"numa.balancing": {"control": "numa.balancing", "status": "pass", "message": "off",
                                                   "observed": 0, "expected": 0}}}}
    assert app.finish("audit", hosts) == 3
    lines = err.getvalue().splitlines()
    assert lines == ["gpuhost: the JSON report was not written to /dev/full: No space left on device",
                     f"gpuhost: the Prometheus textfile was not written to {tmp_path}/no-such-dir/m.prom: "
                     "No such file or directory"], lines
    assert ET.parse(junit).getroot().tag == "testsuites" and "numa.balancing" in html.read_text()


def test_host_text_in_the_plan_is_shown_as_it_is_never_as_markup_or_escape_sequences():
    """Issue 19: rich markup ate `[tuned]` in a file name and raised on `[/x]`; an ESC from a
    host moved the cursor. What a host says is shown literally, control characters as \\xHH."""
    out = io.StringIO()
    app = App(Options(), console=Console(file=io.StringIO()), err=Console(file=out, width=300, force_terminal=False))
    finding = {"control": "numa.balancing", "status": "drift", "fix": {},
               "message": "set in /etc/sysctl.d/[tuned]/50-numa.conf [/x] \x1b[1A\x1b[2K\x9b31m"}
    app.print_plan({"gpu[1]": [finding]}, {"gpu[1]": {"reachable": True}})
    assert out.getvalue().splitlines()[:2] == [
        "gpu[1]: will change",
        "  numa.balancing: set in /etc/sysctl.d/[tuned]/50-numa.conf [/x] \\x1b[1A\\x1b[2K\\x9b31m"], out.getvalue()


def test_a_second_signal_says_what_the_stop_waits_for():
    """Issue 19: a second Ctrl-C was ignored. It still kills nothing mid-change (dpkg, a
    boot-loader refresh) but says which step on which host the stop waits for."""
    import os
    import signal

    from gpuhost.app import Progress

    err = io.StringIO()
    app = App(Options(), console=Console(file=io.StringIO()), err=Console(file=err, width=300))
    progress = Progress(Console(file=io.StringIO()), "gpuhost fix: apply")
    progress.hosts = {"gpu1": "Install the kernel series' metapackages | kernel.version", "gpu2": "done"}
    app._progress = progress
    with app.interruptible() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert os.path.exists(stop)
    assert err.getvalue().splitlines() == [
        "gpuhost fix: SIGINT: finishing the change in flight, starting no new one",
        "gpuhost fix: SIGINT again: stopping as soon as gpu1: Install the kernel series' metapackages | "
        "kernel.version ends; no new change starts (SIGKILL would leave that step half-made)"]


def test_the_lock_wait_is_said_only_when_a_lock_was_busy():
    """The waiting task starts (and is skipped) on every fix: "waiting for another run's lock"
    is said only after the run found a host's lock busy, never on an uncontended fix."""
    from gpuhost.app import Progress
    from gpuhost.runner import LOCK_TASK, TRY_LOCK_TASK

    def run(busy: bool) -> list[str]:
        out = io.StringIO()
        progress = Progress(Console(file=out, width=300), "gpuhost fix: apply")
        for host in ("gpu1", "gpu2"):
            progress.event({"event": "runner_on_start", "event_data": {"host": host, "task": TRY_LOCK_TASK}})
            progress.event({"event": "runner_on_ok", "event_data": {
                "host": host, "task": TRY_LOCK_TASK, "res": {"busy": busy and host == "gpu2"}}})
        for host in ("gpu1", "gpu2"):
            progress.event({"event": "runner_on_start", "event_data": {"host": host, "task": LOCK_TASK}})
        return out.getvalue().splitlines()

    assert run(busy=False) == []
    assert run(busy=True) == ["gpuhost fix: apply: gpu1: waiting for another run's lock (hosts are taken in name order)",
                              "gpuhost fix: apply: gpu2: waiting for another run's lock (hosts are taken in name order)"]


def test_a_preview_says_what_would_change_never_changed():
    """The fault campaign: `audit --diff` printed `changed:` lines for tasks it only previewed.
    A play in check mode says "would change"; one that applies says "changed"."""
    from gpuhost.app import Progress

    def lines(check: bool) -> list[str]:
        out = io.StringIO()
        progress = Progress(Console(file=out, width=300), "gpuhost audit", check=check)
        progress.event({"event": "runner_on_ok", "event_data": {
            "host": "gpu1", "task": "pcie.mrrs | set MaxReadReq", "res": {"changed": True}}})
        return out.getvalue().splitlines()

    assert lines(check=True) == ["gpuhost audit: gpu1: would change: pcie.mrrs | set MaxReadReq"]
    assert lines(check=False) == ["gpuhost audit: gpu1: changed: pcie.mrrs | set MaxReadReq"]
