"""The seed host end to end: the audit reports exactly what its spec's comments say, the
fix (with reboots) ends with every control passing, and a second fix changes nothing (the
whole fix is checked by SeedFix, around the README's quick start in test_readme)."""
from __future__ import annotations

import subprocess
from pathlib import Path
from xml.etree import ElementTree as ET

from conftest import GpuhostRun, gpuhost
from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG

SEED_EXPECTED = {
    "cpu.driver": "drift", "cpu.governor": "pass", "cpu.boost": "pass", "cpu.cstates": "drift", "cpu.online": "pass", "numa.balancing": "drift",
    "numa.gpu_affinity": "pass",
    "pcie.mrrs": "drift", "pcie.link": "pass", "pcie.acs": "pass", "pcie.bar1": "pass", "iommu.mode": "drift",
    "kernel.version": "drift", "kernel.reboot_pending": "pass", "nvidia.driver": "pass",
    "nvidia.persistence": "drift", "nvidia.power_limit": "na", "nvidia.gpu_modes": "pass", "nvidia.p2p": "pass", "nvidia.fabricmanager": "na",
    "nvidia.driver_pinned": "na", "lxc.gpu_nodes": "pass", "lxc.gpu_passthrough": "drift", "lxc.cpuset": "drift",
    "storage.scheduler": "drift", "storage.zfs_arc": "na", "health.gpu": "pass", "guest.cuda": "na",
} | {c.id: "na" for c in CATALOG if c.id.startswith("bios.")}     # no BMC in the seed's inventory
# the model server's container: its NVIDIA userspace and its CUDA 12.8 runtime (llm-two's spec)
GUEST_EXPECTED = {c.id: "na" for c in CATALOG} | {"nvidia.driver": "pass", "guest.cuda": "pass"}
UNTOUCHED_DEVICES = ("0000:c2:00.0", "0000:02:00.0")     # the NIC and the NVMe


def _device_config(snapshot: dict, bdf: str) -> bytes:
    return next(v for p, v in snapshot.items() if p.endswith(f"/{bdf}/config"))


def test_seed_audit_reports_what_the_spec_says_and_writes_nothing(seed_lab, tmp_path):
    disks = {h: seed_lab.disk(h) for h in ("pve-gpu1", "llm-two")}
    sys_before = seed_lab.snapshot("pve-gpu1")
    junit, html = tmp_path / "r.xml", tmp_path / "r.html"
    run = gpuhost("audit", "-i", str(seed_lab.inventory), "--junit", str(junit), "--html", str(html))
    assert run.rc == 2, run.stderr
    assert run.status("pve-gpu1") == SEED_EXPECTED
    assert run.status("llm-two") == GUEST_EXPECTED
    guest_na = run.finding("llm-two", "cpu.driver")
    assert "container" in guest_na["message"] and "pve-gpu1" in guest_na["message"]
    r = run.report
    assert r["schema"] == "gpuhost.report/v1" and r["mode"] == "audit"
    assert r["summary"] == {"hosts": 2, "pass": 15, "drift": 10, "manual": 0, "pending_reboot": 0, "na": 53,
                            "waived": 0, "error": 0, "unreachable": 0}
    facts = r["hosts"]["pve-gpu1"]["facts"]
    assert facts["kernel"] == "6.8.12-4-pve" and facts["gpus"] == 8 and facts["cpu"] == "AMD EPYC 9335 32-Core Processor"
    drv = run.finding("pve-gpu1", "cpu.driver")
    assert drv["observed"] == "acpi-cpufreq" and drv["expected"] == "amd-pstate-epp" and drv["reboot_required"]
    assert all(f["changed"] is False for h in r["hosts"].values() for f in h["findings"])
    # the other reports
    suites = ET.parse(junit).getroot()
    assert suites.get("tests") == str(2 * len(CATALOG)) and suites.get("failures") == "10"
    assert {c.get("name") for c in suites.iter("testcase")} == set(SEED_EXPECTED)
    page = html.read_text()
    assert page.startswith("<!doctype html>") and "pve-gpu1" in page and "MaxReadReq 512" in page
    # an audit writes nothing: the disk layers and the rendered /sys are as they were
    assert {h: seed_lab.disk(h) for h in disks} == disks
    assert seed_lab.snapshot("pve-gpu1") == sys_before


def test_audit_preview_shows_the_fix_in_check_mode_and_still_writes_nothing(seed_lab):
    disks = {h: seed_lab.disk(h) for h in ("pve-gpu1", "llm-two")}
    sys_before = seed_lab.snapshot("pve-gpu1")
    run = gpuhost("audit", "-i", str(seed_lab.inventory), "--diff")
    assert run.rc == 2, run.stderr
    assert run.status("pve-gpu1") == SEED_EXPECTED
    assert run.changed("pve-gpu1") == set(), "an audit marks nothing changed, even what it previews"
    # every fix step previewed, nothing written: not even apt's planner log (eipp.log.xz)
    assert {h: seed_lab.disk(h) for h in disks} == disks
    assert seed_lab.snapshot("pve-gpu1") == sys_before
    # the diffs it computed are printed
    assert "+++ pve-gpu1:/etc/sysctl.d/99-gpuhost-numa-balancing.conf" in run.stdout
    assert "+kernel.numa_balancing = 0" in run.stdout
    assert "would install proxmox-kernel-6.14 proxmox-headers-6.14" in run.stdout
    assert "iommu=pt" in "".join(l for l in run.stdout.splitlines() if l.startswith("+"))
    # runtime values and PCI registers, before -> after (the seed's MaxReadReq 512 -> 4096)
    assert "-/proc/sys/kernel/numa_balancing: 1\n+/proc/sys/kernel/numa_balancing: 0" in run.stdout
    assert "-0000:01:00.0 CAP_EXP+8.w: 283f" in run.stdout and "+0000:01:00.0 CAP_EXP+8.w: 583f" in run.stdout


class SeedFix:
    """The seed's whole fix, checked around the README's quick start (test_readme runs its
    lines verbatim on the seed host and its container, and calls these between them, so the
    seed is converged once for both): gpuhost verify (testinfra, its own reads) disagrees
    with the broken seed on the host only; the fix reboots it and ends with every control
    passing; nothing it must leave alone moves; a second fix changes nothing; a reboot keeps
    every fix."""

    def __init__(self, lab):
        from test_verify import verify

        self.lab = lab
        failing = verify("-i", str(lab.inventory))
        assert failing.returncode == 2, failing.stdout[-2000:]
        failed = {line.split("::")[1].split("[")[0] for line in failing.stdout.splitlines() if line.startswith("FAILED")}
        assert failed == {"test_cpu_driver", "test_cpu_cstates", "test_numa_balancing", "test_pcie_mrrs", "test_iommu_mode",
                          "test_kernel_version", "test_nvidia_persistence", "test_lxc_gpu_passthrough", "test_lxc_cpuset",
                          "test_storage_scheduler"}
        assert all("pve-gpu1" in line for line in failing.stdout.splitlines() if line.startswith("FAILED")), \
            "the container passes"
        self.before = lab.snapshot("pve-gpu1")
        self.ct130 = lab.out("pve-gpu1", "sha256sum /etc/pve/lxc/130.conf")
        self.boot_id = lab.status("pve-gpu1")["boot_id"]

    def audited(self, report: dict) -> None:
        """After the quick start's audit: kept as the baseline of the last audit (kept)."""
        assert report["mode"] == "audit"
        self.before_fix = report

    @staticmethod
    def proved_before(proof: dict, guest: dict) -> None:
        """fix --prove's measurement before the plan: every path modelled; the IOMMU translating
        host DMA drops the GPUs' peer writes (the driver still grants peer access), which the
        check of what arrived catches on every pair; the container measured from its own CPU
        set, after its host."""
        before = proof["before"]
        assert before["conclusion"] == "peer copies lost their data: gpu_to_gpu 28 of 28"
        pairs = [p for p in before["paths"] if p["path"] == "gpu_to_gpu"]
        assert len(pairs) == 28 and all(p["verdict"] == "wrong data" and p["via"] == "peer" for p in pairs)
        assert all("iommu.mode" in [a.get("control") for a in p["attribution"]] for p in pairs)
        local = [p for p in before["paths"] if p["path"] == "host_to_gpu" and p["numa"] == "local"]
        assert len(local) == 8 and all(p["verdict"] == "ok" for p in local)
        assert guest["method"] == "modelled" and guest["in_container"] is True and proof["in_container"] is False
        # the container's CPU set after the fix: its GPUs' nodes' CPUs (lxc.cpuset), none of a node's first core
        assert sum(len(c) for c in guest["cpus"].values()) == 96 and len(guest["cpus"]) == 2

    def fixed(self, report: dict) -> None:
        """After `gpuhost fix --yes --reboot if-needed`, from its JSON report and the host."""
        lab = self.lab
        # the quick start's fix runs with --prove
        self.fixed_proof(report["hosts"]["pve-gpu1"]["proof"])
        self.proved_before(report["hosts"]["pve-gpu1"]["proof"], report["hosts"]["llm-two"]["proof"])
        run = GpuhostRun(subprocess.CompletedProcess([], 0, "", ""), report)
        assert report["mode"] == "fix"
        # every control pass, or na where it does not apply (the seed's GPUs report no power limits)
        assert run.status("pve-gpu1") == {c: "na" if s == "na" else "pass" for c, s in SEED_EXPECTED.items()}
        assert run.changed("pve-gpu1") == {c for c, s in SEED_EXPECTED.items() if s == "drift"}
        assert run.status("llm-two") == GUEST_EXPECTED
        assert lab.status("pve-gpu1")["boot_id"] != self.boot_id, "the host was rebooted"
        assert lab.out("pve-gpu1", "cat /proc/sys/kernel/osrelease") == "6.14.11-4-pve"
        # what the fix must leave alone
        after = lab.snapshot("pve-gpu1")
        for bdf in UNTOUCHED_DEVICES:
            assert _device_config(after, bdf) == _device_config(self.before, bdf), bdf
        assert lab.out("pve-gpu1", "sha256sum /etc/pve/lxc/130.conf") == self.ct130
        assert lab.out("pve-gpu1", "ls /boot/vmlinuz-*").split() == ["/boot/vmlinuz-6.14.11-4-pve",
                                                                     "/boot/vmlinuz-6.8.12-4-pve"]
        # no temporary or backup file beside any config (least of all in /etc/pve, which a
        # cluster replicates); the copies of the edited files are in /var/backups/gpuhost
        assert lab.out("pve-gpu1", "find /etc -name '*gpuhost-tmp*' -o -name '*.gpuhost-[0-9]*' -o -name '*~'") == ""
        backups = lab.out("pve-gpu1", "ls /var/backups/gpuhost").split()
        assert {b.split(".20")[0] for b in backups} >= {"cmdline", "129.conf"}, backups
        # each edit keeps a copy, the first one the file as it was before gpuhost
        assert lab.out("pve-gpu1", "cat \"$(ls /var/backups/gpuhost/cmdline.* | sort | head -n 1)\"") == \
            "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet"

    @staticmethod
    def fixed_proof(proof: dict) -> None:
        """fix --prove: each fix that ran, with the paths it bears on before and after. Every
        figure is the lab's model (the lab's libcuda.so.1): these check gpuhost's bookkeeping
        (which fix bears on which path, the verdicts' rules), never that a fix helps a real host."""
        assert proof["method"] == "modelled" and all(e["method"] == "modelled" for e in proof["effects"])
        effects: dict[tuple[str, str], set[str]] = {}
        for e in proof["effects"]:
            effects.setdefault((e["control"], e["path"]), set()).add(e["verdict"])
        # MaxReadReq moves no copy (the model follows the measurement that found none)
        assert effects[("pcie.mrrs", "host_to_gpu")] == {"no measurable effect"}
        assert effects[("pcie.mrrs", "gpu_to_host")] == {"no measurable effect"}
        # shallow idle states: the wait for a kernel's completion is shorter (timed by the wall
        # clock, as on a real host: a busy test machine may blur a GPU's runs into each other)
        assert "better" in effects[("cpu.cstates", "launch_sync")] and "worse" not in effects[("cpu.cstates", "launch_sync")]
        # iommu=pt: the pairs' peer copies deliver their bytes
        assert effects[("iommu.mode", "gpu_to_gpu")] == {"now delivers its data"}
        assert "kernel.version" in proof["unmeasured_fixes"]
        assert proof["conclusion"] == "the host delivers its hardware's limits; what remains is in the software"
        assert proof["before"]["conclusion"] == "peer copies lost their data: gpu_to_gpu 28 of 28"

    def verified(self, stdout: str) -> None:
        """After `gpuhost verify`: the host passes, the container's host-level controls are skipped with the reason."""
        assert "llm-two: a host-level control: this is a container; verify its host" in stdout

    def kept(self) -> None:
        """A second fix changes nothing, and a reboot keeps every fix."""
        lab = self.lab
        again = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--reboot", "if-needed")
        assert again.rc == 0 and again.changed("pve-gpu1") == set()
        assert "nothing to fix" in again.stderr
        lab.reboot("pve-gpu1")
        # against the quick start's audit before the fix (SeedFix.audited): what changed since
        import json
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(self.before_fix, f)
        try:
            final = gpuhost("audit", "-i", str(lab.inventory), "--baseline", f.name)
        finally:
            Path(f.name).unlink()
        assert final.rc == 0 and final.status("pve-gpu1") == {c: "na" if s == "na" else "pass"
                                                              for c, s in SEED_EXPECTED.items()}
        # every drift resolved, nothing new or worse
        since = final.report["since_baseline"]
        assert {(r["host"], r["control"]) for r in since["resolved"]} == \
            {("pve-gpu1", c) for c, s in SEED_EXPECTED.items() if s == "drift"}
        assert since["new"] == since["worse"] == [] and "resolved (10):" in final.stdout


def test_fix_without_reboot_leaves_pending_reboot(make_lab):
    from conftest import SEED_HOST

    lab = make_lab(SEED_HOST)
    run = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--controls", "cpu.driver,iommu.mode,kernel.reboot_pending,numa.balancing")
    assert run.rc == 2
    assert run.status("pve-gpu1") == {"cpu.driver": "pending_reboot", "numa.balancing": "pass",
                                      "iommu.mode": "pending_reboot", "kernel.reboot_pending": "pending_reboot"}
    assert run.changed("pve-gpu1") == {"cpu.driver", "iommu.mode", "numa.balancing"}
    assert "amd_pstate=active iommu=pt" in lab.out("pve-gpu1", "cat /etc/kernel/cmdline")
    assert "amd_pstate" not in lab.out("pve-gpu1", "cat /proc/cmdline"), "never reboots unless told"
    lab.reboot("pve-gpu1")
    after = gpuhost("audit", "-i", str(lab.inventory), "--controls", "cpu.driver,iommu.mode,kernel.reboot_pending,numa.balancing")
    assert after.rc == 0 and set(after.status("pve-gpu1").values()) == {"pass"}


def test_fix_refuses_without_yes_when_nobody_can_confirm(make_lab):
    from conftest import SEED_HOST

    lab = make_lab(SEED_HOST)
    disk = lab.disk("pve-gpu1")
    run = gpuhost("fix", "-i", str(lab.inventory), "--controls", "numa.balancing")
    assert run.rc == 1 and run.stderr.strip().endswith("fix changes hosts: confirm with --yes (no terminal to ask at)")
    assert lab.disk("pve-gpu1") == disk


def test_reboot_rollout_stops_at_the_first_host_that_comes_back_unhealthy(make_lab, tmp_path):
    import yaml

    from conftest import SEED_HOST

    second = tmp_path / "pve-gpu2.yml"
    data = yaml.safe_load(SEED_HOST.read_text())
    data["hostname"] = "pve-gpu2"
    second.write_text(yaml.safe_dump(data))
    lab = make_lab(SEED_HOST, second)
    # on pve-gpu1 a tuning service turns NUMA balancing back on at every boot, behind
    # sysctl.d's back: the fix passes until the reboot shows it
    unit = "[Service]\nType=oneshot\nExecStart=/sbin/sysctl -w kernel.numa_balancing=1\n[Install]\nWantedBy=multi-user.target\n"
    lab.ssh("pve-gpu1", f"printf '{unit}' > /etc/systemd/system/vendor-tuning.service && systemctl enable vendor-tuning")
    boot2 = lab.status("pve-gpu2")["boot_id"]
    run = gpuhost("fix", "-i", str(lab.inventory), "--yes", "--reboot", "if-needed", "--controls", "kernel.version,numa.balancing")
    assert run.rc == 3, run.stdout + run.stderr
    host1 = run.report["hosts"]["pve-gpu1"]
    assert "did not come back healthy after the reboot" in host1["error"] and "numa.balancing is drift" in host1["error"]
    # the host as it came back was judged by the reboot play's own last task: no second
    # playbook run (a "re-audit") per rebooted host
    assert "gpuhost fix: reboot pve-gpu1: pve-gpu1: done" in run.stderr and "re-audit" not in run.stderr, run.stderr
    assert "roll-out stopped: pve-gpu2 was not rebooted" in run.stderr
    assert lab.status("pve-gpu2")["boot_id"] == boot2
    assert run.status("pve-gpu2") == {"kernel.version": "pending_reboot", "numa.balancing": "pass"}
