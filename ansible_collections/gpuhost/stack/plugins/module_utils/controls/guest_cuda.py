"""guest.cuda: Every CUDA runtime found supports the GPUs it sees and runs on the loaded driver.

Judged wherever CUDA programs run: a container (the seed's model server ran in one), a VM, or
the host itself. Nothing is fixed: which runtime a program loads is its installer's choice;
the finding says which runtime, where, and what it needs.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, error, Finding, Host, na, Param
from ansible_collections.gpuhost.stack.plugins.module_utils.versions import vkey

CONTROL = Control(
    id="guest.cuda",
    title="Every CUDA runtime found supports the GPUs it sees and runs on the loaded driver",
    role="guest",
    fixable=False,
    reboot="-",
    rationale=("Blackwell (compute capability 12.0 and 10.0) needs CUDA 12.8 or newer in every runtime a server loads "
               "(torch built for an older CUDA says sm_120 is not compatible with it); a runtime of a newer CUDA major "
               "than the driver's fails at start, and a stale cuda-compat libcuda on the loader path shadows the "
               "driver's own"),
    references=("CUDA Toolkit release notes: toolkit and driver versions", "CUDA Compatibility guide (minor version, "
                "forward compatibility)", "CUDA C++ Programming Guide: compute capabilities", "torch/version.py"),
    passes=("every CUDA runtime found (toolkits under `/usr/local/cuda*`, `libcudart.so.*` in the loader's directories, "
            "torch's `version.cuda` and the nvidia-cuda-runtime wheels in the usual Python environments and "
            "`gpuhost_guest_cuda_paths`) builds for every visible GPU's compute capability or an earlier minor "
            "revision of its major (whose cubins run on it) and runs on the loaded driver; "
            "no cuda-compat libcuda older than the driver on the loader path; n/a with no runtime found"),
    repair="none: manual (which runtime, where, and what it needs)",
    facts=("cuda", "nvidia"),
    params=(Param("gpuhost_guest_cuda_paths", "list", [], "guest_cuda_paths",
                  "Python environments (or their site-packages) to look for CUDA runtimes in besides the usual places "
                  "(/opt/conda, venvs under /opt, /srv, /root, /home).", elements="str"),),
    host_level=False,
)

# the oldest CUDA that builds code for a compute capability (CUDA C++ Programming Guide and the
# toolkits' release notes: Ampere 11.0/11.1, Ada and Hopper 11.8, Blackwell 12.8); a GPU runs
# the code of an earlier minor revision of its major too (min_cuda)
MIN_CUDA_FOR_CC = {"7.0": "9.0", "7.5": "10.0", "8.0": "11.0", "8.6": "11.1", "8.7": "11.4", "8.9": "11.8",
                   "9.0": "11.8", "10.0": "12.8", "12.0": "12.8"}
# CUDA 13.0 dropped Maxwell, Pascal and Volta (its release notes): compute capability below 7.5
CUDA13_MIN_CC = "7.5"
# each CUDA's minimum Linux driver (CUDA Toolkit release notes, "CUDA Toolkit and Corresponding
# Driver Versions", GA): the newest CUDA a driver runs natively is the last one it reaches
DRIVER_FOR_CUDA = (("11.0", "450.36.06"), ("11.1", "455.23"), ("11.2", "460.27.03"), ("11.3", "465.19.01"),
                   ("11.4", "470.42.01"), ("11.5", "495.29.05"), ("11.6", "510.39.01"), ("11.7", "515.43.04"),
                   ("11.8", "520.61.05"), ("12.0", "525.60.13"), ("12.1", "530.30.02"), ("12.2", "535.54.03"),
                   ("12.3", "545.23.06"), ("12.4", "550.54.14"), ("12.5", "555.42.02"), ("12.6", "560.28.03"),
                   ("12.8", "570.26"), ("12.9", "575.51.03"), ("13.0", "580.65.06"))
# minor version compatibility (CUDA Compatibility guide): a runtime runs on any driver of its
# major at or above this
MINOR_COMPAT = {"11": "450.80.02", "12": "525.60.13", "13": "580.65.06"}


def v(text: str) -> tuple:
    return vkey(text)


def driver_cuda(driver: str) -> str | None:
    """The newest CUDA *driver* runs natively."""
    reached = [cuda for cuda, minimum in DRIVER_FOR_CUDA if v(driver) >= v(minimum)]
    return reached[-1] if reached else None


def min_cuda(cc: str) -> str | None:
    """The oldest CUDA whose code runs on compute capability *cc*: "a cubin object generated
    for compute capability X.y will only execute on devices of compute capability X.z where
    z>=y" (CUDA C++ Programming Guide, Binary Compatibility), so any CUDA that builds for an
    earlier minor revision of the same major will do (sm_86 code runs on an L40S, 8.9: NVIDIA's
    Ada Compatibility Guide; torch cu117 serves on one)."""
    try:
        major, minor = (int(x) for x in cc.split("."))
    except (AttributeError, ValueError):
        return None
    same = [cuda for known, cuda in MIN_CUDA_FOR_CC.items()
            if int(known.split(".", 1)[0]) == major and int(known.split(".")[1]) <= minor]
    return min(same, key=v) if same else None


def needs(version: str, gpus: list[dict], driver: str | None) -> list[str]:
    out = []
    for g in gpus:
        cc = g.get("compute_cap")
        want = min_cuda(cc or "")
        if want and v(version) < v(want):
            out.append(f"CUDA >= {want} for {g.get('name') or 'GPU'} (compute capability {cc})")
        if cc and v(version) >= v("13.0") and v(cc) < v(CUDA13_MIN_CC):
            out.append(f"CUDA 12 or older for {g.get('name') or 'GPU'} (compute capability {cc}: CUDA 13 dropped it)")
    if driver:
        native = driver_cuda(driver)
        major = version.split(".")[0]
        if native and int(major) > int(native.split(".")[0]):
            minimum = dict(DRIVER_FOR_CUDA).get(version) or MINOR_COMPAT.get(major, "?")
            out.append(f"a driver >= {minimum} (the loaded {driver} runs CUDA {native} and older; forward "
                       "compatibility through cuda-compat only on datacenter GPUs)")
        elif major in MINOR_COMPAT and v(driver) < v(MINOR_COMPAT[major]):
            out.append(f"a driver >= {MINOR_COMPAT[major]} for CUDA {major}.x (the loaded one is {driver})")
    return sorted(set(out), key=out.index)


def judge(h: Host) -> Finding:
    cid = CONTROL.id
    cuda = h.section("cuda")
    if cuda is None:
        return error(cid, h.errors.get("cuda", "cannot read the CUDA runtimes"))
    found = [r for r in cuda.get("runtimes") or [] if r.get("version")]
    where = (f"CUDA toolkits, the loader's directories and {cuda.get('sites_read', 0)} Python environments")
    if not found:
        return na(cid, f"no CUDA runtime found (looked at {where})")
    nv = h.section("nvidia") or {}
    gpus = nv.get("gpus") or []
    driver = nv.get("module") or nv.get("userspace")
    if not gpus and not driver:
        return na(cid, f"{len(found)} CUDA runtimes, but no NVIDIA driver or GPU is visible here")
    problems = []
    for r in found:
        what = needs(r["version"], gpus, driver)
        if what:
            name = {"torch": "torch", "toolkit": "CUDA toolkit", "libcudart": "libcudart", "wheel": "nvidia-cuda-runtime"}
            label = f"{name.get(r['kind'], r['kind'])} {r.get('full') or r['version']} (CUDA {r['version']})"
            problems.append(f"{label} at {r['where']} needs " + " and ".join(what))
    for c in cuda.get("compat") or []:
        if driver and v(c["version"]) < v(driver):
            problems.append(f"cuda-compat's libcuda {c['version']} at {c['where']} is on the loader path and older than "
                            f"the driver {driver}: take it off the loader path")
    ccs = sorted({g.get("compute_cap") for g in gpus if g.get("compute_cap")})
    observed = "; ".join(f"{r['kind']} CUDA {r['version']} at {r['where']}" for r in found)
    expected = (f"runtimes for compute capability {', '.join(ccs) or '?'} that run on driver {driver or '?'}")
    if not problems:
        return Finding(cid, "pass", observed, expected,
                       f"{len(found)} CUDA runtimes fit the GPUs (compute capability {', '.join(ccs) or 'unknown'}) "
                       f"and the driver {driver or '(unknown)'}")
    return Finding(cid, "manual", observed, expected, "; ".join(problems))
