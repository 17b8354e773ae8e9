"""Shared fixtures: labs of simulated hosts, reached over real SSH."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpuhost import COLLECTION  # noqa: F401  (the collection gpuhost.stack, for the tests)
from gpuhost.lab import manager, provision
from gpuhost.lab.layout import LabLayout

ROOT = Path(__file__).resolve().parents[1]
SEED_HOST = ROOT / "tests/specs/seed/pve-gpu1.yml"
SEED_GUEST = ROOT / "tests/specs/seed/llm-two.yml"
SPECS = ROOT / "tests/specs"


class LabHandle:
    """A running lab, and the few things tests do with it."""

    def __init__(self, directory: Path, inventory: Path):
        self.dir = directory
        self.layout = LabLayout(directory)
        self.inventory = inventory

    def ssh(self, host: str, command: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        res = subprocess.run(["ssh", "-F", str(self.layout.ssh_config), "-o", "BatchMode=yes", host, command],
                             capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(f"{host}: {command!r} exited {res.returncode}: {res.stderr.strip()}")
        return res

    def out(self, host: str, command: str) -> str:
        return self.ssh(host, command).stdout.strip()

    def status(self, host: str) -> dict:
        return manager.status(self.dir)["hosts"][host]

    def reboot(self, host: str) -> dict:
        """`gpuhost lab reboot`: the operator's power button."""
        return manager.reboot(host, self.dir)

    def reboot_inside(self, host: str, command: str = "reboot") -> str:
        """Reboot from inside the host, as Ansible's reboot module does; wait for the new boot."""
        before = self.out(host, "cat /proc/sys/kernel/random/boot_id")
        self.ssh(host, command, check=False)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.3)
            res = self.ssh(host, "cat /proc/sys/kernel/random/boot_id", check=False, timeout=10)
            if res.returncode == 0 and res.stdout.strip() not in ("", before):
                return res.stdout.strip()
        raise AssertionError(f"{host} did not come back with a new boot_id")

    def snapshot(self, host: str) -> dict:
        return manager.snapshot(host, self.dir)

    def disk(self, host: str) -> dict[str, tuple]:
        """The host's disk layer: every path with its type, mode and content digest."""
        import hashlib
        import os

        upper = self.layout.disk(host)
        out = {}
        for path in sorted(upper.rglob("*")):
            st = path.lstat()
            rel = str(path.relative_to(upper))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_file():
                out[rel] = ("file", st.st_mode, hashlib.sha256(path.read_bytes()).hexdigest())
            elif path.is_dir():
                out[rel] = ("dir", st.st_mode)
            else:
                out[rel] = ("other", st.st_mode, st.st_rdev)
        return out


# The tests' files (rendered scenario hosts, every lab's host roots: some 185,000 files and
# 650 MB a run) in memory where the machine has a tmpfs to spare. On a disk mounted with
# `discard` (the development machine's ext4; CI's was not seen), creating and unlinking
# that many files cost most of the unit scenarios' time: 347 scenarios took 66 s in /tmp
# (46 s of it system time) and 8.6 s on /dev/shm. An explicit --basetemp is left as given.
TMPFS = Path("/dev/shm")
TMPFS_NEEDS = 3 << 30


def pytest_configure(config):
    if config.option.basetemp or os.environ.get("PYTEST_XDIST_WORKER"):
        return      # asked for, or an xdist worker (its controller hands it a directory)
    try:
        fs = os.statvfs(TMPFS)
    except OSError:
        return
    if fs.f_bavail * fs.f_frsize < TMPFS_NEEDS or not os.access(TMPFS, os.W_OK):
        return
    if fs.f_flag & (os.ST_NOEXEC | os.ST_NOSUID | os.ST_NODEV):
        # systemd mounts it nosuid,nodev, hardened hosts noexec: the lab runs its hosts'
        # tools and sudo from these roots and makes device nodes in them, so /tmp it is
        return
    import tempfile
    # short: a lab's socket path (AF_UNIX, 108 bytes) is under it, a few directories down
    config.option.basetemp = tempfile.mkdtemp(prefix="gpuhost-", dir=TMPFS)
    config._gpuhost_tmpfs_basetemp = config.option.basetemp


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """The run's files go with it when it passed (they live in memory); a failed run's stay
    for a look, and the summary says where."""
    base = getattr(session.config, "_gpuhost_tmpfs_basetemp", None)
    if base and int(exitstatus) == 0:
        import shutil
        shutil.rmtree(base, ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    base = getattr(config, "_gpuhost_tmpfs_basetemp", None)
    if base and int(exitstatus) != 0:
        terminalreporter.write_line(f"the failed run's files are kept in {base} (memory: remove it when done)")


@pytest.fixture(scope="session", autouse=True)
def lab_bytecode_cache(tmp_path_factory):
    """Every lab the tests bring up (molecule's and the README's too: they inherit this) keeps
    the bytecode of Ansible's module zips in one directory its hosts share: the same modules
    compile once per test worker, not at every task (shims/gpuhost_lab_bytecode.py). What the
    modules do is the same; only faster."""
    os.environ.setdefault(provision.BYTECODE_CACHE_ENV, str(tmp_path_factory.getbasetemp() / "lab-bytecode"))


@pytest.fixture
def make_lab(tmp_path_factory):
    """Bring up labs from specs; every lab is taken down after the test."""
    labs: list[Path] = []

    def _make(*specs: Path | str) -> LabHandle:
        directory = tmp_path_factory.mktemp("lab") / "lab"
        labs.append(directory)
        inventory = manager.up([str(s) for s in specs], directory)
        return LabHandle(directory, inventory)

    yield _make
    for directory in labs:
        if (directory / "lab.json").exists():
            manager.down(directory)


@pytest.fixture(scope="module")
def seed_lab(tmp_path_factory):
    """The seed host and its container, shared by a module's read-only tests."""
    directory = tmp_path_factory.mktemp("seedlab") / "lab"
    inventory = manager.up([str(SEED_HOST), str(SEED_GUEST)], directory)
    yield LabHandle(directory, inventory)
    manager.down(directory)


def pytest_report_header(config):
    return f"seed specs: {SEED_HOST.parent}"


# ---- running gpuhost itself ----------------------------------------------------------------
class GpuhostRun:
    def __init__(self, proc: subprocess.CompletedProcess, report: dict | None):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.report = report

    def status(self, host: str) -> dict[str, str]:
        return {f["control"]: f["status"] for f in self.report["hosts"][host]["findings"]}

    def changed(self, host: str) -> set[str]:
        return {f["control"] for f in self.report["hosts"][host]["findings"] if f["changed"]}

    def finding(self, host: str, control: str) -> dict:
        return next(f for f in self.report["hosts"][host]["findings"] if f["control"] == control)


@contextlib.contextmanager
def ci_stdin():
    """A non-blocking pipe for stdin, as some CI runners hand their jobs: every ansible CLI
    refuses to start on one, so gpuhost must never pass its own stdin on to them."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    try:
        yield read_end
    finally:
        os.close(read_end)
        os.close(write_end)


def gpuhost(*args: str, cwd: Path | None = None, timeout: float = 600) -> GpuhostRun:
    """Run the real command line; return its exit code and its JSON report."""
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gpuhost-test-") as tmp:
        report_path = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "gpuhost.cli", *args]
        if args and args[0] in ("audit", "fix", "prove") and "--json" not in args:
            argv += ["--json", str(report_path)]
        with ci_stdin() as stdin:
            proc = subprocess.run(argv, stdin=stdin, capture_output=True, text=True, timeout=timeout, cwd=cwd or tmp)
        path = Path(args[args.index("--json") + 1]) if "--json" in args else report_path
        report = json.loads(path.read_text()) if path.exists() else None
    return GpuhostRun(proc, report)


def inventory_with(lab: "LabHandle", host_vars: dict[str, dict]) -> Path:
    """The lab's inventory plus inventory variables for some hosts."""
    import yaml

    inv = yaml.safe_load(lab.inventory.read_text())
    for host, extra in host_vars.items():
        inv["all"]["hosts"][host].update(extra)
    path = lab.dir.parent / f"inventory-{abs(hash(json.dumps(host_vars, sort_keys=True, default=str)))}.yml"
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return path


# The longest files first: with two xdist workers a long test collected last runs alone at
# the end while the other worker idles; started first, the many short unit tests fill the
# gaps at the end instead. Whole files move, so a module's shared lab stays in one place.
# The two workers meet in the last of these files (worksteal takes from the back of a
# queue): test_paths, whose many short tests leave the shortest wait there (its place after
# test_real_world_hosts, whose 10-25 s tests ended the run alone: 20 s of one idle CPU).
LONG_FIRST = ("tests/audit/test_molecule.py", "tests/audit/test_host_matrix.py", "tests/audit/test_readme.py",
              "tests/audit/test_seed.py", "tests/audit/test_verify.py", "tests/audit/test_real_world_hosts.py",
              "tests/audit/test_each_control.py", "tests/audit/test_paths.py")


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        if path in LONG_FIRST:
            return LONG_FIRST.index(path)
        return len(LONG_FIRST) + (0 if path.startswith("tests/audit/") else 1)
    items.sort(key=rank)
