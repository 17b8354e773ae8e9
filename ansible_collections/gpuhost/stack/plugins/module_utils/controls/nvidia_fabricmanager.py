"""nvidia.fabricmanager: On an NVSwitch host, NVIDIA Fabric Manager runs at the driver's version, now and at boot.
"""
from __future__ import annotations

import re

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of, UnitEnable, UnitStart
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.smi import reported

CONTROL = Control(
    id="nvidia.fabricmanager",
    title="On an NVSwitch host, NVIDIA Fabric Manager runs at the driver's version, now and at boot",
    role="nvidia",
    fixable=True,
    reboot="no",
    rationale=("On an NVSwitch baseboard (HGX/DGX A100, H100, H200, B200) the GPUs reach each other through a fabric "
               "that Fabric Manager sets up: without it CUDA fails to start on A100 (error 802, system not yet "
               "initialized) and Hopper GPUs never finish registering with the fabric; Fabric Manager refuses to "
               "start when its version is not the loaded driver's (an apt upgrade of one without the other)"),
    references=("NVIDIA Fabric Manager User Guide (FM service, version check against the loaded driver, GPU fabric "
                "registration, restart needs a GPU reset on Hopper)",
                "open-gpu-kernel-modules: nvswitch PCI class 0x0680 (export_nvswitch.h, linux_nvswitch.c)",
                "NVML nvmlDeviceGetGpuFabricInfo / nvidia-smi --help-query-gpu: fabric.state, fabric.status"),
    passes=("n/a without an NVSwitch (NVIDIA PCI class 0x0680) and without a GPU that reports a fabric state; else "
            "`nvidia-fabricmanager.service` enabled and active (systemd's ActiveState), its package at the loaded "
            "driver's version, and every GPU that reports a fabric state `Completed` with status `Success` (where no "
            "NVSwitch is on the bus and no Fabric Manager installed, that registration alone: a fabric managed off the "
            "host, as on an NVL72 compute tray)"),
    repair=("`systemctl enable` and, where nothing started it this boot, `systemctl start`; manual when it is not "
            "installed, its version is not the driver's, its unit is masked, or it was started and is gone (it "
            "failed, or the fabric was set up and a restart needs the GPUs reset)"),
    facts=("pci", "nvidia", "apt", "units", "fabricmanager"),
    units=("nvidia-fabricmanager.service",),
)

FM_UNIT = CONTROL.units[0]
NVIDIA, NVSWITCH_CLASS = 0x10DE, 0x0680
# NVIDIA's packages with the daemon: nvidia-fabricmanager-<branch> (Ubuntu's archive, NVIDIA's
# repository before 580) or nvidia-fabricmanager (NVIDIA's repository from 580); -dev and the
# cuda-drivers-fabricmanager metapackages carry none
FM_PACKAGE = re.compile(r"^nvidia-fabricmanager(-\d+)?$")


def upstream_version(version: str | None) -> str:
    """A Debian version's upstream part: '1:550.90.07-1ubuntu1' -> '550.90.07'."""
    version = (version or "").split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def nvswitches(pci: list | None) -> list[str]:
    """The NVSwitches on the PCI bus (A100 and Hopper baseboards): NVIDIA's devices of class
    0x0680, the class the nvswitch driver binds to whatever the device ID."""
    return [d["bdf"] for d in pci or [] if d.get("vendor") == NVIDIA and (d.get("class") or 0) >> 8 == NVSWITCH_CLASS]


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    nv, nothing = reported(h, cid)
    if nothing:
        return nothing
    switches = nvswitches(h.section("pci"))
    # a Blackwell baseboard's NVSwitches are not PCI devices (the guide): its GPUs report a fabric state
    on_fabric = [g for g in nv["gpus"] if g.get("fabric")]
    if not switches and not on_fabric:
        return na(cid, "no NVSwitch and no GPU on an NVLink fabric: nothing for Fabric Manager to manage")
    fm = h.section("fabricmanager")
    if fm is None:
        return error(cid, h.errors.get("fabricmanager", "cannot read Fabric Manager's state"))
    if fm["unit_file"] and (fm["active"] is None or fm["started_this_boot"] is None):
        return error(cid, f"cannot ask systemd whether {FM_UNIT} is active (no systemctl answered)")
    running = fm["active"] == "active"
    apt = h.section("apt") or {}
    packages = {n: upstream_version(p.get("version")) for n, p in (apt.get("driver_packages") or {}).items()
                if FM_PACKAGE.match(n)}
    u = (h.f.get("units") or {}).get(FM_UNIT) or {}
    driver = nv.get("module")
    where = (f"{len(switches)} NVSwitches" if switches else f"{len(on_fabric)} GPUs on an NVLink fabric")
    observed = {"nvswitches": len(switches), "packages": packages, "driver": driver,
                "enabled": bool(u.get("enabled")), "active": fm["active"],
                "fabric": sorted({f"{g['fabric']['state']}/{g['fabric']['status'] or '-'}" for g in on_fabric})}
    expected = f"nvidia-fabricmanager enabled and running at the driver's version ({driver or 'unknown'})"
    registered_all = bool(on_fabric) and all(g["fabric"] == {"state": "Completed", "status": "Success"} for g in on_fabric)
    if not switches and registered_all and not fm["unit_file"] and not packages:
        # no NVSwitch on this host's bus and every GPU registered: a fabric managed elsewhere
        # (an NVL72 compute tray's switches are in switch trays of their own)
        return Finding(cid, "pass", observed, expected,
                       f"every GPU ({len(on_fabric)}) registered with its NVLink fabric (Completed, Success), "
                       "which no NVSwitch of this host's bus carries: managed off this host")
    if not fm["unit_file"] and packages:
        return Finding(cid, "manual", observed, expected,
                       f"{', '.join(sorted(packages))} is installed but {FM_UNIT} is not in the unit path: "
                       "reinstall the package")
    if not fm["unit_file"] and not packages:
        return Finding(cid, "manual", observed, expected,
                       f"{where} and Fabric Manager is not installed: install nvidia-fabricmanager"
                       + (f" at {driver} (NVIDIA's package for the {driver.split('.')[0]} branch)" if driver else "")
                       + " (HGX hosts do not ship it); without it CUDA does not start on the fabric's GPUs")
    if packages and driver and driver not in packages.values():
        have = ", ".join(f"{n} {v}" for n, v in sorted(packages.items()))
        return Finding(cid, "manual", observed, expected,
                       f"Fabric Manager ({have}) is not the loaded driver's version {driver}: it refuses to start "
                       f"(\"... don't match with driver version\"); install the Fabric Manager of {driver}, or "
                       "boot the driver its version belongs to")
    if u.get("masked"):
        return Finding(cid, "manual", observed, expected,
                       f"{FM_UNIT} is masked, the administrator's decision: gpuhost does not unmask it")
    failed = [g["bdf"] for g in on_fabric if g["fabric"]["state"] == "Completed" and g["fabric"]["status"] != "Success"]
    if running and failed:
        return Finding(cid, "manual", observed, expected,
                       f"fabric registration failed on GPU {', '.join(failed)} "
                       f"({next(g for g in on_fabric if g['bdf'] == failed[0])['fabric']['status'] or 'no status'}): "
                       f"journalctl -u {FM_UNIT}")
    if running and u.get("enabled"):
        waiting = [g["bdf"] for g in on_fabric if g["fabric"]["state"] != "Completed"]
        if waiting:
            return Finding(cid, "manual", observed, expected,
                           f"Fabric Manager runs but GPU {', '.join(waiting)} has not finished registering with the "
                           f"fabric: if it stays so, journalctl -u {FM_UNIT}")
        return Finding(cid, "pass", observed, expected, f"Fabric Manager runs and starts at boot ({where})")
    if fm["active"] == "activating":
        # the daemon waits for the fabric before systemd calls it started (TimeoutStartSec)
        return Finding(cid, "manual", observed, expected,
                       f"{FM_UNIT} is still starting (activating): audit again when it is active; if it stays so, "
                       f"journalctl -u {FM_UNIT}")
    registered = [g["bdf"] for g in on_fabric if g["fabric"]["state"] == "Completed"]
    if not running and registered:
        # the fabric was set up this boot and its manager is gone: restarting it on Hopper
        # needs the GPUs stopped and reset first (the guide), which is for a person
        return Finding(cid, "manual", observed, expected,
                       f"Fabric Manager set the fabric up this boot and is no longer running: restarting it needs "
                       f"every CUDA program stopped and the GPUs reset (nvidia-smi -r) first; journalctl -u {FM_UNIT}")
    if not running and (u.get("enabled") or fm["started_this_boot"] or fm["active"] == "failed"):
        # started this boot (at boot, or by hand) and gone: it failed, or someone stopped it;
        # starting it again without knowing why is not safe (on an A100 nothing shows whether
        # it set the fabric up; a restart after registration needs a GPU reset)
        return Finding(cid, "manual", observed, expected,
                       f"{FM_UNIT} was started this boot and is {fm['active']}: it failed or was stopped; "
                       f"journalctl -u {FM_UNIT} says why")
    if not u.get("installable") and not u.get("enabled"):
        return Finding(cid, "manual", observed, expected,
                       f"{u.get('path') or FM_UNIT} has no [Install] section: start it at boot from a unit of your own")
    # not enabled: nothing started it this boot (the GPUs are still waiting for their fabric)
    kinds: list = [UnitEnable((FM_UNIT,))]
    if not running:
        kinds.append(UnitStart((FM_UNIT,)))
    said = "not started at boot" if running else "not running and not started at boot"
    return Finding(cid, "drift", observed, expected, f"{where}: Fabric Manager is {said}", fix=fix_of(*kinds))
