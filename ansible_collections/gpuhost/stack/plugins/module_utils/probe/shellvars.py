# -*- coding: utf-8 -*-
"""Shell assignments as /etc/default/grub holds them, read and never run: the values
GRUB's scripts would get, or why a value cannot be read safely.
"""
from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")

GRUB_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT", "GRUB_DEFAULT")


class ShellValueError(ValueError):
    pass


def read_shell_assignments(text, path, values, wanted):
    """Evaluate the plain `NAME=value` lines of a shell file into *values*, the way `sh`
    would for them (quotes, backslashes, $NAME and ${NAME} of earlier assignments),
    without running anything. A line that would run something (command substitution,
    a conditional, a function) and names a wanted variable cannot be evaluated safely:
    ShellValueError names the file and line. Other lines are ignored, as the variables
    they set do not matter here. Returns the wanted names this file assigned."""
    assigned = []
    lines = text.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        line, start = lines[i], i + 1
        # a quoted value may run over several lines
        while _open_quote(line) and i + 1 < len(lines):
            i += 1
            line += "\n" + lines[i]
        i += 1
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = ASSIGN.match(line)
        names_here = [w for w in wanted if re.search(r"\b%s\b" % w, line)]
        if m is None:
            if names_here:
                raise ShellValueError("%s line %d: cannot evaluate %s without running it" % (path, start, names_here[0]))
            continue
        name, raw = m.group(1), m.group(2)
        try:
            value = _shell_word(raw, values)
        except ShellValueError as exc:
            if name in wanted or names_here:
                raise ShellValueError("%s line %d: %s" % (path, start, exc))
            continue
        values[name] = value
        if name in wanted:
            assigned.append(name)
    return assigned


def shell_scan(text):
    """(where an unquoted comment starts, or len(text); the quote still open at the end, or
    None), the way sh reads a line: quotes, backslashes, `#` only at the start of a word."""
    quote, esc = None, False
    for i, ch in enumerate(text):
        if esc:
            esc = False
        elif ch == "\\" and quote != "'":
            esc = True
        elif quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return i, None
    return len(text), quote


def _open_quote(line):
    return shell_scan(line)[1] is not None


def _shell_word(raw, values):
    """One shell word (the right side of NAME=...), with a trailing comment allowed."""
    out, i, quote = [], 0, None
    while i < len(raw):
        ch = raw[i]
        if quote == "'":
            if ch == "'":
                quote = None
            else:
                out.append(ch)
            i += 1
            continue
        if ch == "\\":
            nxt = raw[i + 1:i + 2]
            if quote == '"' and nxt not in ('"', "\\", "$", "`", "\n"):
                out.append(ch)
            elif nxt != "\n":
                out.append(nxt)
            i += 2
            continue
        if ch in "`" or raw.startswith("$(", i):
            raise ShellValueError("command substitution")
        if ch == "$":
            m = re.match(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))", raw[i:])
            if not m:
                raise ShellValueError("a shell expansion gpuhost does not evaluate")
            out.append(values.get(m.group(1) or m.group(2), ""))
            i += m.end()
            continue
        if quote == '"':
            if ch == '"':
                quote = None
            else:
                out.append(ch)
            i += 1
            continue
        if ch in "'\"":
            quote = ch
            i += 1
            continue
        if ch in " \t":
            rest = raw[i:].strip()
            if rest and not rest.startswith("#"):
                raise ShellValueError("more than an assignment on the line")
            break
        if ch in ";&|<>()":
            raise ShellValueError("more than an assignment on the line")
        out.append(ch)
        i += 1
    if quote:
        raise ShellValueError("unclosed quote")
    return "".join(out)
