"""What keeps a setting across boots: gpuhost's boot units, and files compared as the file module does.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import BootUnit


def content_sha256(text: str | None) -> str:
    """A file's text as the file module compares it (read with surrogateescape); "absent" for none."""
    import hashlib
    return "absent" if text is None else hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def unit(name: str, description: str, commands: list[str], after: str = "sysinit.target", before: str = "") -> BootUnit:
    """A oneshot unit that re-applies a runtime setting at every boot, started after *after*
    (and before *before*, where something must not start without it)."""
    execs = "".join(f"ExecStart={c}\n" for c in commands)
    order = f"Before={before}\n" if before else ""
    content = (f"# Managed by gpuhost ({name}); re-applies a runtime setting the kernel forgets at boot.\n"
               f"[Unit]\nDescription=gpuhost: {description}\nAfter={after}\n{order}\n"
               f"[Service]\nType=oneshot\nRemainAfterExit=yes\n{execs}\n[Install]\nWantedBy=multi-user.target\n")
    return BootUnit(name, content)


def unit_ok(facts: dict, u: BootUnit) -> bool:
    have = ((facts.get("units") or {}).get(u.name) or {})
    return have.get("content") == u.content and bool(have.get("enabled"))


def unit_current_or_absent(facts: dict, u: BootUnit) -> bool:
    """For registers and queues that firmware or the kernel set at every boot: a good live
    value with no gpuhost unit is what boot gives; a gpuhost unit must match what is wanted."""
    have = ((facts.get("units") or {}).get(u.name) or {})
    return have.get("content") is None or unit_ok(facts, u)
