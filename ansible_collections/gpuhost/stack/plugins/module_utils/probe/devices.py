# -*- coding: utf-8 -*-
"""The devices: IOMMU, PCI functions with their PCIe registers, the NVIDIA driver and GPUs, disks.
"""
from __future__ import absolute_import, division, print_function

import os
import re
import stat

from ansible_collections.gpuhost.stack.plugins.module_utils.probe.attribute import read_attribute
from ansible_collections.gpuhost.stack.plugins.module_utils.probe.pciconfig import _hex, parse_config

__metaclass__ = type


class DevicesProbe:
    """Probe sections: probe_iommu, probe_pci, probe_lockdown, probe_nvidia, probe_kernel_log, probe_block (a part of probe.Probe)."""

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
                cfg = read_attribute(path + "/config", 4096)
            except (IOError, OSError) as exc:
                cfg = b""
                dev["config_error"] = str(exc)
            dev["config_size"] = len(cfg)
            if 0 < len(cfg) <= 64:
                dev["config_error"] = "only the first 64 bytes of config space are readable without root"
                unreadable.append(bdf)
            dev.update(parse_config(cfg))
            if dev["vendor"] == 0x10DE and (dev["class"] or 0) >> 16 == 0x03:
                dev["resources"] = parse_resources(self.read(rel + "/resource") or "")
            devices.append(dev)
        if unreadable:
            self.errors["pci"] = "config space of %d devices needs root to read" % len(unreadable)
        return devices

    def probe_lockdown(self):
        """The kernel's lockdown level, which decides whether user space may write PCI config
        space: security/lockdown/lockdown.c lists every level with the current one in brackets
        ("[none] integrity confidentiality"); drivers/pci/pci-sysfs.c refuses config writes
        (EPERM) from integrity on (LOCKDOWN_PCI_ACCESS). No file: no lockdown LSM, nothing refused."""
        text = self.read("/sys/kernel/security/lockdown")
        if text is None:
            return "none"
        m = re.search(r"\[([a-z]+)\]", text)
        if not m:
            raise ValueError("no current level in %r" % text.strip()[:80])
        return m.group(1)

    def smi_query(self, smi, fields):
        """nvidia-smi's per-GPU query of *fields*, one CSV line a GPU."""
        return [self.p(smi), "--query-gpu=" + ",".join(fields), "--format=csv,noheader"]

    def smi_p2p(self, smi, mode):
        """nvidia-smi's peer-to-peer matrix for reads (r) or writes (w)."""
        return [self.p(smi), "topo", "-p2p", mode]

    def nvidia_smi(self):
        """nvidia-smi's path on the host (/usr/local/bin's, a .run install, over the package's)."""
        smi = None
        for cand in ("/usr/bin/nvidia-smi", "/usr/local/bin/nvidia-smi"):
            if os.path.exists(self.p(cand)):
                smi = cand
        return smi

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
        smi = self.nvidia_smi()
        # the device nodes as the driver and nvidia-modprobe made them: a container's devN:
        # path must exist when it starts (pve-container refuses the start otherwise)
        nodes = sorted(self.rel(p) for p in self.glob("/dev/nvidia*") + self.glob("/dev/nvidia-caps/*"))
        # the char major each nvidia-uvm node has (None: not a char device): a node made by
        # hand before the module's major changed is as unusable as a missing one
        node_majors = {}
        for path in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
            try:
                st = os.stat(self.p(path))
            except OSError:
                continue
            node_majors[path] = os.major(st.st_rdev) if stat.S_ISCHR(st.st_mode) else None
        # which GPU each /dev/nvidiaN is: the driver's Device Minor of each GPU
        minors = {}
        for info in self.glob("/proc/driver/nvidia/gpus/*/information"):
            m = re.search(r"^Device Minor:\s*(\d+)", self.read(self.rel(info)) or "", re.M)
            if m:
                minors[m.group(1)] = os.path.basename(os.path.dirname(info)).lower()
        out = {"module": module, "flavor": flavor, "majors": majors, "char_devices": char_devices, "smi": None,
               "dev_nodes": nodes, "node_majors": node_majors, "minors": minors,
               "modprobe_tool": next((t for t in ("/usr/bin/nvidia-modprobe", "/usr/local/bin/nvidia-modprobe")
                                      if os.path.exists(self.p(t))), None),
               "gpus": [], "userspace": None, "smi_error": None, "no_devices": False}
        if smi is None:
            return out
        out["smi"] = smi
        # every per-GPU field in one query; a driver that does not know a field fails the
        # whole query naming it ('Field "compute_cap" is not a valid field to query.', R470):
        # ask again without it, and what it would have said is unknown (None)
        fields = list(SMI_FIELDS)
        for dummy in range(len(SMI_FIELDS)):
            rc, text, err = self.command(self.smi_query(smi, fields))
            m = re.search(r'Field "([^"]+)" is not a valid field to query', text + err)
            if rc == 0 or not m or m.group(1) not in fields or m.group(1) in SMI_CORE:
                break
            fields.remove(m.group(1))
        if rc != 0:
            msg = (text.strip() or err.strip()).splitlines()[0] if (text.strip() or err.strip()) else "exit %d" % rc
            out["smi_error"] = msg
            out["no_devices"] = "No devices were found" in (text + err)
            m = re.search(r"NVML library version: (\S+)", text + err)
            out["userspace"] = m.group(1) if m else None
            return out
        for cells in smi_rows(text, len(fields)):
            row = dict(zip(fields, cells))
            bus = row["pci.bus_id"].lower()
            out["gpus"].append({"index": int(row["index"]), "bdf": bus[4:] if len(bus) == 16 else bus,
                                "name": row["name"], "compute_cap": row.get("compute_cap"),
                                "persistence": row["persistence_mode"] == "Enabled",
                                "memory_mib": _mib(row.get("memory.total")),
                                "power": smi_power(row), "health": smi_health(row), "modes": smi_modes(row),
                                "fabric": smi_fabric(row)})
            out["userspace"] = row["driver_version"]
        if not out["gpus"] and "No devices were found" in text:
            out["no_devices"] = True
        if any(g["modes"]["mig"] for g in out["gpus"]):
            out["mig_boot_units"] = self.mig_boot_units()
        mig_on = [g for g in out["gpus"] if (g["modes"]["mig"] or [None])[0] == "Enabled"]
        if mig_on:
            # MIG mode survives a reboot, its GPU instances do not (NVIDIA MIG User Guide):
            # how many each MIG GPU has now, and whether anything creates them at boot
            rc, text, err = self.command([self.p(smi), "mig", "-lgi"])
            counts, why = parse_mig_lgi(rc, text + err)
            out["mig_error"] = why
            for g in mig_on:
                g["mig_instances"] = None if counts is None else counts.get(g["index"], 0)
        if len(out["gpus"]) >= 2:
            # peer-to-peer as the driver sees it, one read per direction (NCCL's troubleshooting
            # guide asks for it): a GPU x GPU matrix of the legend's codes
            out["p2p"], out["p2p_error"] = {}, None
            for mode in ("r", "w"):
                rc, text, err = self.command(self.smi_p2p(smi, mode))
                matrix = parse_p2p(text) if rc == 0 else None
                if not matrix:
                    out["p2p_error"] = "nvidia-smi topo -p2p %s: %s" % (
                        mode, ((text + err).strip().splitlines() or ["exit %d" % rc])[0])
                    break
                out["p2p"][mode] = matrix
        return out

    def mig_boot_units(self):
        """The enabled units whose ExecStart creates GPU instances at boot: mig-parted's
        nvidia-mig-manager.service (its service.sh), nvidia-mig-parted apply, or nvidia-smi mig
        -cgi. Read as systemd reads them (effective_unit); nothing is run."""
        names = {os.path.basename(link) for link in self.glob("/etc/systemd/system/*.target.wants/*.service")}
        return sorted(name for name in names if any(MIG_CREATES.search(cmd or "")
                                                    for cmd in self.effective_unit(name).get("exec_start") or []))

    def probe_kernel_log(self):
        """The NVIDIA driver's Xids in this boot's kernel log (/dev/kmsg: root, or CAP_SYSLOG),
        and the GPUs its probe said it does not support."""
        lines = read_kmsg(self.p("/dev/kmsg"))
        return {"xids": xids_in(lines), "unsupported_gpus": unsupported_in(lines)}

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

    def probe_scheduler_rules(self):
        """udev rules that set a disk's I/O scheduler (ATTR{queue/scheduler}="..."), as udev reads
        its rules files (by name, /etc shadowing /lib): udev applies them in file-name order at
        every boot and hotplug, the last write winning. Each: the file, its name, the value set,
        whether the rule is for rotational disks only (ATTR{queue/rotational}=="1"), and the text
        of gpuhost's own file."""
        out = []
        for name, path, text in self.udev_files():
            for line in text.replace("\\\n", " ").splitlines():
                if line.lstrip().startswith("#"):
                    continue
                m = re.search(r'ATTR\{queue/scheduler\}\s*=\s*"([^"]*)"', line)
                if m:
                    out.append({"name": name, "path": path, "scheduler": m.group(1),
                                "rotational_only": bool(re.search(r'ATTR\{queue/rotational\}\s*==\s*"1"', line)),
                                "content": text if name.startswith("99-gpuhost-") else None})
        return out


# what nvidia-smi --query-gpu is asked for each GPU (nvidia-smi --help-query-gpu): the core
# that every driver since R450 answers, then fields a driver may not know
SMI_CORE = ("index", "pci.bus_id", "name", "driver_version", "persistence_mode")
SMI_FIELDS = SMI_CORE + ("compute_cap", "memory.total", "power.limit", "enforced.power.limit", "power.default_limit",
                         "power.min_limit", "power.max_limit", "gpu_recovery_action", "remapped_rows.pending",
                         "retired_pages.pending", "compute_mode", "mig.mode.current", "mig.mode.pending",
                         "ecc.mode.current", "ecc.mode.pending", "fabric.state", "fabric.status")
POWER_FIELDS = (("limit_w", "power.limit"), ("enforced_w", "enforced.power.limit"), ("default_w", "power.default_limit"),
                ("min_w", "power.min_limit"), ("max_w", "power.max_limit"))


def smi_rows(text, width):
    """nvidia-smi's CSV rows of *width* cells. A GPU name is free text the board's firmware
    sets: one that holds a line break splits its row in two, and a row that starts with a GPU
    index but is short of cells takes the next line in, the break kept as a visible "\\n" (the
    GPU is reported, never dropped). Any other line (a warning nvidia-smi prints) is no row."""
    rows, pending = [], None
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == width:
            rows.append(cells)
            pending = None
            continue
        if pending is not None:
            joined = [c.strip() for c in (pending + "\\n" + line).split(",")]
            if len(joined) == width:
                rows.append(joined)
                pending = None
                continue
            pending = pending + "\\n" + line if len(joined) < width else None
            continue
        if len(cells) < width and re.match(r"^\d+\s*,", line):
            pending = line
    return rows


def _watts(cell):
    """'600.00 W' (or '600.00' with nounits) in watts; [N/A] and [Not Supported] are None."""
    m = re.match(r"^(\d+(?:\.\d+)?)(?: W)?$", (cell or "").strip())
    return float(m.group(1)) if m else None


def smi_power(row):
    """A GPU's power limits, or None where it reports no power management (every limit N/A)."""
    power = dict((key, _watts(row.get(field))) for key, field in POWER_FIELDS)
    if power["limit_w"] is None or power["default_w"] is None:
        return None
    return power


def _yes_no(cell):
    """nvidia-smi's Yes/No; [N/A] (a GPU without the feature: H100 has no page retirement)
    or a field the driver does not know is None."""
    cell = (cell or "").strip()
    return True if cell == "Yes" else False if cell == "No" else None


def smi_health(row):
    """What the driver says of a GPU's health: the recovery action it asks for ("None" when
    none; nvidia-smi --help-query-gpu: gpu_recovery_action), and whether a row remap or a
    page retirement waits for the next reset."""
    action = (row.get("gpu_recovery_action") or "").strip()
    return {"recovery_action": action if action and not action.startswith("[") and action != "N/A" else None,
            "remapped_rows_pending": _yes_no(row.get("remapped_rows.pending")),
            "retired_pages_pending": _yes_no(row.get("retired_pages.pending"))}


def _mode(cell):
    cell = (cell or "").strip()
    return cell if cell in ("Enabled", "Disabled") else None


def smi_modes(row):
    """A GPU's compute mode (Default, Exclusive_Process, Prohibited) and its MIG and ECC modes
    as [current, pending]; None for a mode the GPU does not have ([N/A]: MIG on a GeForce) or
    a field the driver does not know."""
    compute = (row.get("compute_mode") or "").strip()
    return {"compute": compute if re.match(r"^[A-Za-z_]+$", compute) else None,
            "mig": [_mode(row.get("mig.mode.current")), _mode(row.get("mig.mode.pending"))]
            if _mode(row.get("mig.mode.current")) else None,
            "ecc": [_mode(row.get("ecc.mode.current")), _mode(row.get("ecc.mode.pending"))]
            if _mode(row.get("ecc.mode.current")) else None}


# a command that creates GPU instances at boot: mig-parted's unit runs
# /etc/nvidia-mig-manager/service.sh (deployments/systemd/nvidia-mig-manager.service), which
# runs nvidia-mig-parted apply; or nvidia-smi mig -cgi (--create-gpu-instance) itself
MIG_CREATES = re.compile(r"nvidia-mig-manager/|nvidia-mig-parted\b.*\bapply\b|"
                         r"nvidia-smi\b.*\bmig\b.*(?:\s-cgi\b|--create-gpu-instance\b)")
# a row of nvidia-smi mig -lgi's table: "|   0  MIG 1g.10gb   19    9    2:1   |" (GPU, name,
# profile ID, instance ID, placement: NVIDIA MIG User Guide, "Getting Started with MIG")
MIG_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+\S+\s+(\d+)\s+(\d+)\s+\d+:\d+\s*\|$")


def parse_mig_lgi(rc, text):
    """({GPU index: GPU instances}, None) from nvidia-smi mig -lgi, or (None, why) where it
    did not say. "No GPU instances found" (exit 6) is zero instances everywhere."""
    if "No GPU instances found" in text:
        return {}, None
    counts = {}
    for line in text.splitlines():
        m = MIG_ROW.match(line.strip())
        if m:
            counts[int(m.group(1))] = counts.get(int(m.group(1)), 0) + 1
    if rc == 0 and "GPU instances:" in text:
        return counts, None
    first = (text.strip().splitlines() or ["exit %d" % rc])[0]
    return None, "nvidia-smi mig -lgi: " + first


# NVML's GPU fabric states (nvmlGpuFabricState_t: NOT_SUPPORTED, NOT_STARTED, IN_PROGRESS,
# COMPLETED) as nvidia-smi prints them; only Hopper and later GPUs on an NVLink fabric report one
FABRIC_STATES = ("Not Started", "In Progress", "Completed")


def smi_fabric(row):
    """A GPU's registration with the NVLink fabric (nvidia-smi --help-query-gpu: fabric.state,
    and fabric.status, "valid only if ... completed"); None where the GPU reports none ([N/A]
    on an A100, Not Supported on a PCIe card) or the driver does not know the field."""
    state = (row.get("fabric.state") or "").strip()
    if state not in FABRIC_STATES:
        return None
    status = (row.get("fabric.status") or "").strip()
    return {"state": state, "status": status if status and not status.startswith("[") and status != "N/A" else None}


# an Xid as the NVIDIA driver logs it: "NVRM: Xid (PCI:0000:5d:00): 79, pid=..., GPU has fallen
# off the bus." (the function number is not printed)
XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\): (\d+),\s*(.*)")
# what the driver logs once per GPU object, just before that object's first Xid
# (src/nvidia/src/kernel/gpu/rc/kernel_rc.c, _krcLogUuidOnce: "NVRM: GPU at PCI:%04x:%02x:%02x: %s",
# the UUID). The object is made anew when the GPU is attached again: at a GPU reset or a driver
# reload, and, without persistence mode, whenever its last client closes and the next opens
# (health.gpu takes a second line as a reset only on a GPU in persistence mode).
GPU_AT = re.compile(r"NVRM: GPU at PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}): (GPU-[0-9a-fA-F-]+)")
XID_KEPT = 256          # distinct (GPU, Xid, attach) entries kept; the kernel's buffer bounds the rest


def xids_in(lines):
    """The Xids in kernel log lines (/dev/kmsg records, dmesg or journal lines alike): one
    entry per GPU, Xid and attach of the GPU, with how often it came and its last message.
    *since_reset* is False for an Xid the GPU logged before it was attached again (its UUID
    line came again after it): the reset the Xid asked for has happened since."""
    seen = {}
    attach = {}             # GPU: how many times the driver logged its UUID line
    for line in lines:
        m = GPU_AT.search(line)
        if m:
            pci = m.group(1).lower()
            attach[pci] = attach.get(pci, 0) + 1
            continue
        m = XID.search(line)
        if not m:
            continue
        pci = m.group(1).lower()
        key = (pci, int(m.group(2)), attach.get(pci, 0))
        if key not in seen and len(seen) >= XID_KEPT:
            continue
        entry = seen.setdefault(key, {"pci": key[0], "xid": key[1], "count": 0, "attach": key[2]})
        entry["count"] += 1
        entry["message"] = m.group(3).strip()[:200]
    out = []
    for entry in sorted(seen.values(), key=lambda e: (e["pci"], e["attach"], e["xid"])):
        entry["since_reset"] = entry.pop("attach") == attach.get(entry["pci"], 0)
        out.append(entry)
    return out


# the driver's probe of a GPU it does not drive (kernel-open/nvidia/nv.c and
# src/nvidia/arch/nvalloc/unix/src/osinit.c, print_unsupported): "The NVIDIA GPU
# 0000:01:00.0 (PCI ID: 10de:25a0) / installed in this system is not supported by the / NVIDIA
# 520.56.06 driver release." (older releases: "... by the 280.13 NVIDIA Linux / graphics driver
# release"); or, open modules on a GPU without GSP, "... not supported by open / nvidia.ko
# because it does not include the required GPU / System Processor (GSP)."
UNSUPPORTED = re.compile(r"The NVIDIA GPU ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) "
                         r"\(PCI ID: ([0-9a-fA-F]{4}:[0-9a-fA-F]{4})\)")
RELEASE = re.compile(r"not supported by the\s+(?:NVIDIA\s+)?(\d+\.\d+(?:\.\d+)?)")


def unsupported_in(lines):
    """The GPUs the NVIDIA driver's probe refused in this boot's log: [{bdf, pci_id, release}]
    (release None where the open modules refused a GPU without GSP: "open")."""
    flat = []
    for line in lines:
        # /dev/kmsg escapes a record's own newlines (Documentation/ABI/testing/dev-kmsg)
        flat += line.replace("\\x0a", "\n").split("\n")
    out, seen = [], set()
    for i, line in enumerate(flat):
        m = UNSUPPORTED.search(line)
        if not m:
            continue
        window = " ".join(re.sub(r"^.*?NVRM:\s*", "", l) for l in flat[i:i + 4])
        release = RELEASE.search(window)
        why = ("release" if release else "open" if "not supported by open" in window else None)
        key = m.group(1).lower()
        if why and key not in seen:
            seen.add(key)
            out.append({"bdf": key, "pci_id": m.group(2).lower(), "why": why,
                        "release": release.group(1) if release else None})
    return out


KMSG_RECORDS = 200000   # at most this many records: the buffer is bounded, a log flood is not


def read_kmsg(path):
    """This boot's kernel log from /dev/kmsg, read and never written: one record a read
    (Documentation/ABI/testing/dev-kmsg: "prefix;message", continuation lines start with a
    space), non-blocking, so the end of the buffer is EAGAIN; EPIPE means records were
    overwritten meanwhile, and reading goes on. A plain file (a test's tree) reads the same."""
    import errno as _errno
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    lines = []
    try:
        for dummy in range(KMSG_RECORDS):
            try:
                chunk = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == _errno.EPIPE:
                    continue
                if exc.errno == _errno.EAGAIN:
                    break
                raise
            if not chunk:
                break
            for line in chunk.decode("utf-8", "replace").splitlines():
                if line and not line.startswith(" "):
                    lines.append(line.split(";", 1)[1] if ";" in line.split(" ", 1)[0] else line)
    finally:
        os.close(fd)
    return lines


def _mib(cell):
    m = re.match(r"^(\d+)(?: MiB)?$", (cell or "").strip())
    return int(m.group(1)) if m else None


# include/linux/ioport.h
IORESOURCE_MEM, IORESOURCE_PREFETCH, IORESOURCE_MEM_64 = 0x200, 0x2000, 0x100000


def parse_resources(text):
    """sysfs `resource` (drivers/pci/pci-sysfs.c resource_show): a line per resource, BARs
    0-5 first, "start end flags" in hex; the memory BARs with their size in MiB."""
    out = []
    for index, line in enumerate(text.splitlines()[:6]):
        parts = line.split()
        if len(parts) != 3:
            continue
        start, end, flags = (int(p, 16) for p in parts)
        if not end or not flags & IORESOURCE_MEM:
            continue
        out.append({"index": index, "mib": (end - start + 1) >> 20, "prefetch": bool(flags & IORESOURCE_PREFETCH),
                    "mem64": bool(flags & IORESOURCE_MEM_64)})
    return out


P2P_CODES = ("OK", "CNS", "GNS", "TNS", "NS", "DR", "U")


def parse_p2p(text):
    """nvidia-smi topo -p2p's matrix, tabs or spaces alike: [[i, j, code], ...] for every
    ordered pair of GPUs (the diagonal X left out); None when no matrix is there."""
    cells, n = [], None
    for line in text.splitlines():
        words = line.split()
        if words and all(re.match(r"^GPU\d+$", w) for w in words):
            n = len(words)
            continue
        if n and words and re.match(r"^GPU(\d+)$", words[0]) and len(words) == n + 1:
            i = int(words[0][3:])
            for j, code in enumerate(words[1:]):
                if i != j:
                    cells.append([i, j, code if code in P2P_CODES else "U"])
    return cells or None
