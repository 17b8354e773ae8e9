"""What the command line asks of an audit or a fix, checked before any host is touched."""
from __future__ import annotations

from dataclasses import dataclass, field


class BadInput(ValueError):
    """One line for the user; exit 1; no host touched."""


@dataclass
class Options:
    inventory: str | None = None
    limit: str | None = None
    controls: list[str] = field(default_factory=list)
    json: str | None = None
    junit: str | None = None
    html: str | None = None
    reboot: str = "never"
    yes: bool = False
    diff: bool = False
    task_timeout: int = 120
    reboot_timeout: int = 600
    lock_timeout: int = 1800
    connection: list[str] = field(default_factory=list)    # ansible-playbook flags: -u, -b, --private-key, -e, --forks
    prom: str | None = None                 # Prometheus textfile
    no_color: bool = False
    format: str = "table"                   # table | oneline
    prove: dict | None = None               # gpuhost prove / fix --prove: the measure module's options and thresholds
    baseline: str | None = None             # audit/prove --baseline: an earlier report to say what changed since


def parse_controls(text: str | None) -> list[str]:
    """--controls: None selects every control; anything given must name controls exactly
    (an empty or blank selection must never widen to all of them)."""
    if text is None:
        return []
    ids = [c.strip() for c in text.split(",")]
    if not any(ids):
        raise BadInput(f"--controls: empty selection {text!r} (give control IDs, comma-separated)")
    if not all(ids):
        raise BadInput(f"--controls: empty item in {text!r}")
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls import BY_ID

    for cid in ids:
        if cid not in BY_ID:
            raise BadInput(f"--controls: unknown control {cid!r} (known: {', '.join(BY_ID)})")
    return ids


def parse_limit(text: str | None) -> str | None:
    """--limit: None means every host; a given pattern must select something by its shape
    ("", " ", ",", ":" would select every host in Ansible; an unclosed [ is a typo)."""
    if text is None:
        return None
    pattern = text.strip()
    if not pattern or not pattern.strip(",:&! "):
        raise BadInput(f"--limit: empty pattern {text!r}")
    if pattern.count("[") != pattern.count("]"):
        raise BadInput(f"--limit: unbalanced [ ] in {text!r}")
    return pattern


def parse_gpus(text: str | None) -> list[str]:
    """--gpus: GPU indexes or PCI bus ids, comma-separated; None is every GPU."""
    if text is None:
        return []
    items = [g.strip().lower() for g in text.split(",")]
    if not all(items):
        raise BadInput(f"--gpus: empty item in {text!r}")
    import re

    for g in items:
        if not re.match(r"^(\d+|([0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])$", g):
            raise BadInput(f"--gpus: not a GPU index or PCI bus id: {g!r}")
    return items
