"""What the seed host shows: real tools (lspci, setpci, cat) on the rendered kernel, and the shims."""
from __future__ import annotations

import re


def test_os_and_cpu(seed_lab):
    h = "pve-gpu1"
    assert 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' in seed_lab.out(h, "cat /etc/os-release")
    assert seed_lab.out(h, "hostname") == h
    assert seed_lab.out(h, "grep -c ^processor /proc/cpuinfo") == "128"
    assert seed_lab.out(h, "grep -m1 'model name' /proc/cpuinfo").endswith("AMD EPYC 9335 32-Core Processor")
    assert " cppc" in seed_lab.out(h, "grep -m1 ^flags /proc/cpuinfo")
    assert seed_lab.out(h, "nproc --all 2>/dev/null; cat /sys/devices/system/cpu/online").splitlines()[-1] == "0-127"
    assert seed_lab.out(h, "cat /sys/devices/system/node/node1/cpulist") == "32-63,96-127"
    assert seed_lab.out(h, "cat /sys/devices/system/cpu/cpu64/topology/thread_siblings_list") == "0,64"
    assert seed_lab.out(h, "cat /sys/firmware/acpi/pm_profile") == "4"
    assert seed_lab.out(h, "ls -d /sys/devices/system/cpu/cpufreq/policy* | wc -l") == "128"
    assert seed_lab.out(h, "cat /sys/devices/system/cpu/cpu5/cpufreq/scaling_driver") == "acpi-cpufreq"
    states = seed_lab.out(h, "cd /sys/devices/system/cpu/cpu0/cpuidle && for s in state*; do echo $(cat $s/name $s/latency $s/disable); done")
    assert states.splitlines() == ["POLL 0 0", "C1 1 0", "C2 800 0"]
    assert seed_lab.out(h, "cat /sys/devices/system/cpu/cpuidle/current_driver") == "acpi_idle"
    assert seed_lab.out(h, "grep MemTotal /proc/meminfo") == "MemTotal:       805306368 kB"
    assert seed_lab.out(h, "cat /sys/kernel/mm/transparent_hugepage/enabled") == "always [madvise] never"


def test_pci_config_space_decodes_with_real_lspci(seed_lab):
    h = "pve-gpu1"
    listing = seed_lab.out(h, "lspci -n")
    assert len(listing.splitlines()) == 20
    assert "01:00.0 0302: 10de:2bb5" in listing
    assert "c2:00.0 0200: 15b3:1021" in listing
    vv = seed_lab.out(h, "lspci -vv -s 01:00.0")
    assert re.search(r"DevCap:\s+MaxPayload 256 bytes", vv)
    assert "MaxPayload 256 bytes, MaxReadReq 512 bytes" in vv
    assert "LnkCap:\tPort #0, Speed 32GT/s, Width x16" in vv
    assert "LnkSta:\tSpeed 32GT/s, Width x16" in vv
    assert "Kernel driver in use: nvidia" in vv
    nic = seed_lab.out(h, "lspci -vv -s c2:00.0")
    assert "MaxPayload 256 bytes, MaxReadReq 512 bytes" in nic and "DevCap:\tMaxPayload 512 bytes" in nic
    port = seed_lab.out(h, "lspci -vv -s 00:01.1")
    assert "Bus: primary=00, secondary=01, subordinate=01" in port
    assert "Root Port (Slot+)" in port
    assert re.search(r"ACSCtl:\s+SrcValid\+ TransBlk- ReqRedir\+ CmpltRedir\+ UpstreamFwd\+ EgressCtrl- DirectTrans-", port)
    assert seed_lab.out(h, "setpci -s 00:01.1 ECAP_ACS+6.w") == "001d"
    assert seed_lab.out(h, "lspci -t | head -1").startswith("-+-[0000:00]-+-01.1-[01]----00.0")
    assert seed_lab.out(h, "readlink /sys/bus/pci/devices/0000:01:00.0") == "../../../devices/pci0000:00/0000:00:01.1/0000:01:00.0"
    assert seed_lab.out(h, "cat /sys/bus/pci/devices/0000:81:00.0/numa_node") == "1"
    assert seed_lab.out(h, "cat /sys/bus/pci/devices/0000:01:00.0/current_link_width") == "16"


def test_read_only_registers_ignore_writes(seed_lab):
    h = "pve-gpu1"
    seed_lab.ssh(h, "setpci -s 21:00.0 VENDOR_ID.w=1234 CAP_EXP+0xc.l=0")
    assert seed_lab.out(h, "setpci -s 21:00.0 VENDOR_ID.w") == "10de"
    assert "LnkCap:\tPort #0, Speed 32GT/s, Width x16" in seed_lab.out(h, "lspci -vv -s 21:00.0")


def test_iommu_block_devices_and_proc(seed_lab):
    h = "pve-gpu1"
    assert seed_lab.out(h, "ls /sys/class/iommu") == "ivhd0"
    assert seed_lab.out(h, "cat /sys/kernel/iommu_groups/*/type | sort -u") == "DMA-FQ"
    assert seed_lab.out(h, "basename $(readlink /sys/bus/pci/devices/0000:01:00.0/iommu_group)") == "1"
    assert seed_lab.out(h, "cat /sys/block/nvme0n1/queue/scheduler") == "[none] mq-deadline kyber"
    assert seed_lab.out(h, "cat /sys/block/nvme1n1/queue/scheduler") == "none [mq-deadline] kyber"
    assert seed_lab.out(h, "cat /sys/block/nvme1n1/queue/rotational") == "0"
    devices = seed_lab.out(h, "cat /proc/devices")
    assert re.search(r"^195 nvidia$", devices, re.M) and re.search(r"^508 nvidia-uvm$", devices, re.M)
    assert "570.133.20" in seed_lab.out(h, "cat /proc/driver/nvidia/version")
    assert seed_lab.out(h, "ls /proc/driver/nvidia/gpus | wc -l") == "8"


def test_nvidia_smi_formats(seed_lab):
    h = "pve-gpu1"
    csv = seed_lab.out(h, "nvidia-smi --query-gpu=index,pci.bus_id,name,compute_cap,driver_version,persistence_mode,"
                          "pcie.link.gen.max,pcie.link.width.current,memory.total --format=csv")
    lines = csv.splitlines()
    assert lines[0] == ("index, pci.bus_id, name, compute_cap, driver_version, persistence_mode, "
                        "pcie.link.gen.max, pcie.link.width.current, memory.total [MiB]")
    assert lines[1] == ("0, 00000000:01:00.0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 570.133.20, "
                        "Disabled, 5, 16, 97887 MiB")
    assert len(lines) == 9
    nounits = seed_lab.out(h, "nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 7")
    assert nounits == "97887"
    bad = seed_lab.ssh(h, "nvidia-smi --query-gpu=bogus --format=csv", check=False)
    assert bad.returncode == 2 and 'Field "bogus" is not a valid field to query.' in bad.stdout
    q = seed_lab.out(h, "nvidia-smi -q")
    assert "Driver Version                            : 570.133.20" in q
    assert q.count("Persistence Mode") == 8
    assert "NVIDIA-SMI 570.133.20" in seed_lab.out(h, "nvidia-smi")


def test_proxmox_tools(seed_lab):
    h = "pve-gpu1"
    assert seed_lab.out(h, "pveversion") == "pve-manager/8.2.4/faa83925c9641325 (running kernel: 6.8.12-4-pve)"
    conf = seed_lab.out(h, "pct config 129").splitlines()
    assert "hostname: llm-two" in conf and "lxc.cgroup2.devices.allow: c 509:* rwm" in conf
    assert seed_lab.out(h, "cat /etc/pve/lxc/130.conf").startswith("arch: amd64\ncores: 8")
    seed_lab.ssh(h, "pct set 130 --cores 4 --cpulimit 2")
    conf130 = seed_lab.out(h, "cat /etc/pve/lxc/130.conf").splitlines()
    assert "cores: 4" in conf130 and "cpulimit: 2" in conf130 and "cores: 8" not in conf130
    missing = seed_lab.ssh(h, "pct config 999", check=False)
    assert missing.returncode == 2 and "Configuration file 'nodes/pve-gpu1/lxc/999.conf' does not exist" in missing.stderr
    status = seed_lab.out(h, "proxmox-boot-tool status")
    assert "8A1B-2C3D is configured with: uefi (versions: 6.8.12-4-pve)" in status
    assert seed_lab.out(h, "cat /etc/kernel/cmdline") == "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet"


def test_container_view(seed_lab):
    g = "llm-two"
    assert seed_lab.out(g, "nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u") == "570.133.20"
    res = seed_lab.ssh(g, "nvidia-smi -pm 1", check=False)
    assert res.returncode == 4 and "Insufficient Permissions" in res.stdout
    assert seed_lab.ssh(g, "test -e /etc/pve", check=False).returncode == 1
    assert seed_lab.out(g, "lspci -n | wc -l") == "20"
