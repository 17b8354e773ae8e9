"""What a fix will change, read from a finding's fix through the closed set of fix kinds
(plugins/module_utils/controls/fixes.py): files, units, runtime values and PCI registers,
packages, kernel parameters, and whether it waits for a boot. `gpuhost fix` prints this as
its plan before it asks; a fix key no kind owns is an error, never a change left unsaid."""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import fixes


def changes(finding: dict) -> list[str]:
    """One line per change the fix of *finding* makes, in the order it makes them."""
    out = fixes.plan(finding.get("fix") or {})
    if finding.get("reboot_required"):
        out.append("then a reboot (gpuhost fix --reboot if-needed)")
    return out
