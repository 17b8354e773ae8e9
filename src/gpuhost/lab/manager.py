"""Bring a lab up, look at it, reboot its hosts and take it down (the ``gpuhost lab`` verbs)."""
from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import yaml

from .aptrepo import build_repository
from .layout import LabLayout, default_dir
from .provision import kernel_config
from .spec import GuestSpec, HostSpec, SpecError, load_specs

NETWORK = "127.0.1"          # the lab's loopback network; nothing of it listens elsewhere
CLAIMS = Path("/run/gpuhost-lab") if Path("/run").is_dir() else Path("/tmp/gpuhost-lab")
# `lab up` waits this long for its hosts to boot (the spec limits keep a host's boot to seconds)
BRING_UP_LIMIT_S = 120
BRING_UP_PER_HOST_S = 10
REQUIRED_TOOLS = ("unshare", "mount", "fusermount3", "ssh", "ssh-keygen", "dpkg-deb", "apt-get")


class LabError(RuntimeError):
    """Something about the lab is wrong; the message is one line for the user."""


# ---- preflight --------------------------------------------------------------------------
def preflight() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (namespaces, overlay and FUSE mounts); run as root")
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if not Path("/usr/sbin/sshd").exists():
        missing.append("sshd (apt-get install openssh-server)")
    if not Path("/dev/fuse").exists():
        missing.append("/dev/fuse")
    if not Path("/usr/bin/python3").exists():
        missing.append("/usr/bin/python3")
    if missing:
        raise LabError("the lab needs: " + ", ".join(missing))


# ---- addresses -------------------------------------------------------------------------
@contextmanager
def _claims_locked():
    """Serialise address claims across labs. The lock is on the claims directory's parent,
    which outlives it, so removing an empty claims directory cannot split the lock."""
    fd = os.open(CLAIMS.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        CLAIMS.mkdir(parents=True, exist_ok=True)
        yield
    finally:
        os.close(fd)


def _claim_owner_alive(claim: Path) -> bool:
    """A claim holds while its lab's directory exists: from before `lab up` claims (the
    directory is made first) until `lab down` has released it."""
    try:
        owner = LabLayout(claim.read_text().strip())
    except OSError:
        return False
    return owner.dir.is_dir()


def _port_free(addr: str) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, 22))
            return True
        except OSError:
            return False


def claim_addresses(layout: LabLayout, count: int) -> list[str]:
    """Take *count* free 127.0.1.N addresses for this lab, safely across parallel labs."""
    out: list[str] = []
    with _claims_locked():
        for n in range(1, 255):
            if len(out) == count:
                break
            addr = f"{NETWORK}.{n}"
            claim = CLAIMS / addr
            if claim.exists() and _claim_owner_alive(claim):
                continue
            if not _port_free(addr):
                continue
            claim.write_text(str(layout.dir) + "\n")
            out.append(addr)
    if len(out) < count:
        release_addresses(layout)
        raise LabError(f"no free addresses left in {NETWORK}.0/24 for {count} hosts")
    return out


def release_addresses(layout: LabLayout) -> None:
    if not CLAIMS.is_dir():
        return
    with _claims_locked():
        for claim in CLAIMS.glob(f"{NETWORK}.*"):
            try:
                if claim.read_text().strip() == str(layout.dir):
                    claim.unlink()
            except OSError:
                pass
        tag = control_path(layout).removesuffix("%C").rsplit("/", 1)[1]
        for sock in CLAIMS.glob(f"{tag}*"):
            sock.unlink(missing_ok=True)
        if not any(CLAIMS.iterdir()):
            CLAIMS.rmdir()


# ---- the supervisor ---------------------------------------------------------------------
def supervisor_pid(layout: LabLayout) -> int | None:
    try:
        pid = int(layout.pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if b"gpuhost.lab.supervisor" in cmdline and str(layout.dir).encode() in cmdline:
        return pid
    return None


def request(layout: LabLayout, op: str, timeout: float = 300, **kw) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(str(layout.socket))
        except OSError as exc:
            raise LabError(f"the lab in {layout.dir} is not running ({exc.strerror})") from None
        s.sendall((json.dumps({"op": op, **kw}) + "\n").encode())
        data = s.makefile().readline()
    if not data:
        raise LabError(f"the lab in {layout.dir} closed the connection")
    return json.loads(data)


def _start_supervisor(layout: LabLayout) -> None:
    out = open(layout.dir / "supervisor.out", "ab")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    subprocess.Popen(["unshare", "--mount", "--propagation", "private", sys.executable, "-m",
                      "gpuhost.lab.supervisor", str(layout.dir)],
                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                     env=env, cwd="/")
    out.close()
    deadline = time.monotonic() + 30
    while not layout.socket.exists():
        if time.monotonic() > deadline:
            tail = (layout.dir / "supervisor.out").read_text(errors="replace").strip().splitlines()[-1:]
            raise LabError(f"the lab's supervisor did not start: {' '.join(tail) or 'no output'}")
        time.sleep(0.02)


# ---- up ---------------------------------------------------------------------------------
def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)


def up(spec_paths: list[str], directory: str | Path | None = None) -> Path:
    """Bring up one simulated host per spec; return the inventory's path."""
    if not spec_paths:
        raise LabError("lab up needs at least one host spec")
    try:
        specs = load_specs(spec_paths)
    except SpecError as exc:
        raise LabError(str(exc)) from None
    layout = LabLayout(directory or default_dir())
    if layout.state_file.exists():
        names = ", ".join(h["name"] for h in json.loads(layout.state_file.read_text())["hosts"])
        if supervisor_pid(layout):
            raise LabError(f"a lab is already up in {layout.dir} ({names}); take it down first: gpuhost lab down --dir {layout.dir}")
        raise LabError(f"{layout.dir} holds a lab that is not running ({names}); clear it: gpuhost lab down --dir {layout.dir}")
    if layout.dir.exists() and any(layout.dir.iterdir()):
        raise LabError(f"{layout.dir} is not empty and holds no lab; choose another --dir")
    preflight()
    layout.dir.mkdir(parents=True, exist_ok=True)
    layout.dir.chmod(0o700)
    limit = BRING_UP_LIMIT_S + BRING_UP_PER_HOST_S * len(specs)
    try:
        with _terminate_as_interrupt():
            addrs = claim_addresses(layout, len(specs))
            _prepare(layout, specs, spec_paths, addrs)
            _start_supervisor(layout)
            try:
                reply = request(layout, "status", wait=True, wait_s=limit, timeout=limit + 10)
            except TimeoutError:
                raise LabError(f"the lab did not come up within its limit of {limit} s") from None
            if not reply.get("booted", True):
                pending = ", ".join(n for n, h in reply["hosts"].items() if h["state"] != "up")
                raise LabError(f"the lab did not come up within its limit of {limit} s (still booting: {pending})")
            failed = {n: h for n, h in reply["hosts"].items() if h["state"] != "up"}
            if failed:
                name, h = next(iter(failed.items()))
                raise LabError(f"{name} did not boot: {h['error'] or h['state']}")
            _write_inventory(layout, specs, addrs)
            request(layout, "adopt", timeout=30)
    except BaseException:
        _teardown(layout)
        raise
    return layout.inventory


@contextmanager
def _terminate_as_interrupt():
    """SIGTERM and SIGHUP during `lab up` tear the half-made lab down, as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _prepare(layout: LabLayout, specs, spec_paths: list[str], addrs: list[str]) -> None:
    (layout.dir / "specs").mkdir()
    layout.ssh_dir.mkdir(mode=0o700)
    _keygen(layout.client_key, "gpuhost-lab")
    known = []
    for spec, path, addr in zip(specs, spec_paths, addrs, strict=True):
        shutil.copyfile(path, layout.spec_copy(spec.hostname))
        layout.host_dir(spec.hostname).mkdir(parents=True)
        _keygen(layout.host_key(spec.hostname), spec.hostname)
        pub = layout.host_key(spec.hostname).with_suffix(".pub").read_text().split()
        known.append(f"{addr} {pub[0]} {pub[1]}\n")
        if isinstance(spec, HostSpec):
            # Debian's newer kernel series come from <codename>-backports; the lab's repository is that suite
            suite = f"{spec.os.codename}-backports" if spec.os.id == "debian" and not spec.is_proxmox else "lab"
            build_repository(spec.kernel.repository, layout.repo(spec.hostname), kernel_config(spec), suite)
    layout.known_hosts.write_text("".join(known))
    bmcs = [(spec, addr) for spec, addr in zip(specs, addrs, strict=True) if isinstance(spec, HostSpec) and spec.bmc]
    if bmcs:
        # the lab's CA, and each BMC's certificate for its address (wrong_certificate: for another)
        from .bmc import make_ca, make_certificate
        ca = make_ca(layout.dir / "bmc-ca")
        for spec, addr in bmcs:
            ip = "127.0.1.255" if "wrong_certificate" in spec.bmc.faults else addr
            make_certificate(layout.host_dir(spec.hostname) / "bmc", ca, ip)
    hosts = [{"name": s.hostname, "kind": s.kind, "addr": a,
              "parent": s.parent if isinstance(s, GuestSpec) else None} for s, a in zip(specs, addrs, strict=True)]
    layout.state_file.write_text(json.dumps({"version": 1, "hosts": hosts, "created": time.time()}, indent=2) + "\n")


def _write_inventory(layout: LabLayout, specs, addrs: list[str]) -> None:
    hosts = {}
    groups: dict[str, dict] = {"proxmox": {}, "lxc_guests": {}, "gpu_hosts": {}}
    for spec, addr in zip(specs, addrs, strict=True):
        hosts[spec.hostname] = {"ansible_host": addr, "gpuhost_lab_kind": spec.kind}
        if isinstance(spec, HostSpec) and spec.bmc is not None:
            # how an operator gives a BMC (README: BIOS settings through the BMC): its address, the
            # account, the CA its certificate chains to; here the lab's
            hosts[spec.hostname].update(gpuhost_bmc_address=addr, gpuhost_bmc_username=spec.bmc.username,
                                        gpuhost_bmc_password=spec.bmc.password,
                                        gpuhost_bmc_ca=str(layout.dir / "bmc-ca" / "ca.crt"))
        if isinstance(spec, GuestSpec):
            hosts[spec.hostname]["gpuhost_lab_parent"] = spec.parent
            groups["lxc_guests"][spec.hostname] = None
        else:
            if spec.is_proxmox:
                groups["proxmox"][spec.hostname] = None
            if spec.nvidia and spec.nvidia.gpus:
                groups["gpu_hosts"][spec.hostname] = None
    ssh_args = (f"-o UserKnownHostsFile={layout.known_hosts} -o StrictHostKeyChecking=yes "
                f"-o IdentitiesOnly=yes -o ControlMaster=auto -o ControlPersist=60s -o ControlPath={control_path(layout)}")
    inventory = {"all": {
        "hosts": hosts,
        "vars": {"ansible_user": "root", "ansible_port": 22,
                 "ansible_python_interpreter": "/usr/bin/python3",
                 "ansible_ssh_private_key_file": str(layout.client_key),
                 "ansible_ssh_common_args": ssh_args,
                 "gpuhost_lab_dir": str(layout.dir)},
        "children": {g: {"hosts": members} for g, members in groups.items()},
    }}
    layout.inventory.write_text("# written by `gpuhost lab up`; the lab's hosts, over real SSH\n"
                                + yaml.safe_dump(inventory, sort_keys=False, default_flow_style=False))
    layout.ssh_config.write_text("".join(
        f"Host {s.hostname}\n  HostName {a}\n  User root\n  IdentityFile {layout.client_key}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {layout.known_hosts}\n  StrictHostKeyChecking yes\n\n"
        for s, a in zip(specs, addrs, strict=True)))


# ---- the other verbs -----------------------------------------------------------------------
def _existing(directory: str | Path | None) -> LabLayout:
    layout = LabLayout(directory or default_dir())
    if not layout.state_file.exists():
        raise LabError(f"no lab in {layout.dir}")
    return layout


def status(directory: str | Path | None = None) -> dict:
    layout = _existing(directory)
    if supervisor_pid(layout) is None:
        hosts = json.loads(layout.state_file.read_text())["hosts"]
        return {"running": False, "dir": str(layout.dir),
                "hosts": {h["name"]: {"state": "down", "addr": h["addr"], "kind": h["kind"]} for h in hosts}}
    reply = request(layout, "status")
    return {"running": True, "dir": str(layout.dir), "hosts": reply["hosts"]}


def reboot(host: str, directory: str | Path | None = None) -> dict:
    layout = _existing(directory)
    reply = request(layout, "reboot", host=host)
    if not reply.get("ok"):
        raise LabError(f"{host}: {reply.get('error') or 'did not come back up'}")
    return reply["hosts"][host]


def snapshot(host: str, directory: str | Path | None = None) -> dict[str, bytes | str]:
    """Every rendered /sys and model-owned /proc file of *host*, for before/after comparisons."""
    layout = _existing(directory)
    reply = request(layout, "snapshot", host=host)
    if not reply.get("ok"):
        raise LabError(f"{host}: {reply.get('error')}")
    return {p: (v if v.startswith("-> ") else base64.b64decode(v)) for p, v in reply["snapshot"].items()}


def down(directory: str | Path | None = None) -> None:
    layout = LabLayout(directory or default_dir())
    if not layout.state_file.exists() and not _leftovers(layout) and not _claimed_by(layout):
        raise LabError(f"no lab in {layout.dir}")
    # also a lab whose directory lost its files (removed under it): what still runs goes
    _teardown(layout)


def _claimed_by(layout: LabLayout) -> list[Path]:
    if not CLAIMS.is_dir():
        return []
    return [c for c in CLAIMS.glob(f"{NETWORK}.*") if c.read_text().strip() == str(layout.dir)]


def _alive(pid: int) -> bool:
    """True while *pid* runs; a zombie (our own exited child, not yet reaped) is not alive."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _teardown(layout: LabLayout) -> None:
    pid = supervisor_pid(layout)
    if pid is not None:
        try:
            request(layout, "down", timeout=60)
        except (LabError, OSError):
            pass
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
            time.sleep(0.2)
    _kill_leftovers(layout)
    release_addresses(layout)
    shutil.rmtree(layout.dir, ignore_errors=True)


def control_path(layout: LabLayout) -> str:
    """Where SSH keeps the lab's shared connections: short (a socket path has 108 bytes)
    and the lab's own."""
    tag = hashlib.sha1(str(layout.dir).encode()).hexdigest()[:10]
    return f"{CLAIMS}/cm-{tag}-%C"


def _leftovers(layout: LabLayout) -> list[int]:
    """Processes of this lab by their command line: a supervisor, hosts' PID 1 (whose
    arguments name the lab's directory), SSH control masters."""
    lab = str(layout.dir).encode()
    mux = control_path(layout).removesuffix("%C").encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        ours = (lab in cmd and (b"gpuhost.lab.supervisor" in cmd or b"init-outer" in cmd)) or mux in cmd
        if ours:            # never a user's editor or shell that merely names a file of the lab
            pids.append(int(proc.name))
    return pids


def _kill_leftovers(layout: LabLayout) -> None:
    """Whatever of the lab still runs after its supervisor: a host's namespace goes with its
    PID 1; control masters would only linger until they notice their host is gone."""
    for pid in _leftovers(layout):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
