"""A real, local apt repository of kernel packages, built from ``kernel.repository``.

Each package is a small but genuine .deb (built by dpkg-deb) that installs
``/boot/vmlinuz-<release>`` (kernels) or ``/usr/src/linux-headers-<release>`` (headers),
and runs ``/etc/kernel/postinst.d`` hooks as the distribution's kernel packages do, so
installing a kernel is a real ``apt install`` and refreshes the boot loader the same way.
"""
from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
import time
from pathlib import Path


def deb_version(release: str) -> str:
    m = re.match(r"^(\d+(?:\.\d+)*)(?:-(\d+))?", release)
    assert m, release
    return m.group(1) + (f"-{m.group(2)}" if m.group(2) else "")


def is_headers(package: str) -> bool:
    return "headers" in package


KERNEL_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /etc/kernel/postinst.d ]; then
    run-parts --report --exit-on-error --arg={rel} --arg=/boot/vmlinuz-{rel} /etc/kernel/postinst.d
fi
"""
HEADERS_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /etc/kernel/header_postinst.d ]; then
    run-parts --report --exit-on-error --arg={rel} --arg=/usr/src/linux-headers-{rel} /etc/kernel/header_postinst.d
fi
"""
KERNEL_POSTRM = """#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /etc/kernel/postrm.d ]; then
    run-parts --report --exit-on-error --arg={rel} --arg=/boot/vmlinuz-{rel} /etc/kernel/postrm.d
fi
"""


def concrete_packages(name: str, release: str) -> list[str]:
    """The ABI-versioned packages a series metapackage depends on, as the distributions name
    them (pve-kernel debian/control.in: proxmox-kernel-X.Y -> proxmox-kernel-<release>;
    Debian linux-image-<flavour> -> linux-image-<release>; Ubuntu linux-generic-hwe-<ver> ->
    image, headers and linux-modules-extra of the release); [] for a package that names its
    release itself."""
    if release in name:
        return []
    if name.startswith("proxmox-"):
        return [f"proxmox-{'headers' if is_headers(name) else 'kernel'}-{release}"]
    if re.match(r"^linux-[a-z]+-hwe-", name):
        return [f"linux-image-{release}", f"linux-headers-{release}", f"linux-modules-extra-{release}"]
    return [f"linux-{'headers' if is_headers(name) else 'image'}-{release}"]


def build_package(name: str, release: str, out_dir: Path, config: str = "", depends: list[str] | None = None) -> Path:
    with tempfile.TemporaryDirectory(prefix="gpuhost-deb-") as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        if depends is not None or "modules-extra" in name:
            # a metapackage (only its Depends) or linux-modules-extra (drivers the lab has none of)
            (root / "usr/share/doc" / name).mkdir(parents=True)
            (root / "usr/share/doc" / name / "README").write_text(f"{name} (gpuhost lab)\n")
            desc = f"{'Metapackage' if depends else 'Extra modules'} for {release} (gpuhost lab)"
        elif is_headers(name):
            src = root / f"usr/src/linux-headers-{release}"
            src.mkdir(parents=True)
            (src / "Makefile").write_text(f"# headers for {release} (gpuhost lab)\nVERSION = {release}\n")
            (src / "include/config").mkdir(parents=True)
            (src / "include/config/kernel.release").write_text(release + "\n")
            mods = root / f"lib/modules/{release}"
            mods.mkdir(parents=True)
            (mods / "build").symlink_to(f"/usr/src/linux-headers-{release}")
            p = root / "DEBIAN/postinst"
            p.write_text(HEADERS_POSTINST.format(rel=release))
            p.chmod(0o755)
            desc = f"Proxmox Kernel Headers {release} (gpuhost lab)"
        else:
            boot = root / "boot"
            boot.mkdir()
            (boot / f"vmlinuz-{release}").write_bytes(b"gpuhost-lab kernel image " + release.encode() + b"\n")
            (boot / f"config-{release}").write_text(config or "CONFIG_X86_AMD_PSTATE=y\nCONFIG_NUMA_BALANCING=y\n")
            (boot / f"System.map-{release}").write_text("")
            mods = root / f"lib/modules/{release}"
            mods.mkdir(parents=True)
            (mods / "modules.dep").write_text("")
            for script, body in (("postinst", KERNEL_POSTINST), ("postrm", KERNEL_POSTRM)):
                p = root / "DEBIAN" / script
                p.write_text(body.format(rel=release))
                p.chmod(0o755)
            desc = f"Proxmox Kernel Image {release} (gpuhost lab)"
        control = (f"Package: {name}\nVersion: {deb_version(release)}\nArchitecture: all\n"
                   f"Maintainer: gpuhost lab <lab@gpuhost.invalid>\nSection: kernel\nPriority: optional\n"
                   + (f"Depends: {', '.join(depends)}\n" if depends else "") + f"Description: {desc}\n")
        (root / "DEBIAN/control").write_text(control)
        deb = out_dir / f"{name}_{deb_version(release)}_all.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(root), str(deb)],
                       check=True, capture_output=True)
        return deb


def build_repository(repository: dict[str, str], out_dir: Path, config: str = "", suite: str = "lab") -> Path:
    """Build a flat repository (``deb [trusted=yes] file:DIR ./``) in *out_dir*: each
    series metapackage with the versioned packages it depends on. *suite* names it as apt's
    -t selects it; a `-backports` suite is NotAutomatic like Debian's backports."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stanzas = []
    packages: dict[str, tuple[str, list[str] | None]] = {}
    for name, release in sorted(repository.items()):
        deps = concrete_packages(name, release)
        for dep in deps:
            packages.setdefault(dep, (release, None))
        packages[name] = (release, deps or None)
    for name, (release, deps) in sorted(packages.items()):
        deb = build_package(name, release, out_dir, config, deps)
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout
        data = deb.read_bytes()
        stanzas.append(control.rstrip("\n") + f"\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                       f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")
    packages = "\n".join(stanzas).encode()
    (out_dir / "Packages").write_bytes(packages)
    date = time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime())
    backports = "NotAutomatic: yes\nButAutomaticUpgrades: yes\n" if suite.endswith("-backports") else ""
    release = (f"Origin: gpuhost-lab\nLabel: gpuhost-lab\nSuite: {suite}\nCodename: {suite}\nArchitectures: all amd64\n"
               f"Date: {date}\n{backports}"
               f"Description: gpuhost lab kernel packages\nSHA256:\n {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n")
    (out_dir / "Release").write_text(release)
    return out_dir
