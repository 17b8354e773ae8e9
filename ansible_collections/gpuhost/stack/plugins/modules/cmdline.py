#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: set or remove kernel parameters on the persisted command line."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cmdline
short_description: Add, replace or remove kernel parameters for the next boot
description:
  - Edits the boot command line where the host's boot loader takes it from, keeping every
    other parameter as it is, and refreshes the boot loader so the next boot has it.
  - The boot loader is told as the facts probe tells it (proxmox-boot-tool status per ESP,
    cross-checked with the running boot), so the file edited is the one the loader reads.
  - "systemd-boot on proxmox-boot-tool ESPs (configured with: uefi): the one line of
    C(/etc/kernel/cmdline), then C(proxmox-boot-tool refresh)."
  - "GRUB: a drop-in C(/etc/default/grub.d/gpuhost.cfg) that gpuhost owns appends the
    parameters; a parameter to remove is also taken out of C(/etc/default/grub). Then
    C(update-grub), or C(proxmox-boot-tool refresh) where GRUB boots from
    proxmox-boot-tool ESPs (configured with: grub; ZFS root on legacy BIOS or Secure
    Boot), whose C(/etc/kernel/cmdline) nothing reads."
  - Idempotent; supports check mode and diff; keeps a backup of a file it changes.
options:
  set:
    description: Parameters to have, name to value (an empty value gives a bare flag).
    type: dict
    default: {}
  remove:
    description: Names of parameters to take out.
    type: list
    elements: str
    default: []
  backup:
    description: Keep a timestamped copy of a file before changing it, in /var/backups/gpuhost (never beside it).
    type: bool
    default: true
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: cpu.driver | persist amd_pstate=active
  gpuhost.stack.cmdline:
    set: {amd_pstate: active}
"""

RETURN = r"""
loader: {description: "systemd-boot, grub or grub-esp", returned: always, type: str}
before: {description: the persisted parameters before, returned: always, type: str}
after: {description: the persisted parameters after, returned: always, type: str}
backup_file: {description: the backup made, returned: changed, type: str}
"""

import glob
import json
import os
import re
import shlex
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.stack.plugins.module_utils.write import backup, safe_dir, write_atomic
from ansible_collections.gpuhost.stack.plugins.module_utils.probe import GRUB_VARS, REFRESH_JOURNAL, Probe, ShellValueError, read_shell_assignments, shell_scan

KERNEL_CMDLINE = "/etc/kernel/cmdline"
BOOT_UUIDS = "/etc/kernel/proxmox-boot-uuids"
GRUB_DEFAULT = "/etc/default/grub"
GRUB_DROPIN = "/etc/default/grub.d/gpuhost.cfg"


def token(name, value):
    return name if value in (None, "") else "%s=%s" % (name, value)


def grub_word(tok):
    """A parameter as written inside GRUB_CMDLINE_LINUX_DEFAULT="...": grub-mkconfig copies
    the line into grub.cfg unquoted, where ';' would end the linux command."""
    return '\\"%s\\"' % tok if ";" in tok else tok


def edit_tokens(tokens, set_, remove):
    """Replace a parameter where it stands (dropping duplicates), append a new one at the end."""
    out, placed = [], set()
    for tok in tokens:
        name = tok.split("=", 1)[0]
        if name in remove:
            continue
        if name in set_:
            if name in placed:
                continue
            out.append(token(name, set_[name]))
            placed.add(name)
            continue
        out.append(tok)
    for name, value in set_.items():
        if name not in placed:
            out.append(token(name, value))
    return out


GRUB_ASSIGN = re.compile(r'^(\s*(?:export\s+)?(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)=)(.*)$')


def _token_re(name):
    # a bare parameter token inside the value: NAME or NAME=VALUE, bounded by blanks or quotes
    return re.compile(r'(?<![^\s"\'])%s(?:=[^\s"\'#]*)?(?![^\s"\'])' % re.escape(name))


def edit_grub_line(line, set_, remove, placed):
    """One GRUB_CMDLINE_* assignment with parameters edited as tokens where they stand:
    quoting, spacing, comments and line end kept. *placed* collects names set here."""
    body = line.rstrip("\r\n")
    ending = line[len(body):]
    m = GRUB_ASSIGN.match(body)
    if not m:
        return line
    head, rest = m.group(1), m.group(3)
    end = shell_scan(rest)[0]          # the value, up to an unquoted comment
    value, tail = rest[:end], rest[end:]
    # a value with ';' needs GRUB quoting: gpuhost's drop-in carries it
    value = edit_value(value, set_, remove, placed, keep=lambda want: ";" not in want)
    return head + value + tail + ending


def edit_value(value, set_, remove, placed, keep=lambda want: True):
    """Parameters edited as tokens where they stand in *value*; every other byte kept.
    A removed token takes one neighbouring blank with it; *placed* collects names set."""
    for name in list(remove) + list(set_):
        pattern = _token_re(name)
        want = None if name in remove else token(name, set_[name])
        if want is not None and not keep(want):
            want = None

        def sub(match, name=name, want=want):
            if want is None or name in placed:
                return "\0"
            placed.add(name)
            return want
        value = pattern.sub(sub, value)
    return re.sub(r"\0[ \t]?", "", re.sub(r"[ \t]\0", "", value))


def edit_kernel_cmdline(text, set_, remove):
    """/etc/kernel/cmdline (one line, passed to the kernel as written: quotes included)
    edited in place; new parameters appended; the line end kept."""
    body = text.rstrip("\r\n")
    ending = text[len(body):]          # none stays none: every byte not meant to change is kept
    placed = set()
    body = edit_value(body, set_, remove, placed)
    extra = [token(n, v) for n, v in set_.items() if n not in placed]
    if extra:
        body = (body.rstrip(" \t") + " " if body.strip() else "") + " ".join(extra)
    return body + ending


def grub_cmdline_of(texts):
    """The command line grub-mkconfig builds from these files (read, never run)."""
    values = {}
    for path, text in texts:
        read_shell_assignments(text, path, values, GRUB_VARS)
    return shlex.split(values.get("GRUB_CMDLINE_LINUX", "") + " " + values.get("GRUB_CMDLINE_LINUX_DEFAULT", ""))


def check_grub_result(before, after, set_, remove):
    """The edited files, read as grub-mkconfig reads them, give exactly the intended line:
    every other parameter as it was, in order; set ones with their value; removed ones gone."""
    old, new = grub_cmdline_of(before), grub_cmdline_of(after)
    touched = set(set_) | set(remove)
    keep = [t for t in old if t.split("=", 1)[0] not in touched]
    if [t for t in new if t.split("=", 1)[0] not in touched] != keep:
        return "the other parameters would change: %s -> %s" % (" ".join(keep), " ".join(
            t for t in new if t.split("=", 1)[0] not in touched))
    last = {}
    for t in new:
        last[t.split("=", 1)[0]] = t.split("=", 1)[1] if "=" in t else ""
    for name, value in set_.items():
        if last.get(name) != value:
            return "%s would be %r, not %r" % (name, last.get(name), value)
    for name in remove:
        if name in last:
            return "%s would still be set" % name
    return None


def _grub_order(path):
    """GRUB sources /etc/default/grub first, then grub.d/*.cfg by name."""
    return (0, "") if path == GRUB_DEFAULT else (1, os.path.basename(path))


def read(path):
    # newline="": CRLF line ends come back as they are (text mode would turn them into LF);
    # surrogateescape: bytes that are not UTF-8 are written back unchanged
    try:
        with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except IOError:
        return None


def write_journal(module, refresh, before, after):
    """The intent, on disk before the first byte changes (module_utils/probe reads it back)."""
    safe_dir(os.path.dirname(REFRESH_JOURNAL), 0o755)
    record = {"refresh": " ".join(refresh), "before": before, "after": after,
              "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_atomic(module, REFRESH_JOURNAL, json.dumps(record, sort_keys=True) + "\n", new_mode=0o644)


def clear_journal():
    try:
        os.unlink(REFRESH_JOURNAL)
    except FileNotFoundError:
        pass


def main():
    module = AnsibleModule(
        argument_spec=dict(set=dict(type="dict", default={}), remove=dict(type="list", elements="str", default=[]),
                           backup=dict(type="bool", default=True)),
        supports_check_mode=True)
    set_ = dict((str(k), "" if v is None else str(v)) for k, v in module.params["set"].items())
    remove = set(module.params["remove"])
    for name in list(set_) + list(remove):
        if not re.match(r"^[A-Za-z0-9_.\-]+$", name):
            module.fail_json(msg="not a kernel parameter name: %r" % name)

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    probe = Probe("/", run=run)
    try:
        loader, dummy = probe.detect_loader(probe.read1("/proc/cmdline"))
    except IOError as exc:
        module.fail_json(msg=str(exc))
    if loader == "systemd-boot" and os.path.exists(KERNEL_CMDLINE):
        files = {}
        before_text = read(KERNEL_CMDLINE) or ""
        after_text = edit_kernel_cmdline(before_text, set_, remove)
        try:
            problem = check_grub_result([("cmdline", 'GRUB_CMDLINE_LINUX=%s' % shlex.quote(before_text.strip()))],
                                        [("cmdline", 'GRUB_CMDLINE_LINUX=%s' % shlex.quote(after_text.strip()))],
                                        set_, remove)
        except (ShellValueError, ValueError) as exc:
            problem = str(exc)
        if problem:
            module.fail_json(msg="%s edit not made (nothing written): %s" % (KERNEL_CMDLINE, problem), changed=False)
        if after_text != before_text:
            files[KERNEL_CMDLINE] = (before_text, after_text)
        before, after_s = before_text.strip(), after_text.strip()
        refresh = ["proxmox-boot-tool", "refresh"]
    elif loader in ("grub", "grub-esp") and os.path.exists(GRUB_DEFAULT):
        files = {}
        # the files GRUB reads, in its order; gpuhost's drop-in is rebuilt, the others edited in place
        sources = [GRUB_DEFAULT] + sorted(p for p in glob.glob("/etc/default/grub.d/*.cfg") if p != GRUB_DROPIN)
        placed = set()
        for path in sources:
            text = read(path) or ""
            new = "".join(edit_grub_line(line, set_, remove, placed) for line in text.splitlines(True))
            if new != text:
                files[path] = (text, new)
        drop_text = read(GRUB_DROPIN)
        owned = []
        if drop_text:
            m = re.search(r'^GRUB_CMDLINE_LINUX_DEFAULT="\$GRUB_CMDLINE_LINUX_DEFAULT ?(.*)"\s*$', drop_text, re.M)
            owned = shlex.split(m.group(1)) if m else []
        new_owned = edit_tokens([t for t in owned if t.split("=", 1)[0] not in placed],
                                dict((k, v) for k, v in set_.items() if k not in placed), remove)
        if new_owned != owned or (drop_text is None and new_owned):
            files[GRUB_DROPIN] = (drop_text or "", (
                "# Managed by gpuhost: kernel parameters its controls need (see gpuhost_cmdline).\n"
                'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT %s"\n' % " ".join(grub_word(t) for t in new_owned)))
        order = sources + [GRUB_DROPIN]
        before_texts = [(p, read(p) or "") for p in order if os.path.exists(p)]
        after_texts = [(p, files[p][1] if p in files else (read(p) or "")) for p in order
                       if p in files or os.path.exists(p)]
        try:
            problem = check_grub_result(sorted(before_texts, key=lambda pt: _grub_order(pt[0])),
                                        sorted(after_texts, key=lambda pt: _grub_order(pt[0])), set_, remove)
        except ShellValueError as exc:
            problem = "cannot read GRUB's settings safely: %s" % exc
        if problem:
            module.fail_json(msg="GRUB edit not made (nothing written): %s" % problem, changed=False)
        before = " ".join(owned)
        after_s = " ".join(new_owned)
        refresh = ["proxmox-boot-tool", "refresh"] if loader == "grub-esp" else ["update-grub"]
    else:
        module.fail_json(msg="no boot loader configuration gpuhost can edit (%s with %s, or %s); loader: %s"
                             % (KERNEL_CMDLINE, BOOT_UUIDS, GRUB_DEFAULT, loader))

    unfinished = probe.unfinished_refresh()
    result = dict(changed=bool(files) or bool(unfinished), loader=loader, before=before, after=after_s,
                  diff=[dict(before_header=p, after_header=p, before=b, after=a) for p, (b, a) in files.items()])
    if (files or unfinished) and not module.check_mode:
        existed = dict((path, os.path.exists(path)) for path in files)
        try:
            # every copy first: a backup that cannot be made safely means no edit at all
            for path in files:
                if module.params["backup"] and existed[path]:
                    result["backup_file"] = backup(path)
            # the intent, on disk before the first byte changes: a power loss from here to
            # the end of the refresh leaves it, and the audit then knows the boot loader may
            # not hold what the files say (and the next run refreshes it again)
            write_journal(module, refresh, before, after_s)
        except OSError as exc:
            module.fail_json(msg="nothing changed: %s" % exc, changed=False)
        for path, (dummy, text) in files.items():
            write_atomic(module, path, text)
        rc, out, err = module.run_command(refresh)
        if rc != 0:
            why = ((err or out).strip().splitlines() or ["no output"])[-1]
            # leave no half-applied change: the files go back to what they were, and the boot
            # loader is refreshed again from them, since the failed refresh may have written
            # some of its targets (one ESP of two) before it failed
            for path, (text, dummy) in files.items():
                if existed[path]:
                    write_atomic(module, path, text)
                elif os.path.exists(path):
                    os.unlink(path)
            again, out2, err2 = module.run_command(refresh)
            if again == 0:
                clear_journal()
                result.update(changed=False, restored=sorted(files))
                module.fail_json(msg="%s failed, nothing changed (%s restored and the boot loader refreshed from it "
                                     "again): %s" % (" ".join(refresh), ", ".join(sorted(files)) or "no file", why),
                                 **result)
            # the files are as they were; what each target of the loader holds is not known
            result.update(changed=False, restored=sorted(files), unfinished=True)
            module.fail_json(msg="%s failed, and again after %s was restored: the boot loader may hold the new line "
                                 "(%s) on some of its targets; no reboot until `%s` succeeds (%s; then: %s)"
                                 % (" ".join(refresh), ", ".join(sorted(files)) or "nothing", after_s, " ".join(refresh),
                                    why, ((err2 or out2).strip().splitlines() or ["no output"])[-1]), **result)
        clear_journal()
        result["refresh"] = " ".join(refresh)
        if unfinished and not files:
            result["msg"] = "refreshed the boot loader: an earlier refresh (%s) did not finish" % unfinished.get("since", "?")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
