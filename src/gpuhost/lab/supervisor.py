"""The lab's daemon: one per lab directory, in a mount namespace of its own.

It serves every host's rendered ``/sys`` and ``/proc`` files over FUSE, keeps each host's
overlay disk mounted, boots hosts (each a PID/UTS/mount namespace running sshd), and
carries out reboots, asked for from inside a host (its ``reboot`` shim) or through the
control socket. Because all its mounts live in its own namespace, when it exits nothing
of the lab stays mounted.

Run as ``unshare --mount --propagation private python -m gpuhost.lab.supervisor DIR``.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from . import fusefs, provision
from .kernel import boot_state, clear_next_boot_pin
from .layout import LabLayout
from .machine import GuestMachine, Machine
from .spec import GuestSpec, HostSpec, load_spec, with_firmware
from .tree import Tree

log = logging.getLogger("gpuhost.lab")
BOOT_TIMEOUT = 60.0


class Host:
    def __init__(self, name: str, spec, addr: str):
        self.name = name
        self.spec = spec
        self.addr = addr
        self.proc: subprocess.Popen | None = None
        self.machine: Machine | GuestMachine | None = None
        self.state = "down"
        self.error = ""
        self.boots = 0
        self.lock = threading.RLock()
        # what the GPUs keep across boots (their pending MIG and ECC modes, in the InfoROM)
        self.nvram: dict = {}


class Supervisor:
    def __init__(self, layout: LabLayout):
        self.layout = layout
        self.fs = fusefs.LabFS()
        info = json.loads(layout.state_file.read_text())
        self.client_pub = layout.client_key.with_suffix(".pub").read_text()
        self.hosts: dict[str, Host] = {}
        for h in info["hosts"]:
            self.hosts[h["name"]] = Host(h["name"], load_spec(layout.spec_copy(h["name"])), h["addr"])
        self.booted = threading.Event()
        self.stopping = False
        # until `lab up` adopts the lab (its inventory written), the lab lives only as long
        # as that process: an `up` killed mid-way (even by SIGKILL) leaves nothing running
        self.adopted = threading.Event()
        self.bmcs: dict = {}        # host name -> its BMC (gpuhost.lab.bmc.Redfish), from _start_bmcs
        self.owner = os.getppid()

    # ---- the FUSE side -------------------------------------------------------------
    def run(self) -> None:
        self.layout.fs.mkdir(exist_ok=True)
        threading.Thread(target=self._serve_control, daemon=True, name="control").start()
        threading.Thread(target=self._boot_all, daemon=True, name="boot").start()
        threading.Thread(target=self._watch_owner, daemon=True, name="owner").start()
        try:
            fusefs.serve(self.fs, str(self.layout.fs))
        finally:
            self._stop_all()

    def _watch_owner(self) -> None:
        while not self.adopted.wait(0.2):
            if os.getppid() != self.owner:          # reparented: `lab up` is gone
                log.error("lab up (pid %d) went away before the lab was up: taking it down", self.owner)
                self.stopping = True
                self.booted.wait(timeout=60)        # a boot in progress ends first, then it is stopped
                self._stop_all()
                from .manager import release_addresses
                release_addresses(self.layout)
                self._shutdown()
                return

    def _wait_mounted(self) -> None:
        deadline = time.monotonic() + 20
        while not os.path.ismount(self.layout.fs):
            if time.monotonic() > deadline:
                raise RuntimeError("the lab's FUSE filesystem did not mount")
            time.sleep(0.02)

    def _start_bmcs(self) -> None:
        """Each host's BMC (gpuhost.lab.bmc), on the host's address, for as long as the lab runs:
        a BMC runs on standby power whatever its host does."""
        from .bmc import Redfish, documents
        for h in self.hosts.values():
            b = getattr(h.spec, "bmc", None)
            if b is None or "unreachable" in b.faults:
                continue
            d = self.layout.host_dir(h.name) / "bmc"
            docs = documents(b.vendor, b.attributes, b.pending, b.registry)
            self.bmcs[h.name] = Redfish(docs, d / "bmc.crt", d / "bmc.key", h.addr, user=b.username, password=b.password,
                                        log=self.layout.host_dir(h.name) / "bmc.log", faults=tuple(b.faults),
                                        state=d / "state.json", ignores=tuple(b.ignores), renames=b.renames_at_reset)

    def _firmware(self, h: Host) -> HostSpec:
        """The host as its firmware makes it at this boot: at a reboot (a reset) its BMC first
        applies what is pending (gpuhost.lab.bmc.Redfish.reset); the first boot of a lab is the
        host as the spec describes it, already running."""
        bmc = self.bmcs.get(h.name)
        if bmc is None:
            return h.spec
        return with_firmware(h.spec, bmc.reset() if h.boots else bmc.attributes())

    def _boot_all(self) -> None:
        try:
            self._start_bmcs()
            self._wait_mounted()
            for h in self.hosts.values():
                self._mount_disk(h)
            wave = [h for h in self.hosts.values() if not h.spec.is_guest]
            self._parallel(self.boot, wave)
            self._parallel(self.boot, [h for h in self.hosts.values() if h.spec.is_guest])
        except Exception as exc:  # reported through status; the daemon stays to be taken down
            log.error("boot failed: %s\n%s", exc, traceback.format_exc())
            for h in self.hosts.values():
                if h.state != "up":
                    h.state, h.error = "failed", h.error or str(exc)
        finally:
            self.booted.set()

    @staticmethod
    def _parallel(fn, hosts: list[Host]) -> None:
        threads = [threading.Thread(target=fn, args=(h,), daemon=True) for h in hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    # ---- disks and boots ---------------------------------------------------------------
    def _mount_disk(self, h: Host) -> None:
        d = self.layout.host_dir(h.name)
        root = d / "root"
        if os.path.ismount(root):
            return
        new = not (d / "disk/upper").exists()
        for sub in ("disk/upper", "disk/work", "root"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        if new:
            provision.hide_lower_dirs(d / "disk/upper")
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir=/,upperdir={d}/disk/upper,workdir={d}/disk/work", str(root)],
                       check=True, capture_output=True)
        if not (root / "var/lib/gpuhost-lab/provisioned").exists():
            provision.provision(root, h.spec, h.addr, self.layout.host_key(h.name), self.client_pub)
        else:
            provision.install_shims(root, h.spec)

    def boot(self, h: Host) -> None:
        with h.lock:
            if self.stopping:
                return              # the lab is being taken down: boot nothing more
            try:
                self._boot(h)
            except Exception as exc:
                h.state, h.error = "failed", f"{type(exc).__name__}: {exc}"
                log.error("%s: boot failed: %s\n%s", h.name, exc, traceback.format_exc())

    def _boot(self, h: Host) -> None:
        h.state, h.error = "booting", ""
        root = self.layout.host_dir(h.name) / "root"
        if isinstance(h.spec, HostSpec):
            spec = self._firmware(h)
            state = boot_state(spec, root)
            if state.consumed_next_boot_pin:
                clear_next_boot_pin(root, spec.boot.loader, provision.real_grub_mkconfig)
            h.machine = Machine(spec, state, lambda action, h=h: self._request_power(h, action),
                                lambda vmid, h=h: self._request_container_restart(h, vmid), nvram=h.nvram)
            kern, kind, repo = h.name, "host", str(self.layout.repo(h.name))
        else:
            parent = self.hosts[h.spec.parent]
            if parent.state != "up" or not isinstance(parent.machine, Machine):
                raise RuntimeError(f"its parent {parent.name} is not up")
            h.machine = GuestMachine(h.spec, parent.machine, lambda action, h=h: self._request_power(h, action))
            kern, kind, repo = parent.name, "lxc-guest", "-"
        self.fs.trees[h.name] = h.machine.tree
        console = open(self.layout.host_dir(h.name) / "console.log", "ab")
        cmd = ["unshare", "--pid", "--uts", "--mount", "--fork", "--propagation", "private", "--kill-child",
               "/bin/bash", str(provision.shim_source() / "init-outer"), h.name, str(root),
               str(self.layout.fs / h.name), str(self.layout.fs / kern), kind, repo, provision.bytecode_cache() or "-"]
        # a machine boots with a clean environment, not the lab operator's
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
        h.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                  start_new_session=True, env=env)
        console.close()
        deadline = time.monotonic() + BOOT_TIMEOUT
        while not _ssh_banner(h.addr):
            if h.proc.poll() is not None:
                tail = (self.layout.host_dir(h.name) / "console.log").read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"init exited with {h.proc.returncode}: {' | '.join(tail)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not answer on {h.addr}:22 within {BOOT_TIMEOUT:.0f}s")
            time.sleep(0.05)
        h.boots += 1
        h.state = "up"
        log.info("%s: up on %s (boot %d)", h.name, h.addr, h.boots)

    def stop(self, h: Host) -> None:
        with h.lock:
            if h.proc is not None and h.proc.poll() is None:
                h.proc.kill()            # --kill-child takes PID 1, and with it the namespace
                h.proc.wait()
            h.proc = None
            deadline = time.monotonic() + 10
            while _ssh_banner(h.addr, timeout=0.2) and time.monotonic() < deadline:
                time.sleep(0.05)
            self.fs.trees.pop(h.name, None)
            h.machine = None
            h.state = "down"

    def guests_of(self, h: Host) -> list[Host]:
        return [g for g in self.hosts.values() if isinstance(g.spec, GuestSpec) and g.spec.parent == h.name]

    def reboot(self, h: Host, action: str = "reboot") -> None:
        guests = self.guests_of(h)
        for g in guests:
            self.stop(g)
        self.stop(h)
        if action != "reboot" or self.stopping:
            return
        self.boot(h)
        for g in guests:
            self.boot(g)

    def _request_power(self, h: Host, action: str) -> None:
        # like systemd: the request returns at once, the machine goes down a moment later
        def later() -> None:
            time.sleep(0.5)
            self.reboot(h, action)
        threading.Thread(target=later, daemon=True).start()

    def _request_container_restart(self, h: Host, vmid: int) -> None:
        for g in self.guests_of(h):
            if g.spec.lxc_vmid == vmid:
                self._request_power(g, "reboot")

    def _stop_all(self) -> None:
        self.stopping = True
        for h in sorted(self.hosts.values(), key=lambda h: not h.spec.is_guest):
            self.stop(h)

    # ---- the control socket ------------------------------------------------------------
    def _serve_control(self) -> None:
        path = self.layout.socket
        staging = path.with_suffix(".new")
        staging.unlink(missing_ok=True)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(staging))
        os.chmod(staging, 0o600)
        srv.listen(16)
        os.rename(staging, path)      # clients wait for the socket's name: it appears listening
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                req = json.loads(conn.makefile().readline())
                reply = self._dispatch(req)
            except Exception as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            conn.sendall((json.dumps(reply) + "\n").encode())
            if reply.get("exit"):
                threading.Thread(target=self._shutdown, daemon=True).start()

    def _status(self) -> dict:
        return {name: {"state": h.state, "addr": h.addr, "kind": h.spec.kind, "boots": h.boots,
                       "error": h.error, "boot_id": _boot_id(h),
                       "kernel": h.machine.boot.release if isinstance(h.machine, Machine) else
                       (h.machine.parent.boot.release if h.machine else None)}
                for name, h in self.hosts.items()}

    def _dispatch(self, req: dict) -> dict:
        op = req.get("op")
        if op == "status":
            if req.get("wait"):
                self.booted.wait(timeout=req.get("wait_s", 300))
            return {"ok": True, "hosts": self._status(), "pid": os.getpid(), "booted": self.booted.is_set()}
        if op == "reboot":
            h = self._host(req)
            self.reboot(h)
            return {"ok": h.state == "up", "hosts": self._status(), "error": h.error}
        if op == "snapshot":
            h = self._host(req)
            tree: Tree | None = h.machine.tree if isinstance(h.machine, Machine) else None
            if tree is None:
                return {"ok": False, "error": f"{h.name} has no kernel of its own"}
            snap = {p: (v if isinstance(v, str) else base64.b64encode(v).decode()) for p, v in tree.snapshot().items()}
            return {"ok": True, "snapshot": snap}
        if op == "adopt":
            self.adopted.set()
            return {"ok": True}
        if op == "down":
            self.stopping = True
            self._stop_all()
            return {"ok": True, "exit": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def _host(self, req: dict) -> Host:
        name = req.get("host")
        if name not in self.hosts:
            raise KeyError(f"no host {name!r} in this lab")
        return self.hosts[name]

    def _shutdown(self) -> None:
        time.sleep(0.1)
        subprocess.run(["fusermount3", "-u", str(self.layout.fs)], capture_output=True)


def _boot_id(h: Host) -> str | None:
    m = h.machine
    if isinstance(m, Machine):
        return m.boot.boot_id
    if isinstance(m, GuestMachine):
        return m.boot_id
    return None


def _ssh_banner(addr: str, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((addr, 22), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def main() -> None:
    layout = LabLayout(Path(sys.argv[1]))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        handlers=[logging.FileHandler(layout.dir / "supervisor.log")])
    signal.signal(signal.SIGTERM, lambda *_: subprocess.run(["fusermount3", "-u", str(layout.fs)], capture_output=True))
    sup = Supervisor(layout)
    layout.pid_file.write_text(f"{os.getpid()}\n")
    try:
        sup.run()
    finally:
        layout.socket.unlink(missing_ok=True)
        log.info("supervisor exits")


if __name__ == "__main__":
    main()
