#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: one file gpuhost owns or edits, with its boot-unit link, in one call."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: file
short_description: Write a file with exact content (and enable it as a boot unit) in one round trip
description:
  - Writes I(content) to I(path) when it differs, atomically, keeping a copy of the old file
    in I(backup_dir) when asked. With I(wanted_by), also makes the unit's
    C(<target>.wants/) link, as C(systemctl enable) does. With I(daemon_reload), a change
    is followed by C(systemctl daemon-reload), so systemd knows the unit before the next task.
  - Does one job the builtin copy and file modules do in several round trips, which matters
    when a fix touches a dozen files on every host of a fleet. Supports check mode and diff.
options:
  path: {description: The file, type: path, required: true}
  content: {description: What it must contain, type: str, required: true}
  mode: {description: Permissions for a new file (an existing file keeps its own), type: str, default: "0644"}
  backup_dir: {description: Where to keep a timestamped copy of a file before changing it, type: path}
  wanted_by: {description: A systemd target whose .wants directory links the unit, type: str}
  daemon_reload:
    description:
      - After a change (the file or the link), run C(systemctl daemon-reload) (argv, no shell); not in check mode.
      - systemd reads unit files again only when told (systemctl(1), daemon-reload), and a unit started
        or restarted before that runs as systemd last read it.
    type: bool
    default: false
  expect_sha256:
    description:
      - "The SHA-256 of the content the caller computed I(content) from (C(absent): no file). A file that
        differs now (changed since it was read) is not written: the task fails saying so."
    type: str
author: gpuhost maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: pcie.mrrs | install and enable the boot unit
  gpuhost.stack.file:
    path: /etc/systemd/system/gpuhost-pcie-mrrs.service
    content: "{{ unit_text }}"
    wanted_by: multi-user.target
    daemon_reload: true
"""

RETURN = r"""
backup_file: {description: the copy kept, returned: when a file was changed and backup_dir given, type: str}
linked: {description: the wants link made, returned: when made, type: str}
daemon_reloaded: {description: whether systemctl daemon-reload ran, returned: always, type: bool}
"""

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.stack.plugins.module_utils.write import backup, link_refusal, write_atomic


def main():
    module = AnsibleModule(argument_spec=dict(
        path=dict(type="path", required=True), content=dict(type="str", required=True),
        mode=dict(type="str", default="0644"), backup_dir=dict(type="path"), wanted_by=dict(type="str"),
        daemon_reload=dict(type="bool", default=False), expect_sha256=dict(type="str")),
        supports_check_mode=True)
    p = module.params
    path, content = p["path"], p["content"]
    try:
        # byte for byte: CRLF and bytes that are not UTF-8 read back as they are
        with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:
            before = f.read()
    except IOError:
        before = None
    refusal = link_refusal(path)
    if refusal:
        module.fail_json(msg=refusal, path=path)
    if p["expect_sha256"] and before != content:
        now = "absent" if before is None else \
            hashlib.sha256(before.encode("utf-8", "surrogateescape")).hexdigest()
        if now != p["expect_sha256"]:
            # the content was computed from what the audit read: written now it would undo
            # whatever changed since (a line someone added); the next run judges it again
            module.fail_json(msg="%s changed since the audit read it: nothing written (run the fix again to "
                                 "judge it as it is now)" % path, path=path)
    result = dict(changed=False, path=path)
    diffs = []
    if before != content:
        result["changed"] = True
        diffs.append(dict(before_header=path, after_header=path, before=before or "", after=content))
        if not module.check_mode:
            if before is not None and p["backup_dir"]:
                try:
                    result["backup_file"] = backup(path, p["backup_dir"])
                except OSError as exc:     # a backup that cannot be made safely: no change either
                    module.fail_json(msg=str(exc), path=path)
            write_atomic(module, path, content, None if before is not None else int(p["mode"], 8))
    if p["wanted_by"]:
        link = "/etc/systemd/system/%s.wants/%s" % (p["wanted_by"], os.path.basename(path))
        if not (os.path.islink(link) and os.readlink(link) == path):
            result["changed"] = True
            result["linked"] = link
            diffs.append(dict(before_header=link, after_header=link, before="", after="-> %s\n" % path))
            if not module.check_mode:
                if not os.path.isdir(os.path.dirname(link)):
                    os.makedirs(os.path.dirname(link))
                if os.path.lexists(link):
                    os.unlink(link)
                os.symlink(path, link)
    result["daemon_reloaded"] = False
    if result["changed"] and p["daemon_reload"] and not module.check_mode:
        # in this same call, not a task of its own: the reload is part of installing the unit
        rc, out, err = module.run_command(["systemctl", "daemon-reload"])
        if rc != 0:
            module.fail_json(msg="%s was written, but systemctl daemon-reload failed (rc %d): %s"
                                 % (path, rc, (err or out).strip()), path=path, changed=True, diff=diffs)
        result["daemon_reloaded"] = True
    result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
