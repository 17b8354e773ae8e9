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
    """The lab BMC's resources (gpuhost.lab.bmc.documents) around a real Bios resource, as
    published, linked where the BMC serves it; *settings* what its settings object holds,
    *registry* a whole attribute registry listed under /redfish/v1/Registries."""
    name = bios.get("AttributeRegistry") or "BiosAttributeRegistry.v1_0_0"
    docs = labbmc.documents(vendor, bios["Attributes"], settings, None, systems, registry_name=name)
    bios_path = f"/redfish/v1/Systems/{systems[0]}/Bios"
    real = json.loads(json.dumps(bios))
    real["@odata.id"] = bios_path
    real["@Redfish.Settings"] = {**(real.get("@Redfish.Settings") or {}),
                                 "SettingsObject": {"@odata.id": f"{bios_path}/Settings"}}
    docs[bios_path] = real
    if registry is not None:
        entry = f"/redfish/v1/Registries/{name}"
        docs["/redfish/v1/Registries"]["Members"].append({"@odata.id": entry})
        docs[entry] = {"@odata.id": entry, "Location": [{"Language": "en", "Uri": f"{entry}/registry.json"}]}
        docs[f"{entry}/registry.json"] = registry
    return docs
