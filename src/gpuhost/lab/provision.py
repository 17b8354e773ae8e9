"""First boot of a simulated host: lay its disk out as the spec describes.

Everything here writes through the host's merged overlay root, so it all lands in the
host's own upper layer (its "disk") and nowhere else. Files of the machine underneath
that would make the host contact the network or start the machine's own services
(apt sources, enabled units) are removed from the host's view, which leaves whiteouts.
"""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import uuid
from importlib import resources
from pathlib import Path

from .shims import shimlib  # the same code the hosts' update-grub and proxmox-boot-tool run
from .spec import AnySpec, GuestSpec, HostSpec

SHIM_DIR = "usr/lib/gpuhost-lab"
REPO_MOUNT = "var/lib/gpuhost-lab/repo"
ESP_UUID = "8A1B-2C3D"

ZZ_PROXMOX_BOOT = """#!/bin/sh
# from proxmox-kernel-helper: keep the ESPs in sync after a kernel is installed
set -e
exec </dev/null >&2
if [ -e /etc/kernel/proxmox-boot-uuids ]; then
    echo "Running hook script 'zz-proxmox-boot'.."
    proxmox-boot-tool refresh --hook zz-proxmox-boot
fi
"""
ZZ_UPDATE_GRUB = """#!/bin/sh
# from grub2-common: regenerate grub.cfg after a kernel is installed
set -e
if [ -e /boot/grub/grub.cfg ] && command -v update-grub >/dev/null; then
    exec update-grub
fi
"""


DKMS_HOOK = """#!/bin/sh
# from dkms: build the NVIDIA module for a kernel once its headers are installed
# (gpuhost lab: the build succeeds for kernel series up to {builds_up_to})
rel="$1"
[ -n "$rel" ] && [ -d "/usr/src/linux-headers-$rel" ] || exit 0
series=$(echo "$rel" | sed -E 's/^([0-9]+\\.[0-9]+).*/\\1/')
newest="{builds_up_to}"
if [ -n "$newest" ] && [ "$(printf '%s\\n%s\\n' "$series" "$newest" | sort -V | tail -n 1)" != "$newest" ]; then
    echo "Error! Bad return status for module build on kernel: $rel (x86_64)" >&2
    echo "Consult /var/lib/dkms/nvidia/{version}/build/make.log for more information." >&2
    exit 0
fi
mkdir -p "/lib/modules/$rel/updates/dkms"
echo "nvidia {version} for $rel (gpuhost lab)" > "/lib/modules/$rel/updates/dkms/nvidia.ko"
"""

PY_SITE = "usr/lib/python3/dist-packages"


def shim_source() -> Path:
    return Path(str(resources.files("gpuhost.lab") / "shims"))


VIRTUAL = ("proc", "sys", "dev", "run")


def inside(root: Path, rel: str) -> Path:
    """*rel* resolved as the host sees it, with *root* as its /: a symbolic link on the way
    (var/run -> /run, an absolute link of the machine's lower layer) is followed inside the
    host's root, never out of it. Refused when it ends on a virtual file system (the host's
    /run is its own tmpfs, not this directory) or needs more than 40 links."""
    parts, done, hops = [p for p in rel.split("/") if p and p != "."], [], 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            done = done[:-1]
            continue
        here = root.joinpath(*done, part)
        if here.is_symlink():
            hops += 1
            if hops > 40:
                raise ValueError(f"{rel}: too many symbolic links")
            target = os.readlink(here)
            parts = [p for p in target.split("/") if p and p != "."] + parts
            if target.startswith("/"):
                done = []
            continue
        done.append(part)
    if done and done[0] in VIRTUAL:
        raise ValueError(f"{rel} leads to /{'/'.join(done)}, on a virtual file system of the host, not its disk")
    return root.joinpath(*done)


def _write(root: Path, rel: str, text: str | bytes, mode: int = 0o644) -> None:
    # the directory as the host sees it (never out of its root); a link at the name itself
    # is replaced by the file, as the spec or the lab means it
    parent, name = os.path.split(rel.strip("/"))
    path = inside(root, parent) / name
    if name in ("", ".", "..") or (path.parent == root and name in VIRTUAL):
        raise ValueError(f"{rel}: not a file path")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    path.chmod(mode)


# Directories whose content on the machine underneath a host must not see: root's home
# (the lab machine's dotfiles), apt's sources and lists (they point at the network),
# enabled units and sysctl.d (the machine's services and settings), kernels and modules.
# dpkg's journal too: an interrupted dpkg on the machine leaves entries there that would
# make every lab host's dpkg refuse to run ("dpkg was interrupted").
HIDDEN_DIRS = ("root", "boot", "usr/lib/modules", "etc/apt/sources.list.d", "var/lib/apt/lists",
               "etc/systemd/system/multi-user.target.wants", "etc/sysctl.d", "var/lib/dpkg/updates")
# The package database a lab host starts from: the machine's, copied into the host's own
# layer at provisioning, so later apt runs on the machine change nothing a lab host sees.
DPKG_STATE = ("status", "available", "diversions", "statoverride", "arch", "triggers/File", "triggers/Unincorp")


def hide_lower_dirs(upper: Path) -> None:
    """Make HIDDEN_DIRS opaque in a new host's upper layer, before its overlay is mounted.

    An opaque directory hides everything below it in the lower layer at once, where
    deleting through the overlay would write a whiteout for every file.
    """
    for rel in HIDDEN_DIRS:
        d = upper / rel
        d.mkdir(parents=True, exist_ok=True)
        os.setxattr(d, "trusted.overlay.opaque", b"y")
    (upper / "root").chmod(0o700)


def install_shims(root: Path, spec: AnySpec) -> None:
    """Install (or bring up to date) the vendor-tool shims in the host's own layer."""
    src = shim_source()
    shim_dir = root / SHIM_DIR
    shim_dir.mkdir(parents=True, exist_ok=True)
    _sync(src / "shimlib.py", shim_dir / "shimlib.py", 0o644)
    _compile_for_hosts(shim_dir / "shimlib.py")
    for tool in ("systemctl", "uname"):         # the real ones, which the shims call
        real = shim_dir / f"{tool}.real"
        if not real.exists() and Path(f"/usr/bin/{tool}").is_file() and not Path(f"/usr/bin/{tool}").is_symlink():
            shutil.copy2(f"/usr/bin/{tool}", real)
    tools = {"usr/bin/systemctl": "systemctl", "usr/bin/uname": "uname", f"{SHIM_DIR}/init": "init"}
    for name in ("reboot", "shutdown", "poweroff", "halt"):
        tools[f"usr/sbin/{name}"] = "systemctl"
    nvidia = spec.nvidia is not None
    if nvidia:
        tools["usr/bin/nvidia-smi"] = "nvidia-smi"
        if not spec.is_guest:
            tools["usr/bin/nvidia-persistenced"] = "nvidia-persistenced"
            tools["usr/bin/nvidia-modprobe"] = "nvidia-modprobe"
        if getattr(spec.nvidia, "fabricmanager", None) is not None:
            tools["usr/bin/nv-fabricmanager"] = "nv-fabricmanager"
    if not spec.is_guest:
        tools["usr/sbin/update-grub"] = "update-grub"
        tools["usr/sbin/update-initramfs"] = "update-initramfs"
        tools["usr/sbin/grub-probe"] = "grub-probe"     # the real grub-mkconfig asks it about the disk
    if spec.is_proxmox or (isinstance(spec, HostSpec) and spec.boot.loader in ("systemd-boot", "grub-esp")):
        # the contract's systemd-boot hosts keep their ESPs with proxmox-boot-tool
        tools["usr/sbin/proxmox-boot-tool"] = "proxmox-boot-tool"
    if spec.is_proxmox:
        tools["usr/sbin/pct"] = "pct"
        tools["usr/bin/pveversion"] = "pveversion"
    for dest, name in tools.items():
        _sync(src / name, root / dest, 0o755)
    # Python's view of the kernel release (the system Python's site-packages runs .pth lines)
    _install_site_hook(root, "gpuhost_lab_uname")
    if nvidia:
        # the driver's library (a container's NVIDIA userspace brings its own), answering from
        # the lab's model, and the host's CPUs for the threads that place themselves to measure
        _sync(lab_libcuda(), root / LIBCUDA, 0o644)
        _install_site_hook(root, "gpuhost_lab_sched")
    install_bytecode_cache(root, bytecode_cache() is not None)


# proxmox-kernel-helper: src/proxmox-boot/proxmox-boot-cleanup.service (its directives)
PROXMOX_BOOT_CLEANUP = ("[Unit]\nAfter=systemd-remount-fs.service\nConditionPathExists=/etc/kernel/next-boot-pin\n\n"
                        "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
                        "ExecStart=/usr/sbin/proxmox-boot-tool kernel unpin --next-boot\n"
                        "ExecStart=/usr/sbin/proxmox-boot-tool refresh\n\n[Install]\nWantedBy=multi-user.target\n")


# where Debian's libcuda1 (and NVIDIA's .run installer) puts the driver's library
LIBCUDA = "usr/lib/x86_64-linux-gnu/libcuda.so.1"


def lab_libcuda() -> Path:
    """The lab's libcuda.so.1, built from libcuda/libcuda.c with the machine's C compiler
    once per version of that source (kept in the user's cache, shared by every lab)."""
    source = Path(__file__).parent / "libcuda" / "libcuda.c"
    text = source.read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuhost"
    built = cache / f"libcuda-{hashlib.sha256(text).hexdigest()[:16]}.so.1"
    if built.is_file():
        return built
    cache.mkdir(parents=True, exist_ok=True)
    tmp = built.with_name(f"{built.name}.{os.getpid()}.tmp")
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("the lab's libcuda.so.1 needs a C compiler: apt install gcc")
    proc = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(tmp), str(source),
                           "-lm", "-lpthread"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building the lab's libcuda.so.1 failed: {proc.stderr.strip()[:300]}")
    os.replace(tmp, built)
    return built


def _install_site_hook(root: Path, name: str) -> Path:
    """A shim module in the host's site-packages and the .pth line that imports it at every
    start of the system Python; returns the module's path."""
    hook = root / PY_SITE / f"{name}.py"
    _sync(shim_source() / f"{name}.py", hook, 0o644)
    pth = root / PY_SITE / f"{name}.pth"
    if not pth.is_file() or pth.read_text() != f"import {name}\n":
        _write(root, f"{PY_SITE}/{name}.pth", f"import {name}\n")
    return hook


# `gpuhost lab up` with this set to a directory gives its hosts' Python a cache, kept there,
# of what it compiles from Ansible's module zips (shims/gpuhost_lab_bytecode.py): every host
# of every lab that names the same directory shares it. The test suite sets it, for speed;
# the benchmarks and the README's lab measure hosts as they are, without it
BYTECODE_CACHE_ENV = "GPUHOST_LAB_BYTECODE_CACHE"


def bytecode_cache() -> str | None:
    """The directory the hosts share their compiled module code in, made when first named."""
    directory = os.environ.get(BYTECODE_CACHE_ENV, "")
    if not directory or directory == "0":
        return None
    os.makedirs(directory, mode=0o700, exist_ok=True)
    return os.path.abspath(directory)


def install_bytecode_cache(root: Path, wanted: bool) -> None:
    """The cache's hook in the host's site-packages where wanted, and nowhere else: the
    supervisor's environment decides it at every boot (and init-outer mounts the directory
    at the hook's /run/gpuhost-lab-bytecode), so a lab is one thing or the other."""
    if wanted:
        _compile_for_hosts(_install_site_hook(root, "gpuhost_lab_bytecode"))
    else:
        hook = root / PY_SITE / "gpuhost_lab_bytecode.py"
        for path in (hook.with_suffix(".pth"), hook, Path(importlib.util.cache_from_source(str(hook)))):
            path.unlink(missing_ok=True)


def _compile_for_hosts(source: Path) -> None:
    """Byte-compile a module the shims import, as Debian's py3compile does a package's
    modules at install: a shim runs with sys.dont_write_bytecode (a tool run leaves nothing
    on the disk), so without this every run compiles it again. Only where this Python is the
    hosts' /usr/bin/python3 (the same bytecode); elsewhere the shims read the source."""
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        return
    cached = Path(importlib.util.cache_from_source(str(source)))
    if not cached.is_file() or cached.stat().st_mtime < source.stat().st_mtime:
        py_compile.compile(str(source), cfile=str(cached), doraise=True)


def _sync(src: Path, dest: Path, mode: int) -> None:
    data = src.read_bytes()
    if dest.is_symlink():
        dest.unlink()
    elif dest.exists() and dest.read_bytes() == data:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    dest.chmod(mode)


def os_release(spec: AnySpec) -> str:
    o = spec.os
    name = {"debian": "Debian GNU/Linux", "ubuntu": "Ubuntu"}.get(o.id, o.id.capitalize())
    return (f'PRETTY_NAME="{o.pretty_name}"\nNAME="{name}"\nVERSION_ID="{o.version_id}"\n'
            f'VERSION="{o.version_id} ({o.codename})"\nVERSION_CODENAME={o.codename}\nID={o.id}\n')


def sshd_config(addr: str) -> str:
    return f"""# gpuhost lab: this host's sshd listens on its own loopback address only
ListenAddress {addr}:22
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PidFile /run/sshd.pid
PrintMotd no
PrintLastLog no
UseDNS no
MaxStartups 200:30:400
MaxSessions 200
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""


# A non-root login with sudo, as production hosts are reached (Ansible's become). It takes
# the lab's client key like root; its uid stays clear of the machine's own users.
OPERATOR, OPERATOR_ID = "ops", 2742


def add_operator(root: Path, client_pub: str) -> None:
    for rel, line in (("etc/passwd", f"{OPERATOR}:x:{OPERATOR_ID}:{OPERATOR_ID}:lab operator:/home/{OPERATOR}:/bin/sh"),
                      ("etc/group", f"{OPERATOR}:x:{OPERATOR_ID}:"),
                      ("etc/shadow", f"{OPERATOR}:*:19000:0:99999:7:::")):
        path = root / rel
        text = path.read_text() if path.exists() else ""
        if not any(l.split(":", 1)[0] == OPERATOR for l in text.splitlines()):
            mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
            _write(root, rel, text + ("" if not text or text.endswith("\n") else "\n") + line + "\n", mode)
    home = root / "home" / OPERATOR
    _write(root, f"home/{OPERATOR}/.ssh/authorized_keys", client_pub, 0o600)
    for d in (home, home / ".ssh"):
        os.chown(d, OPERATOR_ID, OPERATOR_ID)
        d.chmod(0o700)
    os.chown(home / ".ssh/authorized_keys", OPERATOR_ID, OPERATOR_ID)
    _write(root, f"etc/sudoers.d/gpuhost-lab-{OPERATOR}", f"{OPERATOR} ALL=(ALL) NOPASSWD: ALL\n", 0o440)


def ships_sysctl_conf_link(spec: AnySpec) -> bool:
    """Debian's systemd up to 12 (bookworm) and Ubuntu's ship /etc/sysctl.d/99-sysctl.conf ->
    ../sysctl.conf; Debian 13 (trixie, PVE 9) ships neither the link nor /etc/sysctl.conf."""
    o = spec.os
    if o.id == "debian":
        try:
            return int(str(o.version_id).split(".")[0]) <= 12
        except ValueError:
            return False
    return o.id == "ubuntu"


def sysctl_layout(root: Path, spec: AnySpec) -> None:
    """The sysctl files the distribution's own packages lay out (etc/sysctl.d is hidden from
    the machine underneath, so each host gets only what its OS ships)."""
    link = root / "etc/sysctl.d/99-sysctl.conf"
    if ships_sysctl_conf_link(spec):
        if not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("../sysctl.conf")
    else:
        if link.is_symlink():
            link.unlink()
        if spec.os.id == "debian" and (root / "etc/sysctl.conf").is_file():
            (root / "etc/sysctl.conf").unlink()         # trixie's procps no longer ships it


def provision(root: Path, spec: AnySpec, addr: str, host_key: Path, client_pub: str) -> None:
    """Lay out a new host's disk. Idempotent; writes only through *root*."""
    _write(root, "etc/hostname", spec.hostname + "\n")
    _write(root, "etc/hosts", f"127.0.0.1\tlocalhost\n{addr}\t{spec.hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    _write(root, "etc/os-release", os_release(spec))
    _write(root, "etc/ssh/sshd_config", sshd_config(addr))
    _write(root, "etc/ssh/ssh_host_ed25519_key", host_key.read_bytes(), 0o600)
    _write(root, "etc/ssh/ssh_host_ed25519_key.pub", host_key.with_suffix(".pub").read_bytes())
    # root's home is the host's own (hidden_lower_dirs), with Debian's default dotfiles
    for name in ("bashrc", "profile"):
        skel = Path(f"/usr/share/base-files/dot.{name}")
        if skel.is_file():
            _write(root, f"root/.{name}", skel.read_bytes())
    (root / "root/.ssh").mkdir(parents=True, exist_ok=True)
    (root / "root/.ssh").chmod(0o700)
    _write(root, "root/.ssh/authorized_keys", client_pub, 0o600)
    add_operator(root, client_pub)
    # the machine underneath: not a container marker, no network sources, none of its enabled services
    for marker in (".dockerenv", "run/.containerenv"):
        if (root / marker).is_file():
            (root / marker).unlink()
    if (root / "etc/apt/sources.list").exists():
        (root / "etc/apt/sources.list").unlink()
    (root / REPO_MOUNT).mkdir(parents=True, exist_ok=True)
    _write(root, "etc/apt/sources.list.d/gpuhost-lab.list",
           f"# the lab's local kernel repository\ndeb [trusted=yes] file:/{REPO_MOUNT} ./\n")
    _write(root, "etc/apt/apt.conf.d/99gpuhost-lab", 'APT::Sandbox::User "root";\nAcquire::Languages "none";\n')
    for name in DPKG_STATE:
        path = root / "var/lib/dpkg" / name
        if path.is_file():
            _write(root, f"var/lib/dpkg/{name}", path.read_bytes(), path.stat().st_mode & 0o777)
    install_shims(root, spec)
    if isinstance(spec, HostSpec):
        _provision_host(root, spec, real_grub_mkconfig)
    else:
        _provision_guest(root, spec)
    write_spec_files(root, spec.files)
    build_initramfs(root, spec)
    _write(root, "var/lib/gpuhost-lab/provisioned", spec.hostname + "\n")


UNIT_DIRS = ("/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")


def write_spec_files(root: Path, files: dict[str, str]) -> None:
    """A spec's files; one in a .wants/ or .requires/ directory that names a unit the spec
    also ships is written as `systemctl enable` makes it (systemd.unit(5), [Install]): a link
    to that unit file, not a copy of it."""
    for path, content in files.items():
        parent, name = os.path.split(path)
        target = next((f"{d}/{name}" for d in UNIT_DIRS if f"{d}/{name}" in files and f"{d}/{name}" != path), None)
        if parent.endswith((".wants", ".requires")) and target and files[target] == content:
            link = inside(root, parent.strip("/")) / name
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)
        else:
            _write(root, path, content)


def sh_double_quoted(value: str) -> str:
    """*value* as a double-quoted shell word, as an admin writes it in /etc/default/grub
    (`"quiet acpi_osi=\\"Windows 2015\\""`): what the shell reads back is *value* exactly."""
    return '"' + "".join("\\" + c if c in '"\\$`' else c for c in value) + '"'


ROOT_ARG = re.compile(r"(?:^|\s)root=(\S+)")


def grub_default_args(cmdline: str) -> str:
    """The spec's command line as /etc/default/grub holds it: without root= and ro, which
    grub-mkconfig's 10_linux puts on every linux line itself (root=<device> ro)."""
    return " ".join(re.sub(r"(?:^|\s)(?:root=\S+|ro)(?=\s|$)", " ", cmdline).split())


def grub_device(spec: HostSpec) -> dict:
    """The root device the host's grub-probe reports, so that 10_linux writes the spec's
    root= (root=UUID=..., root=ZFS=..., /dev/...); without one, an LVM root as the Proxmox
    VE and Debian installers make it. The file-system UUID is the host's own (GRUB's entry
    ids carry it: gnulinux-<release>-advanced-<uuid>)."""
    m = ROOT_ARG.search(spec.boot.cmdline)
    given = m.group(1) if m else None
    fs_uuid = given[5:] if given and given.startswith("UUID=") else \
        str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{spec.hostname}.root.gpuhost-lab.invalid"))
    vg = "pve" if spec.is_proxmox else spec.hostname.replace("-", "--") + "--vg"
    device = given or f"/dev/mapper/{vg}-root"
    lvm = device.startswith("/dev/mapper/")
    return {"device": device, "fs_uuid": fs_uuid, "abstraction": "lvm" if lvm else "",
            "compatibility_hint": "lvmid/3pNoJN-HBLW-3wNo-n0bn-XBGW-XHHa-m3Sdnm/3M9AR2-PpJ4-JzJG-ehUl-hJbn-4QTK-PQ1wD8" if lvm else ""}


def real_grub_mkconfig(root: Path, out: str) -> None:
    """The real grub-mkconfig (Debian's grub-common), run in the host's root as its
    update-grub runs it; the lab's grub-probe in that root answers for the disk. Needs
    the lab's own mount namespace (the supervisor's): /dev is bound in for the run."""
    dev = root / "dev"
    dev.mkdir(exist_ok=True)
    subprocess.run(["mount", "--rbind", "/dev", str(dev)], check=True, capture_output=True)
    try:
        res = subprocess.run(["chroot", str(root), "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                              "LANG=C.UTF-8", "/usr/bin/python3", "-c",
                              "import sys; sys.path.insert(0, '/usr/lib/gpuhost-lab'); import shimlib; "
                              f"shimlib.run_grub_mkconfig({out!r})"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True)
    finally:
        subprocess.run(["umount", "-R", str(dev)], capture_output=True)
    if res.returncode != 0:
        raise RuntimeError(f"grub-mkconfig in {root}: {res.stderr.strip()[-400:]}")


def python_grub_mkconfig(root: Path, out: str) -> None:
    """grub.cfg in grub-mkconfig's layout, where the real one cannot run (unit-speed scenarios)."""
    shimlib.write_grub_cfg(str(root), out)


# Where `make system-deps` keeps the real unattended-upgrades package (apt-get download): a lab
# host gets its files and its dpkg entry, never its services
LAB_DEBS = Path("/var/cache/gpuhost-lab")


def _deb(name: str) -> Path:
    debs = sorted(LAB_DEBS.glob(f"{name}_*.deb"))
    if not debs:
        raise RuntimeError(f"no {name} package in {LAB_DEBS}: run `make system-deps`")
    return debs[-1]


def _deb_file(deb: Path, member: str) -> bytes:
    import tarfile
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        return t.extractfile("./" + member.lstrip("/")).read()


def driver_packages(spec: HostSpec) -> list[tuple[str, str]]:
    """The NVIDIA driver's packages as the distribution names them, at the userspace version."""
    nv = spec.nvidia
    major = nv.userspace.split(".")[0]
    if spec.os.id == "ubuntu":
        version = f"{nv.userspace}-0ubuntu0.{spec.os.version_id}.1"
        return [(f"{n}-{major}", version) for n in ("nvidia-driver", "libnvidia-compute", "nvidia-utils", "nvidia-dkms")]
    return [(n, f"{nv.userspace}-1") for n in ("nvidia-driver", "nvidia-kernel-dkms", "libnvidia-ml1", "nvidia-smi")]


def provision_unattended_upgrades(root: Path, spec: HostSpec) -> None:
    """unattended-upgrades as its package's postinst leaves it with debconf's default (enable
    automatic updates: true): 50unattended-upgrades and 20auto-upgrades copied by ucf from
    /usr/share/unattended-upgrades, and the package installed in dpkg's status; the NVIDIA
    driver's packages installed beside it, as a distribution's driver is."""
    deb = _deb("unattended-upgrades")
    for name in ("50unattended-upgrades", "20auto-upgrades"):
        _write(root, f"etc/apt/apt.conf.d/{name}", _deb_file(deb, f"usr/share/unattended-upgrades/{name}"))
    control = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version", "Architecture", "Maintainer",
                              "Installed-Size", "Depends", "Description"], capture_output=True, text=True, check=True).stdout
    stanzas = [control.replace("Package: unattended-upgrades\n", "Package: unattended-upgrades\nStatus: install ok installed\n", 1)]
    if spec.nvidia:
        for name, version in driver_packages(spec):
            stanzas.append(f"Package: {name}\nStatus: install ok installed\nPriority: optional\nSection: non-free/libs\n"
                           f"Architecture: amd64\nVersion: {version}\nDescription: NVIDIA driver ({name}, gpuhost lab)\n")
    status = root / "var/lib/dpkg/status"
    before = status.read_text() if status.exists() else ""
    _write(root, "var/lib/dpkg/status", before.rstrip("\n") + ("\n\n" if before.strip() else "")
           + "\n".join(s.rstrip("\n") + "\n" for s in stanzas))


FM_UNIT = "nvidia-fabricmanager.service"


def provision_fabricmanager(root: Path, spec: HostSpec) -> None:
    """NVIDIA Fabric Manager as its package installs it: the unit (a stand-in with the
    package's unit name and daemon, as the Fabric Manager User Guide names them), its config
    file, the package in dpkg's status at its version, and the unit enabled when the spec says."""
    fm = spec.nvidia.fabricmanager
    version = fm.version or spec.nvidia.kernel_module
    _write(root, f"usr/lib/systemd/system/{FM_UNIT}",
           "[Unit]\nDescription=NVIDIA fabric manager service\n\n[Service]\n"
           "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n"
           "Type=forking\nTimeoutStartSec=240\n\n[Install]\nWantedBy=multi-user.target\n")
    _write(root, "usr/share/nvidia/nvswitch/fabricmanager.cfg", "LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\n")
    status = root / "var/lib/dpkg/status"
    before = status.read_text() if status.exists() else ""
    _write(root, "var/lib/dpkg/status", before.rstrip("\n") + ("\n\n" if before.strip() else "")
           + f"Package: nvidia-fabricmanager-{version.split('.')[0]}\nStatus: install ok installed\nPriority: optional\n"
           f"Section: multiverse/libs\nArchitecture: amd64\nVersion: {version}-1\n"
           "Description: Fabric Manager for NVSwitch based systems (gpuhost lab)\n")
    if fm.enabled:
        link = root / "etc/systemd/system/multi-user.target.wants" / FM_UNIT
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(f"/usr/lib/systemd/system/{FM_UNIT}")


def provision_uvm_recipe(root: Path) -> None:
    """What a Proxmox host that passes GPUs to containers usually has so that CUDA's nodes exist
    at boot (the recipe posted in Proxmox forum threads on NVIDIA in LXC): nvidia and nvidia_uvm
    in modules-load.d, and a udev rule that runs nvidia-modprobe -c0 -u once nvidia_uvm loads."""
    _write(root, "etc/modules-load.d/nvidia.conf", "nvidia\nnvidia_uvm\n")
    _write(root, "etc/udev/rules.d/70-nvidia.rules",
           'KERNEL=="nvidia", RUN+="/bin/bash -c \'/usr/bin/nvidia-smi -L && /bin/chmod 666 /dev/nvidia*\'"\n'
           'KERNEL=="nvidia_uvm", RUN+="/bin/bash -c \'/usr/bin/nvidia-modprobe -c0 -u && /bin/chmod 0666 /dev/nvidia-uvm*\'"\n')


def lay_out_cuda_runtime(root: Path, rt) -> None:
    """A CUDA runtime as its package lays it out: the toolkit's version.json (CUDA 11.1+: one
    {name, version} per component) and targets/<arch>/lib/libcudart.so.X.Y.Z with its SONAME
    link, /usr/local/cuda pointing at it (update-alternatives in NVIDIA's packages); torch's
    generated torch/version.py; the nvidia-cuda-runtime-cuXX wheel's dist-info and library."""
    full = rt.version if rt.version.count(".") == 2 else rt.version + ".0"
    major = full.split(".")[0]
    base = rt.path.lstrip("/")
    if rt.what == "toolkit":
        _write(root, f"{base}/version.json", json.dumps({
            "cuda": {"name": "CUDA SDK", "version": full},
            "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": full}}, indent=3) + "\n")
        lib = root / base / "targets/x86_64-linux/lib"
        _write(root, f"{base}/targets/x86_64-linux/lib/libcudart.so.{full}", b"\x7fELF cudart (gpuhost lab)\n")
        if not (lib / f"libcudart.so.{major}").is_symlink():
            (lib / f"libcudart.so.{major}").symlink_to(f"libcudart.so.{full}")
        link = root / "usr/local/cuda"
        if not link.is_symlink() and not link.exists():
            link.symlink_to(rt.path.rsplit("/", 1)[1])
    elif rt.what == "torch":
        tag = "cu" + rt.version.replace(".", "")[:3]
        _write(root, f"{base}/torch/version.py", (
            "from typing import Optional\n\n"
            "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']\n"
            f"__version__ = '{rt.torch}+{tag}'\ndebug = False\ncuda: Optional[str] = '{rt.version}'\n"
            "git_version = '0000000000000000000000000000000000000000'\nhip: Optional[str] = None\n"
            "xpu: Optional[str] = None\n"))
    else:
        info = f"{base}/nvidia_cuda_runtime_cu{major}-{full}.dist-info"
        _write(root, f"{info}/METADATA", f"Metadata-Version: 2.1\nName: nvidia-cuda-runtime-cu{major}\nVersion: {full}\n")
        _write(root, f"{base}/nvidia/cuda_runtime/lib/libcudart.so.{major}", b"\x7fELF cudart (gpuhost lab)\n")


def build_initramfs(root: Path, spec: HostSpec) -> None:
    """Each kernel's initramfs on a ZFS root, built with the modprobe.d files the host was set
    up with (its spec's files included): what the zfs module reads at boot."""
    if isinstance(spec, HostSpec) and spec.zfs_root:
        for rel in shimlib.installed_kernels(str(root)):
            _write(root, f"boot/initrd.img-{rel}", shimlib.initramfs_image(str(root)))


def _provision_host(root: Path, spec: HostSpec, mkconfig=python_grub_mkconfig) -> None:
    sysctl_layout(root, spec)
    if spec.os.unattended_upgrades:
        provision_unattended_upgrades(root, spec)
    if spec.nvidia and spec.nvidia.fabricmanager:
        provision_fabricmanager(root, spec)
    if spec.nvidia and spec.nvidia.uvm_at_boot and spec.is_proxmox:
        provision_uvm_recipe(root)
    for rt in spec.runtimes:
        lay_out_cuda_runtime(root, rt)
    if spec.zfs is not None and spec.zfs.arc_max is not None:
        # the PVE installer's file (8.1+): the ARC limit in bytes
        _write(root, "etc/modprobe.d/zfs.conf", f"options zfs zfs_arc_max={spec.zfs.arc_max}\n")
    for rel in spec.kernel.installed:
        _write(root, f"boot/vmlinuz-{rel}", b"gpuhost-lab kernel image " + rel.encode() + b"\n")
        _write(root, f"boot/config-{rel}", kernel_config(spec))
        (root / f"lib/modules/{rel}").mkdir(parents=True, exist_ok=True)
        # the driver was built for the kernels the machine came with
        _write(root, f"usr/src/linux-headers-{rel}/Makefile", f"VERSION = {rel}\n")
        if spec.nvidia:
            where = "updates/dkms" if spec.nvidia.dkms else "kernel/drivers/video"
            _write(root, f"lib/modules/{rel}/{where}/nvidia.ko", f"nvidia {spec.nvidia.kernel_module} for {rel} (gpuhost lab)\n")
    if spec.nvidia and spec.nvidia.dkms:
        (root / f"var/lib/dkms/nvidia/{spec.nvidia.kernel_module}/source").mkdir(parents=True, exist_ok=True)
        _write(root, f"var/lib/dkms/nvidia/{spec.nvidia.kernel_module}/source/dkms.conf",
               f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{spec.nvidia.kernel_module}"\nAUTOINSTALL="yes"\n')
        hook = DKMS_HOOK.format(builds_up_to=spec.nvidia.builds_up_to or "", version=spec.nvidia.kernel_module)
        _write(root, "etc/kernel/header_postinst.d/dkms", hook, 0o755)
        _write(root, "etc/kernel/postinst.d/dkms", hook, 0o755)
    kernels = shimlib.installed_kernels(str(root))
    # initramfs-tools' kernel hook: a new kernel gets its initramfs as it is installed
    _write(root, "etc/kernel/postinst.d/initramfs-tools",
           '#!/bin/sh\n# the lab\'s stand-in for initramfs-tools\' hook\n[ -n "$1" ] || exit 0\n'
           'exec update-initramfs -c -k "$1" >&2\n', 0o755)
    if spec.kernel.pinned:
        _write(root, "etc/kernel/proxmox-boot-pin", spec.kernel.pinned + "\n")
    _write(root, "etc/kernel/postinst.d/zz-update-grub", ZZ_UPDATE_GRUB, 0o755)
    if spec.is_proxmox:
        _write(root, "etc/kernel/postinst.d/zz-proxmox-boot", ZZ_PROXMOX_BOOT, 0o755)
        # proxmox-kernel-helper's unit that undoes a next-boot pin at the boot that used it;
        # its work is the lab's supervisor's at boot (kernel.clear_next_boot_pin), so it is
        # laid out for systemctl and the probe to see, not linked into multi-user.target.wants
        _write(root, "lib/systemd/system/proxmox-boot-cleanup.service", PROXMOX_BOOT_CLEANUP)
        _write(root, "var/lib/gpuhost-lab/proxmox_ve", spec.os.proxmox_ve + "\n")
        # pve-manager's build fills these in (PVE/pvecfg.pm.in); pveversion prints them
        release = ".".join(spec.os.proxmox_ve.split(".")[:2])
        _write(root, "usr/share/perl5/PVE/pvecfg.pm",
               f"package PVE::pvecfg;\n\nuse strict;\nuse warnings;\n\nsub package {{\n    return 'pve-manager';\n}}\n\n"
               f"sub version {{\n    return '{spec.os.proxmox_ve}';\n}}\n\nsub release {{\n    return '{release}';\n}}\n\n"
               f"sub repoid {{\n    return 'faa83925c9641325';\n}}\n\n1;\n")
    if spec.boot.loader in ("systemd-boot", "grub-esp"):
        # the installer writes /etc/kernel/cmdline either way; GRUB-mode ESPs do not read it
        _write(root, "etc/kernel/cmdline", spec.boot.cmdline + "\n")
        _write(root, "etc/kernel/proxmox-boot-uuids", ESP_UUID + "\n")
        _write(root, shimlib.ESP.lstrip("/") + "/mode", ("grub" if spec.boot.loader == "grub-esp" else "uefi") + "\n")
    if spec.boot.loader == "systemd-boot":
        shimlib.esp_refresh(kernels, spec.boot.cmdline, spec.kernel.pinned, root=str(root))
    else:
        _write(root, "etc/default/grub", (
            "# If you change this file, run 'update-grub' afterwards to update\n# /boot/grub/grub.cfg.\n\n"
            f"GRUB_DEFAULT={spec.boot.grub_default}\nGRUB_TIMEOUT=5\n"
            "GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`\n"
            f'GRUB_CMDLINE_LINUX_DEFAULT={sh_double_quoted(grub_default_args(spec.boot.cmdline))}\n'
            'GRUB_CMDLINE_LINUX=""\n'))
        (root / "etc/default/grub.d").mkdir(parents=True, exist_ok=True)
        if spec.is_proxmox:
            _write(root, "etc/default/grub.d/proxmox-ve.cfg", 'GRUB_DISTRIBUTOR="Proxmox VE"\n')
        (root / "boot/grub").mkdir(parents=True, exist_ok=True)
        _write(root, shimlib.GRUB_PROBE_CONF.lstrip("/"), shimlib.grub_probe_conf(grub_device(spec)))
        out = shimlib.ESP_GRUB_CFG if spec.boot.loader == "grub-esp" else shimlib.GRUB_CFG
        # a pin is GRUB's default entry by id (proxmox-kernel-helper's set_grub_default): the
        # id is in grub.cfg, so the first grub.cfg is made before the pin is written
        mkconfig(root, out)
        if spec.kernel.pinned:
            shimlib.set_grub_default(spec.kernel.pinned, root=str(root))
            mkconfig(root, out)
    if spec.is_proxmox:
        node = f"etc/pve/nodes/{spec.hostname}"
        (root / node / "lxc").mkdir(parents=True, exist_ok=True)
        (root / node / "qemu-server").mkdir(parents=True, exist_ok=True)
        for link, target in (("etc/pve/lxc", f"nodes/{spec.hostname}/lxc"),
                             ("etc/pve/qemu-server", f"nodes/{spec.hostname}/qemu-server"),
                             ("etc/pve/local", f"nodes/{spec.hostname}")):
            if not (root / link).is_symlink():
                os.symlink(target, root / link)
        for ct in spec.lxc:
            _write(root, f"{node}/lxc/{ct.vmid}.conf", ct.config, 0o640)


def kernel_config(spec: HostSpec) -> str:
    """The parts of /boot/config-<release> the audit reads: the default cpufreq governor."""
    gov = spec.cpu.governor_default.upper()
    return f"CONFIG_X86_AMD_PSTATE=y\nCONFIG_NUMA_BALANCING=y\nCONFIG_CPU_FREQ_DEFAULT_GOV_{gov}=y\n"


def _provision_guest(root: Path, spec: GuestSpec) -> None:
    """A container has no kernel or boot loader of its own: beyond the common part, only
    what its OS ships."""
    sysctl_layout(root, spec)
    for rt in spec.runtimes:
        lay_out_cuda_runtime(root, rt)
