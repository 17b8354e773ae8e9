"""Proxmox container configs (pct.conf(5)): find and repair GPU passthrough lines.

Only the main section (before the first ``[snapshot]`` header) is ever read for the
check or edited by the fix; every other line is kept byte for byte.

How a container really gets a device node (pve-container src/PVE/LXC.pm, pct.conf(5)):
- ``devN: [path=]/dev/X[,gid=..,uid=..,mode=..,deny-write]`` (PVE >= 8.1): at start PVE
  creates the node and its cgroup2 allow from the node's current major:minor, so such a
  node is usable whatever the majors are now.
- ``lxc.mount.entry: SRC TARGET ...`` bind-mounts a host node; what counts is TARGET, the
  path inside the container. It is usable only with a cgroup2 allow of its major
  (``lxc.cgroup2.devices.allow: c M:* rwm``) or ``lxc.cgroup2.devices.allow: a``.
- ``lxc.cgroup.devices.allow`` is cgroup v1: PVE 7+ runs pure cgroup v2, so it counts
  for nothing.
Which ``/dev/nvidiaN`` a container gets is the operator's choice; the repair never adds one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# a trailing "# comment" after the rule is allowed: the rule's own parser stops at its access
# letters (LXC reads the line as written, and operators label majors that way)
ALLOW_RE = re.compile(r"^lxc\.cgroup2\.devices\.allow\s*[:=]\s*(?:c\s+(\d+):(\*|\d+)\s+(\w+)|(a))\s*(?:#.*)?$")
V1_ALLOW_RE = re.compile(r"^lxc\.cgroup\.devices\.allow\s*[:=]\s*c\s+(\d+):")
MOUNT_RE = re.compile(r"^lxc\.mount\.entry\s*[:=]\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")
DEV_RE = re.compile(r"^dev(\d+)\s*:\s*(.*)$")
GPU_NODE = re.compile(r"^dev/nvidia\d+$")
CONTROL_NODES = ("dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools")
CAPS = "dev/nvidia-caps"
# the caps nodes nvidia-modprobe creates under /dev/nvidia-caps (MIG config and monitor)
CAPS_NODES = ("dev/nvidia-caps/nvidia-cap1", "dev/nvidia-caps/nvidia-cap2")
# Documentation/admin-guide/devices.txt: dynamic char majors
DYNAMIC = tuple(range(234, 255)) + tuple(range(384, 512))


@dataclass
class Passthrough:
    vmid: str
    gives_gpus: bool
    allowed: list[int] = field(default_factory=list)     # cgroup2 majors allowed
    allow_all: bool = False                               # lxc.cgroup2.devices.allow: a
    mounted: list[str] = field(default_factory=list)      # mount targets (dev/nvidia0)
    devn: list[str] = field(default_factory=list)         # devN: nodes, as targets (dev/nvidia0)
    devn_options: str = ""                                # what follows the path on the first nvidia devN
    max_dev_index: int = -1
    refused: list[str] = field(default_factory=list)      # allow lines LXC cannot parse

    @property
    def nodes(self) -> list[str]:
        return self.mounted + self.devn

    @property
    def gpu_nodes(self) -> list[str]:
        return sorted({n for n in self.nodes if GPU_NODE.match(n)}, key=lambda n: int(n[10:]))

    @property
    def style(self) -> str:
        """How the config passes NVIDIA nodes: 'dev' (devN:) or 'mount' (lxc.mount.entry)."""
        nv_mounts = [n for n in self.mounted if n.startswith("dev/nvidia")]
        return "dev" if self.devn and not nv_mounts else "mount"


def main_section(text: str) -> tuple[list[str], list[str]]:
    """(main section lines, the rest from the first section header on), without newlines lost."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("["):
            return lines[:i], lines[i:]
    return lines, []


def _target(path: str) -> str:
    return path.strip().lstrip("/")


def dev_path(value: str) -> tuple[str, str]:
    """A devN value (``/dev/x,gid=44`` or ``path=/dev/x,gid=44``): (path, the other options)."""
    parts = [p.strip() for p in value.split(",")]
    path, rest = "", []
    for p in parts:
        if p.startswith("path="):
            path = p[5:]
        elif "=" not in p and p.startswith("/") and not path:
            path = p
        elif p:
            rest.append(p)
    return path, ",".join(rest)


def inspect(vmid: str, text: str) -> Passthrough:
    main, dummy = main_section(text)
    pt = Passthrough(vmid, False)
    for raw in main:
        line = raw.strip()
        m = ALLOW_RE.match(line)
        if m:
            if m.group(4):
                pt.allow_all = True
            elif m.group(1):
                pt.allowed.append(int(m.group(1)))
                if "#" in line and len(m.group(3)) < 3:
                    # LXC's rule parser reads up to three access letters, and a space there is
                    # an error (cgfsng.c device_cgroup_parse_access): "rwm # x" works, "rw # x"
                    # stops the container from starting
                    pt.refused.append(line)
            continue
        if V1_ALLOW_RE.match(line):
            continue                 # cgroup v1 keys: no effect on PVE 7+ (pure cgroup v2)
        m = MOUNT_RE.match(line)
        if m and _target(m.group(2)).startswith("dev/nvidia"):
            pt.mounted.append(_target(m.group(2)))
            continue
        m = DEV_RE.match(line)
        if m:
            pt.max_dev_index = max(pt.max_dev_index, int(m.group(1)))
            path, opts = dev_path(m.group(2))
            if path.startswith("/dev/nvidia"):
                if not pt.devn:
                    pt.devn_options = opts
                pt.devn.append(_target(path))
    # cgroup v1 keys count for nothing, also as a sign that GPUs were meant
    pt.gives_gpus = any(n.startswith("dev/nvidia") for n in pt.nodes) or 195 in pt.allowed
    return pt


def nvidia_majors(devices: dict[int, str]) -> dict[str, int]:
    return {name: major for major, name in devices.items() if name.startswith("nvidia")}


def major_of(node: str, majors: dict[str, int]) -> int | None:
    """The char major a node in the container has on this host (nvidiaN, nvidiactl: 195)."""
    name = node[len("dev/"):]
    if name.startswith("nvidia-caps"):
        return majors.get("nvidia-caps")
    if name.startswith("nvidia-uvm"):
        return majors.get("nvidia-uvm")
    if name.startswith("nvidia-modeset") or re.match(r"^nvidia(\d+|ctl)$", name):
        return majors.get("nvidia", 195)
    return None


def required_nodes(majors: dict[str, int], style: str) -> list[str]:
    """The control nodes every GPU container needs. nvidia-caps nodes are needed only for MIG
    (libnvidia-container mounts them only on its MIG paths): never required, never added;
    a container that already uses them gets its caps allow checked like any mount."""
    return list(CONTROL_NODES)


# the driver's dynamic char majors a container's nodes may use; a module that is not loaded
# (nvidia-uvm until something loads it) has none in /proc/devices, so its major is unknown
DYNAMIC_MODULES = ("nvidia-uvm", "nvidia-caps")


def unknown_modules(pt: Passthrough, majors: dict[str, int]) -> list[str]:
    """Modules whose nodes this container uses (or needs) and that hold no major now."""
    used = {"nvidia-uvm"} | ({"nvidia-caps"} if any(n.startswith(CAPS) for n in pt.nodes) else set())
    return [m for m in DYNAMIC_MODULES if m in used and m not in majors]


def _has_node(pt: Passthrough, node: str) -> bool:
    if node == CAPS:      # the caps directory, or the caps nodes one by one
        return any(n == CAPS or n.startswith(CAPS + "/") for n in pt.nodes)
    if node.startswith(CAPS + "/"):
        return node in pt.nodes or CAPS in pt.nodes
    return node in pt.nodes


def stale(major: int, devices: dict[int, str], unknown: list[str] | tuple = ()) -> bool:
    """A dynamic major that no driver holds now while every module the container's nodes
    need holds its own: the leftover of an earlier driver load (nvidia-uvm's major changes
    between loads). Every major in /proc/devices is live, NVIDIA's included
    (nvidia-caps-imex-channels, nvidia-nvlink, nvidia-nvswitch); while a needed module is
    not loaded (*unknown*), an absent major may be its own, and is never stale."""
    return major in DYNAMIC and major not in devices and not unknown


def needed_allows(pt: Passthrough, majors: dict[str, int]) -> list[int]:
    """Majors of nodes the container mounts (not devN) that no cgroup2 rule allows."""
    if pt.allow_all:
        return []
    want: list[int] = []
    for node in pt.mounted + [n for n in required_nodes(majors, pt.style) if pt.style == "mount"]:
        major = major_of(node, majors)
        if major is not None and major not in want:
            want.append(major)
    return [m for m in want if m not in pt.allowed]


def problems(pt: Passthrough, devices: dict[int, str]) -> list[str]:
    majors = nvidia_majors(devices)
    names = {v: k for k, v in majors.items()}
    unknown = unknown_modules(pt, majors)
    out = [f"missing allow c {m}:* ({names.get(m, 'nvidia')})" for m in needed_allows(pt, majors)]
    out += [f"stale allow c {m}:*" for m in pt.allowed if stale(m, devices, unknown)]
    out += [f"missing {'dev' if pt.style == 'dev' else 'mount'} /{n}" for n in required_nodes(majors, pt.style)
            if not _has_node(pt, n)]
    return out


def blockers(pt: Passthrough, devices: dict[int, str], dev_nodes: list[str] | None) -> list[str]:
    """Why the repair cannot be proven right on this host now (a person or lxc.gpu_nodes
    acts first): a module whose major is unknown, a devN: node that does not exist."""
    majors = nvidia_majors(devices)
    refused = [f"LXC cannot parse {line!r} (a comment after fewer than three access letters): the container "
               "does not start" for line in pt.refused]
    absent = [m for m in pt.allowed if m in DYNAMIC and m not in devices]
    unsure = absent or (pt.style == "mount" and not pt.allow_all)
    out = [f"{m} is not loaded, so its major is unknown" + (f" (the allow of {', '.join(map(str, absent))} may be its own)"
                                                            if absent else "")
           + ": load it at boot before the containers start (lxc.gpu_nodes)"
           for m in unknown_modules(pt, majors) if unsure] + refused
    if pt.style == "dev" and dev_nodes is not None:
        missing = [n for n in required_nodes(majors, pt.style) if not _has_node(pt, n) and "/" + n not in dev_nodes]
        if missing:
            out.append("no " + ", ".join("/" + n for n in missing) + " on the host: a devN: for a node that does "
                       "not exist stops the container from starting")
    return out


def repairable(pt: Passthrough) -> bool:
    """The repair can only complete what the container was given: with no /dev/nvidiaN
    it has no GPU to complete, and which GPU to give it is the operator's choice."""
    return bool(pt.gpu_nodes)


def line_end(text: str) -> str:
    """The line end a config already uses ("\r\n" where its lines end so: a file edited on
    Windows and copied over), so that a line gpuhost adds ends like its neighbours."""
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"


def _ended(lines: list[str], eol: str) -> list[str]:
    return [line[:-1] + eol if line.endswith("\n") and not line.endswith(eol) else line for line in lines]


def repair(text: str, devices: dict[int, str]) -> str:
    """The config with the main section's passthrough lines made right, in the syntax it
    already uses; every other byte untouched."""
    main, rest = main_section(text)
    pt = inspect("", text)
    majors = nvidia_majors(devices)
    missing = needed_allows(pt, majors)
    unknown = unknown_modules(pt, majors)
    out: list[str] = []
    for line in main:
        m = ALLOW_RE.match(line.strip())
        if m and m.group(1) and stale(int(m.group(1)), devices, unknown):
            major = int(m.group(1))
            if missing:                        # replace it in place with a major still missing
                line = line.replace(f"c {major}:", f"c {missing.pop(0)}:", 1)
            else:
                continue
        out.append(line)
    eol = line_end(text)
    if out and not out[-1].endswith("\n"):
        out[-1] += eol
    ours = len(out)                         # the lines from here on are gpuhost's
    for major in missing:
        out.append(f"lxc.cgroup2.devices.allow: c {major}:* rwm\n")
    index = pt.max_dev_index
    for node in required_nodes(majors, pt.style):
        if _has_node(pt, node):
            continue
        if pt.style == "dev":
            index += 1
            opts = f",{pt.devn_options}" if pt.devn_options else ""
            out.append(f"dev{index}: /{node}{opts}\n")
        else:
            kind = "dir" if node == CAPS else "file"
            out.append(f"lxc.mount.entry: /{node} {node} none bind,optional,create={kind}\n")
    # a mount added above may need its major allowed
    again = needed_allows(inspect("", "".join(out)), majors)
    out += [f"lxc.cgroup2.devices.allow: c {m}:* rwm\n" for m in again]
    # the lines gpuhost added end as the file's own do
    return "".join(out[:ours] + _ended(out[ours:], eol) + rest)


CPUSET_RE = re.compile(r"^lxc\.cgroup2\.cpuset\.cpus(?::|\s*=)\s*(.*?)\s*$")
CORES_RE = re.compile(r"^cores:\s*(\d+)\s*$")


def cpu_request(text: str) -> tuple[str | None, int | None]:
    """The main section's raw ``lxc.cgroup2.cpuset.cpus`` (PVE then picks no CPUs of its own:
    LXC.pm update_lxc_config, $had_cpuset) and ``cores``; the last of each counts."""
    cpuset, cores = None, None
    for line in main_section(text)[0]:
        m = CPUSET_RE.match(line.strip())
        if m:
            cpuset = m.group(1)
        m = CORES_RE.match(line.strip())
        if m:
            cores = int(m.group(1))
    return cpuset, cores


def with_cpuset(text: str, cpus: str) -> str | None:
    """The config with ``lxc.cgroup2.cpuset.cpus: <cpus>`` after the main section's last line
    (where pve-container writes raw keys); the text itself where it already says so, None
    where it names another set (someone chose one since the audit)."""
    have, dummy = cpu_request(text)
    if have is not None:
        return text if have == cpus else None
    main, rest = main_section(text)
    last = max((i for i, line in enumerate(main) if line.strip()), default=-1)
    head, tail = main[:last + 1], main[last + 1:]
    eol = line_end(text)
    if head and not head[-1].endswith("\n"):
        head[-1] += eol
    return "".join(head + [f"lxc.cgroup2.cpuset.cpus: {cpus}{eol}"] + tail + rest)


# A line pve-container reads (pve-docs, "Configuration File Format" of pct.conf): a comment,
# a blank line, "OPTION: value", or a raw LXC key with ":" or "=".
PCT_LINE_RE = re.compile(r"^(#.*|\s*|lxc\.[a-z0-9_.\-]+\s*[:=]\s*.*|[a-z][a-z_]*\d*:\s*\S.*)$")


def reads_back(original: str, fixed: str) -> str | None:
    """Why *fixed* would not read back as intended (None when it would): every line the
    repair wrote is one pve-container parses, and the snapshot sections are as they were."""
    if main_section(fixed)[1] != main_section(original)[1]:
        return "a snapshot section would change"
    kept = set(main_section(original)[0])
    for line in main_section(fixed)[0]:
        if line not in kept and not PCT_LINE_RE.match(line.rstrip("\r\n")):
            return f"the line {line.rstrip()!r} is not one pve-container reads"
    return None
