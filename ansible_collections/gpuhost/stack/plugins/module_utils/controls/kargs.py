"""The kernel command line as the kernel splits it, and the words boot loaders add themselves.
"""
from __future__ import annotations


LOADER_OWN = ("BOOT_IMAGE", "root", "ro", "rw", "initrd", "rootflags", "boot")


# parameters boot loaders add themselves: Ubuntu's GRUB adds vt.handoff=7 with `splash`
# (/etc/grub.d/10_linux); never in a config file, so never a difference
ADDED_BY_LOADER = ("vt.handoff",)


def kernel_args(cmdline: str) -> list[tuple[str, str | None]]:
    """The words of a kernel command line as the kernel splits them (kernel/params.c
    next_arg): whitespace outside double quotes separates; a double quote toggles quoting
    and is dropped where it opens the word or the value and where it ends it; a backslash
    is an ordinary character (systemd-boot's initrd=\\EFI\\... keeps it); an unclosed quote
    runs to the end of the line. Never raises: a line is what the kernel got."""
    out: list[tuple[str, str | None]] = []
    i, n = 0, len(cmdline)
    while i < n:
        while i < n and cmdline[i].isspace():
            i += 1
        if i >= n:
            break
        quoted = cmdline[i] == '"'
        if quoted:
            i += 1
        start, in_quote, equals = i, quoted, -1
        while i < n and (in_quote or not cmdline[i].isspace()):
            if equals < 0 and cmdline[i] == "=":
                equals = i
            if cmdline[i] == '"':
                in_quote = not in_quote
            i += 1
        word = cmdline[start:i]
        if equals < 0:
            name, value = (word[:-1] if quoted and word.endswith('"') else word), None
        else:
            name, value = cmdline[start:equals], cmdline[equals + 1:i]
            if value.startswith('"'):
                value = value[1:]
                if value.endswith('"'):
                    value = value[:-1]
            elif quoted and value.endswith('"'):
                value = value[:-1]
        out.append((name, value))
    return out


def params(cmdline: str | None) -> dict[str, str] | None:
    """Kernel parameters as name -> value ('' for a flag); the last one given wins."""
    if cmdline is None:
        return None
    return {name: value or "" for name, value in kernel_args(cmdline)}


def _comparable(p: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in p.items() if k not in LOADER_OWN}
