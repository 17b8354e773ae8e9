# -*- coding: utf-8 -*-
"""Writing BIOS attributes through a host's BMC, from the controller: the fix's side of
redfish.py, which only reads (the audit never imports this file).

DMTF DSP0266 (Settings and apply time): values for the next reset are PATCHed to the Bios
resource's settings object (@Redfish.Settings.SettingsObject), with
@Redfish.SettingsApplyTime {"ApplyTime": "OnReset"} where @Redfish.Settings lists OnReset
among SupportedApplyTimes; a client sends If-Match with the resource's ETag where the service
gives one. Dell's iDRAC applies pending BIOS values only through a configuration job: where
it does not list OnReset, the job is asked for with a POST to the manager's Jobs
(TargetSettingsURI: the settings object), as dell/iDRAC-Redfish-Scripting does.

Safety: every wanted attribute is checked before anything is sent (the firmware still has it,
its registry offers the value, it is not read-only); a value already current or already
pending is never written again; everything goes in one PATCH (iDRAC refuses a second set of
pending values while a job waits for them); and after the PATCH the settings object is read
back, so a failure says exactly what is pending now.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.stack.plugins.module_utils.redfish import (
    Bmc, RedfishError, match_attribute, offers, read_bios, unwritable)

DELL_JOBS = "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs"


class WritableBmc(Bmc):
    """A Bmc that may also PATCH and POST (the fix's, never the audit's)."""

    def patch(self, path, body, etag=None):
        """(document answered, headers answered)"""
        return self._send("PATCH", path, body, {"If-Match": etag} if etag else {}, empty_ok=True)

    def post(self, path, body):
        return self._send("POST", path, body, {}, empty_ok=True)


def plan_write(state, staged):
    """What one write must send: ({attribute: value} to PATCH, {control: [attribute, ...]}
    it serves, [(attribute, why skipped)]), from the BIOS as read just now (*state*:
    read_bios) and the fixes' *staged* values ({control: {attribute: value}}). Raises
    RedfishError, naming the BMC, when any value cannot be written: then nothing is."""
    address = state["address"]
    attributes, pending = state.get("attributes") or {}, state.get("pending") or {}
    send, served, skipped, asked = {}, {}, [], {}
    for control in sorted(staged):
        for name, value in sorted((staged[control] or {}).items()):
            found = match_attribute(attributes, name)
            if not found:
                raise RedfishError("%s: the firmware no longer has %s (%s; renamed by a firmware update?): "
                                   "nothing written" % (address, name, control))
            if asked.setdefault(found, value) != value:
                raise RedfishError("%s: %s is asked for as %s and %s: nothing written" % (address, found, asked[found], value))
            now, next_ = attributes.get(found), pending.get(found)
            if next_ == value or (now == value and next_ is None):
                skipped.append((found, "already %s" % ("pending" if next_ == value else "set")))
                continue
            why = unwritable(state, found)
            if why:
                raise RedfishError("%s: %s: nothing written" % (address, why))
            entry = state["registry"][found]
            if not offers(entry, value):
                raise RedfishError("%s: its registry offers %s for %s, not %s: nothing written" % (
                    address, ", ".join(map(str, entry["values"])), found, value))
            send[found] = value
            served.setdefault(control, []).append(found)
    return send, served, skipped


def write_bios(bmc, system_id, staged, check=False):
    """Write the *staged* BIOS values ({control: {attribute: value}}) to the settings object
    in one PATCH, to apply at the next reset; in *check* mode only say what would be sent.
    Returns {"written": {attr: value}, "controls": {control: [attr]}, "skipped": [...],
    "apply_time": ..., "job": ..., "settings_object": ...}."""
    if not bmc.verify:
        raise RedfishError("%s: its certificate is not verified (gpuhost_bmc_validate_certs: false): gpuhost writes "
                           "BIOS settings only over a verified connection; nothing written" % bmc.address)
    state = read_bios(bmc, system_id, tuple(n for v in staged.values() for n in v))
    send, served, skipped = plan_write(state, staged)
    out = {"address": bmc.address, "written": send, "controls": served, "skipped": skipped,
           "settings_object": state["settings_object"], "apply_time": None, "job": None, "checked": bool(check)}
    if not send or check:
        return out
    path = state["settings_object"]     # there is one: plan_write sends nothing otherwise (unwritable)
    # the ETag of the settings object as read_bios read it, the state this write was planned on:
    # a change made since then fails the PATCH (412) instead of being overwritten
    etag = state.get("settings_etag")
    if not etag and state.get("vendor") in ("lenovo", "ami"):
        # these answer 428 to a PATCH without a precondition (Lenovo's own set_bios_attribute.py
        # and AMI's RTP 1.5 send If-Match: *) and gave no ETag to send
        etag = "*"
    body = {"Attributes": send}
    # DSP0266: OnReset asked for where the service lists it; without SupportedApplyTimes a
    # settings object applies at the next reset anyway
    if "OnReset" in (state.get("apply_times") or []):
        body["@Redfish.SettingsApplyTime"] = {"ApplyTime": "OnReset"}
        out["apply_time"] = "OnReset"
    headers = bmc.patch(path, body, etag=etag)[1]
    if state.get("vendor") == "dell":
        if out["apply_time"]:
            # iDRAC makes the configuration job itself and names it (Location), as Dell's
            # GetSetBiosAttributesREDFISH.py reads it; a POST as well would be refused
            out["job"] = headers.get("Location")
        else:
            # an iDRAC without apply times: the pending values wait for a configuration job
            try:
                answer, headers = bmc.post(DELL_JOBS, {"TargetSettingsURI": path})
            except RedfishError as exc:
                raise RedfishError("%s; %s are pending, but no configuration job applies them at the next reset" % (
                    exc, _names(send)))
            out["job"] = answer.get("Id") or headers.get("Location") or "created"
    # read back: exactly what is pending now, whatever the PATCH's answer said
    try:
        staged_now = bmc.get(path).get("Attributes") or {}
    except RedfishError as exc:
        raise RedfishError("%s: the PATCH to %s was accepted (%s), but what is pending now could not be read back: %s" % (
            bmc.address, path, _names(send), str(exc)[len(bmc.address) + 2:]))
    missing = sorted(k for k, v in send.items() if staged_now.get(k) != v)
    if missing:
        took = sorted(set(send) - set(missing))
        raise RedfishError("%s: after the PATCH to %s, %s %s not pending%s" % (
            bmc.address, path, _names(missing), "is" if len(missing) == 1 else "are",
            ("; pending now: " + _names(took)) if took else "; nothing was written"))
    return out


def _names(names):
    return ", ".join(sorted(names))
