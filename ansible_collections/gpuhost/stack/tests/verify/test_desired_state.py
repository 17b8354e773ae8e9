"""One test per control: the state a fixed host must be in (contract: controls-and-report.md)."""
from __future__ import annotations

import re
import shlex

from conftest import View, host_level

# what does not apply is skipped with the reason, never counted as passed
CONTAINER = "a host-level control: this is a container; verify its host"
NO_GPU = "no NVIDIA GPU the host drives"

CPU = "/sys/devices/system/cpu"


# One verify run reads a host once: every PCI function's lspci -vv and driver in one command
# each (a command over Ansible costs about a second; eight GPUs read one by one cost minutes)
_READ: dict[tuple[str, str], dict[str, str]] = {}


def _per_device(view: View, what: str, command: str, header: str) -> dict[str, str]:
    key = (view.name, what)
    if key not in _READ:
        out: dict[str, str] = {}
        current = None
        for line in view.host.check_output(command).splitlines():
            m = re.match(header, line)
            if m:
                current = m.group(1)
                out[current] = line[m.end():] + "\n" if what == "lspci" else line[m.end():]
            elif current and what == "lspci":
                out[current] += line + "\n"
        _READ[key] = out
    return _READ[key]


def _lspci_vv(view: View, bdf: str) -> str:
    return _per_device(view, "lspci", "lspci -D -vv", r"^([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ").get(bdf, "")


def _driver(view: View, bdf: str) -> str:
    """The driver bound to a PCI function, as sysfs links it ("" for none)."""
    links = _per_device(view, "driver", "for d in /sys/bus/pci/devices/*; do echo \"${d##*/} "
                        "$(readlink $d/driver 2>/dev/null)\"; done", r"^(\S+) ?")
    return links.get(bdf, "").strip().rsplit("/", 1)[-1]


def _passes_devices_to_vms(view: View) -> list[str]:
    """Evidence that this host gives devices to VMs (pve-docs, qm-pci-passthrough)."""
    why = []
    if view.host.run("ls /sys/bus/pci/drivers/vfio-pci 2>/dev/null | grep -c :").stdout.strip() not in ("", "0"):
        why.append("devices bound to vfio-pci")
    for conf in view.host.run("ls /etc/pve/qemu-server/*.conf 2>/dev/null").stdout.split():
        main = view.host.file(conf).content_string.split("\n[")[0]      # snapshots are not the VM
        if re.search(r"^hostpci\d+:", main, re.M):
            why.append("hostpciN in a VM's config")
            break
    if "vfio-pci.ids" in view.params or _persisted_has(view, "vfio-pci.ids="):
        why.append("vfio-pci.ids= on the command line")
    return why


def _persisted_has(view: View, word: str) -> list[str]:
    """The boot-loader config files that set *word* on a line that is not a comment."""
    return view.host.run(f"grep -lsE '^[^#]*{word}' /etc/kernel/cmdline /etc/default/grub "
                         "/etc/default/grub.d/*.cfg 2>/dev/null").stdout.split()


def test_cpu_driver(view: View):
    drivers = set(view.host.run(f"cat {CPU}/cpufreq/policy*/scaling_driver 2>/dev/null").stdout.split())
    if not host_level(view):
        view.skip(CONTAINER)
    if not drivers:
        view.skip("no cpufreq driver (a VM, or cpufreq off): no frequency driver to judge")
    flags = view.host.check_output("grep -m1 ^flags /proc/cpuinfo")
    vendor = view.host.check_output("grep -m1 ^vendor_id /proc/cpuinfo")
    # firmware CPPC is the ACPI _CPC object, acpi_cppc/ in sysfs; the cpuinfo flag shows only
    # the MSR interface (shared-memory CPPC, EPYC 7002/7003 and Threadripper, has none)
    cppc = " cppc" in flags or view.host.file(f"{CPU}/cpu0/acpi_cppc").exists
    if "AuthenticAMD" in vendor and cppc:
        assert drivers == {"amd-pstate-epp"}
        assert view.read(f"{CPU}/amd_pstate/status") == "active"
    elif "GenuineIntel" in vendor and " hwp" in flags:
        assert drivers == {"intel_pstate"}
    elif "AuthenticAMD" in vendor:
        # amd-pstate needs the firmware's _CPC (Documentation/admin-guide/pm/amd-pstate.rst):
        # without it this host runs acpi-cpufreq until CPPC is on in the BIOS
        raise AssertionError(f"no CPPC in the firmware: {', '.join(sorted(drivers))} instead of amd-pstate-epp")
    else:
        view.skip("no CPPC (AMD) or HWP (Intel) in firmware: no driver gpuhost can require")


def test_cpu_governor(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    governors = view.host.run(f"cat {CPU}/cpufreq/policy*/scaling_governor 2>/dev/null").stdout.split()
    if not governors:
        view.skip("no cpufreq policy (a VM, or cpufreq off): no governor to judge")
    assert set(governors) <= {"performance"}
    epp = view.host.run(f"cat {CPU}/cpufreq/policy*/energy_performance_preference 2>/dev/null").stdout.split()
    assert set(epp) <= {"performance"}


def test_cpu_boost(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    # a glob that matches nothing stays literal in sh: list the policies first
    if not view.host.run(f"ls -d {CPU}/cpufreq/policy[0-9]* 2>/dev/null").stdout.split():
        view.skip("no cpufreq policy (a VM, or cpufreq off): no frequency to boost")
    out = view.host.run(f"for p in {CPU}/cpufreq/policy[0-9]*; do echo $(cat $p/scaling_max_freq) $(cat $p/cpuinfo_max_freq)"
                        f" $(cat $p/boost 2>/dev/null || echo -); done").stdout
    rows = [l.split() for l in out.splitlines() if l.strip()]
    assert [r for r in rows if int(r[0]) < int(r[1])] == [], "a policy capped below cpuinfo_max_freq"
    assert [r for r in rows if r[2] == "0"] == [], "a policy with boost off"
    switches = view.host.run(f"cat {CPU}/cpufreq/boost 2>/dev/null; cat {CPU}/intel_pstate/no_turbo 2>/dev/null "
                             "| sed 's/^/no_turbo=/'").stdout.split()
    assert "0" not in switches and "no_turbo=1" not in switches, switches
    # acpi-cpufreq makes the switch only where the CPU reports boost, which firmware that turns
    # it off hides (Documentation/admin-guide/pm/cpufreq.rst, Frequency Boost Support)
    driver = view.host.run(f"cat {CPU}/cpufreq/policy0/scaling_driver 2>/dev/null").stdout.strip()
    assert driver != "acpi-cpufreq" or switches, "acpi-cpufreq offers no boost switch: boost is off in the firmware"


def test_cpu_cstates(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    limit = view.setting("gpuhost_cstate_max_latency_us", 10)
    if not view.host.run(f"ls -d {CPU}/cpu0/cpuidle/state[0-9]* 2>/dev/null").stdout.split():
        view.skip("no idle states (no cpuidle driver): nothing to limit")
    # one grep for every state's two files (a cat each costs a process per file on 256 CPUs)
    out = view.host.run(f"grep -H . {CPU}/cpu[0-9]*/cpuidle/state[0-9]*/latency "
                        f"{CPU}/cpu[0-9]*/cpuidle/state[0-9]*/disable").stdout
    states: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        path, dummy, value = line.partition(":")
        state, dummy, name = path.rpartition("/")
        states.setdefault(state, {})[name] = value.strip()
    enabled_deep = [s for s, v in states.items() if v.get("disable") == "0" and int(v.get("latency", 0)) > limit]
    assert enabled_deep == []


def test_cpu_online(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    # `offline` is possible minus online: the firmware's hotplug slots (possible, not present)
    # are listed too and are no CPU the host has (drivers/base/cpu.c print_cpus_offline)
    offline = _cpus(view.host.file("/sys/devices/system/cpu/offline").content_string)
    present = _cpus(view.host.file("/sys/devices/system/cpu/present").content_string)
    lost = sorted(offline & present) if present else sorted(offline)
    smt = view.host.run("cat /sys/devices/system/cpu/smt/control 2>/dev/null").stdout.strip()
    # SMT siblings of an operator who turned SMT off are the one reason a CPU may be down
    assert not lost or smt in ("off", "forceoff"), f"CPUs {lost} are offline"
    # nr_cpus=N caps the kernel: CPUs past N are listed nowhere, so a kernel that knows exactly
    # N may be missing some (kernel-parameters.txt, nr_cpus=)
    cap = re.search(r"(?:^|\s)nr_cpus=(\d+)(?:\s|$)", view.read("/proc/cmdline") or "")
    possible = _cpus(view.host.file("/sys/devices/system/cpu/possible").content_string)
    assert not cap or len(possible) < int(cap.group(1)), f"nr_cpus={cap.group(1)} caps the kernel at the CPUs it knows"


def _cpus(text: str) -> set[int]:
    """A kernel CPU list (0-3,8) as a set."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        elif part.strip():
            out.add(int(part))
    return out


def test_numa_balancing(view: View):
    nodes = view.host.run("ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null").stdout.split()
    path = "/proc/sys/kernel/numa_balancing"
    if not host_level(view):
        view.skip(CONTAINER)
    if len(nodes) <= 1 or not view.host.file(path).exists:
        view.skip("one NUMA node (or no NUMA balancing in this kernel): nothing to balance")
    assert view.read(path) == "0"
    persisted = view.params.get("numa_balancing") == "disable" or view.host.run(
        "cat /etc/sysctl.d/*.conf 2>/dev/null | grep -E '^\\s*kernel.numa_balancing\\s*=' | tail -n1").stdout.split("=")[-1].strip() == "0"
    assert persisted, "nothing keeps NUMA balancing off at boot"


def test_numa_gpu_affinity(view: View):
    nodes = view.host.run("ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null").stdout.split()
    if not host_level(view):
        view.skip(CONTAINER)
    driven = [bdf for bdf in view.gpus if _driver(view, bdf) != "vfio-pci"]
    if not driven:
        view.skip(NO_GPU + " (functions bound to vfio-pci are the VMs')")
    if len(nodes) <= 1:
        view.skip("one NUMA node: every GPU is local to it")
    unknown = [bdf for bdf in driven if int(view.read(f"/sys/bus/pci/devices/{bdf}/numa_node")) < 0]
    assert not unknown, f"the kernel knows no NUMA node for {', '.join(unknown)}"


def test_pcie_mrrs(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    extra = [b.lower() for b in view.setting("gpuhost_pcie_mrrs_devices", []) or []
             if view.host.file(f"/sys/bus/pci/devices/{b.lower()}").exists]
    targets = [b for b in view.gpus + extra if _driver(view, b) != "vfio-pci"]
    if not targets:
        view.skip(NO_GPU + " (functions bound to vfio-pci are the VMs')")
    for bdf in targets:
        assert "MaxReadReq 4096 bytes" in _lspci_vv(view, bdf), bdf


def test_pcie_link(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.gpus:
        view.skip(NO_GPU)
    for bdf in view.gpus:
        head = view.host.run(f"od -An -tx1 -N4 /sys/bus/pci/devices/{bdf}/config").stdout.split()
        assert head != ["ff"] * 4, f"{bdf} does not answer (config space all ones): its link cannot be read"
        vv = _lspci_vv(view, bdf)
        cap = re.search(r"LnkCap:.*Width x(\d+)", vv)
        sta = re.search(r"LnkSta:.*Width x(\d+)", vv)
        if cap and sta:
            assert int(sta.group(1)) == int(cap.group(1)), f"{bdf} runs x{sta.group(1)} of x{cap.group(1)}"


def test_pcie_acs(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.gpus:
        view.skip(NO_GPU)
    vms = _passes_devices_to_vms(view)
    if vms:
        # ACS isolation is what VFIO's groups rest on: nothing of gpuhost's may clear it
        assert "disable_acs_redir" not in view.params.get("pci", ""), "pci=disable_acs_redir= on a VM host"
        persisted = _persisted_has(view, "disable_acs_redir")
        assert not persisted, f"pci=disable_acs_redir= persisted on a VM host ({', '.join(persisted)})"
        assert not view.host.file("/etc/systemd/system/gpuhost-pcie-acs.service").exists, "gpuhost's old ACS unit"
        view.skip("this host gives devices to VMs (" + "; ".join(vms) + "): ACS isolation stays, as it is")
    blocks = view.host.check_output("lspci -D -vv").split("\n\n")
    for block in blocks:
        if "Downstream Port" in block or "Upstream Port" in block:
            ctl = re.search(r"ACSCtl:.*", block)
            if ctl:
                assert "ReqRedir+" not in ctl.group(0) and "CmpltRedir+" not in ctl.group(0) and "EgressCtrl+" not in ctl.group(0), block.split()[0]


def _mib(size: str, unit: str) -> int:
    """lspci's sizes (64M, 128G; 64MB, 128GB) in MiB."""
    return int(size) * {"M": 1, "G": 1 << 10, "T": 1 << 20}[unit] if unit != "K" else int(size) >> 10


def test_pcie_bar1(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    gpus = [b for b in view.gpus if _driver(view, b) != "vfio-pci"]
    if not gpus:
        view.skip(NO_GPU + " (functions bound to vfio-pci are the VMs')")
    res = view.host.run("nvidia-smi --query-gpu=pci.bus_id,memory.total --format=csv,noheader,nounits")
    memory = {}
    for line in res.stdout.splitlines() if res.rc == 0 else []:
        bus, mib = (c.strip() for c in line.split(","))
        memory[bus.lower()[4:]] = int(mib)
    for bdf in gpus:
        vv = _lspci_vv(view, bdf)
        # the framebuffer aperture: the largest 64-bit prefetchable memory region, as lspci reads it
        regions = [(int(i), _mib(n, u)) for i, n, u in
                   re.findall(r"Region (\d+): Memory at \S+ \(64-bit, prefetchable\) \[size=(\d+)([KMGT])\]", vv)]
        assert regions, f"{bdf}: no 64-bit prefetchable memory region"
        index, size = max(regions, key=lambda r: r[1])
        rebar = re.search(rf"BAR {index}: current size: \S+, supported: ([^\n]*)", vv)
        offered = max((_mib(n, u[0]) for n, u in re.findall(r"(\d+)([KMGT]B)", rebar.group(1))), default=0) if rebar else None
        fb = memory.get(bdf)
        if fb is not None and size >= fb:
            continue
        assert offered is not None or fb is not None, f"{bdf}: no memory reported and no Resizable BAR to compare"
        if offered is not None:
            assert size >= offered, f"{bdf}: BAR{index} is {size} MiB; Resizable BAR offers {offered} MiB"


def test_iommu_mode(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.host.run("ls /sys/class/iommu 2>/dev/null").stdout.split():
        # off is a state this control accepts: nothing translates host DMA
        assert not view.host.run("ls /sys/kernel/iommu_groups 2>/dev/null").stdout.split(), "IOMMU groups but no IOMMU"
        return
    types = set(view.host.run("cat /sys/kernel/iommu_groups/*/type 2>/dev/null").stdout.split())
    assert types <= {"identity"}
    assert view.params.get("iommu") == "pt"


def test_kernel_version(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    minimum = str(view.setting("gpuhost_kernel_min_version", "") or "")
    if not minimum:
        if not view.proxmox or not re.match(r"pve-manager/[89]\.", view.host.check_output("pveversion")):
            view.skip("no minimum kernel set (gpuhost_kernel_min_version) and not Proxmox VE 8 or 9")
        minimum = "6.14"
    release = view.read("/proc/sys/kernel/osrelease")
    have = tuple(int(x) for x in re.findall(r"\d+", release)[:2])
    assert have >= tuple(int(x) for x in minimum.split(".")[:2]), f"{release} is older than {minimum}"


def _grub_cmdline(view: View) -> list[str]:
    """GRUB_CMDLINE_LINUX and GRUB_CMDLINE_LINUX_DEFAULT as grub-mkconfig has them: it sources
    /etc/default/grub, then each /etc/default/grub.d/*.cfg in glob order; a later assignment
    wins and "$VAR" / "${VAR}" is what an earlier one set (values are read, never run)."""
    values: dict[str, str] = {}
    files = ["/etc/default/grub"] + sorted(view.host.run("ls /etc/default/grub.d/*.cfg 2>/dev/null").stdout.split())
    for path in files:
        for line in view.host.file(path).content_string.splitlines():
            m = re.match(r"^\s*(?:export\s+)?(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)=(.*)$", line)
            if not m:
                continue
            # the shell's quoting and comments; $VAR and ${VAR} expanded unless single-quoted
            raw = m.group(2)
            expanded = raw if raw.lstrip().startswith("'") else \
                re.sub(r"\$\{?(\w+)\}?", lambda x: values.get(x.group(1), ""), raw)
            lexer = shlex.shlex(expanded, posix=True)
            lexer.whitespace_split, lexer.commenters = True, "#"
            values[m.group(1)] = " ".join(lexer)
    return _kernel_words(values.get("GRUB_CMDLINE_LINUX", "") + " " + values.get("GRUB_CMDLINE_LINUX_DEFAULT", ""))


def _kernel_words(line: str) -> list[str]:
    """A command line's parameters as the kernel splits them (kernel/params.c next_arg):
    whitespace outside double quotes separates; the quotes themselves are dropped."""
    words, word, quoted = [], "", False
    for ch in line:
        if ch == '"':
            quoted = not quoted
        elif ch.isspace() and not quoted:
            if word:
                words.append(word)
            word = ""
        else:
            word += ch
    return words + ([word] if word else [])


def test_kernel_reboot_pending(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    running = [p for p in _kernel_words(" ".join(view.cmdline)) if not p.startswith(("BOOT_IMAGE=", "initrd=", "vt.handoff="))]
    if not view.cmdline[0].startswith("BOOT_IMAGE="):
        # systemd-boot (no BOOT_IMAGE=): it reads /etc/kernel/cmdline
        persisted = view.read("/etc/kernel/cmdline").split()
    elif view.host.file("/etc/kernel/proxmox-boot-uuids").exists:
        # GRUB on proxmox-boot-tool ESPs: its grub.cfg lives on the ESPs, which are not
        # mounted; what grub-mkconfig puts there comes from /etc/default/grub (10_linux)
        own = ("BOOT_IMAGE", "root", "ro", "rw", "initrd", "boot", "rootflags", "vt.handoff")
        mine = sorted(p for p in running if p.split("=", 1)[0] not in own)
        theirs = sorted(p for p in _grub_cmdline(view) if p.split("=", 1)[0] not in own)
        assert theirs == mine, "the next boot's command line (/etc/default/grub) is not the running one"
        return
    else:
        release = view.read("/proc/sys/kernel/osrelease")
        cfg = view.read("/boot/grub/grub.cfg")
        line = re.search(rf"^\s*linux\s+\S*vmlinuz-{re.escape(release)}\s+(.*)$", cfg, re.M)
        assert line, f"grub.cfg has no entry for the running kernel {release}"
        persisted = [p for p in line.group(1).split() if not p.startswith("vt.handoff=")]
    assert sorted(persisted) == sorted(running), "the next boot's command line is not the running one"


def test_nvidia_driver(view: View):
    if not view.host.exists("nvidia-smi"):
        view.skip("no nvidia-smi: no NVIDIA driver here")
    res = view.host.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert res.rc == 0, res.stdout.strip()
    module = re.search(r"Kernel Module(?: for \S+)?\s+(\S+)", view.read("/proc/driver/nvidia/version")).group(1)
    assert set(res.stdout.split()) == {module}


def test_nvidia_persistence(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.host.exists("nvidia-smi"):
        view.skip("no nvidia-smi: no NVIDIA driver here")
    res = view.host.run("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
    if "No devices were found" in res.stdout:
        view.skip(NO_GPU)
    assert set(res.stdout.split()) <= {"Enabled"}
    # the unit as systemd reads it (systemd.unit(5)): the first file in the unit path, then the
    # drop-ins of every unit directory by file name; an empty ExecStart= resets the list
    name = "nvidia-persistenced.service"
    dirs = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system",
            "/usr/lib/systemd/system")
    unit = next((f"{d}/{name}" for d in dirs if view.host.file(f"{d}/{name}").exists), None)
    assert unit, f"no {name}"
    dropins = {}
    for d in reversed(dirs):
        for path in view.host.run(f"ls {d}/{name}.d/*.conf 2>/dev/null").stdout.split():
            dropins[path.rsplit("/", 1)[1]] = path
    text = "\n".join(view.host.file(p).content_string for p in [unit] + [dropins[k] for k in sorted(dropins)])
    execs = [line.split("=", 1)[1].strip() for line in text.splitlines() if line.strip().startswith("ExecStart=")]
    while "" in execs:
        execs = execs[execs.index("") + 1:]
    assert execs and "--no-persistence-mode" not in execs[-1], execs
    enabled = view.host.run("systemctl is-enabled nvidia-persistenced.service").stdout.strip() == "enabled"
    by_udev = view.host.run("grep -ls 'SYSTEMD_WANTS.*nvidia-persistenced' /etc/udev/rules.d/* /lib/udev/rules.d/*").rc == 0
    assert enabled or by_udev, "nothing starts nvidia-persistenced at boot"


def test_nvidia_power_limit(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.host.exists("nvidia-smi"):
        view.skip("no nvidia-smi: no NVIDIA driver here")
    res = view.host.run("nvidia-smi --query-gpu=pci.bus_id,power.limit,enforced.power.limit,power.default_limit,"
                        "power.min_limit,power.max_limit,persistence_mode --format=csv,noheader,nounits")
    if "No devices were found" in res.stdout:
        view.skip(NO_GPU)
    assert res.rc == 0, res.stdout + res.stderr
    rows = [[c.strip() for c in line.split(",")] for line in res.stdout.strip().splitlines()]
    # a GPU without power management answers [Not Supported] (or N/A) for its limits
    managed = [r for r in rows if all(re.match(r"^\d+(\.\d+)?$", c) for c in r[1:6])]
    if not managed:
        view.skip("no GPU reports power management")
    asked = int(view.setting("gpuhost_nvidia_power_limit_w", 0) or 0)
    unit = view.host.file("/etc/systemd/system/gpuhost-nvidia-power-limit.service")
    for bus, limit, enforced, default, low, high, persistence in managed:
        want = asked or round(float(default))
        assert float(low) <= want <= float(high), f"{bus}: {want} W is outside {low}..{high} W"
        assert float(enforced) >= want - 0.5, f"{bus} enforces {enforced} W, below {want} W"
        if want > float(default) + 0.5:
            # the driver forgets a limit at every boot: something must set it again, after persistence
            assert unit.exists and f"-i {bus} -pl {want}" in unit.content_string, f"nothing sets {bus} to {want} W at boot"
            assert persistence == "Enabled", f"{bus}: persistence off, the driver drops the limit"
            assert f"-i {bus} -pm 1" in unit.content_string, f"nothing keeps {bus} persistent for its limit at boot"


def _wanted(value) -> str | None:
    """An optional bool of the inventory as nvidia-smi words it; None where it is not set."""
    word = str(value).strip().lower()
    return "Enabled" if word in ("true", "yes", "on", "1") else "Disabled" if word in ("false", "no", "off", "0") else None


def test_nvidia_gpu_modes(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.host.exists("nvidia-smi"):
        view.skip("no nvidia-smi: no NVIDIA driver here")
    res = view.host.run("nvidia-smi --query-gpu=pci.bus_id,compute_mode,mig.mode.current,mig.mode.pending,"
                        "ecc.mode.current,ecc.mode.pending --format=csv,noheader")
    if "No devices were found" in res.stdout:
        view.skip(NO_GPU)
    assert res.rc == 0, res.stdout + res.stderr
    compute = view.setting("gpuhost_nvidia_compute_mode", "Default")
    wants = {"MIG": _wanted(view.setting("gpuhost_nvidia_mig", "")), "ECC": _wanted(view.setting("gpuhost_nvidia_ecc", ""))}
    for line in res.stdout.strip().splitlines():
        bus, mode, mig_now, mig_next, ecc_now, ecc_next = [c.strip() for c in line.split(",")]
        assert mode == compute, f"{bus} is in compute mode {mode}, not {compute}"
        for name, now, pending in (("MIG", mig_now, mig_next), ("ECC", ecc_now, ecc_next)):
            if now.startswith("["):
                assert wants[name] != "Enabled", f"{bus} has no {name}, which the inventory wants on"
                continue
            assert now == pending, f"{bus} {name} is {now}, {pending} waits for a reset"
            assert wants[name] in (None, now), f"{bus} {name} is {now}, not {wants[name]}"


DRIVER_PACKAGE = re.compile(r"^(?!nvidia-(container|docker|prime)|libnvidia-container)"
                            r"(nvidia-|libnvidia-|libcuda1|libnvcuvid1|libnvoptix1|cuda-drivers|xserver-xorg-video-nvidia"
                            r"|firmware-nvidia-gsp|linux-(modules|objects|signatures)-nvidia-)")


def test_nvidia_fabricmanager(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    # NVSwitches: NVIDIA's PCI devices of class 0x0680 (the class the nvswitch driver binds to)
    switches = view.host.run("for d in /sys/bus/pci/devices/*; do [ \"$(cat $d/vendor)\" = 0x10de ] && "
                             "case \"$(cat $d/class)\" in 0x0680*) echo ${d##*/};; esac; done; true").stdout.split()
    fabric = []
    if view.host.exists("nvidia-smi"):
        out = view.host.run("nvidia-smi --query-gpu=fabric.state,fabric.status --format=csv,noheader").stdout
        fabric = [l.split(", ") for l in out.splitlines() if l.split(",")[0].strip() in ("Not Started", "In Progress", "Completed")]
    if not switches and not fabric:
        view.skip("no NVSwitch and no GPU on an NVLink fabric: nothing for Fabric Manager to manage")
    unit = "nvidia-fabricmanager.service"
    installed = view.host.run(f"systemctl cat {unit} >/dev/null 2>&1 && echo yes").stdout.strip() == "yes"
    if not switches and not installed:
        # no NVSwitch on this bus, no Fabric Manager here: the fabric is managed elsewhere
        # (an NVL72 compute tray), and every GPU must have registered with it
        assert all(row == ["Completed", "Success"] for row in fabric), fabric
        return
    assert view.host.run(f"systemctl is-enabled {unit}").stdout.strip() == "enabled"
    assert view.host.run(f"systemctl is-active {unit}").stdout.strip() == "active"
    module = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", view.host.file("/proc/driver/nvidia/version").content_string)
    versions = view.host.run("dpkg-query -W -f '${Package} ${Version}\\n' 'nvidia-fabricmanager*' 2>/dev/null").stdout
    fm = [v.split(":")[-1].rsplit("-", 1)[0] for p, v in (l.split() for l in versions.splitlines() if len(l.split()) == 2)
          if re.match(r"^nvidia-fabricmanager(-\d+)?$", p)]
    # installed from NVIDIA's .run file there is no package to compare (the judgement too)
    assert module and (not fm or module.group(1) in fm), (module and module.group(1), fm)
    assert all(row == ["Completed", "Success"] for row in fabric), fabric


def test_nvidia_driver_pinned(view: View):
    # hosts and guests alike: a container's own apt upgrades its own driver libraries
    if not view.host.exists("dpkg-query"):
        view.skip("no dpkg: not a Debian-family system")
    listed = view.host.run("dpkg-query -W -f='${Package} ${Status}\\n'").stdout.splitlines()
    installed = {l.split()[0]: l.split()[1] for l in listed if l.endswith(" installed")}
    if "unattended-upgrades" not in installed:
        view.skip("unattended-upgrades is not installed")
    dump = view.host.run("apt-config dump").stdout
    periodic = re.search(r'^APT::Periodic::Unattended-Upgrade "(.*)";$', dump, re.M)
    if not periodic or periodic.group(1).strip() in ("", "0"):
        view.skip("unattended-upgrades is installed but off (APT::Periodic::Unattended-Upgrade 0)")
    drivers = sorted(n for n in installed if DRIVER_PACKAGE.match(n))
    if not drivers:
        view.skip("no NVIDIA driver package installed: apt does not upgrade the driver")
    patterns = re.findall(r'^Unattended-Upgrade::Package-Blacklist:: "(.*)";$', dump, re.M)

    def kept(name: str) -> bool:
        # unattended-upgrades: each entry a Python regular expression, matched at the start
        return installed[name] == "hold" or any(_matches(p, name) for p in patterns)

    assert [n for n in drivers if not kept(n)] == [], "unattended-upgrades may upgrade these under the loaded module"


def _matches(pattern: str, name: str) -> bool:
    try:
        return re.match(pattern, name) is not None
    except re.error:
        return False


def test_storage_zfs_arc(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    arc_max = view.host.run("cat /sys/module/zfs/parameters/zfs_arc_max 2>/dev/null").stdout.strip()
    if not arc_max:
        view.skip("no zfs module loaded")
    c_max = int(re.search(r"^c_max\s+\d+\s+(\d+)$", view.host.file("/proc/spl/kstat/zfs/arcstats").content_string,
                          re.M).group(1))
    ram = int(re.search(r"^MemTotal:\s+(\d+) kB", view.host.file("/proc/meminfo").content_string, re.M).group(1)) * 1024
    assert int(arc_max) > 0, "no ARC limit: the ARC may take half of RAM or more"
    assert c_max == int(arc_max), f"zfs_arc_max {arc_max} is not in effect (arcstats c_max {c_max})"
    # the containers given GPUs (any NVIDIA node or major 195 in the main section) and their memory
    given = 0
    for conf in view.host.run("ls /etc/pve/lxc/*.conf 2>/dev/null").stdout.split():
        main = view.host.file(conf).content_string.split("\n[", 1)[0]
        if re.search(r"^(lxc\.mount\.entry|dev\d+)\s*[:=]\s*\S*/?dev/nvidia|^lxc\.cgroup2\.devices\.allow\s*[:=]\s*c 195:",
                     main, re.M):
            m = re.search(r"^memory\s*:\s*(\d+)", main, re.M)
            given += (int(m.group(1)) if m else 512) << 20
    reserve = int(view.setting("gpuhost_zfs_reserve_gib", 8)) << 30
    assert c_max + given + reserve <= ram, f"ARC {c_max} + containers {given} + reserve {reserve} > RAM {ram}"
    # the next boot: the last zfs_arc_max modprobe reads (files by name, /etc before /lib)
    dump = view.host.run("for d in /etc/modprobe.d /run/modprobe.d /usr/local/lib/modprobe.d /lib/modprobe.d /usr/lib/modprobe.d; do "
                         "ls $d/*.conf 2>/dev/null; done").stdout.split()
    chosen = {}
    for path in dump:
        chosen.setdefault(path.rsplit("/", 1)[1], path)
    persisted = None
    for name in sorted(chosen):
        # kmod: a line that starts with # is a comment, a # later on is not
        for value in re.findall(r"^[ \t]*options\s+zfs\s+.*?(?<!\S)zfs_arc_max=(\S+)", view.host.file(chosen[name]).content_string, re.M):
            persisted = int(value, 0)
    # then this boot's command line (`zfs.zfs_arc_max=`), which kmod adds after every file's
    for value in re.findall(r"(?<!\S)zfs\.zfs[_-]arc[_-]max=(\S+)", view.host.file("/proc/cmdline").content_string):
        persisted = int(value, 0)
    assert persisted == int(arc_max), f"the next boot sets zfs_arc_max {persisted}, not {arc_max}"


def test_nvidia_p2p(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.setting("gpuhost_nvidia_p2p", True):
        view.skip("gpuhost_nvidia_p2p is false")
    if not view.host.exists("nvidia-smi"):
        view.skip("no nvidia-smi: no NVIDIA driver here")
    listed = view.host.run("nvidia-smi -L")
    if listed.rc != 0 or len(listed.stdout.strip().splitlines()) < 2:
        view.skip("fewer than two GPUs that the NVIDIA driver reports")
    for mode in ("r", "w"):
        out = view.host.check_output(f"nvidia-smi topo -p2p {mode}")
        # the matrix's rows: "GPUi" then a code per GPU (the header is GPU names only)
        rows = [w for w in (line.split() for line in out.splitlines())
                if len(w) > 1 and re.match(r"^GPU\d+$", w[0]) and not re.match(r"^GPU\d+$", w[1])]
        bad = [f"GPU{i}-{row[0]} {code}" for row in rows for i, code in enumerate(row[1:]) if code not in ("X", "OK")]
        assert rows and not bad, f"topo -p2p {mode}: {', '.join(bad) or 'no matrix'}"


def test_lxc_gpu_passthrough(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.host.file("/etc/pve/lxc").exists:
        view.skip("not a Proxmox VE host: no containers")
    devices = view.read("/proc/devices").split("Block devices:")[0]
    majors = {m.group(2): m.group(1) for m in re.finditer(r"^\s*(\d+) (nvidia\S*)$", devices, re.M)}
    if not majors:
        view.skip("the NVIDIA driver is not loaded: no device majors to pass through")
    given = 0
    for conf in view.host.run("ls /etc/pve/lxc/*.conf 2>/dev/null").stdout.split():
        main = view.host.file(conf).content_string.split("\n[")[0]
        mounted = re.findall(r"^lxc\.mount\.entry:\s*\S+\s+/?(dev/nvidia\S*)", main, re.M)
        devn = [p.lstrip("/") for p in re.findall(r"^dev\d+:\s*(?:path=)?(/dev/nvidia[^,\s]*)", main, re.M)]
        if not [n for n in mounted + devn if re.match(r"^dev/nvidia\d+$", n)]:
            continue
        given += 1
        allow_all = re.search(r"^lxc\.cgroup2\.devices\.allow:\s*a\s*$", main, re.M)
        for node in mounted:        # a bind mount needs a cgroup2 allow of its major; devN: brings its own
            name = "nvidia-caps" if "caps" in node else "nvidia-uvm" if "uvm" in node else "nvidia"
            major = majors.get(name) or ("195" if name == "nvidia" else None)
            if major and not allow_all:     # LXC reads a trailing # comment as one (issue 12)
                assert re.search(rf"^lxc\.cgroup2\.devices\.allow:\s*c {major}:\* rwm\s*(#.*)?$", main, re.M), \
                    f"{conf}: {node}"
        for node in ("dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools"):
            assert node in mounted + devn, f"{conf}: {node}"
        # nvidia-caps nodes only matter for MIG (libnvidia-container mounts them only there): a
        # container that uses them needs them to exist on the host
        for node in [n for n in devn if n.startswith("dev/nvidia-caps")]:
            assert view.host.file("/" + node).exists, f"{conf}: /{node} does not exist on the host"
    if not given:
        view.skip("no container is given GPUs")


def _gpu_containers(view: View) -> dict[str, str]:
    """vmid -> main section of each Proxmox container given GPUs: a /dev/nvidiaN (mounted or
    devN:), or an allow of the driver's major 195."""
    out = {}
    for conf in view.host.run("ls /etc/pve/lxc/*.conf 2>/dev/null").stdout.split():
        main = view.host.file(conf).content_string.split("\n[")[0]
        nodes = re.findall(r"^lxc\.mount\.entry:\s*\S+\s+/?(dev/nvidia\d+)\s", main, re.M)
        nodes += re.findall(r"^dev\d+:\s*(?:path=)?/(dev/nvidia\d+)(?:,|\s*$)", main, re.M)
        if nodes or re.search(r"^lxc\.cgroup2\.devices\.allow:\s*c 195:", main, re.M):
            out[conf.rsplit("/", 1)[1][:-5]] = main
    return out


def _cpus(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.strip().split(","):
        if part.strip():
            lo, dummy, hi = part.strip().partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _runs_uvm_modprobe(text: str) -> bool:
    return bool(re.search(r"nvidia-modprobe\b[^\n\"]*\s(-[a-z]*u\b|--unified-memory)", text))


def test_lxc_gpu_nodes(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.host.file("/etc/pve/lxc").exists:
        view.skip("not a Proxmox VE host: no containers")
    if not _gpu_containers(view):
        view.skip("no container is given GPUs")
    devices = view.read("/proc/devices").split("Block devices:")[0]
    if not re.search(r"^\s*\d+ nvidia$", devices, re.M):
        view.skip("the NVIDIA driver is not loaded")
    uvm = re.search(r"^\s*(\d+) nvidia-uvm$", devices, re.M)
    assert uvm, "nvidia-uvm is not loaded"
    for node in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
        kind, dummy, major = view.host.run(f"stat -c '%F %t' {node} 2>/dev/null").stdout.strip().rpartition(" ")
        assert kind == "character special file", f"{node} is missing or not a char device"
        assert int(major, 16) == int(uvm.group(1)), f"{node}: major {int(major, 16)}, nvidia-uvm {uvm.group(1)}"
    # at the next boot: a udev rule that runs nvidia-modprobe -u (one on nvidia_uvm once
    # modules-load.d loads it), or an enabled unit that runs it before pve-guests.service
    loads = view.host.run("cat /etc/modules-load.d/*.conf /run/modules-load.d/*.conf /usr/lib/modules-load.d/*.conf "
                          "2>/dev/null").stdout
    listed = bool(re.search(r"^\s*nvidia[-_]uvm\s*$", loads, re.M))
    # the rules files and enabled units that mention nvidia-modprobe, each whole, in one read
    found = view.host.run(
        "for f in $(grep -ls nvidia-modprobe /etc/udev/rules.d/*.rules /lib/udev/rules.d/*.rules); do "
        "echo \"== rules $f\"; cat \"$f\"; done; "
        "for l in /etc/systemd/system/*.target.wants/*.service; do [ -e \"$l\" ] || continue; u=${l##*/}; "
        "t=$(systemctl cat \"$u\" 2>/dev/null); case $t in *nvidia-modprobe*) echo \"== unit $u\"; echo \"$t\";; esac; "
        "done").stdout
    makers = []
    for chunk in found.split("== ")[1:]:
        head, dummy, text = chunk.partition("\n")
        kind, name = head.split(" ", 1)
        if kind == "rules":
            for rule in text.replace("\\\n", " ").splitlines():
                if rule.lstrip().startswith("#") or not _runs_uvm_modprobe(rule):
                    continue
                if listed or not re.search(r'(KERNEL|DEVPATH)=="[^"]*nvidia[_-]uvm', rule):
                    makers.append(name)
        elif _runs_uvm_modprobe(text) and re.search(r"^Before=.*\bpve-guests\.service", text, re.M):
            makers.append(name)
    assert makers, "nothing makes nvidia-uvm's nodes at boot before pve-guests.service"


def test_lxc_cpuset(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.host.file("/etc/pve/lxc").exists:
        view.skip("not a Proxmox VE host: no containers")
    containers = _gpu_containers(view)
    if not containers:
        view.skip("no container is given GPUs")
    online = _cpus(view.read(f"{CPU}/online"))
    node_of = {}
    for info in view.host.run("grep -H 'Device Minor' /proc/driver/nvidia/gpus/*/information 2>/dev/null").stdout.splitlines():
        bdf, minor = info.split("/")[5], info.rsplit(":", 1)[1].strip()
        node_of[minor] = int(view.read(f"/sys/bus/pci/devices/{bdf}/numa_node"))
    for vmid, main in containers.items():
        raw = re.findall(r"^lxc\.cgroup2\.cpuset\.cpus(?::|\s*=)\s*(\S+)", main, re.M)
        cores = re.findall(r"^cores:\s*(\d+)\s*$", main, re.M)
        if not raw:
            assert not cores or int(cores[-1]) >= len(online), f"{vmid}: cores: {cores[-1]} and no fixed CPU set"
            continue
        cpus = _cpus(raw[-1])
        gpus = set(re.findall(r"dev/nvidia(\d+)\b", main))
        for minor in gpus:
            node = node_of.get(minor)
            assert node is not None and node >= 0, f"{vmid}: the NUMA node of /dev/nvidia{minor} is unknown"
            assert cpus & _cpus(view.read(f"/sys/devices/system/node/node{node}/cpulist")), \
                f"{vmid}: its CPU set {raw[-1]} has no CPU of node {node}"
        # running: the set its cgroup has (written by LXC from the raw key; empty: inherited)
        running = view.host.run(f"cd /sys/fs/cgroup/lxc/{vmid} 2>/dev/null && "
                                "{ grep . cpuset.cpus || cat cpuset.cpus.effective; }").stdout.strip()
        if running:
            assert _cpus(running) == cpus & online, f"{vmid}: runs on {running}"


# the oldest CUDA for a compute capability, and each CUDA's minimum Linux driver (CUDA
# Toolkit release notes); CUDA N.x runs on any driver of N at or above its first
CUDA_FOR_CC = {"7.5": (10, 0), "8.0": (11, 0), "8.6": (11, 1), "8.9": (11, 8), "9.0": (11, 8), "10.0": (12, 8),
               "12.0": (12, 8)}
MAJOR_DRIVER = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}
# the oracle's own look-up, run on the host: toolkits' version.json (version.txt before 11.1)
# and torch's version.py in the usual environments
FIND_CUDA = r"""
import glob, json, os, re
for d in glob.glob("/usr/local/cuda*"):
    if os.path.islink(d):
        continue
    try:
        j = json.load(open(d + "/version.json"))
        print("rt", (j.get("cuda_cudart") or j["cuda"])["version"], d)
    except (OSError, ValueError, KeyError):
        m = re.search(r"CUDA Version ([0-9.]+)", open(d + "/version.txt").read()) if os.path.exists(d + "/version.txt") else None
        if m:
            print("rt", m.group(1), d)
for pattern in ("/usr/lib/python3*/dist-packages", "/usr/local/lib/python3*/*-packages", "/opt/conda/lib/python3*/site-packages",
                "/opt/conda/envs/*/lib/python3*/site-packages", "/opt/*/lib/python3*/site-packages",
                "/opt/*/.venv/lib/python3*/site-packages", "/opt/*/venv/lib/python3*/site-packages",
                "/srv/*/.venv/lib/python3*/site-packages", "/root/.venv/lib/python3*/site-packages"):
    for site in glob.glob(pattern):
        m = re.search(r"^cuda\b[^=]*=\s*'([0-9.]+)'", open(site + "/torch/version.py").read(), re.M) \
            if os.path.exists(site + "/torch/version.py") else None
        if m:
            print("rt", m.group(1), site + "/torch")
"""


def test_guest_cuda(view: View):
    found = [line.split(" ", 2) for line in view.host.run("python3 -c " + shlex.quote(FIND_CUDA)).stdout.splitlines()
             if line.startswith("rt ")]
    if not found:
        view.skip("no CUDA runtime found")
    smi = view.host.run("nvidia-smi --query-gpu=compute_cap,driver_version --format=csv,noheader 2>/dev/null")
    rows = [[c.strip() for c in line.split(",")] for line in smi.stdout.splitlines() if "," in line]
    if smi.rc != 0 or not rows:
        view.skip("no NVIDIA driver or GPU visible here")
    driver = tuple(int(x) for x in rows[0][1].split("."))
    for dummy, version, where in found:
        cuda = tuple(int(x) for x in version.split(".")[:2])
        for cc, dummy in rows:
            assert cuda >= CUDA_FOR_CC.get(cc, (0, 0)), f"{where}: CUDA {version} for compute capability {cc}"
        assert driver >= MAJOR_DRIVER.get(cuda[0], (0,)), f"{where}: CUDA {version} on driver {rows[0][1]}"


def test_storage_scheduler(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    judged = 0
    for disk in view.host.run("ls /sys/block").stdout.split():
        if re.match(r"^(loop|ram|zram|sr|fd|nbd)", disk):
            continue
        sched = view.read(f"/sys/block/{disk}/queue/scheduler")
        if view.read(f"/sys/block/{disk}/queue/rotational") == "0" and "none" in sched.replace("[", " ").replace("]", " ").split():
            judged += 1
            # a bare `none` (dm, md, zvols: bio-based, no elevator) is the only choice there is
            assert "[none]" in sched or "[" not in sched, f"{disk}: {sched}"
    if not judged:
        view.skip("no non-rotational disk that offers the none scheduler")


# Xids that mean the GPU needs a person (Azure's HPC health checks); 13, 31, 43 are applications'
CRITICAL_XIDS = {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120}
# this boot's kernel log, read as dmesg does (/dev/kmsg, non-blocking: the end is EAGAIN)
READ_KMSG = ("import os, errno\n"
             "fd = os.open('/dev/kmsg', os.O_RDONLY | os.O_NONBLOCK)\n"
             "while True:\n"
             "    try:\n"
             "        b = os.read(fd, 8192)\n"
             "    except OSError as e:\n"
             "        if e.errno == errno.EPIPE: continue\n"
             "        break\n"
             "    if not b: break\n"
             "    print(b.decode('utf-8', 'replace').rstrip())\n")


def test_health_gpu(view: View):
    if not host_level(view):
        view.skip(CONTAINER)
    gpus = [b for b in view.gpus if _driver(view, b) != "vfio-pci"]
    if not gpus:
        view.skip(NO_GPU)
    # a device that fell off the bus answers every config read with all ones (one read for all)
    heads = view.host.check_output("for b in " + " ".join(gpus) + "; do echo $b $(od -An -tx1 -N4 "
                                   "/sys/bus/pci/devices/$b/config); done").splitlines()
    dead = [line.split()[0] for line in heads if line.split()[1:] == ["ff"] * 4]
    assert not dead, f"{', '.join(dead)} does not answer (config space all ones)"
    log = view.host.run(f"python3 -c {shlex.quote(READ_KMSG)}")
    assert log.rc == 0, f"cannot read the kernel log: {log.stderr.strip()}"
    xids = re.findall(r"NVRM: Xid \(PCI:([0-9a-f:]+)\): (\d+),", log.stdout, re.I)
    critical = sorted({f"{pci} Xid {x}" for pci, x in xids if int(x) in CRITICAL_XIDS})
    assert not critical, f"critical Xids in this boot's kernel log: {', '.join(critical)}"
    res = view.host.run("nvidia-smi --query-gpu=pci.bus_id,gpu_recovery_action,remapped_rows.pending,"
                        "retired_pages.pending --format=csv,noheader")
    if "is not a valid field" in res.stdout + res.stderr:
        view.skip("this driver's nvidia-smi reports no recovery action or remap (the GPUs answer, no critical Xid)")
    if res.rc != 0:
        view.skip("the NVIDIA driver reports no GPU (the GPUs answer, no critical Xid): "
                  + ((res.stdout + res.stderr).strip().splitlines() or ["?"])[0])
    for line in res.stdout.strip().splitlines():
        bus, action, remap, retire = (c.strip() for c in line.split(","))
        assert action in ("None", "[N/A]"), f"{bus}: the driver asks for {action}"
        assert remap != "Yes" and retire != "Yes", f"{bus}: a memory remap or retirement is pending"


# ---- BIOS settings: read from the host's BMC here, its own GETs (urllib), not gpuhost's reader ----
def _bmc_get(view: View, path: str) -> dict:
    import base64
    import json
    import ssl
    import urllib.request
    address = str(view.setting("gpuhost_bmc_address", ""))
    ca = str(view.setting("gpuhost_bmc_ca", "") or "")
    context = ssl.create_default_context(cafile=ca or None)
    if not view.setting("gpuhost_bmc_validate_certs", True):
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    token = base64.b64encode(f"{view.setting('gpuhost_bmc_username', '')}:{view.setting('gpuhost_bmc_password', '')}"
                             .encode()).decode()
    request = urllib.request.Request(f"https://{address}{path}", headers={"Authorization": "Basic " + token})
    with urllib.request.urlopen(request, context=context, timeout=float(view.setting("gpuhost_bmc_timeout", 10))) as r:
        return json.loads(r.read())


def _bios(view: View, setting: str, default: str):
    """The BMC's current value of a setting is the firmware's spelling of the one wanted, and
    nothing else is pending for it (the vendor's spelling: gpuhost's table, whose entries
    carry their sources; the reads are this test's own)."""
    if not host_level(view):
        view.skip(CONTAINER)
    if not view.setting("gpuhost_bmc_address", ""):
        view.skip("no BMC for this host in the inventory (gpuhost_bmc_address)")
    want = str(view.setting(f"gpuhost_bios_{setting}", default))
    if want == "keep":
        view.skip(f"left as it is (gpuhost_bios_{setting}: keep)")
    from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import TABLE
    root = _bmc_get(view, "/redfish/v1/")
    system = _bmc_get(view, _bmc_get(view, root["Systems"]["@odata.id"])["Members"][0]["@odata.id"])
    bios = _bmc_get(view, system["Bios"]["@odata.id"])
    vendor = str(root.get("Vendor") or system.get("Manufacturer") or "").lower()
    family = next((f for f in TABLE[setting] if f in vendor), None)
    attrs = bios.get("Attributes") or {}
    found = [(a, n) for a in TABLE[setting].get(family, ()) for n in attrs
             if n in a.names or any(re.match(re.escape(x) + r"[#_][0-9A-Fa-f]{4}$", n) for x in a.names)]
    if not found:
        view.skip(f"no {setting} attribute gpuhost knows on this BMC ({vendor or 'unknown vendor'})")
    spec, name = found[0]
    if want not in spec.values:
        view.skip(f"no {family} spelling of {setting} {want} in gpuhost's table")
    pending = _bmc_get(view, bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"]).get("Attributes") or {}
    assert attrs[name] == spec.values[want], f"{name} is {attrs[name]}, {spec.values[want]} wanted"
    assert pending.get(name, attrs[name]) == attrs[name], f"{name}: {pending[name]} is pending"


def test_bios_nps(view: View):
    _bios(view, "nps", "1")


def test_bios_smt(view: View):
    _bios(view, "smt", "on")


def test_bios_cppc(view: View):
    _bios(view, "cppc", "on")


def test_bios_cstates(view: View):
    _bios(view, "cstates", "on")


def test_bios_boost(view: View):
    _bios(view, "boost", "on")


def test_bios_iommu(view: View):
    _bios(view, "iommu", "on")


def test_bios_above4g(view: View):
    _bios(view, "above4g", "on")


def test_bios_rebar(view: View):
    _bios(view, "rebar", "keep")


def test_bios_acs(view: View):
    _bios(view, "acs", "keep")


def test_bios_determinism(view: View):
    _bios(view, "determinism", "power")


def test_bios_profile(view: View):
    _bios(view, "profile", "performance")
