# -*- coding: utf-8 -*-
"""GRUB's own files as grub-mkconfig writes them: the menu, its entry IDs, grubenv, and the
kernel the default entry boots.
"""
from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type


def grubenv_values(grubenv):
    """grubenv's NAME=value lines (grub-editenv's format; the rest is # padding)."""
    out = {}
    for line in (grubenv or "").splitlines():
        if line and not line.startswith("#") and "=" in line:
            name, dummy, value = line.partition("=")
            out[name] = value
    return out


def grub_menu(cfg):
    """grub.cfg's menu as a tree: top-level entries and submenus with their titles, ids
    and, for entries, the kernel release their linux line boots."""
    entries, stack = [], []
    for line in cfg.splitlines():
        t = line.strip()
        mm = re.match(r"^(menuentry|submenu)\s+(['\"])(.*?)\2(.*)\{$", t)
        if mm:
            ident = re.search(r"\$menuentry_id_option\s+'([^']*)'", mm.group(4))
            node = {"title": mm.group(3), "id": ident.group(1) if ident else None, "kids": [], "kernel": None}
            (stack[-1]["kids"] if stack else entries).append(node)
            stack.append(node)
            continue
        lm = re.match(r"^linux\S*\s+\S*vmlinuz-(\S+)", t)
        if lm and stack and stack[-1]["kernel"] is None:
            stack[-1]["kernel"] = lm.group(1)
        if t == "}" and stack:
            stack.pop()
    return entries


def grub_default_kernel(cfg, grubenv):
    """(the kernel release GRUB boots next, whether only this once), resolved as GRUB does
    from grub.cfg as grub-mkconfig writes it (util/grub.d/00_header.in): a non-empty
    `next_entry` in grubenv (grub-reboot) is used once; else the `set default=` of the
    else branch: GRUB_DEFAULT, or `${saved_entry}` from grubenv for GRUB_DEFAULT=saved
    (never the first `set default="${next_entry}"`). A default is an index into the
    top-level entries (a submenu counts as one, `N>M` goes into it), a title or an id."""
    if not cfg:
        return None, False
    env = grubenv_values(grubenv)
    defaults = [v for v in re.findall(r'^\s*set default="?([^"\n]*)"?\s*$', cfg, re.M)
                if "next_entry" not in v]
    default, once = (defaults[0] if defaults else "0"), False
    if env.get("next_entry") and re.search(r'set default="?\$\{next_entry\}', cfg):
        default, once = env["next_entry"], True
    default = re.sub(r"\$\{?saved_entry\}?", lambda m: env.get("saved_entry", ""), default) or "0"
    return _grub_resolve(grub_menu(cfg), default), once


def grub_entry_ids(cfg):
    """release -> "<submenu id>><entry id>" (or the entry id alone at top level)."""
    out = {}

    def walk(level, prefix):
        for node in level:
            if node["kids"]:
                walk(node["kids"], (prefix + ">" if prefix else "") + (node["id"] or node["title"]))
            elif node["kernel"] and node["id"] and not re.search(r"-(recovery|simple)-", node["id"]) \
                    and node["kernel"] not in out:
                out[node["kernel"]] = (prefix + ">" if prefix else "") + node["id"]
    walk(grub_menu(cfg or ""), "")
    return out


def _grub_resolve(entries, default):
    level = entries
    node = None
    for part in default.split(">"):
        part = part.strip()
        if part.isdigit():
            node = level[int(part)] if int(part) < len(level) else None
        else:
            node = next((e for e in level if part in (e["title"], e["id"])), None)
        if node is None:
            return None
        level = node["kids"]
    while node and node["kernel"] is None and node["kids"]:
        node = node["kids"][0]
    return node["kernel"] if node else None


def version_key(release):
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.\-+~_]", release))
