"""nvidia.power_limit: Every GPU may draw its full power (its default limit, or the one the inventory sets).
"""
from __future__ import annotations

import math

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of, Persistence, PowerLimit
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.smi import reported
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na, Param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.pci import PCI_ADDRESS
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import Run, unit, unit_current_or_absent, unit_ok

CONTROL = Control(
    id="nvidia.power_limit",
    title="Every GPU may draw its full power (its default limit, or the one the inventory sets)",
    role="nvidia",
    fixable=True,
    reboot="no",
    rationale=("A GPU capped below its default power limit runs its clocks down under load: an RTX PRO 6000 "
               "Blackwell at 300 W instead of 600 W served about 30 % fewer tokens at 64 concurrent requests; a limit "
               "set by hand is gone after a reboot or driver reload, so caps come and go"),
    references=("nvidia-smi(1): -pl/--power-limit; nvidia-smi -q -d POWER",
                "NVML: nvmlDeviceSetPowerManagementLimit (not persistent across reboots or driver unloads)"),
    passes=("every GPU's enforced power limit at least `gpuhost_nvidia_power_limit_w` if set, else its default "
            "limit, live and at boot; na where the GPUs report no power management; an enforced limit below the one "
            "set (an external cap: the BMC, a power brake) is manual"),
    repair=("`nvidia-smi -i <bus id> -pl <W>` now (persistence mode on first: the driver drops a limit when its last "
            "client exits otherwise), and a boot unit that sets both again after nvidia-persistenced"),
    facts=("nvidia", "units"),
    units=("gpuhost-nvidia-power-limit.service",),
    params=(Param("gpuhost_nvidia_power_limit_w", "int", 0, "nvidia_power_limit_w",
                  "Lowest power limit, in watts, every GPU must have (0: each GPU's default limit); set it to your "
                  "own cap where the power budget needs one.", bounds=(0, 100000), what="a whole number of watts"),),
)


UNIT = CONTROL.units[0]


def bus_id(bdf: str) -> str:
    """A PCI address as nvidia-smi names the GPU (-i): the domain in eight digits."""
    return "0000" + bdf.upper()


def power_unit(smi: str, wants: list[tuple[str, int]]) -> object:
    """Sets the limits again at every boot. A limit set while its GPU has no persistence is
    dropped as nvidia-smi exits (nvidia-smi warns so; NVML: "not persistent across ... driver
    unloads"), so each GPU gets persistence first, after nvidia-persistenced where it runs.
    Every address matched PCI_ADDRESS and every limit is an int."""
    lines = []
    for bdf, w in wants:
        lines += [Run((smi, "-i", bus_id(bdf), "-pm", "1")), Run((smi, "-i", bus_id(bdf), "-pl", str(w)))]
    return unit(UNIT, "nvidia.power_limit: each GPU's power limit", lines, after="nvidia-persistenced.service")


# nvidia-smi reports power limits in hundredths of a watt
PRECISION_W = 0.005


def _w(x: float) -> str:
    return f"{x:g} W"


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    nv, nothing = reported(h, cid)
    if nothing:
        return nothing
    gpus = [g for g in nv["gpus"] if g.get("power")]
    if not gpus:
        return na(cid, "no GPU reports power management (its power limits read N/A)")
    strange = [repr(g["bdf"]) for g in gpus if not PCI_ADDRESS.match(str(g["bdf"]))]
    if strange:
        return error(cid, f"nvidia-smi names a GPU {', '.join(strange)}: not an address gpuhost puts in a command")
    asked = int(h.s.get("nvidia_power_limit_w") or 0)
    # what each GPU must allow: the limit asked for, else its own default as the driver reports
    # it (nvidia-smi prints hundredths of a watt; NVML keeps milliwatts), compared at that
    # precision. A default nobody set is in its own range by definition: a 39.50 W default and
    # maximum is no limit "outside" anything
    floor = {g["bdf"]: (float(asked) if asked else float(g["power"]["default_w"])) for g in gpus}
    # what the fix writes: nvidia-smi -pl takes whole watts, so the smallest one at or above
    wants = {bdf: int(math.ceil(w - PRECISION_W)) for bdf, w in floor.items()}
    expected = f"at least {asked} W" if asked else "at least the default limit"
    observed = ", ".join(f"{g['bdf']} {_w(g['power']['enforced_w'] if g['power']['enforced_w'] is not None else g['power']['limit_w'])}"
                         f" of {_w(g['power']['default_w'])}" for g in gpus)
    outside = [g for g in gpus if asked and not (g["power"]["min_w"] or 0) - PRECISION_W <= asked
               <= (g["power"]["max_w"] or asked) + PRECISION_W]
    if outside:
        return Finding(cid, "manual", observed, expected,
                       "gpuhost_nvidia_power_limit_w " + str(asked) + " W is outside what "
                       + ", ".join(f"{g['bdf']} allows ({_w(g['power']['min_w'])} to {_w(g['power']['max_w'])})" for g in outside)
                       + ": nvidia-smi refuses it; set a limit in that range")
    low = [g for g in gpus if g["power"]["limit_w"] < floor[g["bdf"]] - PRECISION_W]
    unreachable = [g for g in low if g["power"]["max_w"] and wants[g["bdf"]] > g["power"]["max_w"] + PRECISION_W]
    if unreachable:
        return Finding(cid, "manual", observed, expected,
                       ", ".join(f"{g['bdf']} is limited to {_w(g['power']['limit_w'])}, below its default "
                                 f"{_w(g['power']['default_w'])}" for g in unreachable)
                       + ": nvidia-smi -pl takes whole watts and the next one is above its maximum "
                         f"{_w(unreachable[0]['power']['max_w'])}; a driver reload or reboot restores the default")
    # the enforced limit is the lowest of the one set and any external cap (a BMC's, a
    # chassis power brake's): no nvidia-smi call lifts that
    capped = [g for g in gpus if g not in low and g["power"]["enforced_w"] is not None
              and g["power"]["enforced_w"] < floor[g["bdf"]] - PRECISION_W]
    if capped:
        return Finding(cid, "manual", observed, expected,
                       ", ".join(f"{g['bdf']} enforces {_w(g['power']['enforced_w'])} below its limit "
                                 f"{_w(g['power']['limit_w'])}" for g in capped)
                       + ": an external power cap (the BMC's power capping, a power brake); lift it there")
    smi = nv.get("smi") or "/usr/bin/nvidia-smi"
    u = power_unit(smi, sorted(wants.items()))
    # the limit at boot is the default: a gpuhost unit is needed where the one wanted is
    # above it, and must be current where it exists
    above_default = bool(asked) and any(asked > g["power"]["default_w"] + PRECISION_W for g in gpus)
    persisted_ok = unit_ok(h.f, u) if above_default else unit_current_or_absent(h.f, u)
    if not low and persisted_ok:
        return Finding(cid, "pass", observed, expected, f"{len(gpus)} GPUs may draw {expected.replace('at least ', '')}")
    kinds: list = []
    if any(not g["persistence"] for g in low):
        kinds.append(Persistence())
    kinds += [PowerLimit(bus_id(g["bdf"]), wants[g["bdf"]]) for g in low]
    msg = (", ".join(f"{g['bdf']} is limited to {_w(g['power']['limit_w'])} ({_w(wants[g['bdf']])} wanted)" for g in low)
           if low else "the limits are right now, but nothing sets them again at boot")
    return Finding(cid, "drift", observed, expected, msg, fix=fix_of(u, *kinds))
