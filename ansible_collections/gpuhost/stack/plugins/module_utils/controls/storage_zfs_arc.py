"""storage.zfs_arc: The ZFS ARC has a limit, live and at boot, that leaves room for the GPU containers.
"""
from __future__ import annotations

import re

from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import FileEdit, fix_of, Initramfs, RuntimeWrite
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na, Param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import content_sha256

CONTROL = Control(
    id="storage.zfs_arc",
    title="The ZFS ARC has a limit, live and at boot, that leaves room for the GPU containers",
    role="storage",
    fixable=True,
    reboot="no",
    rationale=("Without zfs_arc_max the ARC may take half of RAM (OpenZFS up to 2.2) or nearly all of it (2.3+), "
               "and it gives memory back slower than a container given GPUs asks for it: a 480 GiB inference "
               "container next to an uncapped ARC meets the OOM killer or swaps while loading its weights (which "
               "mmap caches twice, in the page cache and the ARC)"),
    references=("OpenZFS module parameters: zfs_arc_max, zfs_arc_min; module/os/linux/zfs/arc_os.c",
                "pve-docs local-zfs: Limit ZFS Memory Usage (10 % of RAM up to 16 GiB from PVE 8.1's installer; "
                "zfs_arc_max at or below zfs_arc_min is ignored; update-initramfs on a ZFS root)",
                "modprobe.d(5)", "kmod libkmod/libkmod-config.c: kmod_config_new reads /proc/cmdline after the files"),
    passes=("n/a without the zfs module; else `zfs_arc_max` set and in effect (arcstats c_max) live and for the next "
            "boot (`zfs.zfs_arc_max=` on the kernel command line it boots with, else `/etc/modprobe.d` and the "
            "initramfs on a ZFS root), and ARC max + the memory of containers given "
            "GPUs + `gpuhost_zfs_reserve_gib` <= RAM"),
    repair=("`zfs_arc_max` (and `zfs_arc_min` below it where the default minimum, RAM/32, would void it) now and in "
            "the modprobe.d file that sets it (a package's file shadowed by the same name in `/etc/modprobe.d`), else "
            "`/etc/modprobe.d/zfs.conf`, at min(10 % of RAM, 16 GiB) as the PVE installer sets it, never above what "
            "fits; `update-initramfs -u -k all` on a ZFS root; manual when nothing fits, when the options line goes on "
            "over several lines, or when the kernel command line sets the limit (`zfs.zfs_arc_max=`: modprobe gives "
            "the module the command line's options after every modprobe.d file's)"),
    facts=("zfs", "lxc", "boot"),
    params=(Param("gpuhost_zfs_reserve_gib", "int", 8, "zfs_reserve_gib",
                  "Memory, in GiB, kept free beside the ZFS ARC and the containers given GPUs (the host itself, "
                  "its other guests).", bounds=(0, 65536), what="a whole number of GiB"),),
)

GIB, MIB = 1 << 30, 1 << 20
PARAMS = "/sys/module/zfs/parameters"
ZFS_DIR = "/etc/modprobe.d"
ZFS_CONF = ZFS_DIR + "/zfs.conf"


def container_memory(lxc: dict | None) -> dict[str, int]:
    """Bytes of memory of each Proxmox container given GPUs (`memory:` in MiB in the main
    section; pct's default 512 where it is not set)."""
    out = {}
    for vmid, text in sorted(((lxc or {}).get("configs") or {}).items()):
        if not lxcconf.inspect(vmid, text or "").gives_gpus:
            continue
        main, dummy = lxcconf.main_section(text or "")
        m = next((re.match(r"^memory\s*:\s*(\d+)\s*$", line) for line in main if re.match(r"^memory\s*:", line)), None)
        out[vmid] = (int(m.group(1)) if m else 512) * MIB
    return out


def _num(value) -> int | None:
    try:
        return int(str(value), 0)
    except (TypeError, ValueError):
        return None


def edited_line(text: str, line_no: int, want: dict[str, int]) -> str:
    """*text* with the options line *line_no* (1-based) setting each of *want*: an existing
    assignment's value replaced in place, a missing one appended to the line; every other
    byte kept."""
    lines = text.splitlines(keepends=True)
    line = lines[line_no - 1]
    body = line.rstrip("\r\n")
    ending = line[len(body):]
    for name, value in want.items():
        pattern = re.compile(r"(?<!\S)(" + name + r"=)\S*")
        body = pattern.sub(lambda m: m.group(1) + str(value), body, count=1) if pattern.search(body) \
            else body + f" {name}={value}"
    lines[line_no - 1] = body + ending
    return "".join(lines)


def cmdline_option(params: dict | None, name: str) -> str | None:
    """The value the kernel command line gives the zfs module's *name* (`zfs.zfs_arc_max=N`):
    modprobe adds the command line's options after every modprobe.d file's (kmod,
    libkmod-config.c kmod_config_new parses /proc/cmdline last) and the module takes the last
    value given, so a value there wins over modprobe.d; a word without `=` sets nothing."""
    found = None
    for key, value in (params or {}).items():
        module, dot, param = key.partition(".")
        if dot and module.replace("-", "_") == "zfs" and param.replace("-", "_") == name and value:
            found = value
    return found


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    z = h.section("zfs")
    if z is None:
        return error(cid, h.errors.get("zfs", "cannot read the zfs module's parameters"))
    if not z["loaded"]:
        return na(cid, "no zfs module loaded")
    ram = z.get("mem_total")
    if not ram or z.get("arc_max") is None or z.get("c_max") is None:
        return error(cid, "cannot read MemTotal, zfs_arc_max or arcstats' c_max")
    cts = container_memory(h.section("lxc"))
    reserve = int(h.s.get("zfs_reserve_gib", 8)) * GIB
    room = ram - sum(cts.values()) - reserve          # the most the ARC may take
    default_min = max(32 * MIB, ram // 32)
    live, effective = z["arc_max"], z["c_max"]
    # what the next boot gives the module: the command line it boots with, over modprobe.d
    boot_params = h.persisted if h.persisted is not None else h.live
    cmd_max, cmd_min = (_num(cmdline_option(boot_params, n)) for n in ("zfs_arc_max", "zfs_arc_min"))
    persisted = (cmd_max if cmd_max is not None else _num(z.get("persisted"))) or 0
    observed = (f"zfs_arc_max {_gib(live) if live else '0 (default)'}, in effect {_gib(effective)}; "
                f"next boot {_gib(persisted) if persisted else '0 (default)'}"
                + (" (kernel command line)" if cmd_max is not None else "") + f"; RAM {_gib(ram)}"
                + (f", GPU containers {_gib(sum(cts.values()))} ({', '.join(sorted(cts))})" if cts else ""))
    expected = f"a limit in effect, at most {_gib(max(room, 0))}, the same at boot"
    if room < 64 * MIB:
        return Finding(cid, "manual", observed, expected,
                       f"nothing fits: containers given GPUs take {_gib(sum(cts.values()))} and "
                       f"gpuhost_zfs_reserve_gib {reserve // GIB} GiB of {_gib(ram)}; give them less memory")
    # keep the operator's limit where it fits (the command line's first: it is what every boot
    # sets), else the PVE installer's: 10 % of RAM, at most 16 GiB (64 MiB at least: the ARC
    # ignores a smaller maximum, arc_os.c)
    if cmd_max and 64 * MIB <= cmd_max <= room:
        want = cmd_max
    elif live and 64 * MIB <= live <= room:
        want = live
    elif persisted and 64 * MIB <= persisted <= room:
        want = persisted
    else:
        want = min(ram // 10, 16 * GIB, room) // MIB * MIB
    # a maximum at or below the ARC's minimum is ignored: lower the minimum below it (PVE's docs)
    # the minimum in effect (arcstats c_min: a zfs_arc_min below 32 MiB is ignored), and the one
    # the next boot sets
    persisted_min = (cmd_min if cmd_min is not None else _num(z.get("persisted_min"))) or 0
    need_min_live = (z.get("c_min") or default_min) >= want
    need_min_boot = (persisted_min if persisted_min >= 32 * MIB else default_min) >= want
    root_zfs = str(h.live.get("root", "")).startswith("ZFS=")
    nxt = h.boot.get("default_kernel") or h.boot.get("running_kernel")
    image = (z.get("initrd_mtimes") or {}).get(nxt)
    stale_image = (root_zfs and cmd_max is None and persisted == want
                   and (image is None or image < (z.get("persisted_mtime") or 0)))
    live_ok = live == want and effective == want
    persisted_ok = persisted == want and not need_min_boot
    if live_ok and persisted_ok and not stale_image:
        return Finding(cid, "pass", observed, expected,
                       f"the ARC is limited to {_gib(want)}, live and at boot"
                       + (f", beside {_gib(sum(cts.values()))} of containers given GPUs" if cts else ""))
    kinds: list = []
    if not live_ok and need_min_live:
        kinds.append(RuntimeWrite(str(want - 1), path=f"{PARAMS}/zfs_arc_min"))
    if not live_ok:
        kinds.append(RuntimeWrite(str(want), path=f"{PARAMS}/zfs_arc_max"))
    settings = {"zfs_arc_max": want, **({"zfs_arc_min": want - 1} if need_min_boot else {})}
    edit = None
    if not persisted_ok and ((cmd_max is not None and cmd_max != want) or (need_min_boot and cmd_min is not None)):
        # modprobe.d cannot outvote the command line: the boot loader's configuration is the
        # operator's to change (and the next boot's to apply)
        return Finding(cid, "manual", observed, expected,
                       "the kernel command line sets " + " ".join(
                           f"zfs.{n}={v}" for n, v in (("zfs_arc_max", cmd_max), ("zfs_arc_min", cmd_min)) if v is not None)
                       + f", which the zfs module gets after every modprobe.d file: set zfs.zfs_arc_max={want}"
                       + (f" zfs.zfs_arc_min={want - 1}" if need_min_boot else "")
                       + " there (or remove it) and refresh the boot loader")
    if not persisted_ok:
        where = z.get("persisted_in")
        if where and where.get("continued"):
            return Finding(cid, "manual", observed, expected,
                           f"the options line that sets zfs_arc_max in {where['path']} (line {where['line']}) goes on over "
                           f"several lines (a trailing backslash): set zfs_arc_max={want}"
                           + (f" zfs_arc_min={want - 1}" if need_min_boot else "") + " there by hand")
        if where:
            text = z.get("persisted_text") or ""
            new = edited_line(text, where["line"], settings)
            if where["path"].startswith("/etc/modprobe.d/"):
                edit = FileEdit(where["path"], new, content_sha256(text))
            else:
                # a package's file (/lib, /usr/lib) or /run's is replaced at the next upgrade or
                # boot: the same name in /etc/modprobe.d shadows it (modprobe.d(5))
                edit = FileEdit(ZFS_DIR + "/" + where["path"].rsplit("/", 1)[1], new, "absent")
        else:
            text = z.get("zfs_conf")
            line = "options zfs " + " ".join(f"{k}={v}" for k, v in settings.items()) + "\n"
            new = line if text is None else text + ("" if text.endswith("\n") or not text else "\n") + line
            edit = FileEdit(ZFS_CONF, new, content_sha256(text))
    if edit:
        kinds.append(edit)
    if root_zfs and (edit or stale_image):
        kinds.append(Initramfs())
    said = []
    if not live:
        said.append("no ARC limit is set (zfs_arc_max 0)")
    elif live != want:
        said.append(f"the ARC may take {_gib(live)}, {_gib(live - room)} more than fits")
    elif effective != want:
        said.append(f"zfs_arc_max {_gib(live)} is not in effect (at or below the ARC's minimum {_gib(z.get('c_min') or default_min)})")
    if not persisted_ok:
        said.append("the next boot " + (f"sets {_gib(persisted)}" if persisted else "sets no limit"))
    if stale_image:
        said.append(f"the initramfs of {nxt} predates the modprobe.d file (a ZFS root reads its copy)")
    return Finding(cid, "drift", observed, expected, "; ".join(said) + f": limit it to {_gib(want)}",
                   fix=fix_of(*kinds))
