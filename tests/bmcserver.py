"""A Redfish service over real HTTPS for the tests: the resources it serves are JSON documents
by path (a real BMC's, from tests/real_data/bmc), behind HTTP Basic authentication, on a
127.0.1.N address with a certificate from a CA made for the test by the real openssl. It
notes every request's method, so a test can count what the BMC saw, and plays a BMC's faults:
too slow, not JSON, too large."""
from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ADDRESS = "127.0.1.254"


def make_ca(directory: Path, ip: str = ADDRESS) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key): the server's for *ip*."""
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt, ext = directory / "bmc.key", directory / "bmc.csr", directory / "bmc.crt", directory / "bmc.ext"
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
        "-subj", "/CN=gpuhost test CA", "-keyout", str(ca_key), "-out", str(ca_crt))
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={ip}",
        "-keyout", str(key), "-out", str(csr))
    ext.write_text(f"subjectAltName=IP:{ip}\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "2",
        "-extfile", str(ext), "-out", str(crt))
    return ca_crt, crt, key


class Redfish:
    """One BMC: *docs* maps a path to its JSON document (a str is sent as it is)."""

    def __init__(self, docs: dict, cert: Path, key: Path, user: str = "root", password: str = "calvin"):
        self.docs, self.methods, self.delay, self.lock = dict(docs), [], 0.0, threading.Lock()
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _any(self):
                with outer.lock:
                    outer.methods.append((self.command, self.path))
                if outer.delay:
                    time.sleep(outer.delay)
                if self.headers.get("Authorization") != outer.auth:
                    self._send(401, b'{"error": {"code": "Base.1.0.NoValidSession"}}')
                    return
                if self.command != "GET":
                    self._send(405, b"{}")
                    return
                doc = outer.docs.get(self.path)
                if doc is None:
                    self._send(404, b'{"error": {"code": "Base.1.0.ResourceMissingAtURI"}}')
                    return
                self._send(200, doc.encode() if isinstance(doc, str) else json.dumps(doc).encode())

            do_GET = do_PATCH = do_POST = do_DELETE = do_PUT = _any

            def _send(self, code, body):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer((ADDRESS, 0), Handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.address = f"{ADDRESS}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def service(bios: dict, vendor: str, settings: dict | None = None, registry: dict | None = None,
            systems: tuple = ("1",)) -> dict:
    """The documents of a BMC whose one system has *bios* (a real Bios resource): the service
    root, the Systems collection, the system, the Bios resource as published, its settings
    object and, where given, a registry listed under /redfish/v1/Registries."""
    bios = json.loads(json.dumps(bios))
    sys_path = f"/redfish/v1/Systems/{systems[0]}"
    bios_path = f"{sys_path}/Bios"
    bios["@odata.id"] = bios_path
    settings_path = f"{bios_path}/Settings"
    bios["@Redfish.Settings"] = {**(bios.get("@Redfish.Settings") or {}), "SettingsObject": {"@odata.id": settings_path}}
    docs = {"/redfish/v1/": {"@odata.id": "/redfish/v1/", "Vendor": vendor, "Systems": {"@odata.id": "/redfish/v1/Systems"},
                             "Registries": {"@odata.id": "/redfish/v1/Registries"}},
            "/redfish/v1/Systems": {"Members": [{"@odata.id": f"/redfish/v1/Systems/{s}"} for s in systems]},
            sys_path: {"@odata.id": sys_path, "Manufacturer": vendor, "Bios": {"@odata.id": bios_path}},
            bios_path: bios,
            settings_path: {"@odata.id": settings_path, "Attributes": dict(settings or {})}}
    members = []
    if registry is not None:
        name = bios.get("AttributeRegistry")
        entry = f"/redfish/v1/Registries/{name}"
        members.append({"@odata.id": entry})
        docs[entry] = {"@odata.id": entry, "Location": [{"Language": "en", "Uri": f"{entry}/registry.json"}]}
        docs[f"{entry}/registry.json"] = registry
    docs["/redfish/v1/Registries"] = {"Members": members}
    return docs
