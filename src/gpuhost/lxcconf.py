"""Proxmox container configs (pct.conf(5)): find and repair GPU passthrough lines.

Only the main section (before the first ``[snapshot]`` header) is ever read for the
check or edited by the fix; every other line is kept byte for byte.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

ALLOW_RE = re.compile(r"^lxc\.cgroup2?\.devices\.allow\s*[:=]\s*c\s+(\d+):(\*|\d+)\s+(\w+)\s*$")
MOUNT_RE = re.compile(r"^lxc\.mount\.entry\s*[:=]\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")
NVIDIA_NODE = re.compile(r"^/dev/nvidia")


@dataclass
class Passthrough:
    vmid: str
    gives_gpus: bool
    allowed: list[int] = field(default_factory=list)
    mounted: list[str] = field(default_factory=list)


def main_section(text: str) -> tuple[list[str], list[str]]:
    """(main section lines, the rest from the first section header on), without newlines lost."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("["):
            return lines[:i], lines[i:]
    return lines, []


def inspect(vmid: str, text: str) -> Passthrough:
    main, _ = main_section(text)
    allowed, mounted = [], []
    for line in main:
        line = line.strip()
        m = ALLOW_RE.match(line)
        if m:
            allowed.append(int(m.group(1)))
        m = MOUNT_RE.match(line)
        if m and NVIDIA_NODE.match(m.group(1)):
            mounted.append(m.group(1))
    gives = bool(mounted) or 195 in allowed or any(re.match(r"^dev\d+:\s*/dev/nvidia", l) for l in main)
    return Passthrough(vmid, gives, allowed, mounted)


def required(majors: dict[str, int], gpu_count: int) -> tuple[list[int], list[str]]:
    wanted_majors = [majors.get("nvidia", 195)]
    for name in ("nvidia-uvm", "nvidia-caps"):
        if name in majors:
            wanted_majors.append(majors[name])
    nodes = [f"/dev/nvidia{i}" for i in range(gpu_count)] + [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-caps"]
    return wanted_majors, nodes


def problems(pt: Passthrough, devices: dict[int, str], gpu_count: int) -> list[str]:
    majors = nvidia_majors(devices)
    wanted_majors, nodes = required(majors, gpu_count)
    out = [f"missing allow c {m}:* (nvidia{'' if m == 195 else '-' + _name(m, majors)})" for m in wanted_majors if m not in pt.allowed]
    out += [f"stale allow c {m}:*" for m in pt.allowed if _stale(m, wanted_majors, devices)]
    out += [f"missing mount {n}" for n in nodes if n not in pt.mounted]
    return out


def _name(major: int, majors: dict[str, int]) -> str:
    return next((n.split("-", 1)[1] for n, m in majors.items() if m == major and "-" in n), str(major))


def nvidia_majors(devices: dict[int, str]) -> dict[str, int]:
    return {name: major for major, name in devices.items() if name.startswith("nvidia")}


def _stale(major: int, wanted: list[int], devices: dict[int, str]) -> bool:
    """A dynamic major the host no longer has, or an NVIDIA one that is not current:
    the leftover of an earlier driver load (nvidia-uvm's major changes between loads)."""
    if major in wanted or major < 234:
        return False
    return major not in devices or devices[major].startswith("nvidia")


def repair(text: str, devices: dict[int, str], gpu_count: int) -> str:
    """The config with the main section's passthrough lines made right; the rest untouched."""
    main, rest = main_section(text)
    wanted_majors, nodes = required(nvidia_majors(devices), gpu_count)
    out: list[str] = []
    have_majors: set[int] = set()
    have_nodes: set[str] = set()
    missing_majors = [m for m in wanted_majors]
    for line in main:
        m = ALLOW_RE.match(line.strip())
        if m:
            major = int(m.group(1))
            if major in wanted_majors:
                have_majors.add(major)
            elif _stale(major, wanted_majors, devices):
                # a stale dynamic major: replace it with the first current one still missing
                replacement = next((w for w in missing_majors if w not in have_majors and w not in _majors_in(main)), None)
                if replacement is None:
                    continue
                line = line.replace(f"c {major}:", f"c {replacement}:", 1)
                have_majors.add(replacement)
        mm = MOUNT_RE.match(line.strip())
        if mm:
            have_nodes.add(mm.group(1))
        out.append(line)
    if out and not out[-1].endswith("\n"):
        out[-1] += "\n"
    for major in wanted_majors:
        if major not in have_majors:
            out.append(f"lxc.cgroup2.devices.allow: c {major}:* rwm\n")
    for node in nodes:
        if node not in have_nodes:
            kind = "dir" if node == "/dev/nvidia-caps" else "file"
            out.append(f"lxc.mount.entry: {node} {node[1:]} none bind,optional,create={kind}\n")
    return "".join(out + rest)


def _majors_in(lines: list[str]) -> set[int]:
    found = set()
    for line in lines:
        m = ALLOW_RE.match(line.strip())
        if m:
            found.add(int(m.group(1)))
    return found
