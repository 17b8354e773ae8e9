# -*- coding: utf-8 -*-
"""Read everything a GPU host can tell about its system stack, in one pass.

Runs on the managed host under its own Python 3 with the standard library only, so the
facts module ships it as module_utils; unit tests import it directly. Nothing here
writes. Every section is read independently: what cannot be read is reported in
``errors`` with the reason, never guessed.
"""
from __future__ import absolute_import, division, print_function

import glob
import json
import os
import re
import struct
import subprocess

# what the controls declare they need read back (made from their declarations)
from ansible_collections.gpuhost.stack.plugins.module_utils.watchlist import OWNED_UNITS, WATCHED_SYSCTLS  # noqa: F401

__metaclass__ = type

CAP_ID_EXP = 0x10
ECAP_ID_ACS = 0x000D
MPS_SIZES = (128, 256, 512, 1024, 2048, 4096)
SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
# the journal gpuhost's cmdline module keeps while it edits and refreshes the boot loader
REFRESH_JOURNAL = "/var/lib/gpuhost/boot-refresh.json"
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system",
             "/usr/lib/systemd/system")


class Probe:
    """Reads under *root* ('/' on a real host; a directory tree in unit tests)."""

    def __init__(self, root="/", run=None):
        self.root = root.rstrip("/") or ""
        self.errors = {}
        self._run = run or _run

    # ---- small readers ---------------------------------------------------------------
    def p(self, path):
        return self.root + path

    def read(self, path, default=None):
        try:
            with open(self.p(path), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except (IOError, OSError):
            return default

    def read1(self, path, default=None):
        text = self.read(path)
        return text.strip() if text is not None else default

    def glob(self, pattern):
        return sorted(glob.glob(self.p(pattern)))

    def rel(self, path):
        return path[len(self.root):] if self.root and path.startswith(self.root) else path

    def section(self, name, fn):
        try:
            return fn()
        except Exception as exc:  # reported, not raised: other sections still count
            self.errors[name] = "%s: %s" % (type(exc).__name__, exc)
            return None

    # ---- sections --------------------------------------------------------------------
    def gather(self):
        facts = {}
        for name in ("os", "container", "cpu", "cpufreq", "cpuidle", "numa", "sysctl", "boot",
                     "iommu", "pci", "nvidia", "lxc", "vms", "block", "units"):
            facts[name] = self.section(name, getattr(self, "probe_" + name))
        facts["errors"] = self.errors
        facts["is_root"] = os.geteuid() == 0
        return facts

    def probe_os(self):
        info = {}
        for line in (self.read("/etc/os-release") or self.read("/usr/lib/os-release") or "").splitlines():
            m = re.match(r'^([A-Z_]+)=("?)(.*)\2$', line.strip())
            if m:
                info[m.group(1)] = m.group(3)
        pve = None
        if os.path.exists(self.p("/usr/bin/pveversion")):
            # pveversion prints PVE::pvecfg::version(), which pve-manager's build writes into
            # pvecfg.pm as a literal ("sub version { return '8.2.4'; }"): read it, not run Perl
            m = re.search(r"sub\s+version\s*\{\s*return\s+'(\d+[.\d]*)",
                          self.read("/usr/share/perl5/PVE/pvecfg.pm") or "")
            if not m:
                out = self._run([self.p("/usr/bin/pveversion")])
                m = re.search(r"pve-manager/(\d+[.\d]*)", out[1] or "")
            pve = m.group(1) if m else None
        hostname = self.read1("/proc/sys/kernel/hostname") or self.read1("/etc/hostname")
        return {"id": info.get("ID"), "version_id": info.get("VERSION_ID"), "pretty_name": info.get("PRETTY_NAME"),
                "codename": info.get("VERSION_CODENAME"),
                "machine": os.uname()[4],
                "proxmox_ve": pve, "hostname": hostname}

    def probe_container(self):
        env = self.read("/proc/1/environ")
        kind = None
        if env is None:
            if os.geteuid() != 0:
                kind = None  # unreadable without root; the markers below still tell
        else:
            for var in env.split("\0"):
                if var.startswith("container="):
                    kind = var.split("=", 1)[1]
        if kind is None:
            kind = self.read1("/run/systemd/container") or self.read1("/run/host/container-manager")
        if kind is None and os.path.exists(self.p("/.dockerenv")):
            kind = "docker"
        return {"kind": kind, "in_container": bool(kind)}

    def probe_cpu(self):
        text = self.read("/proc/cpuinfo")
        if text is None:
            raise IOError("/proc/cpuinfo unreadable")
        first = {}
        count = 0
        for block in text.split("\n\n"):
            if not block.strip():
                continue
            count += 1
            if not first:
                for line in block.splitlines():
                    k, _, v = line.partition(":")
                    first[k.strip()] = v.strip()
        flags = first.get("flags", "").split()
        return {"vendor": first.get("vendor_id"), "family": int(first.get("cpu family", "0") or 0),
                "model_name": first.get("model name"), "logical_cpus": count,
                # _CPC parsed by drivers/acpi/cppc_acpi.c shows as cpuN/acpi_cppc/; the cpuinfo
                # flag marks only the MSR interface (EPYC 7002/7003 use shared memory, no flag)
                "cppc": os.path.isdir(self.p("/sys/devices/system/cpu/cpu0/acpi_cppc")), "cppc_msr": "cppc" in flags,
                "hwp": "hwp" in flags, "hypervisor": "hypervisor" in flags,
                "pm_profile": int(self.read1("/sys/firmware/acpi/pm_profile", "0") or 0)}

    def probe_cpufreq(self):
        policies = []
        dirs = self.glob("/sys/devices/system/cpu/cpufreq/policy*")
        # what a policy offers is the driver's, the same for all: read it once
        first = self.rel(dirs[0]) if dirs else None
        driver = self.read1(first + "/scaling_driver") if first else None
        governors = (self.read1(first + "/scaling_available_governors") or "").split() if first else []
        for d in dirs:
            rel = self.rel(d)
            pol = {"id": int(re.sub(r"\D", "", os.path.basename(d)) or 0),
                   "governor": self.read1(rel + "/scaling_governor")}
            epp = self.read1(rel + "/energy_performance_preference")
            if epp is not None:
                pol["epp"] = epp
            policies.append(pol)
        policies.sort(key=lambda x: x["id"])
        # driver and governors once, not per policy: on a 256-CPU host they were most of the facts
        return {"driver": driver, "governors": governors,
                "amd_pstate_status": self.read1("/sys/devices/system/cpu/amd_pstate/status"), "policies": policies}

    def probe_cpuidle(self):
        driver = self.read1("/sys/devices/system/cpu/cpuidle/current_driver")
        states = {}
        for d in self.glob("/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*"):
            idx = int(re.sub(r"\D", "", os.path.basename(d)))
            rel = self.rel(d)
            st = states.get(idx)
            if st is None:   # a state's name and latency are the idle driver's, the same on every CPU
                st = states[idx] = {"index": idx, "name": self.read1(rel + "/name"),
                                    "latency_us": int(self.read1(rel + "/latency", "0") or 0), "cpus": 0, "disabled": 0}
            st["cpus"] += 1
            if self.read1(rel + "/disable", "0") not in ("0", None):
                st["disabled"] += 1
        return {"driver": driver, "states": [states[k] for k in sorted(states)]}

    def probe_numa(self):
        nodes = [os.path.basename(n) for n in self.glob("/sys/devices/system/node/node[0-9]*")]
        return {"nodes": len(nodes) or 1}

    def probe_sysctl(self):
        """As systemd-sysctl applies them (sysctl.d(5)): *.conf in the four directories by
        file name, a name in an earlier directory shadowing the same name later, the last
        assignment winning; /etc/sysctl.conf only through Debian's 99-sysctl.conf link."""
        live = {}
        for key in WATCHED_SYSCTLS:
            live[key] = self.read1("/proc/sys/" + key.replace(".", "/"))
        files = {}
        for d in SYSCTL_DIRS:
            for path in self.glob(d + "/*.conf"):
                files.setdefault(os.path.basename(path), path)   # /etc wins over /usr/lib
        # systemd-sysctl never reads /etc/sysctl.conf itself (src/sysctl/sysctl.c): Debian <= 12
        # and Ubuntu reach it through the /etc/sysctl.d/99-sysctl.conf link their systemd ships,
        # Debian 13 (PVE 9) has no link, and then the file does nothing at boot
        ordered = [(n, files[n]) for n in sorted(files)]
        persisted, sources, assignments, contents = {}, {}, [], {}
        for name, path in ordered:
            rel = self.rel(path)
            real = self.rel(os.path.realpath(path))
            text = self.read(rel) or ""
            for n, line in enumerate(text.splitlines(), 1):
                line = line.strip()
                if not line or line[0] in "#;":
                    continue
                m = re.match(r"^-?\s*([\w./-]+)\s*=\s*(.*)$", line)
                if m and m.group(1).replace("/", ".") in WATCHED_SYSCTLS:
                    key = m.group(1).replace("/", ".")
                    persisted[key] = m.group(2).strip()
                    sources[key] = rel if rel == real else "%s -> %s" % (rel, real)
                    assignments.append({"key": key, "value": m.group(2).strip(), "name": name, "path": rel,
                                        "real_path": real, "line": n})
                    contents[real] = text
        # what /etc/sysctl.conf sets that no boot applies (no 99-sysctl.conf link: Debian 13)
        unapplied = []
        if "99-sysctl.conf" not in files:
            for line in (self.read("/etc/sysctl.conf") or "").splitlines():
                m = re.match(r"^\s*-?\s*([\w./-]+)\s*=\s*(.*)$", line)
                if m and not line.lstrip().startswith(("#", ";")) and m.group(1).replace("/", ".") in WATCHED_SYSCTLS:
                    unapplied.append({"key": m.group(1).replace("/", "."), "value": m.group(2).strip()})
        return {"live": live, "persisted": persisted, "sources": sources, "assignments": assignments,
                "contents": contents, "sysctl_conf_unapplied": unapplied}

    def probe_boot(self):
        cmdline = self.read1("/proc/cmdline")
        running = self.read1("/proc/sys/kernel/osrelease")
        installed = sorted((os.path.basename(p)[len("vmlinuz-"):] for p in self.glob("/boot/vmlinuz-*")),
                           key=version_key)
        loader, esp_modes = self.detect_loader(cmdline)
        persisted, grub_default = None, None
        if loader == "systemd-boot":
            # proxmox-boot-tool takes the file's first line only (proxmox-kernel-helper)
            persisted = " ".join(((self.read("/etc/kernel/cmdline") or "").splitlines() or [""])[0].split())
        elif loader in ("grub", "grub-esp"):
            values, _ = self.grub_settings()
            persisted = " ".join((values.get("GRUB_CMDLINE_LINUX", "") + " "
                                  + values.get("GRUB_CMDLINE_LINUX_DEFAULT", "")).split())
            grub_default = values.get("GRUB_DEFAULT", "0")
        next_pin = self.read1("/etc/kernel/next-boot-pin")
        pin = self.read1("/etc/kernel/proxmox-boot-pin")
        default, once = self.next_kernel(loader, installed, pin, next_pin)
        # a kernel whose modules landed but whose image is not in /boot (a /boot partition not
        # mounted during the upgrade, files deleted to make room): no boot loader can start it
        imageless = {}
        for moddir in self.glob("/lib/modules/*"):
            k = os.path.basename(moddir)
            if k not in installed and k != running and os.path.exists(os.path.join(moddir, "modules.dep")):
                owners = sorted(os.path.basename(l)[:-len(".list")].split(":")[0] for pattern in
                                ("proxmox-kernel-%s*.list", "pve-kernel-%s*.list", "linux-image-%s*.list",
                                 "linux-image-unsigned-%s*.list") for l in self.glob("/var/lib/dpkg/info/" + pattern % k))
                imageless[k] = owners
        headers = [k for k in installed if os.path.isdir(self.p("/usr/src/linux-headers-" + k))
                   or os.path.isdir(self.p("/lib/modules/%s/build" % k))]
        configs = dict((k, self.kernel_config(k)) for k in set(filter(None, [running, default])))
        m = re.search(r"^btime (\d+)", self.read("/proc/stat") or "", re.M)
        sources = ["/etc/kernel/cmdline"] if loader == "systemd-boot" else \
            ["/etc/default/grub"] + [self.rel(p) for p in self.glob("/etc/default/grub.d/*.cfg")]
        if default:
            sources.append("/boot/vmlinuz-" + default)
        mtimes = {}
        for path in sources:
            try:
                # ctime, not mtime: dpkg keeps a package's mtimes (a kernel image installed
                # today can carry last month's), the inode change time is when it landed
                st = os.stat(self.p(path))
                mtimes[path] = int(max(st.st_mtime, st.st_ctime))
            except OSError:
                pass
        return {"cmdline": cmdline, "boot_time": int(m.group(1)) if m else None, "mtimes": mtimes, "loader": loader, "esp_modes": esp_modes, "persisted_cmdline": persisted,
                "running_kernel": running, "installed_kernels": installed, "default_kernel": default,
                "kernels_without_image": imageless,
                "pinned_kernel": next_pin or pin, "permanent_pin": pin, "boot_once": once,
                "grub_entries": self.grub_entry_ids() if loader == "grub" else {},
                # gpuhost's own GRUB_DEFAULT pin (kernel.version, hosts without proxmox-boot-tool)
                "gpuhost_grub_pin": os.path.exists(self.p("/etc/default/grub.d/zz-gpuhost-kernel-pin.cfg")),
                "kernels_with_headers": headers, "grub_default": grub_default,
                "last_reboot": self.last_reboot(), "unfinished_refresh": self.unfinished_refresh(), "boot_id": self.read1("/proc/sys/kernel/random/boot_id"),
                "default_governor": dict((k, c[0]) for k, c in configs.items()),
                "amd_pstate_default_mode": dict((k, c[1]) for k, c in configs.items()),
                "nvidia_module_for": dict((k, self.nvidia_module_built(k)) for k in installed),
                "nvidia_dkms": bool(self.glob("/var/lib/dkms/nvidia*"))}

    def detect_loader(self, cmdline):
        """Which boot loader reads which file (pve-docs system-booting; proxmox-kernel-helper).
        ESPs that proxmox-boot-tool keeps (/etc/kernel/proxmox-boot-uuids) hold systemd-boot,
        which reads /etc/kernel/cmdline, or GRUB (ZFS on legacy BIOS, or Secure Boot), which
        reads /etc/default/grub(.d) although the installer wrote /etc/kernel/cmdline too;
        without them, plain GRUB. The running boot tells which loader the firmware starts:
        GRUB passes BOOT_IMAGE=, systemd-boot the entry's initrd=\\EFI\\...; only when
        it does not tell is `proxmox-boot-tool status` asked (it mounts every ESP)."""
        line = cmdline or ""
        booted_grub = line.startswith("BOOT_IMAGE=")
        booted_sdboot = not booted_grub and "initrd=\\EFI\\" in line
        if not os.path.exists(self.p("/etc/kernel/proxmox-boot-uuids")):
            return ("grub", []) if os.path.exists(self.p("/etc/default/grub")) else (None, [])
        if booted_grub or booted_sdboot:
            return ("grub-esp" if booted_grub else "systemd-boot"), []
        modes = []
        tool = self.p("/usr/sbin/proxmox-boot-tool")
        if os.path.exists(tool):
            rc, out, _ = self._run([tool, "status"])
            # "<uuid> is configured with: uefi (versions: ...)[, grub (versions: ...)]"
            for text in (out or "").splitlines() if rc == 0 else []:
                if "is configured with:" in text:
                    kinds = set(re.findall(r"\b(uefi|grub) \(versions", text))
                    modes.append(kinds.pop() if len(kinds) == 1 else "both")
        if modes and set(modes) == {"grub"}:
            return "grub-esp", modes
        if modes and set(modes) == {"uefi"}:
            return "systemd-boot", modes
        raise IOError("cannot tell which boot loader the ESPs hold (proxmox-boot-tool status: %s)"
                      % (", ".join(modes) or "unreadable"))

    def next_kernel(self, loader, installed, pin, next_pin=None):
        """(the kernel the boot loader will start, whether only once): a next-boot pin, a pin
        (proxmox-boot-tool writes them at the refresh), else on plain GRUB what grub.cfg
        selects as GRUB does (grub-reboot's next_entry once, else GRUB_DEFAULT or the saved
        entry), else the newest installed."""
        if loader == "grub":
            # plain GRUB boots what grub.cfg and grubenv select: a proxmox-boot-tool pin counts
            # only as the GRUB_DEFAULT its update-grub wrote there (grub-reboot's next_entry,
            # a later grub.d file, a failed update-grub all win over the pin file)
            chosen, once = grub_default_kernel(self.read("/boot/grub/grub.cfg"), self.read("/boot/grub/grubenv"))
            if chosen in installed:
                return chosen, once
        elif next_pin and next_pin in installed:
            return next_pin, True
        elif pin and pin in installed:
            return pin, False
        return (installed[-1] if installed else None), False

    def grub_entry_ids(self):
        """release -> the GRUB_DEFAULT value that names its entry by id ("<submenu id>><entry id>"),
        from grub.cfg as grub-mkconfig wrote it: what pins a kernel on plain GRUB."""
        return grub_entry_ids(self.read("/boot/grub/grub.cfg"))

    def unfinished_refresh(self):
        """The journal gpuhost's cmdline module keeps while it edits and refreshes the boot
        loader: still there, the refresh never finished (modules/cmdline.py)."""
        text = self.read(REFRESH_JOURNAL)
        if text is None:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        return dict((k, str(v)) for k, v in data.items()) if isinstance(data, dict) else {"since": "?"}

    def last_reboot(self):
        """What gpuhost's last reboot of this host was for (written by its reboot play just
        before it rebooted): a finding that boot did not clear is not worth a second one."""
        text = self.read("/var/lib/gpuhost/last-reboot.json")
        if not text:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def nvidia_module_built(self, release):
        """Only a module file proves the next boot has GPUs (dkms builds can fail)."""
        for pattern in ("/lib/modules/%s/updates/dkms/nvidia.ko*", "/lib/modules/%s/*/nvidia.ko*",
                        "/lib/modules/%s/*/*/nvidia.ko*", "/lib/modules/%s/*/*/*/nvidia.ko*"):
            if self.glob(pattern % release):
                return True
        return False

    def grub_settings(self):
        """GRUB's settings as grub-mkconfig sees them (/etc/default/grub, then grub.d/*.cfg),
        read without running anything from those files (see read_shell_assignments)."""
        values = {}
        files = ["/etc/default/grub"] + [self.rel(p) for p in self.glob("/etc/default/grub.d/*.cfg")]
        sources = {}
        for path in files:
            text = self.read(path)
            if text is None:
                if path == "/etc/default/grub":
                    raise IOError("cannot read /etc/default/grub")
                continue
            for name in read_shell_assignments(text, path, values, GRUB_VARS):
                sources[name] = path
        return values, sources

    def kernel_config(self, release):
        """What /boot/config-<release> says: the default cpufreq governor, amd_pstate's mode."""
        text = self.read("/boot/config-" + release)
        if text is None:
            return None, None
        gov = re.search(r"^CONFIG_CPU_FREQ_DEFAULT_GOV_(\w+)=y", text, re.M)
        mode = re.search(r"^CONFIG_X86_AMD_PSTATE_DEFAULT_MODE=(\S+)", text, re.M)
        return gov.group(1).lower() if gov else None, mode.group(1).strip('"') if mode else None

    def probe_iommu(self):
        units = [os.path.basename(p) for p in self.glob("/sys/class/iommu/*")]
        types = sorted(set(filter(None, (self.read1(self.rel(p) + "/type") for p in self.glob("/sys/kernel/iommu_groups/*")))))
        return {"units": units, "group_types": types, "groups": len(self.glob("/sys/kernel/iommu_groups/*"))}

    def probe_pci(self):
        devices = []
        unreadable = []
        for path in self.glob("/sys/bus/pci/devices/*"):
            bdf = os.path.basename(path)
            rel = self.rel(path)
            real = os.path.realpath(path)
            parent = os.path.basename(os.path.dirname(real))
            dev = {"bdf": bdf, "vendor": _hex(self.read1(rel + "/vendor")), "device": _hex(self.read1(rel + "/device")),
                   "class": _hex(self.read1(rel + "/class")),
                   "parent": parent if re.match(r"^[0-9a-f]{4}:", parent) else None,
                   "driver": os.path.basename(os.path.realpath(path + "/driver")) if os.path.exists(path + "/driver") else None,
                   "numa_node": int(self.read1(rel + "/numa_node", "-1") or -1),
                   # behind an external-facing port: the kernel marks it untrusted and removable
                   # (drivers/pci/probe.c pci_set_removable) and always gives it a DMA domain
                   "removable": self.read1(rel + "/removable") == "removable",
                   "iommu_group_type": (self.read1(self.rel(os.path.realpath(path + "/iommu_group")) + "/type")
                                        if os.path.exists(path + "/iommu_group") else None)}
            try:
                with open(path + "/config", "rb") as f:
                    cfg = f.read(4096)
            except (IOError, OSError) as exc:
                cfg = b""
                dev["config_error"] = str(exc)
            dev["config_size"] = len(cfg)
            if 0 < len(cfg) <= 64:
                dev["config_error"] = "only the first 64 bytes of config space are readable without root"
                unreadable.append(bdf)
            dev.update(parse_config(cfg))
            devices.append(dev)
        if unreadable:
            self.errors["pci"] = "config space of %d devices needs root to read" % len(unreadable)
        return devices

    def probe_nvidia(self):
        version_text = self.read("/proc/driver/nvidia/version")
        module, flavor = None, None
        if version_text:
            m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", version_text)
            module = m.group(1) if m else None
            # kernel-open builds say "Open Kernel Module"; the proprietary ones "Kernel Module"
            flavor = "open" if "Open Kernel Module" in version_text else "proprietary"
        majors, char_devices = {}, {}
        devices = self.read("/proc/devices") or ""
        chars = devices.split("Block devices:")[0]
        for line in chars.splitlines():
            m = re.match(r"^\s*(\d+)\s+(\S+)$", line)
            if m:
                char_devices[m.group(1)] = m.group(2)
                if m.group(2).startswith("nvidia"):
                    majors[m.group(2)] = int(m.group(1))
        smi = None
        for cand in ("/usr/bin/nvidia-smi", "/usr/local/bin/nvidia-smi"):
            if os.path.exists(self.p(cand)):
                smi = cand
        # the device nodes as the driver and nvidia-modprobe made them: a container's devN:
        # path must exist when it starts (pve-container refuses the start otherwise)
        nodes = sorted(self.rel(p) for p in self.glob("/dev/nvidia*") + self.glob("/dev/nvidia-caps/*"))
        out = {"module": module, "flavor": flavor, "majors": majors, "char_devices": char_devices, "smi": None,
               "dev_nodes": nodes,
               "gpus": [], "userspace": None, "smi_error": None, "no_devices": False}
        if smi is None:
            return out
        out["smi"] = smi
        fields = "index,pci.bus_id,name,driver_version,persistence_mode,compute_cap"
        rc, text, err = self._run([self.p(smi), "--query-gpu=" + fields, "--format=csv,noheader"])
        if rc != 0 and "compute_cap" in (text + err) and "not a valid field" in (text + err):
            # R470 and older have no compute_cap field: the whole query fails, so ask without it
            rc, text, err = self._run([self.p(smi), "--query-gpu=" + fields.rsplit(",", 1)[0],
                                       "--format=csv,noheader"])
        if rc != 0:
            msg = (text.strip() or err.strip()).splitlines()[0] if (text.strip() or err.strip()) else "exit %d" % rc
            out["smi_error"] = msg
            out["no_devices"] = "No devices were found" in (text + err)
            m = re.search(r"NVML library version: (\S+)", text + err)
            out["userspace"] = m.group(1) if m else None
            return out
        for line in text.strip().splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) < 5:
                continue
            bus = cells[1].lower()
            out["gpus"].append({"index": int(cells[0]), "bdf": bus[4:] if len(bus) == 16 else bus, "name": cells[2],
                                "compute_cap": cells[5] if len(cells) > 5 else None,
                                "persistence": cells[4] == "Enabled"})
            out["userspace"] = cells[3]
        if not out["gpus"] and "No devices were found" in text:
            out["no_devices"] = True
        return out

    def probe_lxc(self):
        confs = {}
        d = "/etc/pve/lxc"
        if not os.path.isdir(self.p(d)):
            return None
        for path in self.glob(d + "/*.conf"):
            vmid = os.path.basename(path)[:-5]
            if vmid.isdigit():
                confs[vmid] = self.read(self.rel(path))
        return {"configs": confs}

    def probe_vms(self):
        """Proxmox VMs given PCI devices (hostpciN in their main section): vfio-pci binds
        them only when the VM starts, so the host passes devices on even while none is bound."""
        vms = {}
        for path in self.glob("/etc/pve/qemu-server/*.conf"):
            vmid = os.path.basename(path)[:-5]
            lines = []
            for line in (self.read(self.rel(path)) or "").splitlines():
                if line.startswith("["):
                    break
                if re.match(r"^hostpci\d+\s*:", line):
                    lines.append(line.strip())
            if lines:
                vms[vmid] = lines
        return {"hostpci": vms}

    def probe_block(self):
        out = []
        for path in self.glob("/sys/block/*"):
            name = os.path.basename(path)
            if re.match(r"^(loop|ram|zram|sr|fd|nbd)\d*", name):
                continue
            sched = self.read1("/sys/block/%s/queue/scheduler" % name) or ""
            m = re.search(r"\[(\S+)\]", sched)
            out.append({"name": name, "rotational": self.read1("/sys/block/%s/queue/rotational" % name) == "1",
                        "scheduler": m.group(1) if m else (sched or None),
                        "schedulers": sched.replace("[", "").replace("]", "").split()})
        return out

    def probe_units(self):
        units = {}
        for name in OWNED_UNITS:
            units[name] = self.effective_unit(name)
        return units

    def udev_rules(self):
        """The texts of every udev rules file, read once for all the units asked about."""
        if getattr(self, "_udev_rules", None) is None:
            self._udev_rules = [self.read(self.rel(rule)) or ""
                                for d in ("/etc/udev/rules.d", "/lib/udev/rules.d", "/usr/lib/udev/rules.d")
                                for rule in self.glob(d + "/*.rules")]
        return self._udev_rules

    def effective_unit(self, name):
        """A unit as systemd reads it (systemd.unit(5)): the first file of that name in the
        unit path, then drop-ins (<unit>.d/*.conf from every unit directory, by file name),
        where an empty ExecStart= resets the list; enabled by a .wants link, or started by
        a udev rule (Ubuntu's nvidia persistenced has no [Install], 71-nvidia.rules starts it)."""
        content, where, masked = None, None, False
        for d in UNIT_DIRS:
            path = d + "/" + name
            if os.path.islink(self.p(path)) and os.readlink(self.p(path)) == "/dev/null":
                content, where, masked = "", path, True      # `systemctl mask`: systemd.unit(5)
                break
            text = self.read(path)
            if text is not None:
                content, where = text, path
                break
        dropins = {}
        for d in reversed(UNIT_DIRS):
            for path in self.glob(d + "/" + name + ".d/*.conf"):
                dropins[os.path.basename(path)] = self.rel(path)
        execs = _exec_starts(content or "")
        dropin_texts = {}
        for base in sorted(dropins):
            text = self.read(dropins[base]) or ""
            dropin_texts[dropins[base]] = text
            more = _exec_starts(text, reset_marker=True)
            for cmd in more:
                execs = [] if cmd is None else execs + [cmd]
        enabled = any(os.path.lexists(self.p(d + "/multi-user.target.wants/" + name)) for d in UNIT_DIRS[:1])
        by_udev = any(re.search(r'SYSTEMD_WANTS\S*\s*[+:]?=\s*"?%s' % re.escape(name), text)
                      for text in self.udev_rules())
        return {"content": content, "path": where, "enabled": enabled, "dropins": dropin_texts, "masked": masked,
                "exec_start": execs, "started_by_udev": by_udev,
                "installable": bool(re.search(r"^\s*\[Install\]", content or "", re.M))}


def _exec_starts(text, reset_marker=False):
    """ExecStart= values of a unit file's [Service] section; None for an empty ExecStart=
    (which resets the list) when reading a drop-in."""
    out, section = [], None
    for line in text.splitlines():
        t = line.strip()
        if t.startswith("["):
            section = t
            continue
        if section != "[Service]":
            continue
        m = re.match(r"^ExecStart\s*=\s*(.*)$", t)
        if m:
            if not m.group(1):
                out.append(None)
            else:
                out.append(m.group(1))
    if not reset_marker:
        cleaned = []
        for cmd in out:
            cleaned = [] if cmd is None else cleaned + [cmd]
        return cleaned
    return out


def parse_config(cfg):
    """Decode the registers the controls need from a config-space dump."""
    out = {}
    if len(cfg) >= 4 and cfg[:4] == b"\xff\xff\xff\xff":
        # a function that does not answer reads all ones (PCI: a master abort): a GPU fallen
        # off the bus (Xid 79) keeps its sysfs vendor/device from enumeration, never its registers
        return {"dead": True}
    if len(cfg) < 64:
        return out
    status = struct.unpack_from("<H", cfg, 0x06)[0]
    ptr = cfg[0x34] if status & 0x10 else 0
    seen = 0
    while ptr and ptr + 2 <= len(cfg) and seen < 48:
        cap_id, nxt = cfg[ptr], cfg[ptr + 1]
        if cap_id == CAP_ID_EXP and ptr + 0x14 <= len(cfg):
            flags = struct.unpack_from("<H", cfg, ptr + 2)[0]
            devcap = struct.unpack_from("<I", cfg, ptr + 4)[0]
            devctl = struct.unpack_from("<H", cfg, ptr + 8)[0]
            lnkcap = struct.unpack_from("<I", cfg, ptr + 0x0C)[0]
            lnksta = struct.unpack_from("<H", cfg, ptr + 0x12)[0]
            out.update({"pcie_cap": ptr, "port_type": (flags >> 4) & 0xF,
                        "mps_supported": MPS_SIZES[devcap & 0x7] if (devcap & 0x7) < 6 else None,
                        "mps": MPS_SIZES[(devctl >> 5) & 0x7] if ((devctl >> 5) & 0x7) < 6 else None,
                        "mrrs": MPS_SIZES[(devctl >> 12) & 0x7] if ((devctl >> 12) & 0x7) < 6 else None,
                        "link_cap": {"gen": lnkcap & 0xF, "width": (lnkcap >> 4) & 0x3F},
                        "link_sta": {"gen": lnksta & 0xF, "width": (lnksta >> 4) & 0x3F}})
        ptr = nxt
        seen += 1
    off = 0x100
    seen = 0
    while len(cfg) >= off + 8 and 0x100 <= off and seen < 64:
        header = struct.unpack_from("<I", cfg, off)[0]
        if header in (0, 0xFFFFFFFF):
            break
        if header & 0xFFFF == ECAP_ID_ACS:
            out["acs_cap"] = off
            out["acs_caps"] = struct.unpack_from("<H", cfg, off + 4)[0]     # ACS Capability register
            out["acs_ctrl"] = struct.unpack_from("<H", cfg, off + 6)[0]
        off = (header >> 20) & 0xFFC
        seen += 1
        if off == 0:
            break
    return out


GRUB_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT", "GRUB_DEFAULT")
ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


class ShellValueError(ValueError):
    pass


def read_shell_assignments(text, path, values, wanted):
    """Evaluate the plain `NAME=value` lines of a shell file into *values*, the way `sh`
    would for them (quotes, backslashes, $NAME and ${NAME} of earlier assignments),
    without running anything. A line that would run something (command substitution,
    a conditional, a function) and names a wanted variable cannot be evaluated safely:
    ShellValueError names the file and line. Other lines are ignored, as the variables
    they set do not matter here. Returns the wanted names this file assigned."""
    assigned = []
    lines = text.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        line, start = lines[i], i + 1
        # a quoted value may run over several lines
        while _open_quote(line) and i + 1 < len(lines):
            i += 1
            line += "\n" + lines[i]
        i += 1
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = ASSIGN.match(line)
        names_here = [w for w in wanted if re.search(r"\b%s\b" % w, line)]
        if m is None:
            if names_here:
                raise ShellValueError("%s line %d: cannot evaluate %s without running it" % (path, start, names_here[0]))
            continue
        name, raw = m.group(1), m.group(2)
        try:
            value = _shell_word(raw, values)
        except ShellValueError as exc:
            if name in wanted or names_here:
                raise ShellValueError("%s line %d: %s" % (path, start, exc))
            continue
        values[name] = value
        if name in wanted:
            assigned.append(name)
    return assigned


def shell_scan(text):
    """(where an unquoted comment starts, or len(text); the quote still open at the end, or
    None), the way sh reads a line: quotes, backslashes, `#` only at the start of a word."""
    quote, esc = None, False
    for i, ch in enumerate(text):
        if esc:
            esc = False
        elif ch == "\\" and quote != "'":
            esc = True
        elif quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return i, None
    return len(text), quote


def _open_quote(line):
    return shell_scan(line)[1] is not None


def _shell_word(raw, values):
    """One shell word (the right side of NAME=...), with a trailing comment allowed."""
    out, i, quote = [], 0, None
    while i < len(raw):
        ch = raw[i]
        if quote == "'":
            if ch == "'":
                quote = None
            else:
                out.append(ch)
            i += 1
            continue
        if ch == "\\":
            nxt = raw[i + 1:i + 2]
            if quote == '"' and nxt not in ('"', "\\", "$", "`", "\n"):
                out.append(ch)
            elif nxt != "\n":
                out.append(nxt)
            i += 2
            continue
        if ch in "`" or raw.startswith("$(", i):
            raise ShellValueError("command substitution")
        if ch == "$":
            m = re.match(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))", raw[i:])
            if not m:
                raise ShellValueError("a shell expansion gpuhost does not evaluate")
            out.append(values.get(m.group(1) or m.group(2), ""))
            i += m.end()
            continue
        if quote == '"':
            if ch == '"':
                quote = None
            else:
                out.append(ch)
            i += 1
            continue
        if ch in "'\"":
            quote = ch
            i += 1
            continue
        if ch in " \t":
            rest = raw[i:].strip()
            if rest and not rest.startswith("#"):
                raise ShellValueError("more than an assignment on the line")
            break
        if ch in ";&|<>()":
            raise ShellValueError("more than an assignment on the line")
        out.append(ch)
        i += 1
    if quote:
        raise ShellValueError("unclosed quote")
    return "".join(out)


def grubenv_values(grubenv):
    """grubenv's NAME=value lines (grub-editenv's format; the rest is # padding)."""
    out = {}
    for line in (grubenv or "").splitlines():
        if line and not line.startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            out[name] = value
    return out


def grub_menu(cfg):
    """grub.cfg's menu as a tree: top-level entries and submenus with their titles, ids
    and, for entries, the kernel release their linux line boots."""
    entries, stack = [], []
    for line in cfg.splitlines():
        t = line.strip()
        mm = re.match(r"^(menuentry|submenu)\s+(['\"])(.*?)\2(.*)\{$", t)
        if mm:
            ident = re.search(r"\$menuentry_id_option\s+'([^']*)'", mm.group(4))
            node = {"title": mm.group(3), "id": ident.group(1) if ident else None, "kids": [], "kernel": None}
            (stack[-1]["kids"] if stack else entries).append(node)
            stack.append(node)
            continue
        lm = re.match(r"^linux\S*\s+\S*vmlinuz-(\S+)", t)
        if lm and stack and stack[-1]["kernel"] is None:
            stack[-1]["kernel"] = lm.group(1)
        if t == "}" and stack:
            stack.pop()
    return entries


def grub_default_kernel(cfg, grubenv):
    """(the kernel release GRUB boots next, whether only this once), resolved as GRUB does
    from grub.cfg as grub-mkconfig writes it (util/grub.d/00_header.in): a non-empty
    `next_entry` in grubenv (grub-reboot) is used once; else the `set default=` of the
    else branch: GRUB_DEFAULT, or `${saved_entry}` from grubenv for GRUB_DEFAULT=saved
    (never the first `set default="${next_entry}"`). A default is an index into the
    top-level entries (a submenu counts as one, `N>M` goes into it), a title or an id."""
    if not cfg:
        return None, False
    env = grubenv_values(grubenv)
    defaults = [v for v in re.findall(r'^\s*set default="?([^"\n]*)"?\s*$', cfg, re.M)
                if "next_entry" not in v]
    default, once = (defaults[0] if defaults else "0"), False
    if env.get("next_entry") and re.search(r'set default="?\$\{next_entry\}', cfg):
        default, once = env["next_entry"], True
    default = re.sub(r"\$\{?saved_entry\}?", lambda m: env.get("saved_entry", ""), default) or "0"
    return _grub_resolve(grub_menu(cfg), default), once


def grub_entry_ids(cfg):
    """release -> "<submenu id>><entry id>" (or the entry id alone at top level)."""
    out = {}

    def walk(level, prefix):
        for node in level:
            if node["kids"]:
                walk(node["kids"], (prefix + ">" if prefix else "") + (node["id"] or node["title"]))
            elif node["kernel"] and node["id"] and not re.search(r"-(recovery|simple)-", node["id"]) \
                    and node["kernel"] not in out:
                out[node["kernel"]] = (prefix + ">" if prefix else "") + node["id"]
    walk(grub_menu(cfg or ""), "")
    return out


def _grub_resolve(entries, default):
    level = entries
    node = None
    for part in default.split(">"):
        part = part.strip()
        if part.isdigit():
            node = level[int(part)] if int(part) < len(level) else None
        else:
            node = next((e for e in level if part in (e["title"], e["id"])), None)
        if node is None:
            return None
        level = node["kids"]
    while node and node["kernel"] is None and node["kids"]:
        node = node["kids"][0]
    return node["kernel"] if node else None


def version_key(release):
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.\-+~_]", release))


def _hex(text):
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def _run(argv):
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate()
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    except OSError as exc:
        return 127, "", str(exc)
