"""The GPUs nvidia-smi reports, as the controls that read them start: the section, or the
finding that says why there is nothing to judge.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import error, Finding, Host, na


def reported(h: Host, cid: str) -> tuple[dict, Finding | None]:
    """The nvidia section with at least one GPU the driver reports, or (that section, the
    error or na finding *cid* gives when it cannot be read or lists no GPU)."""
    nv = h.section("nvidia")
    if nv is None:
        return {}, error(cid, h.errors.get("nvidia", "cannot read the NVIDIA driver"))
    if not nv["gpus"]:
        return nv, na(cid, "no GPU that the NVIDIA driver reports"
                      + (f" ({nv['smi_error']})" if nv.get("smi_error") else ""))
    return nv, None
