"""A lab host's BMC: a Redfish service over real HTTPS on the host's own lab address, with a
certificate from the lab's CA (made by the real openssl), behind HTTP Basic authentication.

What it serves is modelled on DMTF's public mockups (DSP2043: service root, Systems
collection, ComputerSystem, Bios, the Bios settings object, Registries) with the attributes
of the host's spec (`bmc:`), whose names and values the spec takes from the vendors' own
documents (tests/real_data/bmc). It writes every request's method and path to the host's
bmc.log, so a test can count what the BMC saw, and plays the faults a spec names: slow (each
answer after 30 s), not_json, huge (a 64 MiB answer), and wrong_certificate (a certificate for
another address); unreachable means it is not started at all.

Writes are what DSP0266 gives a settings object: a PATCH of Attributes to it (each attribute
one the Bios resource has, each value one the registry offers, else HTTP 400 with the Redfish
message; If-Match with a stale ETag: 412) makes them pending; the host's next reset (`reset`,
called by the supervisor as the host reboots) applies them, as the firmware does, but those
the spec says the firmware ignores, and renames the attributes a firmware update renames.
Pending values and the current ones are kept in the host's bmc/state.json across reboots
(and over the spec's attributes: a changed spec takes effect in a new lab). A renamed
attribute's effects (spec bmc.effects, keyed by the old name) no longer apply: the host boots
as the spec's own fields describe it.
"""
from __future__ import annotations

import base64
import hashlib
import json
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PORT = 443
SLOW_S = 30.0
# where an iDRAC lists its jobs (dell/iDRAC-Redfish-Scripting; the configuration job a PATCH
# with @Redfish.SettingsApplyTime OnReset schedules is named in the answer's Location)
DELL_JOBS = "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs"


def make_ca(directory: Path) -> tuple[Path, Path]:
    """The lab's CA (certificate, key), made once per lab."""
    directory.mkdir(parents=True, exist_ok=True)
    key, crt = directory / "ca.key", directory / "ca.crt"
    if not crt.exists():
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "30",
                 "-subj", "/CN=gpuhost lab CA", "-keyout", str(key), "-out", str(crt))
        key.chmod(0o600)
    return crt, key


def make_certificate(directory: Path, ca: tuple[Path, Path], ip: str) -> tuple[Path, Path]:
    """A server certificate for *ip* (its subjectAltName), signed by the lab's CA."""
    directory.mkdir(parents=True, exist_ok=True)
    key, csr, crt, ext = (directory / n for n in ("bmc.key", "bmc.csr", "bmc.crt", "bmc.ext"))
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={ip}",
             "-keyout", str(key), "-out", str(csr))
    ext.write_text(f"subjectAltName=IP:{ip}\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial", "-days", "30",
             "-extfile", str(ext), "-out", str(crt))
    key.chmod(0o600)
    return crt, key


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def documents(vendor: str, attributes: dict, pending: dict | None = None, registry: dict | None = None,
              systems: tuple = ("1",), registry_name: str = "BiosAttributeRegistry.v1_0_0",
              apply_times: tuple = ("OnReset",)) -> dict:
    """The resources of a BMC whose first system has these BIOS *attributes*: the service root
    (its Vendor), the Systems collection, the system, its Bios, the settings object holding
    what is *pending*, and, where given, the attribute registry (attribute -> values offered)."""
    sys_path = f"/redfish/v1/Systems/{systems[0]}"
    bios_path = f"{sys_path}/Bios"
    settings_path = f"{bios_path}/Settings"
    docs = {
        "/redfish/v1/": {"@odata.id": "/redfish/v1/", "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot", "Vendor": vendor,
                         "Systems": {"@odata.id": "/redfish/v1/Systems"}, "Registries": {"@odata.id": "/redfish/v1/Registries"}},
        "/redfish/v1/Systems": {"@odata.id": "/redfish/v1/Systems", "Members@odata.count": len(systems),
                                "Members": [{"@odata.id": f"/redfish/v1/Systems/{s}"} for s in systems]},
        sys_path: {"@odata.id": sys_path, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Manufacturer": vendor,
                   "Bios": {"@odata.id": bios_path}},
        bios_path: {"@odata.id": bios_path, "@odata.type": "#Bios.v1_2_0.Bios", "AttributeRegistry": registry_name,
                    "Attributes": dict(attributes),
                    "@Redfish.Settings": {"@odata.type": "#Settings.v1_3_5.Settings",
                                          "SettingsObject": {"@odata.id": settings_path},
                                          **({"SupportedApplyTimes": list(apply_times)} if apply_times else {})}},
        settings_path: {"@odata.id": settings_path, "@odata.type": "#Bios.v1_2_0.Bios", "Attributes": dict(pending or {})},
        "/redfish/v1/Registries": {"@odata.id": "/redfish/v1/Registries", "Members": []},
    }
    if registry is not None:
        entry = f"/redfish/v1/Registries/{registry_name}"
        docs["/redfish/v1/Registries"]["Members"].append({"@odata.id": entry})
        docs[entry] = {"@odata.id": entry, "Location": [{"Language": "en", "Uri": f"{entry}/registry.json"}]}
        docs[f"{entry}/registry.json"] = {"RegistryEntries": {"Attributes": [
            {"AttributeName": name, "Type": "Enumeration", "ReadOnly": False,
             "Value": [{"ValueName": v} for v in values]} for name, values in registry.items()]}}
    return docs


class Redfish:
    """One BMC serving *docs* (path -> JSON document; a str is sent as it is) on (ip, port)."""

    def __init__(self, docs: dict, cert: Path, key: Path, ip: str, port: int = PORT, user: str = "root",
                 password: str = "", log: Path | None = None, faults: tuple = (), state: Path | None = None,
                 ignores: tuple = (), renames: dict | None = None):
        self.docs, self.methods, self.lock = dict(docs), [], threading.Lock()
        self.preconditions: list = []       # each PATCH's If-Match (None: none sent)
        self.delay = SLOW_S if "slow" in faults else 0.0
        self.faults, self.log = tuple(faults), log
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.state, self.ignores, self.renames = state, tuple(ignores), dict(renames or {})
        self.vendor = (self.docs.get("/redfish/v1/") or {}).get("Vendor")
        self.bios_path = next((p for p, d in self.docs.items() if isinstance(d, dict) and "@Redfish.Settings" in d), None)
        self.settings_path = (((self.docs.get(self.bios_path) or {}).get("@Redfish.Settings") or {}).get("SettingsObject")
                              or {}).get("@odata.id") if self.bios_path else None
        if self.settings_path and self.settings_path not in self.docs:
            self.docs[self.settings_path] = {"@odata.id": self.settings_path, "Attributes": {}}
        if state is not None and state.exists():
            kept = json.loads(state.read_text())
            self.docs[self.bios_path]["Attributes"] = kept["attributes"]
            self.docs[self.settings_path]["Attributes"] = kept["pending"]
            self.renames = kept.get("renames", self.renames)
            self.docs.update(kept.get("jobs") or {})
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _any(self):
                with outer.lock:
                    outer.methods.append((self.command, self.path))
                    if outer.log is not None:
                        with open(outer.log, "a") as f:
                            f.write(f"{self.command} {self.path}\n")
                if outer.delay:
                    time.sleep(outer.delay)
                if self.headers.get("Authorization") != outer.auth:
                    self._send(401, b'{"error": {"code": "Base.1.0.NoValidSession"}}')
                    return
                if self.command == "POST" and self.path == DELL_JOBS and outer.vendor == "Dell":
                    length = int(self.headers.get("Content-Length") or 0)
                    code, body, location = outer.create_job(self.rfile.read(length))
                    self._send(code, body, location=location)
                    return
                if self.command == "PATCH" and self.path == outer.settings_path:
                    length = int(self.headers.get("Content-Length") or 0)
                    code, body, location = outer.patch(self.rfile.read(length), self.headers.get("If-Match"))
                    self._send(code, body, location=location)
                    return
                if self.command != "GET":
                    self._send(405, b'{"error": {"code": "Base.1.0.OperationNotAllowed"}}')
                    return
                with outer.lock:
                    doc = outer.docs.get(self.path)
                    etag = outer.etag() if self.path == outer.settings_path else None
                    raw = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
                if doc is None:
                    self._send(404, b'{"error": {"code": "Base.1.0.ResourceMissingAtURI"}}')
                elif "not_json" in outer.faults and self.path.endswith("/Bios"):
                    self._send(200, b"<html><body>Service temporarily unavailable</body></html>")
                elif "huge" in outer.faults and self.path.endswith("/Bios"):
                    self._send(200, b'{"Attributes": {"x": "' + b"x" * (64 << 20) + b'"}}')
                else:
                    self._send(200, raw, etag)

            do_GET = do_PATCH = do_POST = do_DELETE = do_PUT = _any

            def _send(self, code, body, etag=None, location=None):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if etag:
                    self.send_header("ETag", etag)
                if location:
                    self.send_header("Location", location)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    pass

        self.server = ThreadingHTTPServer((ip, port), Handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.address = ip if port == PORT else f"{ip}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name=f"bmc {ip}")
        self.thread.start()

    # ---- the firmware's side ------------------------------------------------------------
    def etag(self) -> str | None:
        """The settings object's ETag: a digest of what is pending (caller holds the lock)."""
        if not isinstance(self.docs.get(self.settings_path), dict):
            return None
        pending = json.dumps(self.docs[self.settings_path].get("Attributes") or {}, sort_keys=True).encode()
        return 'W/"%s"' % hashlib.sha256(pending).hexdigest()[:16]

    def registry(self) -> dict | None:
        """attribute -> values offered, from the registry the BMC serves (None: it serves none)."""
        for path, doc in self.docs.items():
            if path.endswith("/registry.json") and isinstance(doc, dict):
                # a value by its name or, as Supermicro's firmware takes it, by its displayed word
                return {a["AttributeName"]: [n for v in a.get("Value") or []
                                             for n in (v.get("ValueName"), v.get("ValueDisplayName")) if n]
                        for a in (doc.get("RegistryEntries") or {}).get("Attributes") or []}
        return None

    def patch(self, raw: bytes, if_match: str | None) -> tuple[int, bytes, str | None]:
        """A PATCH of the settings object: its Attributes become pending, all or none; on a
        Dell, with apply time OnReset, a configuration job is scheduled for them (its URI the
        answer's Location), and a second set while one waits is refused as iDRAC does (SYS011)."""
        try:
            body = json.loads(raw.decode())
        except (ValueError, UnicodeDecodeError):
            return 400, _error("Base.1.0.MalformedJSON", "The request body submitted was malformed JSON."), None
        attrs = body.get("Attributes") if isinstance(body, dict) else None
        if not isinstance(attrs, dict) or not attrs:
            return 400, _error("Base.1.0.PropertyMissing", "The property Attributes is a required property."), None
        offered = self.registry()
        with self.lock:
            self.preconditions.append(if_match)
            if not if_match and self.vendor in ("Lenovo", "AMI"):
                # XCC and MegaRAC (from RTP 1.5) take no PATCH without a precondition
                return 428, _error("Base.1.0.PreconditionRequired", "A precondition header or annotation is required "
                                                                    "to change this resource."), None
            if if_match and if_match not in ("*", self.etag()):
                return 412, _error("Base.1.0.PreconditionFailed", "The ETag supplied did not match the current ETag."), None
            if self.vendor == "Dell" and self._scheduled():
                return 400, _error("IDRAC.2.9.SYS011", "Pending configuration values are already committed, unable to "
                                                       "perform another set operation."), None
            current = self.docs[self.bios_path]["Attributes"]
            for name, value in attrs.items():
                if name not in current:
                    return 400, _error("Base.1.0.PropertyUnknown", f"The property {name} is not in the list of valid "
                                                                   "properties for the resource."), None
                if offered is not None and name in offered and value not in offered[name]:
                    return 400, _error("Base.1.0.PropertyValueNotInList",
                                       f"The value {value} for the property {name} is not in the list of acceptable values."), None
            self.docs[self.settings_path]["Attributes"].update({str(k): v for k, v in attrs.items()})
            location = None
            if self.vendor == "Dell" and (body.get("@Redfish.SettingsApplyTime") or {}).get("ApplyTime") == "OnReset":
                location = self._new_job()
            self._save()
        return (202 if location else 204), b"", location

    def create_job(self, raw: bytes) -> tuple[int, bytes, str | None]:
        """An iDRAC's POST to its Jobs: a BIOS configuration job for the pending values of the
        settings object it names (TargetSettingsURI), as dell/iDRAC-Redfish-Scripting asks for one."""
        try:
            target = (json.loads(raw.decode()) or {}).get("TargetSettingsURI")
        except (ValueError, UnicodeDecodeError, AttributeError):
            return 400, _error("Base.1.0.MalformedJSON", "The request body submitted was malformed JSON."), None
        with self.lock:
            if target != self.settings_path:
                return 400, _error("Base.1.0.PropertyValueNotInList", f"The value {target} for TargetSettingsURI is "
                                                                      "not in the list of acceptable values."), None
            if not self.docs[self.settings_path].get("Attributes"):
                return 400, _error("IDRAC.2.9.SYS018", "No pending data present to create a Configuration job."), None
            location = self._new_job()
            self._save()
        return 200, json.dumps({"Id": location.rsplit("/", 1)[-1]}).encode(), location

    def _jobs(self) -> dict:
        """The iDRAC's jobs: URI -> document (caller holds the lock)."""
        return {p: d for p, d in self.docs.items() if p.startswith(DELL_JOBS + "/")}

    def _scheduled(self) -> list:
        """Its jobs that wait for the next reset (caller holds the lock)."""
        return [d for d in self._jobs().values() if d.get("JobState") == "Scheduled"]

    def _new_job(self) -> str:
        """A scheduled BIOS configuration job's URI (caller holds the lock)."""
        job = f"JID_{len(self._jobs()) + 1:012d}"
        location = f"{DELL_JOBS}/{job}"
        self.docs[location] = {"@odata.id": location, "Id": job, "JobType": "BIOSConfiguration",
                               "JobState": "Scheduled", "PercentComplete": 0, "Message": "Task successfully scheduled."}
        return location

    def reset(self) -> dict:
        """The host's reset: a firmware update renames attributes first (once; their pending
        values are gone with the old names), then the firmware applies what is pending but
        what the spec says it ignores (kept pending); on a Dell, only through its scheduled
        configuration job, which the job_never_runs fault leaves scheduled. The attributes it
        now runs with."""
        with self.lock:
            if self.settings_path is None:
                return dict(self.docs[self.bios_path]["Attributes"]) if self.bios_path else {}
            current = self.docs[self.bios_path]["Attributes"]
            pending = self.docs[self.settings_path]["Attributes"]
            for old, new in self.renames.items():
                if old in current:
                    current[new] = current.pop(old)
                pending.pop(old, None)
            self.renames = {}
            jobs = self._scheduled()
            if self.vendor == "Dell" and (not jobs or "job_never_runs" in self.faults):
                kept = dict(pending)        # no job (or one that never runs): nothing applies
            else:
                kept = {k: v for k, v in pending.items() if k in self.ignores}
                current.update({k: v for k, v in pending.items() if k not in self.ignores and k in current})
                for job in jobs:
                    job.update(JobState="Completed", PercentComplete=100, Message="Job completed successfully.")
            self.docs[self.settings_path]["Attributes"] = kept
            self._save()
            return dict(current)

    def attributes(self) -> dict:
        with self.lock:
            return dict(self.docs[self.bios_path]["Attributes"]) if self.bios_path else {}

    def _save(self) -> None:
        if self.state is not None:
            tmp = self.state.with_suffix(".new")
            tmp.write_text(json.dumps({"attributes": self.docs[self.bios_path]["Attributes"],
                                       "pending": self.docs[self.settings_path]["Attributes"],
                                       "renames": self.renames,
                                       "jobs": self._jobs()},
                                      sort_keys=True))
            tmp.replace(self.state)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _error(ident: str, message: str) -> bytes:
    """A Redfish error body (DSP0266 9.6)."""
    return json.dumps({"error": {"code": ident, "message": message,
                                 "@Message.ExtendedInfo": [{"MessageId": ident, "Message": message}]}}).encode()
