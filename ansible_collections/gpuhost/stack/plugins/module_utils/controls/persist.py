"""What keeps a setting across boots: gpuhost's boot units as data, rendered to systemd here
and nowhere else, and files compared as the file module does.

A boot unit is a list of steps in the order they run: values written to sysfs files
(``Write``, a tmpfiles.d(5) `w` line: the files a glob matches, only where they exist) and
programs run with their arguments (``Run``, an ExecStart= line). No step is shell: the
writes are data systemd-tmpfiles reads, the programs' arguments are quoted for systemd.
"""
from __future__ import annotations

from dataclasses import dataclass

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import BootUnit

# the writes' data files: outside tmpfiles.d, so that systemd-tmpfiles-setup.service does not
# apply them early in the boot, before the drivers whose files they write have loaded; the
# unit applies them at its own place in the boot order
BOOT_DATA_DIR = "/etc/gpuhost/boot.d"
# systemd.service(5): a command that is not an absolute path is looked up in a fixed search
# path (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin, systemd 239 and
# later): systemd-tmpfiles lives in /bin on an unmerged Debian 11 and in /usr/bin elsewhere
TMPFILES = "systemd-tmpfiles"


@dataclass(frozen=True)
class Write:
    """*value* written to every file *glob* matches (tmpfiles.d(5) `w`: shell-style globs, the
    value without a trailing newline, a file that does not exist left alone). *refused_ok*: a
    kernel that refuses the write is not a failure: such writes get a systemd-tmpfiles call of
    their own that the unit may see fail (the ExecStart `-` prefix; tmpfiles' own `w-` needs
    systemd 240, NEWS, and RHEL 8 runs 239)."""
    glob: str
    value: str
    refused_ok: bool = False

    def line(self) -> str:
        if any(c.isspace() for c in self.glob) or "\\" in self.value or any(c.isspace() for c in self.value):
            # white space would need quoting, a backslash is an escape to tmpfiles: no control
            # writes either, and none may by accident
            raise ValueError(f"not a tmpfiles `w` line gpuhost writes: {self.glob!r} {self.value!r}")
        return f"w {self.glob} - - - - {self.value}"


@dataclass(frozen=True)
class Run:
    """A program run with its arguments, no shell between (an ExecStart= line); *failure_ok*:
    the unit goes on where it fails (systemd.service(5), the `-` prefix)."""
    argv: tuple
    failure_ok: bool = False

    def exec_start(self) -> str:
        if not self.argv or not self.argv[0].startswith("/"):
            raise ValueError(f"a boot unit runs a program by its absolute path: {self.argv!r}")
        return ("-" if self.failure_ok else "") + " ".join(_systemd_word(a) for a in self.argv)


def _systemd_word(arg: str) -> str:
    """One argument as systemd.service(5) splits a command line: % starts a specifier and $
    a variable (both doubled to stand for themselves); white space, quotes and backslashes
    would need quoting, which no gpuhost command has: refused rather than quoted."""
    if not arg or any(c.isspace() or c in "\"'\\;" for c in arg):
        raise ValueError(f"not an argument gpuhost puts in a unit: {arg!r}")
    return arg.replace("%", "%%").replace("$", "$$")


@dataclass(frozen=True)
class Boot:
    """A oneshot unit that re-applies runtime settings at every boot: its steps in order,
    started after *after* (and before *before*, where something must not start without it)."""
    name: str                       # gpuhost-<control>.service
    description: str
    steps: tuple
    after: str = "sysinit.target"
    before: str = ""

    def _groups(self) -> list:
        """The steps in order, consecutive writes of the same kind (refusable or not) grouped:
        each group is one systemd-tmpfiles call over one data file."""
        out: list = []
        for step in self.steps:
            if not isinstance(step, (Write, Run)):
                raise TypeError(f"not a boot step: {step!r}")
            if isinstance(step, Write) and out and isinstance(out[-1], list) and out[-1][0].refused_ok == step.refused_ok:
                out[-1].append(step)
            else:
                out.append([step] if isinstance(step, Write) else step)
        return out

    def render(self) -> BootUnit:
        """The unit file and its data files, as systemd and systemd-tmpfiles read them."""
        stem = self.name.rsplit(".", 1)[0]
        data, execs = [], []
        for group in self._groups():
            if isinstance(group, Run):
                execs.append(group.exec_start())
                continue
            path = f"{BOOT_DATA_DIR}/{stem}{'' if not data else f'.{len(data) + 1}'}.conf"
            data.append((path, f"# Managed by gpuhost ({self.name}): tmpfiles.d(5) lines the unit applies at boot"
                               f"{', each allowed to fail' if group[0].refused_ok else ''}.\n"
                               + "".join(w.line() + "\n" for w in group)))
            execs.append(f"{'-' if group[0].refused_ok else ''}{TMPFILES} --create {path}")
        order = f"Before={self.before}\n" if self.before else ""
        content = (f"# Managed by gpuhost ({self.name}); re-applies a runtime setting the kernel forgets at boot.\n"
                   f"[Unit]\nDescription=gpuhost: {self.description}\nAfter={self.after}\n{order}\n"
                   f"[Service]\nType=oneshot\nRemainAfterExit=yes\n" + "".join(f"ExecStart={e}\n" for e in execs) +
                   "\n[Install]\nWantedBy=multi-user.target\n")
        return BootUnit(self.name, content, tuple(data))


def content_sha256(text: str | None) -> str:
    """A file's text as the file module compares it (read with surrogateescape); "absent" for none."""
    import hashlib
    return "absent" if text is None else hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def unit(name: str, description: str, steps: list, after: str = "sysinit.target", before: str = "") -> BootUnit:
    """A oneshot unit that re-applies a runtime setting at every boot, rendered from its steps."""
    return Boot(name, description, tuple(steps), after, before).render()


def unit_ok(facts: dict, u: BootUnit) -> bool:
    have = ((facts.get("units") or {}).get(u.name) or {})
    data = have.get("data") or {}
    return (have.get("content") == u.content and bool(have.get("enabled"))
            and all(data.get(path) == text for path, text in u.data))


def unit_current_or_absent(facts: dict, u: BootUnit) -> bool:
    """For registers and queues that firmware or the kernel set at every boot: a good live
    value with no gpuhost unit is what boot gives; a gpuhost unit must match what is wanted."""
    have = ((facts.get("units") or {}).get(u.name) or {})
    return have.get("content") is None or unit_ok(facts, u)
