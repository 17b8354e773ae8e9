"""The firmware dimension, first step: BIOS settings read from a host's BMC over Redfish (GETs
only, from the controller) and judged against what gpuhost asks for, on real BMCs' Bios
documents (tests/real_data/bmc, each from its public source) served over real HTTPS."""
from __future__ import annotations

import importlib
import json
import socket
from pathlib import Path

import pytest

from ansible_collections.gpuhost.stack.plugins.module_utils import controls
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import WANTED_NAMES
from ansible_collections.gpuhost.stack.plugins.module_utils.redfish import Bmc, RedfishError, read_bios
from bmcserver import ADDRESS, Redfish, make_ca, service

DATA = Path(__file__).resolve().parents[1] / "real_data" / "bmc"
PASSWORD = "s3cret-Pa55"


def real(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def bmc_of(ca):
    made = []

    def start(docs: dict) -> Redfish:
        server = Redfish(docs, ca[1], ca[2], password=PASSWORD)
        made.append(server)
        return server
    yield start
    for server in made:
        server.close()


# the bios.* controls, each judged as the audit judges it
BIOS = [importlib.import_module(f"ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios_{s}")
        for s in ("nps", "smt", "cppc", "cstates", "boost", "iommu", "above4g", "rebar", "acs", "determinism", "profile")]


def judge(bmc: dict, facts: dict | None = None, **settings) -> dict[str, dict]:
    host = controls.Host({**(facts or {}), "bmc": bmc}, settings)
    return {m.CONTROL.id: m.judge(host).as_dict() for m in BIOS}


# ---- real BMCs' documents, judged -------------------------------------------------------------
# expected values read off each document (tests/real_data/SOURCES.md)
REAL = {
    "dell-bios.json": ("dell", {"bios.smt": ("pass", "LogicalProc=Enabled"), "bios.boost": ("pass", "ProcTurboMode=Enabled"),
                                "bios.cstates": ("manual", "ProcCStates is Disabled, Enabled wanted"),
                                "bios.iommu": ("pass", "ProcVirtualization=Enabled"),
                                "bios.above4g": ("pass", "MmioAbove4Gb=Enabled"),
                                "bios.profile": ("pass", "SysProfile=PerfOptimized"),
                                "bios.nps": ("pass", "SubNumaCluster=Disabled"),
                                "bios.cppc": ("na", "gpuhost knows no CPPC attribute of dell firmware"),
                                "bios.determinism": ("na", "has no determinism slider attribute")}),
    "hpe-dl385gen10plusv2-ilo5-bios.json": ("hpe", {
        "bios.nps": ("manual", "NumaMemoryDomainsPerSocket is Auto, OneMemoryDomainPerSocket wanted"),
        "bios.smt": ("pass", "ProcSMT=Enabled"), "bios.boost": ("pass", "ProcAMDBoost=Enabled"),
        "bios.cstates": ("pass", "MinProcIdlePower=C6"), "bios.iommu": ("pass", "ProcAmdIoVt=Enabled"),
        "bios.determinism": ("pass", "PerformanceDeterminism=PowerDeterministic"),
        "bios.acs": ("na", "left as it is (gpuhost_bios_acs: keep)")}),
    "lenovo-sr670v2-xcc-bios.json": ("lenovo", {
        "bios.smt": ("pass", "Processors_HyperThreading=Enabled"), "bios.boost": ("pass", "Processors_TurboMode=Enabled"),
        "bios.above4g": ("manual", "DevicesandIOPorts_PCI64BitResourceAllocation is Auto, Enabled wanted"),
        "bios.profile": ("manual", "OperatingModes_ChooseOperatingMode is Efficiency_FavorPerformance, MaximumPerformance wanted"),
        "bios.nps": ("pass", "Processors_SNC=Disabled")}),
    "smc-x13-sys821ge-tnhr-Bios.json": ("supermicro", {
        "bios.smt": ("pass", "Hyper_Threading_ALL__F27F=Enable"), "bios.boost": ("pass", "TurboMode_3D06=Enable"),
        "bios.iommu": ("pass", "IntelVTforDirectedI_O_VT_d__1E32=Enable"), "bios.above4g": ("pass", "Above4GDecoding_0041=Enabled"),
        "bios.nps": ("manual", "SNC_F300 is Auto, Disable wanted"),
        "bios.rebar": ("na", "left as it is (gpuhost_bios_rebar: keep)")}),
    "dmtf-bios.json": ("dmtf", {"bios.smt": ("pass", "ProcHyperthreading=Enabled"),
                                "bios.boost": ("pass", "ProcTurboMode=Enabled"),
                                "bios.profile": ("pass", "PowerProfile=MaxPerf")}),
    "ami-dgxh100-viking-Bios.json": ("ami", {"bios.nps": ("na", "has no NUMA nodes per socket attribute"),
                                             "bios.smt": ("na", "gpuhost knows no SMT attribute of ami firmware")}),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_a_real_bmcs_bios_is_judged_setting_by_setting(name):
    vendor, want = REAL[name]
    doc = real(name)
    bmc = {"address": "bmc.example", "vendor": vendor, "attributes": doc["Attributes"], "pending": {}, "registry": None,
           "tls_verified": True}
    got = judge(bmc)
    for cid, (status, says) in want.items():
        f = got[cid]
        assert f["status"] == status and says in f["message"] + str(f["observed"]), (cid, f)
        assert "BMC bmc.example" in f["message"] + str(f["observed"]) or f["status"] == "na", f


def test_the_same_bmc_read_over_https_gives_the_same_findings_with_only_gets(bmc_of, ca):
    """Dell's R650 served as its iDRAC would, its settings object with nothing pending: the
    audit's read gives the findings of the document itself, and the BMC saw GETs alone."""
    doc = real("dell-bios.json")
    settings = real("dell-bios-settings.json")["Attributes"]
    server = bmc_of(service(doc, "Dell", settings=settings))
    got = read_bios(Bmc(server.address, "root", PASSWORD, ca_file=str(ca[0])), None, WANTED_NAMES)
    assert got["vendor"] == "dell" and got["pending"] == {} and got["attributes"] == doc["Attributes"]
    assert {m for m, _ in server.methods} == {"GET"}, server.methods
    local = judge({"address": server.address, "vendor": "dell", "attributes": doc["Attributes"], "pending": {},
                   "registry": None, "tls_verified": True})
    assert {c: f["status"] for c, f in judge(got).items()} == {c: f["status"] for c, f in local.items()}


def test_a_pending_value_and_the_registrys_offer_come_from_the_bmc(bmc_of, ca):
    doc = real("hpe-dl385gen10plusv2-ilo5-bios.json")
    registry = {"RegistryEntries": {"Attributes": [
        {"AttributeName": "NumaMemoryDomainsPerSocket", "Type": "Enumeration", "ReadOnly": False,
         "Value": [{"ValueName": v} for v in ("OneMemoryDomainPerSocket", "TwoMemoryDomainsPerSocket",
                                              "FourMemoryDomainsPerSocket", "Auto")]},
        {"AttributeName": "ProcSMT", "Type": "Enumeration", "ReadOnly": False, "Value": [{"ValueName": "Enabled"}]}]}}
    server = bmc_of(service(doc, "HPE", settings={"NumaMemoryDomainsPerSocket": "OneMemoryDomainPerSocket",
                                                   "ProcSMT": "Enabled"}, registry=registry))
    got = read_bios(Bmc(server.address, "root", PASSWORD, ca_file=str(ca[0])), None, WANTED_NAMES)
    assert got["pending"] == {"NumaMemoryDomainsPerSocket": "OneMemoryDomainPerSocket"}, "ProcSMT is already Enabled"
    assert got["registry"]["ProcSMT"] == {"values": ["Enabled"], "display": [], "read_only": False, "type": "Enumeration"}
    f = judge(got)
    assert f["bios.nps"]["status"] == "pending_reboot" and f["bios.nps"]["reboot_required"]
    assert f["bios.smt"]["status"] == "pass"
    assert {m for m, _ in server.methods} == {"GET"}


def test_a_registry_listed_under_another_version_is_found_by_its_name(bmc_of, ca):
    """An R650's Bios names BiosAttributeRegistry.v1_0_3 while /redfish/v1/Registries lists
    v1_0_0 (the iDRAC's own listing, tests/real_data/SOURCES.md)."""
    doc = real("dell-bios.json")
    docs = service(doc, "Dell", registry={"RegistryEntries": {"Attributes": [
        {"AttributeName": "LogicalProc", "ReadOnly": False, "Value": [{"ValueName": "Enabled"}, {"ValueName": "Disabled"}]}]}})
    old = "/redfish/v1/Registries/BiosAttributeRegistry.v1_0_3"
    new = "/redfish/v1/Registries/BiosAttributeRegistry.v1_0_0"
    docs[new] = {**docs.pop(old), "@odata.id": new}
    docs["/redfish/v1/Registries"] = {"Members": [{"@odata.id": new}]}
    server = bmc_of(docs)
    got = read_bios(Bmc(server.address, "root", PASSWORD, ca_file=str(ca[0])), None, WANTED_NAMES)
    assert got["registry"] == {"LogicalProc": {"values": ["Enabled", "Disabled"], "display": [], "read_only": False, "type": None}}


# ---- faults: each one line naming the BMC, never the password, never a write ------------------------
def _fails(bmc: Bmc, says: str) -> str:
    with pytest.raises(RedfishError) as e:
        read_bios(bmc, None, WANTED_NAMES)
    msg = str(e.value)
    assert says in msg and bmc.address in msg and "\n" not in msg, msg
    assert PASSWORD not in msg and PASSWORD not in repr(e.value.args)
    return msg


def test_a_wrong_password_is_the_bmcs_refusal(bmc_of, ca):
    server = bmc_of(service(real("dmtf-bios.json"), "DMTF"))
    _fails(Bmc(server.address, "root", "wrong", ca_file=str(ca[0])), "refused the credentials (HTTP 401)")
    assert {m for m, _ in server.methods} == {"GET"}


def test_a_certificate_from_another_ca_or_for_another_address_is_not_trusted(bmc_of, ca, tmp_path):
    server = bmc_of(service(real("dmtf-bios.json"), "DMTF"))
    other = make_ca(tmp_path, ip="127.0.1.253")
    _fails(Bmc(server.address, "root", PASSWORD, ca_file=str(other[0])), "TLS certificate is not trusted")
    _fails(Bmc(server.address, "root", PASSWORD), "TLS certificate is not trusted")
    # the operator's opt-out: read, and every finding says the certificate was not verified
    got = read_bios(Bmc(server.address, "root", PASSWORD, verify=False), None, WANTED_NAMES)
    assert got["tls_verified"] is False
    assert "its certificate not verified" in judge(got)["bios.smt"]["observed"]


def test_a_bmc_that_answers_too_slowly_fails_within_the_timeout(bmc_of, ca):
    import time
    server = bmc_of(service(real("dmtf-bios.json"), "DMTF"))
    server.delay = 1.5
    start = time.monotonic()
    _fails(Bmc(server.address, "root", PASSWORD, ca_file=str(ca[0]), timeout=0.5), "no answer within 0.5 s")
    assert time.monotonic() - start < 1.4


@pytest.mark.parametrize("body, says", [("<html>iDRAC is restarting</html>", "not JSON"),
                                        ('"' + "x" * (2 << 20) + '"', "more than 1048576 bytes"),
                                        ("[1, 2]", "not a Redfish resource")])
def test_an_answer_that_is_not_a_redfish_resource_is_an_error(bmc_of, ca, body, says):
    docs = service(real("dmtf-bios.json"), "DMTF")
    docs["/redfish/v1/Systems/1/Bios"] = body
    server = bmc_of(docs)
    _fails(Bmc(server.address, "root", PASSWORD, ca_file=str(ca[0])), says)


def test_a_settings_object_whose_attributes_are_no_mapping_is_an_error(bmc_of, ca):
    docs = service(real("dmtf-bios.json"), "DMTF")
    docs["/redfish/v1/Systems/1/Bios/Settings"] = {"Attributes": ["ProcTurboMode", "Disabled"]}
    server = bmc_of(docs)
    _fails(Bmc(server.address, "root", PASSWORD, ca_file=str(ca[0])), "holds Attributes that are not a mapping")


def test_nothing_listening_is_unreachable_and_several_systems_need_a_name(bmc_of, ca):
    s = socket.socket()
    s.bind((ADDRESS, 0))
    port = s.getsockname()[1]
    s.close()
    _fails(Bmc(f"{ADDRESS}:{port}", "root", PASSWORD, ca_file=str(ca[0]), timeout=2), "unreachable")
    server = bmc_of(service(real("dmtf-bios.json"), "DMTF", systems=("1", "2")))
    _fails(Bmc(server.address, "root", PASSWORD, ca_file=str(ca[0])), "2 systems; name one with gpuhost_bmc_system")
    got = read_bios(Bmc(server.address, "root", PASSWORD, ca_file=str(ca[0])), "1", WANTED_NAMES)
    assert got["system"] == "/redfish/v1/Systems/1"


@pytest.mark.parametrize("address", ["bmc; rm -rf /", "http://bmc", "bmc/redfish", ""])
def test_a_bmc_address_that_is_not_one_is_refused_before_any_request(address):
    with pytest.raises(RedfishError, match="not a BMC address"):
        Bmc(address, "root", PASSWORD)


# the record of gpuhost's reboot for bios.smt's pending LogicalProc=Enabled, and the boot it brought up
REBOOTED_FOR_SMT = {"boot": {"boot_id": "boot-2", "boot_time": 1_800_000_030, "last_reboot": {
    "boot_id": "boot-1", "epoch": 1_800_000_000, "time": "2026-12-07T08:00:00Z",
    "findings": {"bios.smt": json.dumps(["bios.smt", "LogicalProc=Enabled", "LogicalProc=Enabled is pending"])}}}}
WRITABLE = {"settings_object": "/redfish/v1/Systems/1/Bios/Settings",
            "registry": {"LogicalProc": {"values": ["Enabled", "Disabled"], "read_only": False}}}


def _bmc(attrs: dict, vendor: str = "dell", **more) -> dict:
    return {"address": "bmc.example", "vendor": vendor, "attributes": attrs, "pending": {}, "registry": None,
            "tls_verified": True, **more}


@pytest.mark.parametrize("bmc, facts, settings, status, says", [
    (None, {}, {}, "na", "no BMC for this host in the inventory (gpuhost_bmc_address)"),
    ({"address": "bmc.example", "error": "unreachable (timed out)"}, {}, {}, "error", "BMC bmc.example: unreachable"),
    (_bmc({"LogicalProc": "Disabled"}), {}, {"bios_smt": "keep"}, "na", "left as it is (gpuhost_bios_smt: keep)"),
    (_bmc({"LogicalProc": "Enabled"}, vendor=None), {}, {}, "na", "gpuhost knows no SMT attribute of this firmware"),
    (_bmc({"Other": "Enabled"}), {}, {}, "na", "has no SMT attribute (LogicalProc)"),
    (_bmc({"LogicalProc": "Disabled"}, registry={"LogicalProc": {"values": ["Disabled"]}}), {}, {}, "manual",
     "the firmware offers Disabled for LogicalProc, not Enabled"),
    (_bmc({"LogicalProc": "Disabled"}, pending={"LogicalProc": "Enabled"}), {}, {}, "pending_reboot",
     "LogicalProc=Enabled is pending: the next reset applies it"),
    (_bmc({"ProcSMT": "Enabled"}, vendor="hpe", pending={"ProcSMT": "Disabled"},
          **{**WRITABLE, "registry": {"ProcSMT": {"values": ["Enabled", "Disabled"], "read_only": False}}}), {}, {}, "drift",
     "ProcSMT is Enabled, but Disabled is pending for the next reset"),
    (_bmc({"LogicalProc": "Disabled"}, **WRITABLE), {}, {}, "drift", "fix writes LogicalProc=Enabled for the next reset"),
    (_bmc({"LogicalProc": "Disabled"}, **WRITABLE), {}, {"bios_write": False}, "manual", "gpuhost_bios_write is off"),
    (_bmc({"LogicalProc": "Disabled"}, **{**WRITABLE, "tls_verified": False}), {}, {}, "manual",
     "gpuhost writes only over a verified connection"),
    (_bmc({"LogicalProc": "Disabled"}, **{**WRITABLE, "settings_object": None}), {}, {}, "manual",
     "names no settings object"),
    (_bmc({"LogicalProc": "Disabled"}, **{**WRITABLE, "registry": None}), {}, {}, "manual",
     "no attribute registry was read from it"),
    (_bmc({"LogicalProc": "Disabled"}, **{**WRITABLE, "registry": None, "registry_error": "HTTP 404"}), {}, {}, "manual",
     "its attribute registry could not be read (HTTP 404)"),
    (_bmc({"LogicalProc": "Disabled"}, **{**WRITABLE, "registry": {"Other": {"values": []}}}), {}, {}, "manual",
     "its attribute registry does not list LogicalProc"),
    (_bmc({"LogicalProc": "Disabled"}, **{**WRITABLE, "registry": {"LogicalProc": {"values": ["Enabled", "Disabled"],
                                                                                    "read_only": True}}}), {}, {},
     "manual", "its registry marks LogicalProc read-only"),
    # no attribute and Linux shows SMT off: n/a where gpuhost never wrote it (a CPU without SMT
    # reads the same), manual where it wrote it and rebooted for it (renamed by a firmware update)
    (_bmc({"Other": "Enabled"}), {"cpu": {"smt_control": "notsupported"}}, {}, "na", "has no SMT attribute"),
    (_bmc({"Other": "Enabled"}), {"cpu": {"smt_control": "notsupported"}, **REBOOTED_FOR_SMT}, {}, "manual",
     "no longer has the attribute gpuhost wrote (LogicalProc=Enabled) before its reboot"),
    # written, rebooted for, not applied: never written again
    (_bmc({"LogicalProc": "Disabled"}, **WRITABLE), REBOOTED_FOR_SMT, {}, "manual",
     "gpuhost wrote LogicalProc=Enabled before its reboot at 2026-12-07T08:00:00Z and the firmware did not apply it"),
    # an iDRAC with values waiting for their job takes no new set (SYS011)
    (_bmc({"LogicalProc": "Disabled", "ProcTurboMode": "Enabled"}, pending={"ProcTurboMode": "Disabled"}, **WRITABLE), {}, {},
     "manual", "an iDRAC takes no new values while a configuration job waits"),
    # an AMI settings object that answers no GET: what is pending cannot be read back
    (_bmc({"LogicalProc": "Disabled"}, **{**WRITABLE, "pending_unknown": True}), {}, {}, "manual",
     "answers no GET, so what is pending cannot be read back"),
    (_bmc({"LogicalProc": "Enabled"}), {"cpu": {"smt_control": "notsupported"}}, {}, "manual",
     "the BMC says LogicalProc=Enabled, but Linux sees SMT off (smt/control notsupported)"),
    (_bmc({"LogicalProc": "Enabled"}), {"cpu": {"smt_control": "off"}}, {}, "pass", "SMT is on"),
    (_bmc({"LogicalProc": "Disabled"}), {}, {"bios_smt": "off"}, "pass", "SMT is off"),
])
def test_every_branch_of_a_setting_s_judgement(bmc, facts, settings, status, says):
    f = judge(bmc, facts, **settings)["bios.smt"]
    assert f["status"] == status and says in f["message"], f


@pytest.mark.parametrize("numa, seen", [({"cpu_nodes": 2, "packages": 2}, None), ({"cpu_nodes": 8, "packages": 2}, "4"),
                                        ({"cpu_nodes": 1, "packages": 2}, "0"), ({"cpu_nodes": 3, "packages": 2}, None)])
def test_the_linux_side_of_numa_nodes_per_socket(numa, seen):
    f = judge(_bmc({"NumaNodesPerSocket": "1"}), {"numa": numa})["bios.nps"]
    assert (f["status"], seen) in (("pass", None), ("manual", seen)), f
    if seen:
        assert f"Linux sees NUMA nodes per socket {seen}" in f["message"]
