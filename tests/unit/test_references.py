"""Each control's references link to their public home where a rule knows it (references.py),
and stay plain text where none does: a link is never guessed from a name alone."""
from __future__ import annotations

from gpuhost.references import link
from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG


def test_the_rules_on_the_catalogs_own_references():
    assert link("kernel-parameters.txt: iommu=pt, iommu.passthrough") == \
        "https://docs.kernel.org/admin-guide/kernel-parameters.html"
    assert link("drivers/pci/pci.c: pci_std_enable_acs") == "https://github.com/torvalds/linux/blob/master/drivers/pci/pci.c"
    assert link("Documentation/admin-guide/pm/cpuidle.rst") == \
        "https://github.com/torvalds/linux/blob/master/Documentation/admin-guide/pm/cpuidle.rst"
    assert link("NVIDIA/enroot#106") == "https://github.com/NVIDIA/enroot/issues/106"
    assert link("pve-container: src/PVE/LXC.pm (devN)") == "https://git.proxmox.com/?p=pve-container.git"
    assert link("dkms(8)") == "https://manpages.debian.org/bookworm/dkms.8"
    assert link("torch/version.py") is None and link("PCIe Base Spec: ACS Control") is None


def test_most_references_have_a_home_and_each_link_is_https():
    refs = {r for c in CATALOG for r in c.references}
    linked = {r: link(r) for r in refs if link(r)}
    assert all(u.startswith("https://") for u in linked.values())
    assert len(linked) >= 0.85 * len(refs), sorted(refs - set(linked))
