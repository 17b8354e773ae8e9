"""nvidia.persistence: Persistence mode is on for every GPU, live and at boot.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import BootUnit, DaemonReload, FileContent, fix_of, Persistence, UnitEnable
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.smi import reported
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="nvidia.persistence",
    title="Persistence mode is on for every GPU, live and at boot",
    role="nvidia",
    fixable=True,
    reboot="no",
    rationale="Without persistence the driver tears GPU state down between clients and re-initialises it on the next",
    references=("NVIDIA driver persistence documentation", "nvidia-persistenced(1)", "systemd.unit(5): drop-ins"),
    passes=("persistence on for every GPU now, and the effective `nvidia-persistenced.service` (unit + drop-ins) "
            "starts at boot (enabled or by the driver's udev rule) without `--no-persistence-mode`"),
    repair=("`nvidia-smi -pm 1`; a drop-in and `systemctl enable` for a vendor unit (never replaced); a unit of "
            "gpuhost's only where none exists"),
    facts=("nvidia", "units"),
    units=("nvidia-persistenced.service",),
)


PERSISTENCED = CONTROL.units[0]


# only where no vendor unit exists (a driver from NVIDIA's .run installer without its
# init scripts): persistence is the daemon's default since 370.23
PERSISTENCED_UNIT = BootUnit(PERSISTENCED, (
    "# Managed by gpuhost (nvidia.persistence): persistence mode on for every GPU at boot.\n"
    "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n\n"
    "[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode\n"
    "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n[Install]\nWantedBy=multi-user.target\n"))


# drop-ins apply by file name: sort after the usual override.conf
PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/zz-gpuhost-persistence.conf"


def persistenced_dropin(exec_start: str) -> FileContent:
    cmd = " ".join(w for w in exec_start.split() if w != "--no-persistence-mode")
    return FileContent(PERSISTENCED_DROPIN, (
        "# Managed by gpuhost (nvidia.persistence): the vendor unit's daemon, with persistence on (its default)\n"
        f"[Service]\nExecStart=\nExecStart={cmd}\n"))


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    nv, nothing = reported(h, cid)
    if nothing:
        return nothing
    off = [g["bdf"] for g in nv["gpus"] if not g["persistence"]]
    u = (h.f.get("units") or {}).get(PERSISTENCED) or {}
    ours = (u.get("content") or "").startswith("# Managed by gpuhost")
    vendor = u.get("content") is not None and not ours
    execs = [e for e in (u.get("exec_start") or []) if e]
    starts = bool(u.get("enabled")) or bool(u.get("started_by_udev"))
    flag_ok = bool(execs) and not any("--no-persistence-mode" in e for e in execs)
    persisted_ok = starts and flag_ok
    how = ("masked unit" if u.get("masked") else "vendor unit" if vendor else "gpuhost's unit" if ours else "no unit") + \
          ("" if starts else ", not started at boot") + ("" if flag_ok or not execs else ", --no-persistence-mode")
    observed = f"{len(nv['gpus']) - len(off)}/{len(nv['gpus'])} on; {how}"
    expected = "on for every GPU, live and at boot"
    if u.get("masked"):
        # systemctl mask (a link to /dev/null, systemd.unit(5)): nothing starts it, the driver's
        # udev rule included; the administrator's decision, never unmasked or enabled here
        return Finding(cid, "manual", observed, expected,
                       f"{PERSISTENCED} is masked ({u.get('path')} -> /dev/null), the administrator's decision: gpuhost "
                       f"does not unmask it (`systemctl unmask {PERSISTENCED}` lets gpuhost fix it)")
    if not off and persisted_ok:
        return Finding(cid, "pass", observed, expected, f"nvidia-persistenced starts at boot ({how})")
    kinds: list = [Persistence()] if off else []
    if not persisted_ok:
        if vendor:
            # the vendor unit stays as the package ships it: a drop-in and an enable link
            if not flag_ok and execs:
                kinds.append(persistenced_dropin(execs[-1]))
            if not starts:
                if not u.get("installable"):
                    return Finding(cid, "manual", observed, expected,
                                   f"{u.get('path')} has no [Install] section and no udev rule starts it: "
                                   "start it from the driver's udev rule or a unit of your own")
                kinds.append(UnitEnable((PERSISTENCED,)))
            kinds.append(DaemonReload())
        else:
            kinds.append(PERSISTENCED_UNIT)
    msg = (f"persistence mode is off on {len(off)} GPUs" if off else "on now, but nothing turns it on at boot") + \
          ("" if persisted_ok else f" ({how})")
    return Finding(cid, "drift", observed, expected, msg, fix=fix_of(*kinds))
