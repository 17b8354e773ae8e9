"""The firmware dimension's write path: BIOS values written through a BMC for the next reset
(module_utils/redfish_write.py), against the lab's Redfish service over real HTTPS. Each
test counts what the BMC saw: one PATCH at most, none when anything is wrong or already done."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.gpuhost.stack.plugins.module_utils.redfish import Bmc, RedfishError, read_bios
from ansible_collections.gpuhost.stack.plugins.module_utils.redfish_write import WritableBmc, plan_write, write_bios
from bmcserver import Redfish, make_ca
from gpuhost.lab import bmc as labbmc

PASSWORD = "wr1te-Pa55"
ATTRS = {"Processors_CPPC": "Disabled", "Processors_CorePerformanceBoost": "Disabled", "Memory_NUMANodesperSocket": "NPS4"}
REGISTRY = {"Processors_CPPC": ["Enabled", "Disabled"], "Processors_CorePerformanceBoost": ["Enabled", "Disabled"],
            "Memory_NUMANodesperSocket": ["NPS1", "NPS2", "NPS4"]}
STAGED = {"bios.cppc": {"Processors_CPPC": "Enabled"}, "bios.boost": {"Processors_CorePerformanceBoost": "Enabled"},
          "bios.nps": {"Memory_NUMANodesperSocket": "NPS1"}}


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def lab(ca, tmp_path):
    made = []

    def start(attributes=ATTRS, pending=None, registry=REGISTRY, vendor="Lenovo", apply_times=("OnReset",), **firmware):
        docs = labbmc.documents(vendor, attributes, pending, registry, apply_times=apply_times)
        server = Redfish(docs, ca[1], ca[2], password=PASSWORD)
        server.state, server.ignores = tmp_path / "state.json", tuple(firmware.get("ignores", ()))
        server.renames = dict(firmware.get("renames", {}))
        made.append(server)
        return server, WritableBmc(server.address, "root", PASSWORD, ca_file=str(ca[0]), timeout=5)
    yield start
    for server in made:
        server.close()


def writes(server) -> list:
    return [(m, p) for m, p in server.methods if m != "GET"]


def test_the_staged_values_are_written_in_one_patch_and_read_back_pending(lab):
    server, bmc = lab()
    read_etag = read_bios(WritableBmc(server.address, "root", PASSWORD, verify=False))["settings_etag"]
    out = write_bios(bmc, None, STAGED)
    assert out["written"] == {"Processors_CPPC": "Enabled", "Processors_CorePerformanceBoost": "Enabled",
                              "Memory_NUMANodesperSocket": "NPS1"}
    assert out["controls"] == {"bios.cppc": ["Processors_CPPC"], "bios.boost": ["Processors_CorePerformanceBoost"],
                               "bios.nps": ["Memory_NUMANodesperSocket"]}
    assert out["apply_time"] == "OnReset"
    assert writes(server) == [("PATCH", "/redfish/v1/Systems/1/Bios/Settings")]
    # If-Match: the settings object's ETag as the write's own read saw it (an XCC answers 428
    # without one, and 412 to one that no longer matches)
    assert server.preconditions == [read_etag] and read_etag.startswith('W/"')
    state = read_bios(Bmc(server.address, "root", PASSWORD, verify=False))
    assert state["pending"] == out["written"] and state["attributes"] == ATTRS, "pending for the next reset, not current"


def test_a_value_already_pending_or_set_is_never_written_again(lab):
    server, bmc = lab(pending={"Processors_CPPC": "Enabled"})
    out = write_bios(bmc, None, {"bios.cppc": {"Processors_CPPC": "Enabled"}, "bios.nps": {"Memory_NUMANodesperSocket": "NPS4"}})
    assert out["written"] == {} and writes(server) == []
    assert sorted(out["skipped"]) == [("Memory_NUMANodesperSocket", "already set"), ("Processors_CPPC", "already pending")]
    out = write_bios(bmc, None, STAGED)           # the rest, once
    out = write_bios(bmc, None, STAGED)           # and again: nothing
    assert out["written"] == {} and writes(server) == [("PATCH", "/redfish/v1/Systems/1/Bios/Settings")]


def test_check_mode_sends_gets_only_and_says_what_it_would_write(lab):
    server, bmc = lab()
    out = write_bios(bmc, None, STAGED, check=True)
    assert out["written"]["Processors_CPPC"] == "Enabled" and out["checked"]
    assert writes(server) == [] and {m for m, _ in server.methods} == {"GET"}


@pytest.mark.parametrize("staged, registry, says", [
    ({"bios.cppc": {"Processors_CPPCControl": "Enabled"}}, REGISTRY,
     "the firmware no longer has Processors_CPPCControl (bios.cppc; renamed by a firmware update?): nothing written"),
    ({"bios.nps": {"Memory_NUMANodesperSocket": "NPS0"}}, REGISTRY,
     "its registry offers NPS1, NPS2, NPS4 for Memory_NUMANodesperSocket, not NPS0: nothing written"),
    ({"bios.cppc": {"Processors_CPPC": "Enabled"}}, {"Processors_CorePerformanceBoost": ["Enabled", "Disabled"]},
     "its attribute registry does not list Processors_CPPC, and gpuhost writes only what it offers: nothing written"),
    ({"bios.cppc": {"Processors_CPPC": "Enabled"}}, None, "its attribute registry could not be read"),
])
def test_one_value_that_cannot_be_written_means_nothing_is_written(lab, staged, registry, says):
    server, bmc = lab(registry=registry)
    with pytest.raises(RedfishError) as err:
        write_bios(bmc, None, {**staged, "bios.boost": {"Processors_CorePerformanceBoost": "Enabled"}})
    assert says in str(err.value) and str(err.value).startswith(server.address), err.value
    assert writes(server) == [], "nothing half-applied"
    assert PASSWORD not in str(err.value)


def test_nothing_is_written_over_a_connection_whose_certificate_is_not_verified(lab):
    server, _ = lab()
    unverified = WritableBmc(server.address, "root", PASSWORD, verify=False, timeout=5)
    with pytest.raises(RedfishError, match="only over a verified connection; nothing written"):
        write_bios(unverified, None, STAGED)
    assert server.methods == [], "not even a GET"


def test_a_bios_without_a_settings_object_takes_no_write(lab):
    server, bmc = lab()
    del server.docs[server.bios_path]["@Redfish.Settings"]
    with pytest.raises(RedfishError, match="names no settings object"):
        write_bios(bmc, None, STAGED)
    assert writes(server) == []


def test_a_change_made_after_the_write_read_the_bios_fails_the_patch_and_nothing_is_overwritten(lab, monkeypatch):
    """The PATCH carries the ETag of the read the write was planned on: another client's value
    pending in between makes the BMC refuse it (412), and that value stays."""
    server, bmc = lab()
    import ansible_collections.gpuhost.stack.plugins.module_utils.redfish_write as rw
    real_plan = rw.plan_write

    def plan_then_someone_else_writes(state, staged):
        planned = real_plan(state, staged)
        other = WritableBmc(server.address, "root", PASSWORD, verify=False)
        other.patch("/redfish/v1/Systems/1/Bios/Settings", {"Attributes": {"Processors_CPPC": "Disabled",
                                                                           "Memory_NUMANodesperSocket": "NPS2"}}, etag="*")
        return planned
    monkeypatch.setattr(rw, "plan_write", plan_then_someone_else_writes)
    with pytest.raises(RedfishError, match="HTTP 412: Base.1.0.PreconditionFailed"):
        write_bios(bmc, None, STAGED)
    assert read_bios(bmc)["pending"] == {"Memory_NUMANodesperSocket": "NPS2"}


def test_an_ami_settings_object_that_answers_no_get_is_read_as_unknown_and_not_written(lab):
    server, bmc = lab(vendor="AMI")
    del server.docs[server.settings_path]
    state = read_bios(bmc)
    assert state["pending_unknown"] is True and state["pending"] == {}
    with pytest.raises(RedfishError, match="answers no GET, so what is pending cannot be read back: nothing written"):
        write_bios(bmc, None, STAGED)
    assert writes(server) == []


def test_a_redirect_is_an_error_never_followed_with_the_credentials(lab):
    server, bmc = lab()
    server.docs["/redfish/v1/"] = None      # answered below as a redirect
    import http.server
    handler = server.server.RequestHandlerClass
    original = handler._any

    def redirect(self):
        if self.path == "/redfish/v1/":
            self.send_response(302)
            self.send_header("Location", "http://127.0.1.254:1/steal")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        original(self)
    handler.do_GET = redirect
    with pytest.raises(RedfishError, match="GET /redfish/v1/ answered HTTP 302"):
        read_bios(bmc)
    assert http.server


def test_a_stale_etag_is_refused_by_the_bmc_and_named(lab):
    server, bmc = lab()
    with pytest.raises(RedfishError, match=r"PATCH /redfish/v1/Systems/1/Bios/Settings answered HTTP 412: "
                                           r"Base.1.0.PreconditionFailed"):
        bmc.patch("/redfish/v1/Systems/1/Bios/Settings", {"Attributes": {"Processors_CPPC": "Enabled"}}, etag='W/"old"')
    assert read_bios(bmc)["pending"] == {}


def test_the_lab_bmc_refuses_what_its_firmware_does_not_have(lab):
    server, bmc = lab()
    with pytest.raises(RedfishError, match="HTTP 428: Base.1.0.PreconditionRequired"):
        bmc.patch("/redfish/v1/Systems/1/Bios/Settings", {"Attributes": {"Processors_CPPC": "Enabled"}})
    with pytest.raises(RedfishError, match="HTTP 400: Base.1.0.PropertyUnknown"):
        bmc.patch("/redfish/v1/Systems/1/Bios/Settings", {"Attributes": {"Nope": "Enabled"}}, etag="*")
    with pytest.raises(RedfishError, match="HTTP 400: Base.1.0.PropertyValueNotInList"):
        bmc.patch("/redfish/v1/Systems/1/Bios/Settings", {"Attributes": {"Processors_CPPC": "Maybe"}}, etag="*")
    with pytest.raises(RedfishError, match="HTTP 405"):
        bmc.patch("/redfish/v1/Systems/1/Bios", {"Attributes": {"Processors_CPPC": "Enabled"}})


def test_a_reset_applies_what_is_pending_but_what_the_firmware_ignores_and_a_rename(lab):
    server, bmc = lab(ignores=("Processors_CorePerformanceBoost",), renames={"Processors_CPPC": "Processors_CPPCCtrl"})
    write_bios(bmc, None, STAGED)
    now = server.reset()
    assert now["Memory_NUMANodesperSocket"] == "NPS1"
    assert now["Processors_CorePerformanceBoost"] == "Disabled", "ignored: not applied"
    assert now["Processors_CPPCCtrl"] == "Disabled" and "Processors_CPPC" not in now, "renamed, its pending value gone"
    state = read_bios(bmc)
    assert state["pending"] == {"Processors_CorePerformanceBoost": "Enabled"}, "an ignored value stays pending"
    kept = json.loads(server.state.read_text())
    assert kept["attributes"] == now and kept["renames"] == {}, "kept across the lab's restarts; renamed once"


def test_plan_write_overrides_a_pending_value_that_would_undo_the_current_one():
    state = {"address": "bmc.example", "attributes": {"LogicalProc": "Enabled"}, "pending": {"LogicalProc": "Disabled"},
             "settings_object": "/redfish/v1/Systems/1/Bios/Settings",
             "registry": {"LogicalProc": {"values": ["Enabled", "Disabled"], "read_only": False}}}
    send, served, skipped = plan_write(state, {"bios.smt": {"LogicalProc": "Enabled"}})
    assert send == {"LogicalProc": "Enabled"} and served == {"bios.smt": ["LogicalProc"]} and skipped == []
    with pytest.raises(RedfishError, match="LogicalProc is asked for as Disabled and Enabled"):
        plan_write(state, {"bios.smt": {"LogicalProc": "Enabled"}, "bios.other": {"LogicalProc": "Disabled"}})


@pytest.mark.parametrize("faults, applied", [((), True), (("job_never_runs",), False)])
def test_a_dell_schedules_its_configuration_job_and_takes_no_second_set_while_it_waits(lab, faults, applied):
    server, bmc = lab(attributes={"LogicalProc": "Disabled", "ProcTurboMode": "Disabled"},
                      registry={"LogicalProc": ["Enabled", "Disabled"], "ProcTurboMode": ["Enabled", "Disabled"]},
                      vendor="Dell")
    server.faults = faults
    out = write_bios(bmc, None, {"bios.smt": {"LogicalProc": "Enabled"}})
    assert out["apply_time"] == "OnReset" and out["job"].startswith("/redfish/v1/Managers/iDRAC.Embedded.1/Jobs/JID_")
    assert writes(server) == [("PATCH", "/redfish/v1/Systems/1/Bios/Settings")], "iDRAC makes the job: no POST"
    # gpuhost sends no second set while the job waits (its own rule, from what is pending) ...
    with pytest.raises(RedfishError, match="LogicalProc already wait for the next reset; an iDRAC takes no new values "
                                           "while a configuration job waits.*nothing written"):
        write_bios(bmc, None, {"bios.boost": {"ProcTurboMode": "Enabled"}})
    assert len(writes(server)) == 1
    # ... which the iDRAC would refuse anyway (SYS011)
    with pytest.raises(RedfishError, match="HTTP 400: IDRAC.2.9.SYS011 Pending configuration values are already committed"):
        bmc.patch("/redfish/v1/Systems/1/Bios/Settings", {"Attributes": {"ProcTurboMode": "Enabled"}})
    now = server.reset()
    assert (now["LogicalProc"] == "Enabled") is applied
    assert read_bios(bmc)["pending"] == ({} if applied else {"LogicalProc": "Enabled"})
    assert server.docs[out["job"]]["JobState"] == ("Completed" if applied else "Scheduled")


# ---- real BMCs' Bios resources with their own attribute registries (tests/real_data/bmc,
# tests/real_data/SOURCES.md): what the firmware offers decides what a fix may write --------------
DATA = Path(__file__).resolve().parents[1] / "real_data" / "bmc"


def real(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("bios, registry, vendor, control, status, says, write", [
    # HPE DL385 Gen10 Plus v2 (A42 v2.60): NumaMemoryDomainsPerSocket is Auto; the registry
    # offers OneMemoryDomainPerSocket, writable
    ("hpe-dl385gen10plusv2-ilo5-bios.json", "hpe-dl385gen10plusv2-registry.json", "HPE", "bios.nps", "drift",
     "fix writes NumaMemoryDomainsPerSocket=OneMemoryDomainPerSocket", {"NumaMemoryDomainsPerSocket": "OneMemoryDomainPerSocket"}),
    # Lenovo SR670 V2 (XCC 2.83): the 64-bit resource allocation is Auto, Enabled offered
    ("lenovo-sr670v2-xcc-bios.json", "lenovo-sr670v2-registry.json", "Lenovo", "bios.above4g", "drift",
     "fix writes DevicesandIOPorts_PCI64BitResourceAllocation=Enabled",
     {"DevicesandIOPorts_PCI64BitResourceAllocation": "Enabled"}),
    ("lenovo-sr670v2-xcc-bios.json", "lenovo-sr670v2-registry.json", "Lenovo", "bios.profile", "drift",
     "fix writes OperatingModes_ChooseOperatingMode=MaximumPerformance",
     {"OperatingModes_ChooseOperatingMode": "MaximumPerformance"}),
    # Supermicro SYS-821GE-TNHR: SNC_F300 is Auto; its registry names the values 15, 0, 2, 4 and
    # shows them as Auto, Disable, ...: the Bios resource's word is what is offered and written
    ("smc-x13-sys821ge-tnhr-Bios.json", "supermicro-sys821ge-tnhr-registry.json", "Supermicro", "bios.nps", "drift",
     "fix writes SNC_F300=Disable", {"SNC_F300": "Disable"}),
    ("smc-x13-sys821ge-tnhr-Bios.json", "supermicro-sys821ge-tnhr-registry.json", "Supermicro", "bios.smt", "pass",
     "Hyper_Threading_ALL__F27F=Enable", None),
])
def test_a_real_registry_decides_what_the_fix_may_write_and_the_bmc_takes_it(ca, bios, registry, vendor, control, status,
                                                                            says, write):
    from bmcserver import service
    from ansible_collections.gpuhost.stack.plugins.module_utils import controls
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import WANTED_NAMES

    doc = real(bios)
    docs = service(doc, vendor, registry=real("registries/" + registry))
    server = Redfish(docs, ca[1], ca[2], password=PASSWORD)
    try:
        bmc = WritableBmc(server.address, "root", PASSWORD, ca_file=str(ca[0]), timeout=5)
        state = read_bios(bmc, None, WANTED_NAMES)
        assert state["registry_error"] is None and state["registry"], state["registry_error"]
        finding = controls.evaluate({"bmc": state}, {})[control]
        assert finding["status"] == status and says in finding["message"] + str(finding["observed"]), finding
        if write is None:
            return
        assert finding["fix"]["bios"]["attributes"] == write
        out = write_bios(bmc, None, {control: write})
        assert out["written"] == write and writes(server) == [("PATCH", "/redfish/v1/Systems/1/Bios/Settings")]
        assert read_bios(bmc, None, WANTED_NAMES)["pending"] == write
    finally:
        server.close()


def test_a_real_dell_registry_keeps_turbo_and_c_states_read_only_outside_the_custom_profile():
    """Dell's R750 registry (BIOS 1.8.2) marks ProcTurboMode and ProcCStates read-only (its
    Dependencies free them under SysProfile Custom): gpuhost does not write them."""
    registry = real("registries/dell-r750-registry.json")
    entries = {a["AttributeName"]: {"values": [v["ValueName"] for v in a["Value"]], "read_only": a["ReadOnly"]}
               for a in registry["RegistryEntries"]["Attributes"]}
    bmc = {"address": "bmc.example", "vendor": "dell", "attributes": {"ProcCStates": "Disabled", "LogicalProc": "Disabled"},
           "pending": {}, "registry": entries, "registry_error": None, "tls_verified": True,
           "settings_object": "/redfish/v1/Systems/System.Embedded.1/Bios/Settings"}
    from ansible_collections.gpuhost.stack.plugins.module_utils import controls
    found = controls.evaluate({"bmc": bmc}, {})
    assert found["bios.cstates"]["status"] == "manual" and "its registry marks ProcCStates read-only" in found["bios.cstates"]["message"]
    assert found["bios.smt"]["status"] == "drift" and found["bios.smt"]["fix"]["bios"]["attributes"] == {"LogicalProc": "Enabled"}


def test_an_idrac_without_apply_times_gets_its_configuration_job_by_a_post(lab):
    server, bmc = lab(attributes={"LogicalProc": "Disabled"}, registry={"LogicalProc": ["Enabled", "Disabled"]},
                      vendor="Dell", apply_times=())
    out = write_bios(bmc, None, {"bios.smt": {"LogicalProc": "Enabled"}})
    assert out["apply_time"] is None and out["job"].startswith("JID_")
    assert writes(server) == [("PATCH", "/redfish/v1/Systems/1/Bios/Settings"),
                              ("POST", "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs")]
    assert server.reset()["LogicalProc"] == "Enabled" and read_bios(bmc)["pending"] == {}
