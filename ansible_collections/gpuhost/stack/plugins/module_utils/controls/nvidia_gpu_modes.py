"""nvidia.gpu_modes: Every GPU's compute mode lets the server in, and no MIG or ECC change waits for a reset.

MIG mode survives a reboot (on Ampere in the InfoROM; on Hopper and later while the driver is
loaded, and nvidia-smi -mig is then run again by whatever set it), its GPU instances do not:
"the created MIG devices are not persistent across system reboots" and "simply enabling MIG
mode on the GPU is not sufficient" (NVIDIA MIG User Guide). A MIG GPU without GPU instances
offers no CUDA device, so gpuhost enables MIG only where an enabled unit creates the
instances at boot (mig-parted's nvidia-mig-manager.service, nvidia-smi mig -cgi).
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import fix_of, GpuMode, UnitRemoval
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, flag, Host, Param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.nvidia_power_limit import bus_id
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.pci import PCI_ADDRESS
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.persist import Run, unit, unit_current_or_absent, unit_ok
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.smi import reported

CONTROL = Control(
    id="nvidia.gpu_modes",
    title="Every GPU's compute mode lets the server in, and no MIG or ECC change waits for a reset",
    role="nvidia",
    fixable=True,
    reboot="MIG/ECC",
    rationale=("A GPU left in Exclusive_Process or Prohibited compute mode refuses the inference server's second "
               "process (or every one) with 'all CUDA-capable devices are busy or unavailable'; a MIG or ECC change "
               "made and never applied leaves the GPU in another mode than the one its operator chose until an "
               "unplanned reset"),
    references=("nvidia-smi(1): -c/--compute-mode, -mig/--multi-instance-gpu, -e/--ecc-config; -q Compute Mode, "
                "MIG Mode and ECC Mode Current/Pending",
                "NVIDIA MIG User Guide: GPU instances are not persistent across reboots; nvidia-smi mig -lgi, -cgi",
                "NVIDIA/mig-parted: deployments/systemd/nvidia-mig-manager.service",
                "NVML nvmlDeviceSetComputeMode: not persisted across reboots on Linux"),
    passes=("every GPU's compute mode `gpuhost_nvidia_compute_mode` (Default); MIG and ECC current == pending, and "
            "== `gpuhost_nvidia_mig` / `gpuhost_nvidia_ecc` where set; a change that waits is pending_reboot; a GPU "
            "with MIG on has GPU instances (`nvidia-smi mig -lgi`), else manual; MIG is turned on only where an "
            "enabled unit creates the instances at boot, else manual"),
    repair=("`nvidia-smi -i <bus id> -c <mode>` now, and a boot unit where the mode is not the boot's Default; MIG "
            "and ECC where set: `nvidia-smi -i <bus id> -mig` or `-e` with 0 or 1, then a reboot applies it (MIG on "
            "only where a unit creates its GPU instances at boot)"),
    facts=("nvidia", "units"),
    units=("gpuhost-nvidia-compute-mode.service",),
    params=(Param("gpuhost_nvidia_compute_mode", "str", "Default", "nvidia_compute_mode",
                  "The compute mode every GPU must have: Default (any number of processes), Exclusive_Process "
                  "(one process per GPU) or Prohibited.", pattern=r"^(Default|Exclusive_Process|Prohibited)$",
                  what="Default, Exclusive_Process or Prohibited"),
            Param("gpuhost_nvidia_mig", "raw", "", "nvidia_mig",
                  "Whether MIG must be on (true) or off (false) on every GPU that has it; \"\": as each GPU has it "
                  "(only a change that waits for a reset is reported)."),
            Param("gpuhost_nvidia_ecc", "raw", "", "nvidia_ecc",
                  "Whether ECC must be on (true) or off (false) on every GPU that has it; \"\": as each GPU has it "
                  "(only a change that waits for a reset is reported).")),
)

UNIT = CONTROL.units[0]
WORDS = {True: "Enabled", False: "Disabled"}


def compute_unit(smi: str, wants: list[tuple[str, str]]) -> object:
    """Sets the compute mode again at every boot (a boot resets it to Default). Every address
    matched PCI_ADDRESS and every mode is one of three words."""
    lines = [Run((smi, "-i", bus_id(bdf), "-c", mode.upper())) for bdf, mode in wants]
    return unit(UNIT, "nvidia.gpu_modes: each GPU's compute mode", lines, after="nvidia-persistenced.service")


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    nv, nothing = reported(h, cid)
    if nothing:
        return nothing
    gpus = [g for g in nv["gpus"] if g.get("modes")]
    strange = [repr(g["bdf"]) for g in gpus if not PCI_ADDRESS.match(str(g["bdf"]))]
    if strange:
        return error(cid, f"nvidia-smi names a GPU {', '.join(strange)}: not an address gpuhost puts in a command")
    compute = h.s.get("nvidia_compute_mode") or "Default"
    wanted = {"mig": flag(h.s.get("nvidia_mig")), "ecc": flag(h.s.get("nvidia_ecc"))}
    observed = "; ".join(f"{g['bdf']} {g['modes']['compute'] or '?'}"
                         + "".join(f", {m.upper()} {'/'.join(g['modes'][m])}" for m in ("mig", "ecc") if g["modes"][m])
                         + (f" ({g['mig_instances']} GPU instances)" if g.get("mig_instances") else "")
                         for g in gpus)
    expected = f"compute {compute}" + "".join(f", {m.upper()} {WORDS[w]}" for m, w in wanted.items() if w is not None) \
        + ", nothing pending"
    # a mode the operator wants on a GPU that does not have it: nothing gpuhost can set
    lacking = [f"{g['bdf']} has no {m.upper()}" for g in gpus for m, w in wanted.items()
               if w is True and g["modes"][m] is None]
    if lacking:
        return Finding(cid, "manual", observed, expected,
                       ", ".join(lacking) + f" (nvidia-smi reports it [N/A]); set gpuhost_nvidia_{'mig' if 'MIG' in lacking[0] else 'ecc'} "
                       "to \"\" or false for this host")
    # MIG on with no GPU instance: no CUDA device at all (and it comes back so after every boot
    # unless a unit creates the instances)
    boot_units = nv.get("mig_boot_units") or []
    creates = (f"{', '.join(boot_units)} did not create them this boot (see its journal)" if boot_units else
               "MIG mode survives a reboot, its instances do not: create them (nvidia-smi mig -cgi <profiles> -C) "
               "and enable a unit that creates them at every boot (mig-parted's nvidia-mig-manager.service)")
    # a GPU whose MIG the inventory turns off is drift below, whatever instances it has
    serving_mig = [g for g in gpus if (g["modes"]["mig"] or [None])[0] == "Enabled" and wanted["mig"] is not False]
    unread = [g["bdf"] for g in serving_mig if g.get("mig_instances") is None]
    if unread:
        return error(cid, f"cannot tell whether MIG GPUs {', '.join(unread)} have GPU instances: "
                          f"{nv.get('mig_error') or 'nvidia-smi mig -lgi said nothing'}")
    empty = [g["bdf"] for g in serving_mig if g.get("mig_instances") == 0]
    if empty:
        which = f"{', '.join(empty)} {'has' if len(empty) == 1 else 'have'}"
        return Finding(cid, "manual", observed + "; no GPU instance on " + ", ".join(empty), expected,
                       f"{which} MIG on and no GPU instance, so no CUDA device: {creates}")
    # MIG turned on (now, or at the next reset) where nothing creates its instances at boot
    # would leave the GPU with none: gpuhost does not turn it on, nor lets a reset do it unseen
    if not boot_units:
        enabling = [g["bdf"] for g in gpus if g["modes"]["mig"] and (
            (wanted["mig"] is True and g["modes"]["mig"][1] != "Enabled") or
            (wanted["mig"] is not False and g["modes"]["mig"][0] != "Enabled" and g["modes"]["mig"][1] == "Enabled"))]
        if enabling:
            return Finding(cid, "manual", observed, expected,
                           f"MIG {'is wanted' if wanted['mig'] else 'waits to be turned on'} on {', '.join(enabling)}, "
                           "but no enabled unit creates GPU instances at boot: MIG on with no instance offers no CUDA "
                           "device; enable one first (mig-parted's nvidia-mig-manager.service, or a unit running "
                           "nvidia-smi mig -cgi <profiles> -C)")
    kinds: list = []
    said: list[str] = []
    for g in gpus:
        now = g["modes"]["compute"]
        if now is not None and now != compute:
            kinds.append(GpuMode(bus_id(g["bdf"]), "compute", compute))
            said.append(f"{g['bdf']} is in compute mode {now}")
    for m, want in wanted.items():
        for g in gpus:
            pair = g["modes"][m]
            if want is not None and pair is not None and pair[1] != WORDS[want]:
                kinds.append(GpuMode(bus_id(g["bdf"]), m, WORDS[want]))
                said.append(f"{g['bdf']} {m.upper()} is {pair[0]}" + (f" (pending {pair[1]})" if pair[1] != pair[0] else "")
                            + f", {WORDS[want]} wanted")
    smi = nv.get("smi") or "/usr/bin/nvidia-smi"
    u = compute_unit(smi, sorted((g["bdf"], compute) for g in gpus))
    # a boot resets the compute mode to Default: a gpuhost unit only where another is wanted,
    # and an older one that sets another mode taken out
    if compute != "Default":
        persisted_ok, at_boot = unit_ok(h.f, u), [u]
    else:
        persisted_ok = unit_current_or_absent(h.f, u)
        at_boot = [] if persisted_ok else [UnitRemoval(UNIT)]
    if kinds or not persisted_ok:
        return Finding(cid, "drift", observed, expected,
                       "; ".join(said) if said else ("the compute mode is right now, but nothing sets it again at boot"
                                                     if compute != "Default" else
                                                     "the compute mode is right now, but gpuhost's boot unit sets another"),
                       reboot_required=any(k.mode != "compute" for k in kinds), fix=fix_of(*at_boot, *kinds))
    waiting = [f"{g['bdf']} {m.upper()} {g['modes'][m][0]} until a reset (pending {g['modes'][m][1]})"
               for g in gpus for m in ("mig", "ecc") if g["modes"][m] and g["modes"][m][0] != g["modes"][m][1]]
    if waiting:
        return Finding(cid, "pending_reboot", observed, expected,
                       "; ".join(waiting) + ": a GPU reset or a reboot applies it", reboot_required=True)
    return Finding(cid, "pass", observed, expected, f"{len(gpus)} GPUs in compute mode {compute}, nothing pending")
