"""Scenarios at unit speed: a spec (plus an overlay) laid out into a directory the way the
lab lays out a host's disk and renders its /sys and /proc, then probed and judged.

The disk comes from the lab's own provisioning and the volatile state from its kernel
model, so a scenario is the lab's host without namespaces, sshd or FUSE; the vendor
tools the probe runs (pveversion, proxmox-boot-tool status, nvidia-smi) answer from the
same model, as the lab's shims do.
"""
from __future__ import annotations

import copy
import os
import stat
from pathlib import Path
from typing import Callable

import yaml

from ansible_collections.gpuhost.stack.plugins.module_utils import controls
from gpuhost.lab import provision
from gpuhost.lab.kernel import boot_state
from gpuhost.lab.machine import Machine
from gpuhost.lab.shims import shimlib
from gpuhost.lab.spec import HostSpec, parse_spec

ROOT = Path(__file__).resolve().parents[1]
from ansible_collections.gpuhost.stack.plugins.module_utils import probe  # noqa: E402  (gpuhost put it on the path)


def merge(base: dict, overlay: dict) -> dict:
    """*overlay* on *base*: mappings merge key by key, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class Rendered:
    """One scenario host: its directory, spec, machine, facts and findings."""

    def __init__(self, root: Path, spec: HostSpec, machine: Machine, smi: "SmiStub"):
        self.root, self.spec, self.machine, self.smi = root, spec, machine, smi
        self.unreadable: dict[str, str] = {}
        self.bmc: dict | None = None

    def facts(self, cuda_paths=()) -> dict:
        facts = probe.Probe(str(self.root), run=self.run, cuda_paths=cuda_paths).gather()
        for section, why in self.unreadable.items():
            # as the probe reports a section it could not read (Probe.section): None, and why
            facts[section] = None
            facts["errors"][section] = why
        facts["bmc"] = self.bmc      # the audit action's, from the controller: never the probe's
        return facts

    def judge(self, settings: dict | None = None, **more) -> dict[str, dict]:
        settings = {**(settings or {}), **more}
        return controls.evaluate(self.facts(settings.get("guest_cuda_paths") or ()), settings)

    def status(self, cid: str, **settings) -> str:
        return self.judge(controls=[cid], **settings)[cid]["status"]

    def finding(self, cid: str, **settings) -> dict:
        return self.judge(controls=[cid], **settings)[cid]

    def write(self, path: str, text: str) -> None:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def remove(self, path: str) -> None:
        (self.root / path.lstrip("/")).unlink()

    def apply_fix(self, fix: dict) -> list[str]:
        """A finding's fix applied to this host as the roles apply its kinds: files written
        (an edit only over the text the judgement read), runtime values written through the
        kernel model, initramfs images built again. The plan lines of what it applied; a kind
        only the lab applies is an error, never skipped."""
        import hashlib
        from ansible_collections.gpuhost.stack.plugins.module_utils.controls import fixes
        done = []
        for kind in fixes.kinds_of(fix):
            if isinstance(kind, fixes.FileContent):
                self.write(kind.path, kind.content)
            elif isinstance(kind, fixes.FileEdit):
                target = self.root / kind.path.lstrip("/")
                now = hashlib.sha256(target.read_bytes()).hexdigest() if target.exists() else "absent"
                assert now == kind.expect_sha256, f"{kind.path} changed since the judgement read it"
                self.write(kind.path, kind.content)
            elif isinstance(kind, fixes.RuntimeWrite):
                for path in [kind.path] if kind.path else self._glob(kind.glob):
                    # through the links sysfs has (/sys/block/<disk> -> ../devices/...)
                    real = str((self.root / path.lstrip("/")).resolve().relative_to(self.root.resolve()))
                    try:
                        self.machine.tree.nodes[real].put(kind.value.encode())
                    except OSError:
                        if not kind.refused_ok:
                            raise
            elif isinstance(kind, fixes.Initramfs):
                provision.build_initramfs(self.root, self.spec)
            elif isinstance(kind, fixes.LxcCpuset):
                from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf
                for c in kind.configs:      # as gpuhost.stack.lxc_config writes it, from what the file holds
                    target = self.root / c["path"].lstrip("/")
                    fixed = lxcconf.with_cpuset(target.read_text(), c["cpus"])
                    assert fixed is not None, f"{c['path']} names another CPU set"
                    target.write_text(fixed)
            elif isinstance(kind, fixes.BootUnit):
                # its data files, then gpuhost.stack.file with wanted_by: the unit, and its link
                # in multi-user.target.wants
                for path, text in kind.data:
                    self.write(path, text)
                self.write(f"/etc/systemd/system/{kind.name}", kind.content)
                link = self.root / "etc/systemd/system/multi-user.target.wants" / kind.name
                link.parent.mkdir(parents=True, exist_ok=True)
                if not link.is_symlink():
                    link.symlink_to(f"/etc/systemd/system/{kind.name}")
            elif isinstance(kind, fixes.UnitRemoval):
                for rel in (f"etc/systemd/system/multi-user.target.wants/{kind.name}", f"etc/systemd/system/{kind.name}"):
                    (self.root / rel).unlink(missing_ok=True)
            elif isinstance(kind, fixes.DaemonReload):
                pass                        # systemd reads units again: the model reads the disk at each boot
            elif isinstance(kind, fixes.UnitStart) and kind.restart:
                for name in kind.names:     # a oneshot of gpuhost's run now: the commands the lab's shims model
                    self._run_unit(name)
            elif isinstance(kind, fixes.BiosSet):
                # the BMC's settings object, as gpuhost.stack.bios_settings writes it: pending
                # for the next reset (redfish.read_bios lists only values that differ from the current)
                assert self.bmc and kind.bmc == self.bmc["address"], "a BIOS write for another BMC"
                pending = {**(self.bmc.get("pending") or {}), **kind.attributes}
                self.bmc = {**self.bmc, "pending": {k: v for k, v in pending.items() if self.bmc["attributes"].get(k) != v}}
            elif isinstance(kind, fixes.LxcRestart):
                for vmid in kind.vmids:     # pct reboot: the container starts again, as PVE reads its config
                    conf = self.root / f"etc/pve/lxc/{vmid}.conf"
                    self.machine.start_container(int(vmid), shimlib.cpuset_request(conf.read_text()))
            else:
                # boot units, command lines, kernels and devices: their cycles run in the lab
                raise ValueError(f"a cycle scenario's fix holds {type(kind).__name__}, which only the lab applies")
            done += kind.plan() if hasattr(kind, "plan") else [type(kind).__name__]
        lay_out_kernel_files(self.root, self.machine)
        return done

    def _glob(self, pattern: str) -> list[str]:
        """The kernel files a glob names, as glob(3) matches them on the host's /sys."""
        import glob
        return sorted("/" + str(Path(p).relative_to(self.root)) for p in glob.glob(str(self.root) + pattern))

    def _tmpfiles(self, conf: str) -> list[str]:
        """A boot unit's `systemd-tmpfiles --create CONF`, by the real systemd-tmpfiles: it runs
        on a copy of the model's /sys made of empty files (its `w` writes without truncating,
        which a file laid out here would keep the tail of), and each file it wrote there is
        written to the kernel model, line by line in the file's order. Errors: the writes the
        kernel refused."""
        import glob
        import shutil
        import subprocess
        import tempfile
        scratch = Path(tempfile.mkdtemp(prefix="tmpfiles-", dir=self.root.parent))
        try:
            for path, value in self.machine.tree.snapshot().items():
                if not path.startswith("sys/"):
                    continue
                target = scratch / path
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(value, str) and value.startswith("-> "):
                    os.symlink(value[3:], target)
                else:
                    target.touch()
            res = subprocess.run(["systemd-tmpfiles", f"--root={scratch}", "--create", str(self.root / conf.lstrip("/"))],
                                 capture_output=True, text=True)
            assert "Unknown" not in res.stderr and "Failed to parse" not in res.stderr, res.stderr
            failed = []
            for line in (self.root / conf.lstrip("/")).read_text().splitlines():
                if not line.startswith("w "):
                    continue
                pattern = line.split()[1]
                for written in sorted(glob.glob(str(scratch) + pattern)):
                    value = Path(written).read_bytes()
                    if not value:
                        continue
                    rel = str(Path(written).relative_to(scratch))
                    try:
                        self.machine.tree.nodes[rel].put(value)
                    except OSError as e:
                        failed.append(f"/{rel}: {e.strerror}")
            return failed
        finally:
            shutil.rmtree(scratch)

    def _boot_units(self) -> list[str]:
        """The enabled units' commands the harness models, in systemd's start order: a gpuhost
        unit's systemd-tmpfiles calls. The writes a unit's tmpfiles call could not make."""
        failed = []
        for command in self.machine.boot.units:
            words = command.split()
            if words[:2] == ["systemd-tmpfiles", "--create"]:
                failed += self._tmpfiles(words[2])
        return failed

    def _run_unit(self, name: str) -> None:
        """A unit's ExecStart lines as the lab's systemctl runs them, for the commands the
        harness models: nvidia-modprobe -u loads nvidia-uvm and, with -c, makes its nodes
        (the lab's nvidia-modprobe shim tells the kernel model the same); any other is an error."""
        from gpuhost.lab.kernel import _runs_uvm_modprobe
        text = (self.root / "etc/systemd/system" / name).read_text()
        for line in text.splitlines():
            if not line.startswith("ExecStart="):
                continue
            command = line.split("=", 1)[1]
            if not _runs_uvm_modprobe(command):
                raise ValueError(f"{name}: the harness does not model {command!r}")
            self.machine._write_uvm(b"loaded")
            if " -c" in f" {command}":
                self.machine._write_uvm(b"nodes")

    def reboot(self) -> None:
        """The next boot: the kernel model boots from the disk as it is now; the firmware first
        applies what its BMC holds pending."""
        import shutil
        if self.bmc and self.bmc.get("pending"):
            self.bmc = {**self.bmc, "attributes": {**self.bmc["attributes"], **self.bmc["pending"]}, "pending": {}}
        (self.root / "proc/stat").unlink(missing_ok=True)
        shutil.rmtree(self.root / "run/gpuhost-lab-units", ignore_errors=True)     # /run is new at every boot
        self.machine = boot(self.spec, self.root, nvram=self.machine.nvram)
        if self.machine.boot.consumed_next_boot_pin and self.spec.boot.loader == "systemd-boot":
            # proxmox-boot-cleanup.service, as the lab's supervisor and init run it at boot
            from gpuhost.lab.kernel import clear_next_boot_pin
            clear_next_boot_pin(self.root, "systemd-boot")
            marker = self.root / "run/gpuhost-lab-units/proxmox-boot-cleanup.service"
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("active\n")
            marker.with_name(marker.name + ".started").write_text("")
        self.smi = SmiStub(self.machine, self.smi.r470)
        self.boot_failures = self._boot_units()
        lay_out_kernel_files(self.root, self.machine)

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        tool = argv[0][len(str(self.root)):] if argv[0].startswith(str(self.root)) else argv[0]
        if tool.endswith("pveversion"):
            return 0, f"pve-manager/{self.spec.os.proxmox_ve}/abc (running kernel: {self.machine.boot.release})\n", ""
        if tool.endswith("proxmox-boot-tool") and argv[1:2] == ["status"]:
            mode = shimlib.esp_mode(str(self.root))
            return 0, f"8A1B-2C3D is configured with: {mode} (versions: {self.machine.boot.release})\n", ""
        if tool.endswith("nvidia-smi"):
            return self.smi(argv[1:])
        if tool.endswith("systemctl") and argv[1:2] in (["is-active"], ["show"]):
            # as the lab's systemctl answers: active while the unit's marker is in /run
            # ("activating" while the marker says so), started this boot while it or its
            # .started marker is there
            marker = self.root / "run/gpuhost-lab-units" / argv[-1]
            state = ("inactive" if not marker.exists() else
                     "activating" if marker.read_text().startswith("activating") else "active")
            if argv[1] == "is-active":
                return (0 if state == "active" else 3), state + "\n", ""
            started = state != "inactive" or marker.with_name(marker.name + ".started").exists()
            return 0, f"ActiveState={state}\nInactiveExitTimestampMonotonic={1000000 if started else 0}\n", ""
        if tool.endswith("apt-config"):
            # the real apt-config, reading this host's /etc/apt (APT_CONFIG is read first)
            import subprocess
            import tempfile
            with tempfile.NamedTemporaryFile("w", suffix=".conf") as conf:
                conf.write(f'Dir "{self.root}/";\n')
                conf.flush()
                res = subprocess.run(["apt-config", *argv[1:]], capture_output=True, text=True,
                                     env={**os.environ, "APT_CONFIG": conf.name})
            return res.returncode, res.stdout, res.stderr
        return 127, "", f"{tool}: not found"


def _load_smi_shim():
    """The lab's nvidia-smi shim as a module: scenarios ask it what the lab's hosts answer."""
    import importlib.machinery
    import importlib.util
    import sys
    from gpuhost.lab.shims import shimlib as _shimlib
    path = ROOT / "src" / "gpuhost" / "lab" / "shims" / "nvidia-smi"
    loader = importlib.machinery.SourceFileLoader("gpuhost_lab_nvidia_smi", str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    saved = sys.path[:], sys.dont_write_bytecode, sys.modules.get("shimlib")
    sys.modules["shimlib"] = _shimlib
    try:
        loader.exec_module(module)
    finally:
        sys.path[:], sys.dont_write_bytecode = saved[0], saved[1]
        if saved[2] is None:
            del sys.modules["shimlib"]
    return module


SMI_SHIM = _load_smi_shim()


class SmiStub:
    """nvidia-smi as the lab's shim answers it, from the model's view of this boot (and,
    with r470=True, as a driver without the compute_cap field does: the whole query fails)."""

    def __init__(self, machine: Machine, r470: bool = False):
        self.machine, self.r470 = machine, r470

    def __call__(self, args: list[str]) -> tuple[int, str, str]:
        import contextlib
        import io
        view = self.machine.nvidia_view(self.machine.spec.nvidia.userspace if self.machine.spec.nvidia else None)
        if self.r470 and any(a.startswith("--query-gpu=") and "compute_cap" in a.split(",") + [a[12:]] for a in args):
            return 2, 'Field "compute_cap" is not a valid field to query.\n\n', ""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                rc = SMI_SHIM.main(list(args), load=lambda: SMI_SHIM.answering(view))
            except SystemExit as stop:
                rc = stop.code
        return int(rc or 0), out.getvalue(), ""


def render(base: Path | dict, root: Path, overlay: dict | None = None,
           before_boot: Callable[[Path], None] | None = None, r470: bool = False,
           live: dict[str, str] | None = None) -> Rendered:
    """Lay a host out in *root*: its disk as provisioning writes it (spec ``files`` too),
    then one boot of the kernel model rendered into /sys and /proc, after the *live* writes
    (path: value) the running host got, each through the model's kernel semantics."""
    data = yaml.safe_load(base.read_text()) if isinstance(base, Path) else base
    spec = parse_spec(merge(data, overlay or {}), "scenario")
    assert isinstance(spec, HostSpec)
    provision._provision_host(root, spec)
    provision._write(root, "etc/os-release", provision.os_release(spec))
    provision.write_spec_files(root, spec.files)
    provision.build_initramfs(root, spec)
    if spec.is_proxmox:
        provision._write(root, "usr/bin/pveversion", "#!/bin/sh\n", 0o755)
    if spec.is_proxmox or spec.boot.loader != "grub":
        provision._write(root, "usr/sbin/proxmox-boot-tool", "#!/bin/sh\n", 0o755)
    if spec.nvidia:
        provision._write(root, "usr/bin/nvidia-smi", "#!/bin/sh\n", 0o755)
        provision._write(root, "usr/bin/nvidia-modprobe", "#!/bin/sh\n", 0o755)
    provision._write(root, "usr/bin/apt-config", "#!/bin/sh\n", 0o755)
    provision._write(root, "usr/bin/systemctl", "#!/bin/sh\n", 0o755)
    if before_boot:
        before_boot(root)
    machine = boot(spec, root)
    for path, value in (live or {}).items():
        machine.tree.nodes[path.lstrip("/")].put(str(value).encode())
    lay_out_kernel_files(root, machine)
    return Rendered(root, spec, machine, SmiStub(machine, r470))


def boot(spec: HostSpec, root: Path, nvram: dict | None = None) -> Machine:
    """One boot of the kernel model from what is on *root*'s disk now."""
    return Machine(spec, boot_state(spec, root), lambda a: None, lambda v: None, nvram=nvram)


def lay_out_kernel_files(root: Path, machine: Machine) -> None:
    """The model's /sys and /proc as files under *root*, as the lab's FUSE serves them."""
    for path, value in machine.tree.snapshot().items():
        target = root / path
        if path == "proc/stat" and target.exists():
            continue        # a scenario that set the boot time itself (files older than the boot: ctime cannot go back)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, str) and value.startswith("-> "):
            if not target.is_symlink():
                os.symlink(value[3:], target)
        else:
            target.write_bytes(value if isinstance(value, bytes) else value.encode())
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev/kmsg").write_text(machine.kmsg())      # the lab's init binds the model's log there
    made = {path for path, _, _ in machine.dev_nodes()}
    for old in (root / "dev").glob("nvidia*"):           # /dev is new at every boot
        if old.is_file() or old.is_char_device() or old.is_symlink():
            if str(old.relative_to(root)) not in made:
                old.unlink()
    for path, major, minor in machine.dev_nodes():      # char nodes, as the lab's init makes them
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        if (root / path).exists() or (root / path).is_symlink():
            (root / path).unlink()
        os.mknod(root / path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


# ---- scenarios as data: tests/controls/<id>.yml --------------------------------------------
CONTROLS_DIR = ROOT / "tests" / "controls"
_BASE = yaml.safe_load((CONTROLS_DIR / "base.yml").read_text())
BASE_HOST: dict = _BASE["host"]
FRAGMENTS: dict = _BASE["fragments"]
SUFFIX = {"pass": ("pass",), "na": ("na",), "fail": ("drift", "manual", "pending_reboot", "error")}
KEYS = {"use", "host", "set", "pci_append", "container_config", "before_boot", "after_boot", "live", "unreadable", "settings",
        "expect", "says", "cycle", "after_fix", "bmc"}


def _set_path(data: dict, path: str, value) -> None:
    """pci.1.mrrs = 512: mapping keys and list indexes, dotted."""
    *parents, last = path.split(".")
    cur = data
    for part in parents:
        cur = cur[int(part)] if isinstance(cur, list) else cur.setdefault(part, {})
    if isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value


def scenario_data(sc: dict) -> dict:
    """The host spec a scenario describes: the base host, its fragments (`use`), the `host`
    overlay (mappings merge; `files` replaces, a null file or `nvidia: null` is left out),
    `set` paths, `pci_append` and the container's config."""
    data = copy.deepcopy(BASE_HOST)
    for name in sc.get("use") or []:
        data = merge(data, FRAGMENTS[name])
    overlay = copy.deepcopy(sc.get("host") or {})
    files = overlay.pop("files", None)
    data = merge(data, overlay)
    if files is not None:
        data["files"] = {k: v for k, v in files.items() if v is not None}
    if "nvidia" in overlay and overlay["nvidia"] is None:
        data.pop("nvidia")
    for path, value in (sc.get("set") or {}).items():
        _set_path(data, path, value)
    data["pci"] = data["pci"] + list(sc.get("pci_append") or [])
    if "container_config" in sc:
        data["lxc"] = [{"vmid": 129, "config": sc["container_config"]}]
    return data


def before_boot_ops(ops: list[dict]) -> Callable[[Path], None] | None:
    """What a scenario does to the disk before the boot (or, after_boot, to what the boot made):
    write, remove, replace a string in, make a char node (mknod),
    mask (systemctl mask) or enable (systemctl enable) a unit, age a file, or set the boot time
    to come after every file's mtime."""
    if not ops:
        return None

    def apply(root: Path) -> None:
        import time
        for op in ops:
            (kind, arg), = op.items()
            if kind == "write":
                target = root / arg["path"].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(arg["text"])
            elif kind == "remove":
                (root / arg.lstrip("/")).unlink()
            elif kind == "replace":
                target = root / arg["path"].lstrip("/")
                text = target.read_text()
                assert arg["old"] in text, f"{arg['path']} has no {arg['old']!r}"
                target.write_text(text.replace(arg["old"], arg["new"]))
            elif kind == "mask":
                target = root / "etc/systemd/system" / arg
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.exists() or target.is_symlink():
                    target.unlink()
                target.symlink_to("/dev/null")
            elif kind == "enable":
                # systemctl enable: a link in multi-user.target.wants to the unit's file
                wants = root / "etc/systemd/system/multi-user.target.wants"
                wants.mkdir(parents=True, exist_ok=True)
                (wants / arg["unit"]).symlink_to(arg["path"])
            elif kind == "age":
                # a file made *seconds* ago (the judgement compares mtimes: an image built before a file)
                then = time.time() - int(arg["seconds"])
                os.utime(root / arg["path"].lstrip("/"), (then, then))
            elif kind == "mknod":
                # a char node as a hand (mknod) leaves it, after the boot made its own
                target = root / arg["path"].lstrip("/")
                if target.exists() or target.is_symlink():
                    target.unlink()
                os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(int(arg["major"]), int(arg["minor"])))
            elif kind == "boot_time_from_now":
                (root / "proc").mkdir(parents=True, exist_ok=True)
                (root / "proc/stat").write_text(f"cpu  1 2 3 4\nbtime {int(time.time()) + int(arg)}\n")
            else:
                raise ValueError(f"unknown before_boot step {kind!r}")
    return apply


def control_scenarios() -> list[tuple[str, str, dict]]:
    """(control ID, scenario name, scenario) for every tests/controls/<id>.yml."""
    out = []
    for path in sorted(CONTROLS_DIR.glob("*.yml")):
        if path.name == "base.yml":
            continue
        doc = yaml.safe_load(path.read_text())
        if doc.get("control") != path.stem:
            raise ValueError(f"{path.name}: says control {doc.get('control')!r}, not {path.stem!r}")
        for name, sc in (doc.get("scenarios") or {}).items():
            out.append((doc["control"], name, sc))
    return out


def render_scenario(sc: dict, root: Path) -> Rendered:
    host = render(scenario_data(sc), root, before_boot=before_boot_ops(sc.get("before_boot") or []),
                  live=sc.get("live"))
    after = before_boot_ops(sc.get("after_boot") or [])
    if after:
        after(root)
    host.unreadable = dict(sc.get("unreadable") or {})     # section -> the probe's reason
    host.bmc = sc.get("bmc")        # what the audit read from the host's BMC (redfish.read_bios), if it has one
    return host
