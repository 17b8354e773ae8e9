"""The lab's Redfish service (gpuhost.lab.bmc) for unit-speed tests: on an ephemeral port of a
127.0.1.N address, serving a real BMC's Bios document (tests/real_data/bmc) in the resources
around it."""
from __future__ import annotations

import json
from pathlib import Path

from gpuhost.lab import bmc as labbmc

ADDRESS = "127.0.1.254"


def make_ca(directory: Path, ip: str = ADDRESS) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key): the server's for *ip*."""
    ca = labbmc.make_ca(directory)
    crt, key = labbmc.make_certificate(directory, ca, ip)
    return ca[0], crt, key


class Redfish(labbmc.Redfish):
    """The lab's BMC on an ephemeral port of ADDRESS."""

    def __init__(self, docs: dict, cert: Path, key: Path, user: str = "root", password: str = "calvin"):
        super().__init__(docs, cert, key, ADDRESS, port=0, user=user, password=password)


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
