"""lab up / status / reboot / down: what is left behind, and what is refused."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import SEED_GUEST, SEED_HOST, SPECS
from gpuhost.lab import manager


def gpuhost(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuhost.cli", *args], capture_output=True, text=True, timeout=300)


def _processes_mentioning(text: str) -> list[str]:
    hits = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd:
                hits.append(f"{proc.name}: {cmd}")
    return hits


def _listening(addr: str) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((addr, 22)) == 0


def test_up_prints_the_inventory_and_down_leaves_nothing(tmp_path):
    lab_dir = tmp_path / "lab"
    res = gpuhost("lab", "up", str(SEED_HOST), str(SEED_GUEST), "--dir", str(lab_dir))
    assert res.returncode == 0, res.stderr
    try:
        _check_running_lab(lab_dir, Path(res.stdout.strip().splitlines()[-1]))
    except BaseException:
        manager.down(lab_dir)
        raise
    addrs = [h["addr"] for h in manager.status(lab_dir)["hosts"].values()]
    res = gpuhost("lab", "down", "--dir", str(lab_dir))
    assert res.returncode == 0, res.stderr
    assert not lab_dir.exists()
    assert _processes_mentioning(str(lab_dir)) == []
    mounts = Path("/proc/mounts").read_text()
    assert str(lab_dir) not in mounts and "gpuhost-lab" not in mounts
    assert not any(_listening(a) for a in addrs)
    assert not (manager.CLAIMS.exists() and any(p.read_text().strip() == str(lab_dir) for p in manager.CLAIMS.glob("127.*")))


def test_down_clears_a_lab_whose_directory_lost_its_files(tmp_path):
    lab_dir = tmp_path / "lab"
    manager.up([str(SEED_HOST)], lab_dir)
    addr = manager.status(lab_dir)["hosts"]["pve-gpu1"]["addr"]
    (lab_dir / "lab.json").unlink()          # as a temp-dir cleaner would
    res = gpuhost("lab", "down", "--dir", str(lab_dir))
    assert res.returncode == 0, res.stderr
    assert _processes_mentioning(f"{lab_dir}/hosts") == [] and not _listening(addr)
    assert not lab_dir.exists()


def _check_running_lab(lab_dir: Path, inventory: Path) -> None:
    assert inventory.is_file()
    inv = yaml.safe_load(inventory.read_text())
    hosts = inv["all"]["hosts"]
    assert set(hosts) == {"pve-gpu1", "llm-two"}
    assert set(inv["all"]["children"]["proxmox"]["hosts"]) == {"pve-gpu1"}
    assert set(inv["all"]["children"]["lxc_guests"]["hosts"]) == {"llm-two"}
    assert set(inv["all"]["children"]["gpu_hosts"]["hosts"]) == {"pve-gpu1"}
    addrs = [h["ansible_host"] for h in hosts.values()]
    assert all(a.startswith("127.0.1.") for a in addrs) and len(set(addrs)) == 2
    assert "StrictHostKeyChecking=yes" in inv["all"]["vars"]["ansible_ssh_common_args"]
    known = (lab_dir / "ssh/known_hosts").read_text().splitlines()
    assert sorted(line.split()[0] for line in known) == sorted(addrs)
    # real Ansible reaches both hosts with host key checking on
    ping = subprocess.run(["ansible", "all", "-i", str(inventory), "-m", "ansible.builtin.ping", "-o"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env={"ANSIBLE_HOST_KEY_CHECKING": "True", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert ping.stdout.count("SUCCESS") == 2
    status = json.loads(gpuhost("lab", "status", "--dir", str(lab_dir), "--json").stdout)
    assert {n: h["state"] for n, h in status["hosts"].items()} == {"pve-gpu1": "up", "llm-two": "up"}


def test_up_twice_on_the_same_dir_is_a_clear_error(make_lab):
    lab = make_lab(SEED_HOST)
    before = lab.status("pve-gpu1")
    res = gpuhost("lab", "up", str(SEED_HOST), "--dir", str(lab.dir))
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1 and "already up" in res.stderr
    after = lab.status("pve-gpu1")
    assert after["boot_id"] == before["boot_id"] and after["boots"] == 1, "the running lab is untouched"
    assert len(_processes_mentioning(f"{lab.dir}/hosts/pve-gpu1/root")) == 1, "one host, not a second copy"


def test_two_labs_side_by_side_get_their_own_addresses(make_lab):
    a = make_lab(SEED_HOST)
    b = make_lab(SEED_HOST)
    addr_a = a.status("pve-gpu1")["addr"]
    addr_b = b.status("pve-gpu1")["addr"]
    assert addr_a != addr_b
    a.ssh("pve-gpu1", "echo a > /root/which")
    assert b.ssh("pve-gpu1", "cat /root/which", check=False).returncode != 0


@pytest.mark.parametrize("mutate,expected", [
    (lambda d: d.pop("firmware"), "firmware: required field is missing"),
    (lambda d: d["cpu"].__setitem__("sockets", "two"), "cpu.sockets: Input should be a valid integer"),
    (lambda d: d["pci"].append(dict(d["pci"][1])), "pci[20].bdf: duplicate BDF 0000:01:00.0"),
    (lambda d: d["pci"][1].__setitem__("parent", "0000:99:01.1"), "pci[1].parent: no device 0000:99:01.1 in pci"),
    (lambda d: d["pci"][1].__setitem__("mrrs", 3000), "pci[1].mrrs: must be one of 128, 256, 512, 1024, 2048, 4096 bytes, not 3000"),
    (lambda d: d["boot"].__setitem__("loader", "lilo"), "boot.loader: Input should be 'systemd-boot', 'grub' or 'grub-esp'"),
    (lambda d: d.__setitem__("colour", "blue"), "colour: unknown field"),
    (lambda d: d["nvidia"]["gpus"][0].__setitem__("bdf", "0000:05:00.0"), "nvidia.gpus[0].bdf: no device 0000:05:00.0 in pci"),
    # a spec the lab could not bring up in bounded time is refused with the limit it exceeds
    (lambda d: d["cpu"].update(sockets=16, cores_per_socket=512, threads_per_core=8),
     "cpu: 65536 logical CPUs (sockets x cores x threads) exceed the lab's limit of 1024"),
    (lambda d: d["cpu"].__setitem__("cstates", [{"name": f"C{i}", "latency_us": i} for i in range(12)]),
     "cpu.cstates: 12 idle states exceed the lab's limit of 10"),
    (lambda d: d["block"].extend({**d["block"][0], "name": f"sd{i}"} for i in range(300)),
     f"block: {300 + len(yaml.safe_load(SEED_HOST.read_text())['block'])} block devices exceed the lab's limit of 256"),
    (lambda d: d.__setitem__("files", {"/etc/big.conf": "x" * (2 << 20)}),
     "files./etc/big.conf: 2097152 bytes exceed the lab's limit of 1048576 per file"),
])
def test_malformed_spec_is_one_line_naming_file_and_field_and_starts_nothing(tmp_path, mutate, expected):
    data = yaml.safe_load(SEED_HOST.read_text())
    mutate(data)
    spec = tmp_path / "bad.yml"
    spec.write_text(yaml.safe_dump(data))
    lab_dir = tmp_path / "lab"
    res = gpuhost("lab", "up", str(spec), "--dir", str(lab_dir))
    assert res.returncode == 1
    assert res.stdout == ""
    assert res.stderr == f"error: {spec}: {expected}\n"
    assert not lab_dir.exists()


def test_guest_whose_parent_is_not_in_the_lab_is_refused(tmp_path):
    res = gpuhost("lab", "up", str(SEED_GUEST), "--dir", str(tmp_path / "lab"))
    assert res.returncode == 1
    assert res.stderr == f"error: {SEED_GUEST}: parent: no host 'pve-gpu1' in this lab\n"
    assert not (tmp_path / "lab").exists()


def test_not_yaml_and_unknown_host(tmp_path, make_lab):
    spec = tmp_path / "broken.yml"
    spec.write_text("spec: [unclosed\n")
    res = gpuhost("lab", "up", str(spec), "--dir", str(tmp_path / "lab"))
    assert res.returncode == 1 and res.stderr.startswith(f"error: {spec}: not valid YAML")
    lab = make_lab(SPECS / "zen4-server.yml")
    res = gpuhost("lab", "reboot", "nosuch", "--dir", str(lab.dir))
    assert res.returncode == 1 and "no host 'nosuch' in this lab" in res.stderr
    res = gpuhost("lab", "status", "--dir", str(tmp_path / "nolab"))
    assert res.returncode == 1 and res.stderr.strip() == f"error: no lab in {tmp_path / 'nolab'}"


def test_a_lab_hosts_packages_do_not_follow_the_machines_dpkg(make_lab):
    """An apt run on the machine after `lab up` (here: one interrupted, which leaves a
    journal entry in /var/lib/dpkg/updates) must not break a lab host's kernel install."""
    lab = make_lab(SEED_HOST)
    journal = Path("/var/lib/dpkg/updates/0999")
    assert not journal.exists()
    try:
        journal.write_text("Package: gpuhost-lab-test\nStatus: install ok half-configured\n")
        run = lab.ssh("pve-gpu1", "apt-get install -y -q proxmox-kernel-6.14 >/dev/null && dpkg --audit", check=False,
                      timeout=300)
        assert run.returncode == 0, run.stderr
    finally:
        journal.unlink(missing_ok=True)
    assert lab.out("pve-gpu1", "dpkg-query -W -f='${Status}' proxmox-kernel-6.14") == "install ok installed"
    assert "gpuhost-lab-test" not in lab.out("pve-gpu1", "cat /var/lib/dpkg/status")


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_a_killed_lab_up_leaves_no_supervisor_behind(tmp_path, sig):
    import signal
    import time

    lab_dir = tmp_path / "lab"
    proc = subprocess.Popen([sys.executable, "-m", "gpuhost.cli", "lab", "up", str(SEED_HOST), str(SEED_GUEST),
                             "--dir", str(lab_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid_file = lab_dir / "supervisor.pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert proc.poll() is None and time.monotonic() < deadline, "the supervisor never started"
        time.sleep(0.02)
    supervisor = int(pid_file.read_text())
    proc.send_signal(getattr(signal, sig))
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{supervisor}").exists() and "Z" not in Path(f"/proc/{supervisor}/stat").read_text().split(")")[1][:3]:
        assert time.monotonic() < deadline, f"the supervisor {supervisor} outlived a {sig}ed lab up"
        time.sleep(0.1)
    deadline = time.monotonic() + 30
    while _processes_mentioning(str(lab_dir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_mentioning(str(lab_dir)) == [], "no host process of the lab is left"
    assert not list(manager.CLAIMS.glob("*")) or all(
        c.read_text().strip() != str(lab_dir) for c in manager.CLAIMS.glob(f"{manager.NETWORK}.*")), "addresses released"
