"""Where a control's reference can be read: the catalog names its sources as people cite them
("kernel-parameters.txt: iommu=pt", "pve-container: src/PVE/LXC.pm", "dkms(8)"); the HTML
report links each to its public home. A reference no rule knows stays plain text: a link is
never guessed from a name alone."""
from __future__ import annotations

import re
from urllib.parse import quote

KERNEL_TREE = "https://github.com/torvalds/linux/blob/master/"
PROXMOX_GIT = "https://git.proxmox.com/?p={}.git"

# (pattern on the reference, URL made from its match), first match wins
RULES: tuple[tuple[str, object], ...] = (
    (r"^kernel-parameters\.txt\b", "https://docs.kernel.org/admin-guide/kernel-parameters.html"),
    (r"^((?:Documentation|drivers|include|kernel|arch/x86/[\w/.-]+)/[\w/.-]+\.(?:rst|txt|c|h))",
     lambda m: KERNEL_TREE + m.group(1)),
    (r"^(Documentation/ABI/testing/[\w.-]+)", lambda m: KERNEL_TREE + m.group(1)),
    (r"^NVIDIA/([\w.-]+)#(\d+)", lambda m: f"https://github.com/NVIDIA/{m.group(1)}/issues/{m.group(2)}"),
    (r"^(NVIDIA|Azure)/([\w.-]+)", lambda m: f"https://github.com/{m.group(1)}/{m.group(2)}"),
    (r"^open-gpu-kernel-modules\b", "https://github.com/NVIDIA/open-gpu-kernel-modules"),
    (r"^DeepOps\b", "https://github.com/NVIDIA/deepops"),
    (r"^(pve-container|pve-manager|proxmox-kernel-helper)\b", lambda m: PROXMOX_GIT.format(m.group(1))),
    (r"^proxmox-boot-tool\b", PROXMOX_GIT.format("proxmox-kernel-helper")),
    (r"^pve-docs\b", "https://pve.proxmox.com/pve-docs/"),
    (r"^grub-mkconfig\b", "https://git.savannah.gnu.org/cgit/grub.git/tree/util/grub.d"),
    (r"^kmod\b", "https://github.com/kmod-project/kmod"),
    (r"^OpenZFS module parameters\b",
     "https://openzfs.github.io/openzfs-docs/Performance%20and%20Tuning/Module%20Parameters.html"),
    (r"^NVIDIA Xid catalog\b", "https://docs.nvidia.com/deploy/xid-errors/"),
    (r"^AMD Instinct System Acceptance\b", "https://instinct.docs.amd.com/projects/system-acceptance/"),
    (r"^udev\(7\)", "https://www.freedesktop.org/software/systemd/man/latest/udev.html"),
    (r"^NCCL troubleshooting\b", "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"),
    (r"^NVIDIA Fabric Manager User Guide\b", "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/"),
    (r"^NVIDIA MIG User Guide\b", "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/"),
    (r"^NVIDIA GPU memory error management\b", "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/"),
    (r"^NVIDIA driver persistence\b", "https://docs.nvidia.com/deploy/driver-persistence/"),
    (r"^NVML\b", "https://docs.nvidia.com/deploy/nvml-api/"),
    (r"^CUDA C\+\+ Programming Guide\b", "https://docs.nvidia.com/cuda/cuda-c-programming-guide/"),
    (r"^CUDA Compatibility guide\b", "https://docs.nvidia.com/deploy/cuda-compatibility/"),
    (r"^CUDA Toolkit release notes\b", "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/"),
    (r"^nvidia-smi\b", "https://docs.nvidia.com/deploy/nvidia-smi/"),
    # a manual page, name(section): Debian's, as a Debian or Proxmox host has it
    (r"^([\w.-]+)\((\d)\)", lambda m: f"https://manpages.debian.org/bookworm/{quote(m.group(1))}.{m.group(2)}"),
)
_COMPILED = tuple((re.compile(p), u) for p, u in RULES)


def link(reference: str) -> str | None:
    """The public home of a reference, or None where no rule knows it."""
    for pattern, url in _COMPILED:
        m = pattern.match(reference)
        if m:
            return url(m) if callable(url) else url
    return None
