"""numa.balancing: Automatic NUMA balancing is off, live and at boot.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import FileContent, FileEdit, fix_of, RuntimeWrite
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import content_sha256

CONTROL = Control(
    id="numa.balancing",
    title="Automatic NUMA balancing is off, live and at boot",
    role="numa",
    fixable=True,
    reboot="no",
    rationale="NUMA balancing unmaps pages to sample accesses, adding faults to pinned inference processes",
    references=("Documentation/admin-guide/sysctl/kernel.rst: numa_balancing", "sysctl.d(5)"),
    passes=("`kernel.numa_balancing` 0 live, and 0 after systemd-sysctl's last assignment at boot (`sysctl.d` in "
            "five places; `/etc/sysctl.conf` only through Debian 12's and Ubuntu's `99-sysctl.conf` link, so never "
            "on Debian 13 / PVE 9); na on one node"),
    repair=("sysctl + `/etc/sysctl.d/99-gpuhost-numa-balancing.conf`; later settings commented out (vendor files "
            "shadowed in `/etc/sysctl.d`), backups kept"),
    facts=("numa", "sysctl", "boot"),
    sysctls=("kernel.numa_balancing",),
)


NUMA_DROPIN = FileContent("/etc/sysctl.d/99-gpuhost-numa-balancing.conf",
                          "# Managed by gpuhost (numa.balancing)\nkernel.numa_balancing = 0\n")
NUMA_DROPIN_NAME = NUMA_DROPIN.path.rsplit("/", 1)[1]
VENDOR_SYSCTL_DIRS = ("/usr/lib/sysctl.d/", "/lib/sysctl.d/", "/usr/local/lib/sysctl.d/", "/run/sysctl.d/")


def comment_out(text: str, lines: set[int], why: str) -> str:
    """*text* with the given 1-based lines commented out; every other byte kept."""
    out = []
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        out.append(f"# {why}: {line}" if n in lines else line)
    return "".join(out)


def later_numa_settings(sysctl: dict) -> list[dict]:
    """Assignments of kernel.numa_balancing that systemd-sysctl applies after gpuhost's
    drop-in (by file name; /etc/sysctl.conf last) and that set it to anything but 0."""
    return [a for a in sysctl.get("assignments") or [] if a["key"] == "kernel.numa_balancing"
            and a["name"] > NUMA_DROPIN_NAME and a["path"] != NUMA_DROPIN.path and a["value"] != "0"]


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    numa, sysctl = h.section("numa"), h.section("sysctl")
    if numa is None or sysctl is None:
        return error(cid, h.errors.get("sysctl") or h.errors.get("numa") or "cannot read NUMA state")
    if numa["nodes"] <= 1:
        return na(cid, "one NUMA node: nothing to balance")
    live = sysctl["live"].get("kernel.numa_balancing")
    if live is None:
        return na(cid, "the kernel has no NUMA balancing (kernel.numa_balancing absent)")
    # the next boot: numa_balancing=disable gives 0, then systemd-sysctl's last assignment wins
    persisted = sysctl["persisted"].get("kernel.numa_balancing")
    by_cmdline = (h.persisted or {}).get("numa_balancing") == "disable"
    next_value = persisted if persisted is not None else ("0" if by_cmdline else None)
    persisted_ok = next_value == "0"
    if live == "0" and persisted_ok:
        return Finding(cid, "pass", live, "0", "NUMA balancing is off, live and at boot")
    kinds: list = []
    if not persisted_ok:
        have = [a for a in sysctl.get("assignments") or [] if a["path"] == NUMA_DROPIN.path]
        if not have or sysctl.get("contents", {}).get(NUMA_DROPIN.path) != NUMA_DROPIN.content:
            kinds.append(NUMA_DROPIN)
        files: dict[str, dict] = {}
        unreadable = sorted({a["real_path"] for a in later_numa_settings(sysctl)
                             if "\ufffd" in sysctl["contents"].get(a["real_path"], "")})
        if unreadable:
            return Finding(cid, "manual", live, "0",
                           f"{', '.join(unreadable)} sets kernel.numa_balancing after gpuhost's drop-in and has bytes "
                           "that are not UTF-8: gpuhost does not edit it; set it to 0 there by hand")
        for a in later_numa_settings(sysctl):
            src = a["real_path"]
            # a vendor file is shadowed by one of the same name in /etc/sysctl.d, never edited
            dest = f"/etc/sysctl.d/{a['name']}" if src.startswith(VENDOR_SYSCTL_DIRS) else src
            entry = files.setdefault(dest, {"path": dest, "text": sysctl["contents"][src], "lines": set(),
                                            # what the judgement read there: the write refuses a file
                                            # that changed since (a line added meanwhile is never lost)
                                            "expect": sysctl["contents"][src] if dest == src else None})
            entry["lines"].add(a["line"])
        kinds += [FileEdit(e["path"], comment_out(e["text"], e["lines"], "disabled by gpuhost (numa.balancing)"),
                           content_sha256(e["expect"])) for e in files.values()]
    if live != "0":
        kinds.append(RuntimeWrite("0", path="/proc/sys/kernel/numa_balancing"))
    src = sysctl["sources"].get("kernel.numa_balancing")
    msg = f"kernel.numa_balancing is {live}"
    if not persisted_ok:
        msg += f" and the next boot sets {next_value or 'the kernel default'}" + (f" ({src})" if src else "")
        if by_cmdline and persisted is not None:
            msg += ", over numa_balancing=disable on the command line"
        if any(a["key"] == "kernel.numa_balancing" for a in sysctl.get("sysctl_conf_unapplied") or []):
            # systemd-sysctl reads only sysctl.d; Debian 13 ships no 99-sysctl.conf link to it
            msg += "; /etc/sysctl.conf sets it, but nothing applies that file at boot here (no /etc/sysctl.d/99-sysctl.conf)"
    return Finding(cid, "drift", live, "0", msg, fix=fix_of(*kinds))
