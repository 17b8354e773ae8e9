"""Issue 18's controls on real data (sources in tests/real_data/SOURCES.md, "Containers and
CUDA runtimes"): posted Proxmox container configs, the Proxmox forum's nvidia-uvm recipe as
its guides publish it, and CUDA runtimes as real installs lay them out. Expected values are
the sources' own text."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import scenarios
from ansible_collections.gpuhost.stack.plugins.module_utils import lxcconf
from conftest import SEED_HOST

DATA = Path(__file__).resolve().parents[1] / "real_data"
SEED = yaml.safe_load(SEED_HOST.read_text())


@pytest.mark.parametrize("name, vmid, cores, cpus", [
    # a GPU rental host's containers (one RTX 5090 each): cores 46 and 48, no CPU set; node 0
    # gives its cores from the second on (its first core, CPUs 0 and 64, last)
    ("pve-lxc-quickpod6006.conf", 6006, 46, "1-23,65-87"),
    ("pve-lxc-nosana6004.conf", 6004, 48, "1-24,65-88"),
])
def test_posted_gpu_containers_with_cores_get_whole_cores_of_their_gpus_node(tmp_path, name, vmid, cores, cpus):
    """On the seed's two sockets (its /dev/nvidia0 on NUMA node 0, SMT siblings 64 apart), the
    posted config's `cores: N` is drift and the fix is N CPUs as whole cores of node 0."""
    text = (DATA / "lxc" / name).read_text()
    assert lxcconf.cpu_request(text) == (None, cores)
    data = dict(SEED, lxc=[{"vmid": vmid, "config": text}])
    host = scenarios.render(data, tmp_path)
    f = host.finding("lxc.cpuset")
    assert f["status"] == "drift" and f"gets {cpus} (NUMA node 0 of its GPUs)" in f["message"], f
    assert f["fix"]["lxc_cpuset"] == [{"path": f"/etc/pve/lxc/{vmid}.conf", "vmid": str(vmid), "cpus": cpus}]
    # the CPU set goes after the last line; every other byte stays
    fixed = lxcconf.with_cpuset(text, cpus)
    assert fixed == text + f"lxc.cgroup2.cpuset.cpus: {cpus}\n"
    assert lxcconf.reads_back(text, fixed) is None and lxcconf.cpu_request(fixed) == (cpus, cores)


def test_a_posted_pinned_container_reads_as_its_set_and_without_nvidia_is_not_judged():
    """A llama.cpp (Vulkan, /dev/dri) container pinned to 40-79 with cores: 40."""
    text = (DATA / "lxc/pve-lxc-llamacpp-cpuset.conf").read_text()
    assert lxcconf.cpu_request(text) == ("40-79", 40)
    assert not lxcconf.inspect("100", text).gives_gpus
    assert lxcconf.with_cpuset(text, "40-79") == text and lxcconf.with_cpuset(text, "0-39") is None


@pytest.mark.parametrize("rules, modules, status", [
    # the forum recipe: nvidia_uvm loaded by modules-load.d, the rule on nvidia_uvm runs nvidia-modprobe -c0 -u
    ("udev-70-nvidia.rules", "modules-load-nvidia.conf", "pass"),
    # the same rule with nothing that loads nvidia_uvm: it never fires
    ("udev-70-nvidia.rules", None, "drift"),
    # a guide's variant whose nvidia_uvm line lost its closing quote: udev cannot read that rule
    ("udev-70-nvidia-gma1n.rules", "modules-load-nvidia-gma1n.conf", "drift"),
])
def test_the_published_nvidia_uvm_recipes_at_boot(tmp_path, rules, modules, status):
    data = scenarios.merge(scenarios.BASE_HOST, {"nvidia": {"uvm_at_boot": False}})
    data["files"] = dict(data.get("files") or {}, **{"/etc/udev/rules.d/70-nvidia.rules": (DATA / "lxc" / rules).read_text()})
    if modules:
        data["files"]["/etc/modules-load.d/modules.conf"] = (DATA / "lxc" / modules).read_text()
    f = scenarios.render(data, tmp_path).finding("lxc.gpu_nodes")
    assert f["status"] == status, f
    if status == "pass":
        assert "/etc/udev/rules.d/70-nvidia.rules makes them at boot" in f["message"]


@pytest.mark.parametrize("path, name, status, says", [
    # a CUDA 12.8 Update 2 toolkit's version.json (cudart 12.8.90): Blackwell is supported
    ("/usr/local/cuda-12.8/version.json", "cuda-version-12.8.2.json", "pass", "compute capability 12.0"),
    # CUDA 11.0's version.txt: no Blackwell
    ("/usr/local/cuda-11.0/version.txt", "cuda-version-11.0.207.txt", "manual",
     "CUDA toolkit 11.0.207 (CUDA 11.0) at /usr/local/cuda-11.0 needs CUDA >= 12.8"),
    # installed torch wheels' version.py
    ("/opt/app/.venv/lib/python3.12/site-packages/torch/version.py", "torch-version-2.11.0+cu128.py", "pass", "1 CUDA runtimes"),
    ("/opt/app/.venv/lib/python3.12/site-packages/torch/version.py", "torch-version-2.5.1+cu124.py", "manual",
     "torch 2.5.1+cu124 (CUDA 12.4)"),
    ("/opt/app/.venv/lib/python3.12/site-packages/torch/version.py", "torch-version-2.3.0+cu121.py", "manual",
     "torch 2.3.0+cu121 (CUDA 12.1)"),
    # CUDA 13.0 on the base host's 575 driver (CUDA 12.9): needs 580.65.06
    ("/opt/app/.venv/lib/python3.12/site-packages/torch/version.py", "torch-version-2.9.1+cu130.py", "manual",
     "a driver >= 580.65.06"),
    ("/opt/app/.venv/lib/python3.12/site-packages/torch/version.py", "torch-version-2.8.0+cpu.py", "na",
     "no CUDA runtime found"),
])
def test_real_cuda_runtimes_on_a_blackwell_host(tmp_path, path, name, status, says):
    data = scenarios.merge(scenarios.BASE_HOST, {})
    data["files"] = dict(data.get("files") or {}, **{path: (DATA / "cuda" / name).read_text()})
    f = scenarios.render(data, tmp_path).finding("guest.cuda")
    assert f["status"] == status and says in f["message"], f
