"""BIOS settings judged from two sides: what the host's BMC says (its Redfish Bios resource,
read by the audit on the controller: module_utils/redfish.py) and what Linux shows of the same
setting.

Vendors are data: for each setting, each BMC family's attribute (the candidates in order)
and the firmware's spelling of each value gpuhost asks for, every entry with its public
source. A family or an attribute not here is n/a with the reason, never a guess; a firmware
whose registry does not offer the value is manual, naming what it offers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ansible_collections.gpuhost.stack.plugins.module_utils.controls.fixes import BiosSet, fix_of
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.gates import rebooted_by_gpuhost
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Finding, Host, Param, error, na
from ansible_collections.gpuhost.stack.plugins.module_utils.redfish import match_attribute, offers, unwritable

KEEP = "keep"


@dataclass(frozen=True)
class Attr:
    """One firmware's attribute for a setting: its names (Supermicro's without the setup
    item's number its firmware adds), the firmware's spelling of each value gpuhost knows
    (gpuhost's word -> the firmware's), and where both were read."""
    names: tuple
    values: dict
    source: str


EN = {"on": "Enabled", "off": "Disabled"}
SMC_EN = {"on": "Enable", "off": "Disable"}

# Sources, as short names (docs/firmware-sources.md gives each in full, with its commit):
#  DELL-OMSDK   dell/omsdk@7d7ff3db omdrivers/iDRAC/Config/BIOS.json (Dell's registry, as a schema)
#  DELL-R650    akaliwod/iserver@bf55df81 doc/redfish-tests-dell-vserver/UriSystems.md (a real GET .../Bios)
#  DELL-R6515   metal-toolbox/ironlib@69ba5533 fixtures/dell/r6515/bios.json (a real AMD export)
#  HPE-A42      NVIDIA/libredfish@c094c9e6 tests/mockups: DL385 Gen10 Plus v2 registry (A42 v2.60)
#  HPE-ILO5     HPEDevCom/redfishdocs@676416da: iLO 5 v3.09 BIOS resource definitions (Intel Gen10)
#  LENOVO-SR670 NVIDIA/libredfish@c094c9e6 tests/mockups: SR670 V2 registry (XCC 2.83)
#  LENOVO-SR635V3 weka/tools@99eed0dd bios_tool/defaults-db.yml: a ThinkSystem SR635 V3's (EPYC) attributes
#  SMC-X13      NVIDIA/libredfish@c094c9e6 tests/mockups/supermicro: SYS-821GE-TNHR Bios and registry
#  SMC-H13      an H13 (EPYC) board's attributes as printed in public threads (smc-ami notes)
#  AMI-CBS      values with the attribute's name before them, as AMD CBS names them (smc-ami notes)
#  DMTF         DMTF/Redfish-Publications@26c94965 mockups/public-rackmount1 Bios
TABLE = {
    "nps": {
        "dell": (Attr(("NumaNodesPerSocket",), {"0": "0", "1": "1", "2": "2", "4": "4"}, "DELL-R6515"),
                 Attr(("SubNumaCluster",), {"1": "Disabled"}, "DELL-OMSDK")),
        "hpe": (Attr(("NumaMemoryDomainsPerSocket",), {"1": "OneMemoryDomainPerSocket", "2": "TwoMemoryDomainsPerSocket",
                                                       "4": "FourMemoryDomainsPerSocket"}, "HPE-A42"),),
        "lenovo": (Attr(("Processors_SNC",), {"1": "Disabled"}, "LENOVO-SR670"),
                   Attr(("Memory_NUMANodesperSocket",), {"1": "NPS1"}, "LENOVO-SR635V3")),
        "supermicro": (Attr(("NUMANodesPerSocket",), {"1": "NPS1", "2": "NPS2", "4": "NPS4"}, "SMC-H13"),
                       Attr(("SNC",), {"1": "Disable"}, "SMC-X13")),
        "ami": (Attr(("CbsDfCmnDramNps",), {"4": "CbsDfCmnDramNpsNPS4"}, "AMI-CBS"),),
    },
    "smt": {
        "dell": (Attr(("LogicalProc",), EN, "DELL-OMSDK"),),
        "hpe": (Attr(("ProcSMT",), EN, "HPE-A42"), Attr(("ProcHyperthreading",), EN, "HPE-ILO5")),
        "lenovo": (Attr(("Processors_HyperThreading",), EN, "LENOVO-SR670"),
                   Attr(("Processors_SMTMode",), {"on": "Enabled"}, "LENOVO-SR635V3")),
        "supermicro": (Attr(("Hyper_Threading_ALL_",), SMC_EN, "SMC-X13"), Attr(("SMTControl",), {"off": "Disabled"}, "SMC-H13")),
        "dmtf": (Attr(("ProcHyperthreading",), EN, "DMTF"),),
    },
    "cppc": {
        "lenovo": (Attr(("Processors_CPPC",), EN, "LENOVO-SR635V3"),),
    },
    "cstates": {
        "dell": (Attr(("ProcCStates",), EN, "DELL-OMSDK"),),
        "hpe": (Attr(("MinProcIdlePower",), {"on": "C6", "off": "NoCStates"}, "HPE-A42"),),
        "lenovo": (Attr(("Processors_GlobalC_stateControl",), {"on": "Enabled"}, "LENOVO-SR635V3"),),
        "ami": (Attr(("CbsCmnCpuGlobalCstateCtrl",), {"off": "CbsCmnCpuGlobalCstateCtrlDisabled"}, "AMI-CBS"),),
    },
    "boost": {
        "dell": (Attr(("ProcTurboMode",), EN, "DELL-OMSDK"),),
        "hpe": (Attr(("ProcAMDBoost",), EN, "HPE-A42"), Attr(("ProcTurbo",), EN, "HPE-ILO5")),
        "lenovo": (Attr(("Processors_TurboMode",), EN, "LENOVO-SR670"),
                   Attr(("Processors_CorePerformanceBoost",), {"on": "Enabled"}, "LENOVO-SR635V3")),
        "supermicro": (Attr(("TurboMode",), SMC_EN, "SMC-X13"),),
        "dmtf": (Attr(("ProcTurboMode",), EN, "DMTF"),),
    },
    "iommu": {
        "dell": (Attr(("ProcVirtualization",), EN, "DELL-OMSDK"),),
        "hpe": (Attr(("ProcAmdIoVt",), EN, "HPE-A42"), Attr(("IntelProcVtd",), EN, "HPE-ILO5")),
        "lenovo": (Attr(("DevicesandIOPorts_IntelVTforDirectedIOVTd",), EN, "LENOVO-SR670"),
                   Attr(("DevicesandIOPorts_IOMMU",), {"on": "Enabled"}, "LENOVO-SR635V3")),
        "supermicro": (Attr(("IntelVTforDirectedI_O_VT_d_",), SMC_EN, "SMC-X13"), Attr(("IOMMU",), EN, "SMC-H13")),
    },
    "above4g": {
        "dell": (Attr(("MmioAbove4Gb",), EN, "DELL-OMSDK"),),
        "lenovo": (Attr(("DevicesandIOPorts_PCI64BitResourceAllocation",), EN, "LENOVO-SR670"),),
        "supermicro": (Attr(("Above4GDecoding",), EN, "SMC-X13"),),
    },
    "rebar": {
        "supermicro": (Attr(("Re_SizeBARSupport",), EN, "SMC-X13"),),
    },
    "acs": {
        "hpe": (Attr(("AccessControlService",), EN, "HPE-A42"),),
        "lenovo": (Attr(("Processors_PCIeACSCTL",), EN, "LENOVO-SR670"),),
        "supermicro": (Attr(("PCIeACSCTL",), SMC_EN, "SMC-X13"), Attr(("ACSEnable",), {"off": "Disabled"}, "SMC-H13")),
    },
    "profile": {
        "dell": (Attr(("SysProfile",), {"performance": "PerfOptimized"}, "DELL-OMSDK"),),
        "lenovo": (Attr(("OperatingModes_ChooseOperatingMode",), {"performance": "MaximumPerformance"}, "LENOVO-SR670"),),
        "dmtf": (Attr(("PowerProfile",), {"performance": "MaxPerf"}, "DMTF"),),
    },
    "determinism": {
        "dell": (Attr(("DeterminismSlider",), {"power": "PowerDeterminism"}, "DELL-R6515"),),
        "hpe": (Attr(("PerformanceDeterminism",), {"power": "PowerDeterministic", "performance": "PerformanceDeterministic"},
                     "HPE-A42"),),
    },
}

# every attribute name any family may use: the audit asks the registry about these only
WANTED_NAMES = tuple(sorted({n for fams in TABLE.values() for attrs in fams.values() for a in attrs for n in a.names}))

# How the audit reaches the host's BMC (host_vars, the password in a vault): read by the audit
# action on the controller, never handed to a judgement, never in a report
BMC_PARAMS = (
    Param("gpuhost_bmc_address", "str", "", None, "The host's BMC (its Redfish service), an address or name; empty: no BMC.",
          pattern=r"^[A-Za-z0-9.:\[\]-]*$", what="a host name or IP address"),
    Param("gpuhost_bmc_username", "str", "", None, "The BMC account the audit reads the BIOS settings with."),
    Param("gpuhost_bmc_password", "str", "", None, "That account's password (keep it in an Ansible vault)."),
    Param("gpuhost_bmc_ca", "str", "", None, "A CA bundle the BMC's TLS certificate must chain to; empty: the system's."),
    Param("gpuhost_bmc_validate_certs", "bool", True, None,
          "Verify the BMC's TLS certificate (false is named in every bios finding)."),
    Param("gpuhost_bmc_system", "str", "", None, "The Redfish system to read where the BMC has several; empty: its only one.",
          pattern=r"^[A-Za-z0-9._-]*$", what="a Redfish system Id"),
    Param("gpuhost_bmc_timeout", "int", 10, None, "Seconds each request to the BMC may take (1 to 120).",
          bounds=(1, 120), what="a whole number of seconds"),
    Param("gpuhost_bios_write", "bool", True, "bios_write",
          "Let fix write BIOS settings through the BMC, for the next reboot (false: the bios findings are manual)."),
)


def param(setting: str, default: str, choices: tuple, what: str, why: str) -> Param:
    """The wanted value of a setting: one of *choices*, or keep (gpuhost leaves it as it is)."""
    words = (KEEP,) + tuple(choices)
    return Param(f"gpuhost_bios_{setting}", "str", default, f"bios_{setting}",
                 f"The firmware's {what}: {', '.join(words)} (keep: leave it as it is). Default {default}: {why}.",
                 pattern="^(" + "|".join(words) + ")$", what="one of " + ", ".join(words))


def _attr(setting: str, family: str | None, attributes: dict):
    for a in TABLE[setting].get(family or "", ()):
        for name in a.names:
            found = match_attribute(attributes, name)
            if found:
                return a, found
    return None, None


def judge_setting(h: Host, control, setting: str, what: str, linux=None) -> Finding:
    """One BIOS setting: n/a without a BMC, an attribute gpuhost knows, or a wanted value; the
    BMC's current value against the one wanted (a pending one applies at the next reset);
    and, where Linux shows the setting, that both sides agree."""
    cid = control.id
    bmc = h.f.get("bmc")
    if bmc is None:
        return na(cid, "no BMC for this host in the inventory (gpuhost_bmc_address)")
    if bmc.get("error"):
        return error(cid, f"BMC {bmc.get('address')}: {bmc['error']}")
    want = str(h.s.get(f"bios_{setting}", control.params[0].default))
    where = f"BMC {bmc['address']}" + ("" if bmc.get("tls_verified", True) else ", its certificate not verified")
    if want == KEEP:
        return na(cid, f"left as it is (gpuhost_bios_{setting}: keep)")
    family = bmc.get("vendor")
    if family not in TABLE[setting]:
        return na(cid, f"gpuhost knows no {what} attribute of {family or 'this'} firmware ({where})")
    attributes = bmc.get("attributes") or {}
    spec, name = _attr(setting, family, attributes)
    if spec is None:
        names = ", ".join(n for a in TABLE[setting][family] for n in a.names)
        seen = linux(h) if linux else None
        before = written_before(h, cid)
        if before and seen is not None and seen[0] != want:
            # gpuhost wrote it and rebooted for it, and now the firmware has no such attribute
            # while Linux shows the setting still not as wanted: a firmware update renamed it
            # (never said of a host gpuhost did not write: a setting Linux shows off may not
            # exist on that CPU at all)
            return Finding(cid, "manual", f"{what} {seen[0]} ({seen[1]}) [{where}]", f"{what} {want}",
                           f"Linux sees {what} {seen[0]} ({seen[1]}), {want} wanted, and the firmware ({where}) no "
                           f"longer has the attribute gpuhost wrote ({before}) before its reboot, nor another it knows "
                           f"({names}): renamed by a firmware update? Set it in the BIOS setup")
        return na(cid, f"the firmware ({where}) has no {what} attribute ({names})")
    current, pending = attributes.get(name), (bmc.get("pending") or {}).get(name)
    wanted = spec.values.get(want)
    observed = f"{name}={current}" + (f" (pending {pending})" if pending is not None else "") + f" [{where}]"
    if wanted is None:
        return na(cid, f"gpuhost knows no {family} spelling of {what} {want} ({name}, {spec.source})")
    entry = (bmc.get("registry") or {}).get(name) or {}
    offered = entry.get("display") if current in (entry.get("display") or []) else entry.get("values")
    if not offers(entry, wanted):
        return Finding(cid, "manual", observed, f"{name}={wanted}",
                       f"the firmware offers {', '.join(map(str, offered))} for {name}, not {wanted} ({where})")
    if current == wanted:
        if pending is not None and pending != wanted:
            return _write(h, cid, bmc, name, wanted, observed, where,
                          f"{name} is {wanted}, but {pending} is pending for the next reset")
        seen = linux(h) if linux else None
        if seen is not None and seen[0] != want:
            return Finding(cid, "manual", observed, f"{name}={wanted}",
                           f"the BMC says {name}={current}, but Linux sees {what} {seen[0]} ({seen[1]}): one side is "
                           f"not what the firmware runs ({where})")
        return Finding(cid, "pass", observed, f"{name}={wanted}", f"{what} is {want} ({name}={current}, {where})")
    if pending == wanted:
        return Finding(cid, "pending_reboot", observed, f"{name}={wanted}",
                       f"{name}={wanted} is pending: the next reset applies it ({where})", reboot_required=True)
    return _write(h, cid, bmc, name, wanted, observed, where, f"{name} is {current}, {wanted} wanted")


def written_before(h: Host, cid: str) -> str | None:
    """The BIOS value (ATTRIBUTE=VALUE) gpuhost's last reboot was for, by this control, where
    the running boot is the one that reboot brought up; None otherwise. From the record the
    reboot play writes (/var/lib/gpuhost/last-reboot.json, gates.reboot_record)."""
    last = h.boot.get("last_reboot") or {}
    sig = (last.get("findings") or {}).get(cid)
    if not sig or not rebooted_by_gpuhost(h, last):
        return None
    try:
        expected = json.loads(sig)[1]
    except (ValueError, TypeError, IndexError):
        return None
    return str(expected) if expected else None


def _write(h: Host, cid: str, bmc: dict, name: str, wanted: str, observed: str, where: str, what: str) -> Finding:
    """A wrong value (current, or pending for the next reset): drift that fix writes for the next
    reset, where the BMC and the inventory allow it; else manual, saying why."""
    why = None if h.s.get("bios_write", True) else "gpuhost_bios_write is off"
    before = written_before(h, cid)
    if before == f"{name}={wanted}":
        # written once, rebooted for, and not applied (a dependency such as a profile that sets
        # it, a value the firmware refuses): writing it again would only repeat that
        why = why or (f"gpuhost wrote {before} before its reboot at {(h.boot.get('last_reboot') or {}).get('time', '?')} "
                      "and the firmware did not apply it; it is not written again")
    why = why or unwritable(bmc, name)
    if why:
        return Finding(cid, "manual", observed, f"{name}={wanted}",
                       f"{what}: set it in the BIOS setup or through {where} ({why})")
    return Finding(cid, "drift", observed, f"{name}={wanted}",
                   f"{what} ({where}): fix writes {name}={wanted} for the next reset", reboot_required=True,
                   fix=fix_of(BiosSet({name: wanted}, str(bmc["address"]))))
