"""bios.acs: PCIe ACS is as gpuhost_bios_acs asks.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import judge_setting, param
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Finding, Host

CONTROL = Control(
    id="bios.acs",
    title="PCIe ACS is as gpuhost_bios_acs asks",
    role="bios",
    fixable=True,
    reboot="yes",
    rationale=('ACS redirects peer traffic through the root complex; VM passthrough needs it, bare-metal P2P does not'),
    references=("NCCL troubleshooting: PCI Access Control Services (ACS)",),
    passes=("left as it is by default; otherwise the BMC's ACS attribute at `gpuhost_bios_acs`"),
    repair=("writes the value to the BMC's settings for the next reset (one request for all the host's bios controls), "
            "where the firmware's registry offers it; the reboot applies it with the OS's changes"),
    facts=("bmc", "boot"),
    params=(param("acs", "keep", ('on', 'off'), "PCIe ACS",
                  'off helps GPUDirect P2P on bare metal (NCCL troubleshooting: PCI Access Control Services), on is needed where VMs get '
                  'devices: the host decides'),),
)


def judge(h: Host) -> Finding:
    return judge_setting(h, CONTROL, "acs", "PCIe ACS")
