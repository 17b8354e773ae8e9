"""What a fix will change, read from a finding's typed fix data: files, units, runtime
values and PCI registers, packages, kernel parameters, and whether it waits for a boot.
`gpuhost fix` prints this as its plan before it asks."""
from __future__ import annotations

import re


def _runtime(changes: list[dict]) -> list[str]:
    """Runtime writes; the same write on many CPUs, policies or disks said once, with a count."""
    out: list[str] = []
    writes: dict[tuple[str, str], list[str]] = {}
    registers: dict[tuple[str, str, str], list[str]] = {}
    for c in changes:
        if c.get("persistence"):
            out.append("persistence mode on for every GPU")
        elif c.get("pci"):
            registers.setdefault((c["register"], c["value"], c["mask"]), []).append(f"{c['pci']} [{c['device']}]")
        elif c.get("glob") or c.get("path"):
            path = c.get("glob") or c["path"]
            writes.setdefault((re.sub(r"(policy|cpu|state)\d+", r"\1N", path), str(c.get("value"))), []).append(path)
    for (shape, value), paths in writes.items():
        out.append(f"write {value} to {paths[0]}" if len(paths) == 1 else f"write {value} to {shape} ({len(paths)} files)")
    for (register, value, mask), devices in registers.items():
        out.append(f"set PCI register {register} to {value} (bits {mask}) on {', '.join(devices)}")
    return out


def changes(finding: dict) -> list[str]:
    """One line per change the fix of *finding* makes, in the order it makes them."""
    fix = finding.get("fix") or {}
    out: list[str] = []
    for key, value in (fix.get("cmdline_set") or {}).items():
        out.append(f"kernel parameter {key}={value} on the boot command line")
    for key in fix.get("cmdline_remove") or []:
        out.append(f"remove kernel parameter {key} from the boot command line")
    pin = fix.get("pin") or {}
    if fix.get("packages"):
        out.append("install " + ", ".join(fix["packages"]))
        if fix.get("check_nvidia_module") and pin:
            out.append(f"if the NVIDIA module is not built for the new kernel: keep booting {pin['release']} (pinned)")
        if fix.get("unpin"):
            out.append("if it is: lift the older kernel's pin")
    elif pin:
        how = "proxmox-boot-tool kernel pin" if pin.get("tool") == "proxmox-boot-tool" else "GRUB_DEFAULT by entry id"
        out.append(f"make {pin['release']} the kernel the boot loader starts ({how})")
    if fix.get("file"):
        out.append(f"write {fix['file']['path']}")
    for f in fix.get("files") or []:
        out.append(f"write {f['path']}")
    for f in fix.get("lxc") or []:
        out.append(f"repair {f['path']} under Proxmox's config lock (a copy in /var/backups/gpuhost)")
    if fix.get("unit"):
        out.append(f"install and enable the boot unit {fix['unit']['name']}")
    out += _runtime(fix.get("runtime") or [])
    if finding.get("reboot_required"):
        out.append("then a reboot (gpuhost fix --reboot if-needed)")
    return out
