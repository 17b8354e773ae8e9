"""One line saying why a task failed: the command and what it printed, never just
"non-zero return code" (what an operator needs to decide whether to re-run)."""
from __future__ import annotations

import re

# what the inventory checks' failures start with: the CLI reads the one line after it as bad
# input (exit 1), whichever task said it
BAD_INPUT_MARK = "gpuhost bad input: "

_TIMED_OUT = re.compile(r"failed to execute in the expected time frame \((\d+)\)|Timed out after (\d+) second")
_MAX = 1000         # a message this long keeps its start and its end (the cause is often last)


def _last_line(text) -> str:
    lines = [l.strip() for l in str(text or "").splitlines() if l.strip()]
    return lines[-1] if lines else ""


def _clip(text: str) -> str:
    return text if len(text) <= _MAX else text[:300] + " ... " + text[-(_MAX - 305):]


def describe(res: dict | None) -> str:
    return _clip(_describe(res) + _full_disk(res))


def _full_disk(res: dict | None) -> str:
    """ENOSPC named where it struck: dpkg and update-initramfs fill /boot first (a kernel's
    image, initrd and System.map land there), and their last line rarely says which disk."""
    res = res or {}
    said = " ".join(str(res.get(k) or "") for k in ("msg", "stdout", "stderr", "module_stdout", "module_stderr"))
    if "No space left on device" not in said:
        return ""
    if re.search(r"(?<![\w/])/boot(?:/|\b)", said):
        return " (/boot is full: see `df -h /boot`, and remove kernels that no longer boot)"
    return " (a file system is full: No space left on device)"


# ansible-core 2.17 and later send modules that start with `from __future__ import
# annotations`: a host whose Python is older than 3.7 fails to compile them, and Ansible
# reports "Module result deserialization failed" (ansible/ansible#82068, #84358)
_OLD_PYTHON = re.compile(r"future feature annotations is not defined")


def _describe(res: dict | None) -> str:
    """*res*: a task's result (an event's ``res``, a rescue's ``ansible_failed_result``)."""
    res = res or {}
    said = " ".join(str(res.get(k) or "") for k in ("msg", "module_stdout", "module_stderr", "exception"))
    if _OLD_PYTHON.search(said):
        return ("the host's Python is older than 3.7 (SyntaxError: future feature annotations is not defined): "
                "ansible-core 2.17 and gpuhost need Python 3.7 or later as the host's ansible_python_interpreter")
    failed_items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if failed_items:
        # a loop: what the item that failed said, not Ansible's "One or more items failed"
        item = failed_items[0]
        label = (item.get("ansible_loop_var") and item.get(item["ansible_loop_var"])) or item.get("item")
        if isinstance(label, dict):
            label = label.get("path") or label.get("name")
        return (f"{label}: " if label else "") + _describe({k: v for k, v in item.items() if k != "results"})
    msg = str(res.get("msg") or "").strip()
    late = _TIMED_OUT.search(msg)
    if late:
        return f"timed out after {late.group(1) or late.group(2)} s"
    cmd = res.get("cmd")
    if cmd and "rc" in res:
        shown = " ".join(str(c) for c in cmd) if isinstance(cmd, (list, tuple)) else str(cmd)
        shown = " ".join(shown.split())             # a multi-line script on one line
        if len(shown) > 120:
            shown = shown[:117] + "..."
        said = _last_line(res.get("stderr")) or _last_line(res.get("stdout")) or "no output"
        return f"`{shown}` exited {res['rc']}: {said}"
    first = msg.splitlines()[0] if msg else ""
    detail = _last_line(res.get("stderr")) or _last_line(res.get("module_stderr"))
    if detail and detail not in first:
        first = f"{first}: {detail}" if first else detail
    return first or "failed"
