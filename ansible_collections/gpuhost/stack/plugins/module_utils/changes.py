# -*- coding: utf-8 -*-
"""The live changes a fix makes (gpuhost.stack.runtime), in the one form they keep from the
judgement to the host: a dict naming its ``kind`` and holding exactly that kind's fields.
The controller's fix kinds (controls/fixes.py) write them, the runtime module reads them, and
both check them here: a field no kind has, or a kind no one knows, is an error, never a guess.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

# kind: (fields it must have, fields it may have)
KINDS = {
    # a sysfs or procfs file (path), or each file a glob matches; selected: the file lists
    # choices, the current one in [brackets]; refused_ok: the kernel may refuse the write
    "sysfs": (("value",), ("path", "glob", "refused_ok", "selected")),
    # bits *mask* of a PCI register set to *value* (hex), on the function at *pci* only while
    # it still has this vendor:device
    "pci_register": (("pci", "device", "register", "value", "mask"), ()),
    # persistence mode on for every GPU
    "persistence": ((), ()),
    # a GPU's power limit, by its bus id as nvidia-smi prints it
    "power_limit": (("gpu", "power_limit_w"), ()),
    # a GPU's compute mode, or its MIG or ECC mode as pending
    "gpu_mode": (("gpu", "gpu_mode", "value"), ()),
}


def check(change):
    """The kind of *change*, after checking it has exactly that kind's fields; ValueError
    naming what is wrong otherwise."""
    if not isinstance(change, dict):
        raise ValueError("a live change is a mapping, not %r" % (change,))
    kind = change.get("kind")
    if kind not in KINDS:
        raise ValueError("not a kind of live change gpuhost makes: %r (known: %s)" % (kind, ", ".join(sorted(KINDS))))
    must, may = KINDS[kind]
    missing = [f for f in must if f not in change]
    unknown = sorted(set(change) - set(must) - set(may) - {"kind"})
    if missing or unknown:
        raise ValueError("a %s change %s" % (kind, "; ".join(
            (["lacks " + ", ".join(missing)] if missing else []) + (["has no field " + ", ".join(unknown)] if unknown else []))))
    if kind == "sysfs" and ("path" in change) == ("glob" in change):
        raise ValueError("a sysfs change names a path or a glob, one of them")
    return kind
