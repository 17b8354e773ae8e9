# -*- coding: utf-8 -*-
"""Reading a host's BIOS settings from its BMC over Redfish, from the controller: Bmc sends GET
requests only (the audit's); the write path, redfish_write.py, adds PATCH and POST beside it. DMTF DSP0266 (the protocol) and DSP0268 (the schemas):
the service root names the Systems collection; a ComputerSystem links its Bios resource,
whose Attributes are the current values, whose @Redfish.Settings names the settings object
that holds the values pending for the next reset, and whose AttributeRegistry names the
registry (listed under /redfish/v1/Registries, its file at Location[].Uri) that says which
attributes and values the firmware offers.

Every failure is a RedfishError with one line that names the BMC and what went wrong; no
message, result or exception here ever holds the password.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json
import re

# ssl, socket and urllib are imported where a BMC is read: every audit worker imports this
# module (the judgement's match_attribute), most for hosts without a BMC, and those imports
# cost each worker some 10 ms of CPU

# a Bios resource is some 10-30 kB; a registry some 0.5-2 MB (a Lenovo SR670 V2's 548 kB, an
# HPE DL385 Gen10 Plus v2's 1 MB): anything far past that is not what was asked for
MAX_DOCUMENT = 1 << 20
MAX_REGISTRY = 16 << 20


class RedfishError(Exception):
    """A BMC that could not be read: the message names it and the cause, in one line."""


class Bmc:
    """One BMC, read over HTTPS with HTTP Basic authentication (DSP0266 13.3.2)."""

    def __init__(self, address, username, password, ca_file=None, verify=True, timeout=10.0):
        if not re.match(r"^[A-Za-z0-9.:\[\]-]+$", address or ""):
            raise RedfishError("not a BMC address: %r" % (address,))
        self.address, self.timeout, self.verify = address, float(timeout), bool(verify)
        self.gets = 0
        self.last_etag = None
        token = base64.b64encode(("%s:%s" % (username or "", password or "")).encode("utf-8")).decode("ascii")
        self._auth = "Basic " + token
        import ssl
        from urllib.request import HTTPRedirectHandler, HTTPSHandler, build_opener

        class NoRedirect(HTTPRedirectHandler):
            """A BMC's answer is its own: a redirect (to http://, to another host) would carry
            the Authorization header there, so it is an error, never followed."""

            def redirect_request(self, req, fp, code, msg, headers, newurl):
                return None
        if verify:
            context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
        else:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self._opener = build_opener(HTTPSHandler(context=context), NoRedirect())

    def get(self, path, limit=MAX_DOCUMENT):
        """The JSON document at *path* (a Redfish URI), never more than *limit* bytes; its ETag
        (header, else @odata.etag) is kept in last_etag."""
        doc, headers = self._send("GET", path, None, {}, limit)
        self.last_etag = headers.get("ETag") or (doc.get("@odata.etag") if isinstance(doc.get("@odata.etag"), str) else None)
        return doc

    def _send(self, method, path, body, headers, limit=MAX_DOCUMENT, empty_ok=False):
        """One request: (the JSON document answered, its headers). Every failure is a
        RedfishError naming the BMC; an HTTP error's Redfish message (DSP0266 9.6: error ->
        @Message.ExtendedInfo) is named with it."""
        import socket
        import ssl
        from urllib.error import HTTPError, URLError
        from urllib.request import Request
        if not path.startswith("/"):
            raise RedfishError("%s: a link that is not a path on the BMC: %r" % (self.address, path))
        data = json.dumps(body).encode("utf-8") if body is not None else None
        request = Request("https://%s%s" % (self.address, path), method=method, data=data,
                          headers=dict({"Authorization": self._auth, "Accept": "application/json",
                                        "OData-Version": "4.0"},
                                       **({"Content-Type": "application/json"} if data is not None else {}),
                                       **headers))
        if method == "GET":
            self.gets += 1
        try:
            response = self._opener.open(request, timeout=self.timeout)
        except HTTPError as exc:
            code = exc.code
            try:
                detail = _error_message(exc.read(MAX_DOCUMENT))
            except Exception:       # the error's body is a courtesy: its status is the answer
                detail = ""
            exc.close()
            if code == 401:
                raise RedfishError("%s: the BMC refused the credentials (HTTP 401)" % self.address)
            raise RedfishError("%s: %s %s answered HTTP %d%s" % (self.address, method, path, code,
                                                                 (": " + detail) if detail else ""))
        except (socket.timeout, TimeoutError):
            raise RedfishError("%s: no answer within %g s (%s %s)" % (self.address, self.timeout, method, path))
        except URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise RedfishError("%s: its TLS certificate is not trusted (%s)" % (
                    self.address, getattr(reason, "verify_message", None) or reason))
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise RedfishError("%s: no answer within %g s (%s %s)" % (self.address, self.timeout, method, path))
            raise RedfishError("%s: unreachable (%s)" % (self.address, reason))
        except (OSError, ValueError) as exc:
            raise RedfishError("%s: unreachable (%s)" % (self.address, exc))
        with response:
            answered = {k: response.headers.get(k) for k in ("ETag", "Location") if response.headers.get(k)}
            try:
                raw = response.read(limit + 1)
            except (socket.timeout, TimeoutError):
                raise RedfishError("%s: no answer within %g s (%s %s)" % (self.address, self.timeout, method, path))
        if len(raw) > limit:
            raise RedfishError("%s: %s %s answered more than %d bytes" % (self.address, method, path, limit))
        if empty_ok and not raw.strip():
            return {}, answered
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise RedfishError("%s: %s %s answered something that is not JSON" % (self.address, method, path))
        if not isinstance(doc, dict):
            raise RedfishError("%s: %s %s answered JSON that is not a Redfish resource" % (self.address, method, path))
        return doc, answered


def _error_message(raw):
    """The first message of a Redfish error body (DSP0266 9.6), on one line; "" without one."""
    try:
        error = json.loads(raw.decode("utf-8")).get("error") or {}
    except (ValueError, UnicodeDecodeError, AttributeError):
        return ""
    infos = error.get("@Message.ExtendedInfo") if isinstance(error, dict) else None
    first = infos[0] if isinstance(infos, list) and infos and isinstance(infos[0], dict) else {}
    text = first.get("Message") or (error.get("message") if isinstance(error, dict) else "") or ""
    ident = first.get("MessageId") or (error.get("code") if isinstance(error, dict) else "") or ""
    line = " ".join(("%s %s" % (ident, text)).split())
    return line[:300]


def connect(values, cls=None):
    """The host's BMC from its gpuhost_bmc_* variables (already rendered): a Bmc, or *cls*."""
    from ansible.module_utils.parsing.convert_bool import boolean
    return (cls or Bmc)(str(values["gpuhost_bmc_address"]), str(values.get("gpuhost_bmc_username") or ""),
                        str(values.get("gpuhost_bmc_password") or ""),
                        ca_file=str(values["gpuhost_bmc_ca"]) if values.get("gpuhost_bmc_ca") else None,
                        verify=boolean(values.get("gpuhost_bmc_validate_certs", True), strict=False),
                        timeout=float(values.get("gpuhost_bmc_timeout") or 10))


def _link(doc, *keys):
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc.get("@odata.id") if isinstance(doc, dict) else None


def vendor_of(root, system):
    """The BMC's family: ServiceRoot.Vendor (Redfish 1.5), else the Oem keys of the service
    root and the system, else the system's Manufacturer."""
    names = [str(root.get("Vendor") or "")]
    names += list((root.get("Oem") or {}).keys()) + list((system.get("Oem") or {}).keys())
    names.append(str(system.get("Manufacturer") or ""))
    text = " ".join(names).lower()
    for family, words in (("dell", ("dell",)), ("hpe", ("hpe", "hewlett")), ("lenovo", ("lenovo",)),
                          ("supermicro", ("supermicro",)), ("ami", ("ami", "asrock", "gigabyte")),
                          # DMTF's public mockups (DSP2043), whose systems Contoso makes
                          ("dmtf", ("dmtf", "contoso"))):
        if any(re.search(r"\b%s" % w, text) for w in words):
            return family
    return None


def read_bios(bmc, system_id=None, wanted=()):
    """The host's BIOS as its BMC tells it: the family, the system, the current and pending
    attributes, the apply times the settings object supports, and, for the attributes in
    *wanted*, what the registry offers (None with the reason where no registry could be read).
    Only GET requests."""
    root = bmc.get("/redfish/v1/")
    systems_path = _link(root, "Systems")
    if not systems_path:
        raise RedfishError("%s: its service root links no Systems collection" % bmc.address)
    members = [m.get("@odata.id") for m in bmc.get(systems_path).get("Members") or [] if isinstance(m, dict)]
    if system_id:
        chosen = [m for m in members if m and m.rstrip("/").rsplit("/", 1)[-1] == system_id]
        if not chosen:
            raise RedfishError("%s: no system %s (it has %s)" % (bmc.address, system_id, ", ".join(
                m.rstrip("/").rsplit("/", 1)[-1] for m in members if m) or "none"))
    else:
        chosen = [m for m in members if m]
        if len(chosen) != 1:
            raise RedfishError("%s: %d systems; name one with gpuhost_bmc_system" % (bmc.address, len(chosen)))
    system = bmc.get(chosen[0])
    bios_path = _link(system, "Bios")
    if not bios_path:
        raise RedfishError("%s: system %s links no Bios resource" % (bmc.address, chosen[0]))
    bios = bmc.get(bios_path)
    attributes = bios.get("Attributes")
    if not isinstance(attributes, dict):
        raise RedfishError("%s: its Bios resource holds no Attributes" % bmc.address)
    settings = bios.get("@Redfish.Settings") or {}
    settings_path = _link(settings, "SettingsObject")
    pending, pending_unknown, settings_etag = {}, False, None
    if settings_path and settings_path.rstrip("/") != bios_path.rstrip("/"):
        # the settings object holds only what is pending, or everything (some BMCs): the
        # values that differ from the current ones are what the next reset changes
        try:
            staged = bmc.get(settings_path).get("Attributes") or {}
            settings_etag = bmc.last_etag
        except RedfishError as exc:
            if vendor_of(root, system) != "ami" or not re.search(r"answered HTTP 40[45]\b", str(exc)):
                raise
            # some AMI firmware takes PATCH at its settings object and answers no GET there
            # (DMTF/Redfish-Tacklebox#55): what is pending cannot be known
            staged, pending_unknown = {}, True
        if not isinstance(staged, dict):
            raise RedfishError("%s: its settings object %s holds Attributes that are not a mapping" % (
                bmc.address, settings_path))
        pending = {k: v for k, v in staged.items() if attributes.get(k) != v}
    out = {"address": bmc.address, "vendor": vendor_of(root, system), "system": chosen[0],
           "manufacturer": system.get("Manufacturer"), "model": system.get("Model"),
           "bios_version": system.get("BiosVersion"), "attributes": attributes, "pending": pending,
           "settings_object": settings_path, "apply_times": list(settings.get("SupportedApplyTimes") or []),
           "settings_etag": settings_etag, "pending_unknown": pending_unknown,
           "registry_name": bios.get("AttributeRegistry"), "registry": None, "registry_error": None,
           "tls_verified": bmc.verify}
    names = {found for name in wanted for found in [match_attribute(attributes, name)] if found}
    if names:
        try:
            out["registry"] = read_registry(bmc, root, bios.get("AttributeRegistry"), names)
        except RedfishError as exc:
            out["registry_error"] = str(exc)
    out["gets"] = bmc.gets
    return out


def unwritable(state, name):
    """Why gpuhost must not write the attribute *name* through the BMC that *state* (read_bios)
    describes, or None: the one rule for the judgement (controls/bios.py) and the writer
    (redfish_write.py). Only over a verified connection, only to a settings object the Bios
    resource names and whose pending values can be read back (DSP0266: values for the next
    reset), never to an iDRAC whose values wait for their job, and only what the firmware's
    own registry lists as writable (the value it offers is checked apart: offers)."""
    if not state.get("tls_verified", True):
        # the audit may read through an unverified certificate, named in every finding; a write
        # (the credentials and the firmware's next settings) goes only where the BMC is proven
        return ("its certificate is not verified (gpuhost_bmc_validate_certs: false), and gpuhost writes only over a "
                "verified connection")
    if state.get("pending_unknown"):
        return "its settings object answers no GET, so what is pending cannot be read back"
    if state.get("vendor") == "dell" and state.get("pending"):
        # iDRAC refuses a new set while a configuration job waits for the last (SYS011)
        return ("%s already wait for the next reset; an iDRAC takes no new values while a configuration job waits: "
                "reboot to apply them, or delete the job, then run gpuhost again" % ", ".join(sorted(state["pending"])))
    if not state.get("settings_object"):
        return "its Bios resource names no settings object (@Redfish.Settings), so it takes no values for the next reset"
    if state.get("registry_error"):
        return "its attribute registry could not be read (%s), and gpuhost writes only what it offers" % state["registry_error"]
    if state.get("registry") is None:
        return "no attribute registry was read from it, and gpuhost writes only what the registry offers"
    entry = state["registry"].get(name)
    if entry is None:
        return "its attribute registry does not list %s, and gpuhost writes only what it offers" % name
    if entry.get("read_only"):
        return "its registry marks %s read-only" % name
    return None


def offers(entry, value):
    """Whether a registry *entry* (read_registry's) offers *value*: by its ValueName, or by its
    ValueDisplayName where the firmware's attributes hold the displayed word (Supermicro); an
    entry that lists no values (a String or Integer attribute) offers anything."""
    entry = entry or {}
    if not entry.get("values"):
        return True
    return value in entry["values"] or value in (entry.get("display") or [])


def match_attribute(attributes, name):
    """The attribute of *attributes* that *name* stands for: itself, or, on Supermicro, the
    name with the setup item's number its firmware adds (SMTControl#0037 on one board,
    SMTControl_0037 or a bare SMTControl on another: NVIDIA/libredfish's supermicro code);
    None where the firmware has no such attribute."""
    if name in attributes:
        return name
    pattern = re.compile(r"^%s[#_][0-9A-Fa-f]{4}$" % re.escape(name))
    found = sorted(k for k in attributes if pattern.match(k))
    return found[0] if len(found) == 1 else None


def read_registry(bmc, root, name, wanted):
    """What the attribute registry *name* offers for the *wanted* attributes: {attribute:
    {"values": [ValueName, ...], "display": [ValueDisplayName, ...], "read_only": bool, "type": ...}}
    (DSP0268 AttributeRegistry:
    RegistryEntries.Attributes). The registry is found by its name among /redfish/v1/Registries'
    members, the version left out where the exact one is not listed (Dell lists v1_0_0 for a
    Bios naming v1_0_3)."""
    if not name:
        raise RedfishError("%s: its Bios resource names no AttributeRegistry" % bmc.address)
    registries = _link(root, "Registries") or "/redfish/v1/Registries"
    members = [m.get("@odata.id") for m in bmc.get(registries).get("Members") or [] if isinstance(m, dict)]
    stem = re.split(r"\.v?\d", name, 1)[0]
    exact = [m for m in members if m and m.rstrip("/").rsplit("/", 1)[-1] == name]
    close = [m for m in members if m and m.rstrip("/").rsplit("/", 1)[-1].startswith(stem)]
    if not (exact or close):
        raise RedfishError("%s: no registry %s under %s" % (bmc.address, name, registries))
    entry = bmc.get((exact or close)[0])
    uris = [loc.get("Uri") for loc in entry.get("Location") or [] if isinstance(loc, dict) and loc.get("Uri")]
    if not uris:
        raise RedfishError("%s: registry %s has no Location on the BMC" % (bmc.address, name))
    registry = bmc.get(uris[0], limit=MAX_REGISTRY)
    found = {}
    for attr in ((registry.get("RegistryEntries") or {}).get("Attributes") or []):
        if isinstance(attr, dict) and attr.get("AttributeName") in wanted:
            found[attr["AttributeName"]] = {
                "values": [v.get("ValueName") for v in attr.get("Value") or [] if isinstance(v, dict)],
                # Supermicro's registry names its values by number ("0") and shows them by word
                # ("Enable"), the word being what its Bios resource holds and its CurrentValue says
                "display": [v.get("ValueDisplayName") for v in attr.get("Value") or []
                            if isinstance(v, dict) and v.get("ValueDisplayName")],
                "read_only": bool(attr.get("ReadOnly")), "type": attr.get("Type")}
    return found
