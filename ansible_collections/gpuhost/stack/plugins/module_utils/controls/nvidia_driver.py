"""nvidia.driver: The NVIDIA kernel module supports every GPU and matches its userspace.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na, Param
from ansible_collections.gpuhost.stack.plugins.module_utils.versions import at_least, vkey

CONTROL = Control(
    id="nvidia.driver",
    title="The NVIDIA kernel module supports every GPU and matches its userspace",
    role="nvidia",
    fixable=False,
    reboot="-",
    rationale="A module older than the GPU's minimum, or an NVML mismatch, leaves GPUs unusable",
    references=("CUDA Toolkit release notes: minimum driver versions",
                "NVIDIA/open-gpu-kernel-modules: nv.c, the probe's 'not supported by the NVIDIA ... driver release'"),
    passes=("module >= the minimum for every GPU's compute capability; userspace == module; every GPU driven "
            "(Blackwell and Grace Hopper need the open modules); a GPU the driver's probe logged as not supported by "
            "its release is manual naming it (a driver too old for it, not a binding problem); na when every GPU is "
            "on vfio-pci"),
    repair="manual",
    facts=("nvidia", "pci", "boot", "kernel_log"),
    params=(Param("gpuhost_nvidia_min_driver", "str", "", "nvidia_min_driver",
                  'Minimum NVIDIA driver, like "570.124.06"; empty: by the GPUs\' compute capability.',
                  pattern=r"^\d+(\.\d+){0,2}$", what='a driver version like "570.124.06"'),),
    host_level=False,
)


# compute capability -> minimum Linux driver: that of the first CUDA release supporting the
# architecture (CUDA release notes, "Toolkit Driver Version"): 7.0 Volta CUDA 9.0, 7.5 Turing
# 10.0, 8.0 A100 11.0 GA, 8.6 11.1 GA, 8.9 Ada and 9.0 Hopper 11.8, 10.0 Blackwell 12.8 GA;
# 12.0 (RTX PRO 6000 Blackwell) is the contract's figure, CUDA 12.8 Update 1.
MIN_DRIVER = {"12.0": "570.124.06", "10.0": "570.26", "9.0": "520.61.05", "8.9": "520.61.05",
              "8.6": "455.23", "8.0": "450.51.05", "7.5": "410.48", "7.0": "384.81"}


OPEN_ONLY = "the open kernel modules"


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    nv = h.section("nvidia")
    if nv is None:
        return error(cid, h.errors.get("nvidia", "cannot read the NVIDIA driver"))
    if nv["module"] is None and nv["smi"] is None and not h.gpus:
        return na(cid, "no NVIDIA driver or GPU")
    if h.gpus and all(g.get("driver") == "vfio-pci" for g in h.gpus):
        return na(cid, f"every NVIDIA GPU ({len(h.gpus)}) is bound to vfio-pci for VMs: their driver runs in the guests")
    if nv["module"] is None:
        return Finding(cid, "manual", nv.get("smi_error") or "no kernel module", "a loaded NVIDIA kernel module",
                       f"the NVIDIA kernel module is not loaded (kernel {h.boot.get('running_kernel')}: "
                       "was it built for this kernel? dkms needs the kernel's headers)")
    if nv["smi"] is None:
        return Finding(cid, "manual", f"module {nv['module']}, no nvidia-smi", "userspace == module",
                       "the NVIDIA userspace (nvidia-smi, NVML) is not installed")
    # the driver's probe said in this boot's log which GPUs it does not support: a driver too old
    # for the GPU's architecture, never a binding problem (nv.c, print_unsupported)
    driven = {str(g.get("bdf")).lower() for g in nv.get("gpus") or []}
    # a GPU the driver does not drive now, refused by the release loaded now (a log line of a
    # release since replaced is history)
    refused = [u for u in (h.section("kernel_log") or {}).get("unsupported_gpus") or []
               if u["bdf"] not in driven and u.get("release") in (None, nv["module"])
               and any(g["bdf"] == u["bdf"] for g in h.gpus if g.get("driver") != "vfio-pci")]
    too_old = [u for u in refused if u["why"] == "release"]
    if too_old:
        return Finding(cid, "manual", f"module {nv['module']}", "a driver that supports every GPU",
                       "; ".join(f"{u['bdf']} (PCI ID {u['pci_id']}) is not supported by the NVIDIA "
                                 f"{u['release'] or nv['module']} driver release, as its probe logged" for u in too_old)
                       + ": install a driver release that supports it (NVIDIA's README, Appendix A lists them)")
    if nv.get("no_devices"):
        host_gpus = [g for g in h.gpus if g.get("driver") != "vfio-pci"]
        if nv.get("flavor") == "proprietary" and host_gpus:
            return Finding(cid, "manual", f"proprietary module {nv['module']}: no devices", "a driver that drives every GPU",
                           f"nvidia-smi finds no devices although {len(host_gpus)} NVIDIA GPUs are on the bus: the "
                           f"proprietary kernel module does not drive Grace Hopper or Blackwell GPUs; install {OPEN_ONLY}")
        return Finding(cid, "manual", "No devices were found", "GPUs the driver drives",
                       f"nvidia-smi: No devices were found (module {nv['module']}); check the GPUs' driver binding "
                       "and the kernel log")
    if nv.get("userspace") != nv["module"]:
        return Finding(cid, "manual", f"userspace {nv.get('userspace')}, module {nv['module']}", "userspace == module",
                       f"userspace {nv.get('userspace')} does not match kernel module {nv['module']} "
                       "(NVML: Driver/library version mismatch); install the matching driver")
    if nv.get("flavor") == "proprietary":
        listed = {g["bdf"] for g in nv["gpus"]}
        unlisted = [g["bdf"] for g in h.gpus if g["bdf"] not in listed and g.get("driver") != "vfio-pci"]
        if unlisted:
            return Finding(cid, "manual", f"proprietary module {nv['module']}", "a driver that drives every GPU",
                           f"{', '.join(unlisted)} are on the bus but not driven by the proprietary kernel module "
                           f"(Grace Hopper and Blackwell need {OPEN_ONLY}); install {OPEN_ONLY}")
    minimum = h.s.get("nvidia_min_driver")
    why = "gpuhost_nvidia_min_driver"
    if not minimum:
        caps = sorted({g["compute_cap"] for g in nv["gpus"] if g.get("compute_cap")}, key=vkey)
        needs = [(MIN_DRIVER.get(c), c) for c in caps if MIN_DRIVER.get(c)]
        if needs:
            minimum, cap = max(needs, key=lambda x: vkey(x[0]))
            why = f"compute capability {cap}"
    if minimum and not at_least(nv["module"], minimum):
        return Finding(cid, "manual", nv["module"], f">= {minimum}",
                       f"driver {nv['module']} is older than {minimum}, the minimum for {why}; upgrade the driver")
    return Finding(cid, "pass", nv["module"], f">= {minimum}" if minimum else "userspace == module",
                   f"driver {nv['module']}, userspace matches")
