"""What a control is and what it finds: the catalog entry with the parameters and the host
data it declares, the finding, and the host view every judgement reads.

A control is one module of this package: ``CONTROL`` (a ``Control``) and ``judge(host)``.
Everything else that names a control (the probe's watch lists, the inventory check, the
roles' task files and argument specs, the docs) is made from these declarations.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.kargs import params

STATUSES = ("pass", "drift", "manual", "pending_reboot", "na", "waived", "error")
FAILING = ("drift", "manual", "pending_reboot")


@dataclass(frozen=True)
class Param:
    """An inventory variable: its default is written here once (roles' defaults, argument
    specs and READMEs are made from it) and the inventory check enforces type and bounds."""
    name: str                        # gpuhost_*
    # an argument_spec type: str, int, bool, list; raw: a bool that may be left unset ("": the
    # judgement does not ask for a value)
    type: str
    default: object
    key: str | None                  # the judgement's settings key; None: only the role's tasks read it
    doc: str                         # one line, for the role's README and argument specs
    elements: str | None = None      # for a list
    bounds: tuple[int, int] | None = None    # an int's inclusive range
    pattern: str | None = None       # a str must match it when not empty
    what: str | None = None          # what a good value is, for the one-line error ("a kernel version like ...")
    choices: tuple[str, ...] = ()    # what each element must be (control IDs: filled in by the registry)
    roles: tuple[str, ...] = ()      # control roles that take it besides its control's own ("*": every one)
    checked: bool = True             # the inventory check reads it (False: gpuhost itself sets it)


@dataclass(frozen=True)
class Control:
    id: str
    title: str
    role: str
    fixable: bool
    reboot: str                      # "no" | "if cmdline" | "yes" | "container" | "-"
    rationale: str
    references: tuple[str, ...] = ()
    passes: str = ""                 # when it passes, for the README's table (markdown)
    repair: str = ""                 # what the fix does, for the README's table (markdown)
    facts: tuple[str, ...] = ()      # the facts sections judge() reads (a test watches it read)
    units: tuple[str, ...] = ()      # systemd units a fix installs, enables or removes: the probe reads them back
    sysctls: tuple[str, ...] = ()    # sysctls judge() reads, live and persisted: the probe reads them
    params: tuple[Param, ...] = ()
    host_level: bool = True          # judged on the host, na inside a container
    role_tasks: str | None = None    # a task file of the role's own, run after the fix (lxc's restart)
    # "setting" (the stack's configuration) | "health" (read-only: the hardware's state; never
    # fixed, stops a reboot roll-out)
    kind: str = "setting"


@dataclass
class Finding:
    control: str
    status: str
    observed: object = None
    expected: object = None
    message: str = ""
    reboot_required: bool = False
    changed: bool = False
    fix: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"control": self.control, "status": self.status, "observed": self.observed,
                "expected": self.expected, "reboot_required": self.reboot_required,
                "message": self.message, "changed": self.changed, "fix": self.fix}


# what Ansible's bool filter reads as true and false (a `-e` value is a string)
TRUE_WORDS, FALSE_WORDS = ("true", "yes", "on", "1", "y", "t"), ("false", "no", "off", "0", "n", "f")


def flag(value: object, unset: object = None) -> object:
    """An inventory bool as the judgement reads it: True, False, or *unset* where it is not
    given ("" or None: an optional bool, a Param of type raw)."""
    if isinstance(value, bool):
        return value
    word = str(value if value is not None else "").strip().lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else unset


def na(cid: str, why: str) -> Finding:
    return Finding(cid, "na", message=why)


def error(cid: str, why: str) -> Finding:
    return Finding(cid, "error", message=why)


class Host:
    """One host's facts with the derived values several controls share, each read from the
    facts when first asked for (so what a judgement reads is what it asked for)."""

    def __init__(self, facts: dict, settings: dict):
        self.f = facts
        self.s = settings
        self._cache: dict = {}

    def _once(self, name: str, make):
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    @property
    def errors(self) -> dict:
        return self._once("errors", lambda: self.f.get("errors") or {})

    @property
    def boot(self) -> dict:
        return self._once("boot", lambda: self.f.get("boot") or {})

    @property
    def live(self) -> dict:
        return self._once("live", lambda: params(self.boot.get("cmdline") or "") or {})

    @property
    def persisted(self) -> dict | None:
        return self._once("persisted", lambda: params(self.boot.get("persisted_cmdline")))

    @property
    def container(self) -> str | None:
        return self._once("container", lambda: (self.f.get("container") or {}).get("kind"))

    @property
    def pci(self) -> dict:
        return self._once("pci", lambda: {d["bdf"]: d for d in self.f.get("pci") or []})

    @property
    def gpus(self) -> list[dict]:
        return self._once("gpus", lambda: [d for d in self.f.get("pci") or [] if d.get("vendor") == 0x10DE
                                           and ((d.get("class") or 0) >> 16) == 0x03])

    def section(self, name: str):
        return self.f.get(name)

    def path_up(self, bdf: str) -> list[dict]:
        out, cur = [], self.pci.get(bdf)
        while cur and cur.get("parent") and cur["parent"] in self.pci:
            cur = self.pci[cur["parent"]]
            out.append(cur)
        return out
