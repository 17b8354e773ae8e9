# -*- coding: utf-8 -*-
"""What boots next: the loader, the persisted command line, installed, default and pinned
kernels, gpuhost's refresh journal and reboot record.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import stat
import re

from ansible_collections.gpuhost.stack.plugins.module_utils.probe.grubcfg import grub_default_kernel, grub_entry_ids, version_key
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.shellvars import GRUB_VARS, read_shell_assignments

__metaclass__ = type

# the journal gpuhost's cmdline module keeps while it edits and refreshes the boot loader
REFRESH_JOURNAL = "/var/lib/gpuhost/boot-refresh.json"


class BootProbe:
    """Probe sections: probe_boot (a part of probe.Probe)."""

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
            values, dummy = self.grub_settings()
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
        boot_id = self.read1("/proc/sys/kernel/random/boot_id")
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
        return {"cmdline": cmdline, "boot_time": int(m.group(1)) if m else None, "mtimes": mtimes, "loader": loader, "esp_modes": esp_modes,
                "persisted_cmdline": persisted,
                "running_kernel": running, "installed_kernels": installed, "default_kernel": default,
                "kernels_without_image": imageless,
                "pinned_kernel": next_pin or pin, "permanent_pin": pin, "boot_once": once,
                "grub_entries": self.grub_entry_ids() if loader == "grub" else {},
                # gpuhost's own GRUB_DEFAULT pin (kernel.version, hosts without proxmox-boot-tool)
                "gpuhost_grub_pin": os.path.exists(self.p("/etc/default/grub.d/zz-gpuhost-kernel-pin.cfg")),
                "kernels_with_headers": headers, "grub_default": grub_default,
                "last_reboot": self.last_reboot(), "unfinished_refresh": self.unfinished_refresh(), "boot_id": boot_id,
                "default_governor": dict((k, c[0]) for k, c in configs.items()),
                "amd_pstate_default_mode": dict((k, c[1]) for k, c in configs.items()),
                "nvidia_module_for": dict((k, self.nvidia_module_built(k)) for k in installed),
                "nvidia_dkms": bool(self.glob("/var/lib/dkms/nvidia*")),
                "untrusted_records": list(getattr(self, "untrusted_records", [])),
                # asked of systemd only where it matters: this boot runs another kernel than the next
                "next_boot_pin_consumed": self.next_boot_pin_consumed() if default and running != default else None,
                "refused_writes": self.refused_writes(boot_id)}

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
            rc, out, dummy = self.command([tool, "status"])
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
        text = self.read_record(REFRESH_JOURNAL)
        if text is None:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        return dict((k, str(v)) for k, v in data.items()) if isinstance(data, dict) else {"since": "?"}

    def refused_writes(self, bid):
        """The runtime writes the kernel refused at gpuhost's fixes in this boot (the runtime
        module's record, trusted only as it writes it) in the boot *bid*: {path: {value, error}}. A refusal lasts
        until a boot, where what it depended on (the firmware's settings, the driver) may have
        changed."""
        text = self.read_record("/var/lib/gpuhost/refused-writes.json")
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            return {}
        return dict((k, {"value": str(v.get("value")), "error": str(v.get("error"))})
                    for k, v in (data.items() if isinstance(data, dict) else [])
                    if isinstance(v, dict) and v.get("boot_id") == bid)

    def next_boot_pin_consumed(self):
        """Whether this boot was a one-time boot that proxmox-boot-tool's cleanup has since
        undone: proxmox-boot-cleanup.service (proxmox-kernel-helper) runs only where
        /etc/kernel/next-boot-pin exists (ConditionPathExists), removes it (`kernel unpin
        --next-boot`) and refreshes the boot loader to its permanent choice, and stays active
        (RemainAfterExit). systemd's own state says it ran this boot (systemctl show, nothing
        started); None where the unit or systemctl is not there."""
        unit = "proxmox-boot-cleanup.service"
        if not any(os.path.exists(self.p(d + "/" + unit)) for d in ("/lib/systemd/system", "/usr/lib/systemd/system")):
            return None
        active, started = self.unit_state(unit)
        if active is None:
            return None
        return active == "active" and bool(started)

    def read_record(self, path):
        """A record gpuhost wrote on this host, trusted only as gpuhost writes it: a plain file
        that root (or the user the probe runs as) owns and no one else can write. Anything else
        is read as absent (a record planted by another user must not hold or blame a reboot),
        and said in self.untrusted_records."""
        try:
            st = os.lstat(self.p(path))
        except OSError:
            return None
        why = None
        if not stat.S_ISREG(st.st_mode):
            why = "not a plain file"
        elif st.st_uid not in (0, os.geteuid()):
            why = "owned by uid %d" % st.st_uid
        elif st.st_mode & 0o022:
            why = "writable by others (mode %04o)" % (st.st_mode & 0o7777)
        if why:
            if not hasattr(self, "untrusted_records"):
                self.untrusted_records = []
            self.untrusted_records.append("%s: %s, not gpuhost's: ignored" % (path, why))
            return None
        return self.read(path)

    def last_reboot(self):
        """What gpuhost's last reboot of this host was for (written by its reboot play just
        before it rebooted): a finding that boot did not clear is not worth a second one."""
        text = self.read_record("/var/lib/gpuhost/last-reboot.json")
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
