"""Which controls there are, in the order the audit dimensions are listed, and what is
derived from their declarations: the catalog, the probe's watch lists, every inventory
variable with its type and default.

A control is added by writing its module (``CONTROL`` and ``judge``), listing it here, and
writing its scenarios (tests/controls/<id>.yml); ``make generate`` then writes the
role glue, argument specs, docs and watch lists, and a test fails while they are stale.
"""
from __future__ import annotations

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import (
    bios_above4g, bios_acs, bios_boost, bios_cppc, bios_cstates, bios_determinism, bios_iommu, bios_nps, bios_profile,
    bios_rebar, bios_smt, cpu_boost, cpu_cstates, cpu_driver, cpu_governor, cpu_online, guest_cuda, health_gpu, iommu_mode, kernel_reboot_pending,
    kernel_version, lxc_cpuset, lxc_gpu_nodes, lxc_gpu_passthrough, numa_balancing, numa_gpu_affinity, nvidia_driver, nvidia_driver_pinned,
    nvidia_fabricmanager, nvidia_gpu_modes, nvidia_p2p, nvidia_persistence, nvidia_power_limit, pcie_acs, pcie_bar1, pcie_link, pcie_mrrs,
    storage_scheduler, storage_zfs_arc)
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.model import Control, Param

CONTROL_MODULES = (cpu_driver, cpu_governor, cpu_boost, cpu_cstates, cpu_online, numa_balancing, numa_gpu_affinity, pcie_mrrs,
                   pcie_link, pcie_acs, pcie_bar1, iommu_mode, kernel_version, kernel_reboot_pending, nvidia_driver,
                   nvidia_persistence, nvidia_power_limit, nvidia_gpu_modes, nvidia_p2p, nvidia_fabricmanager, nvidia_driver_pinned, guest_cuda,
                   lxc_gpu_nodes, lxc_gpu_passthrough, lxc_cpuset, storage_scheduler, storage_zfs_arc, health_gpu,
                   bios_nps, bios_smt, bios_cppc, bios_cstates, bios_boost, bios_iommu, bios_above4g, bios_rebar, bios_acs,
                   bios_determinism, bios_profile)

# each control role, as the play names its fixes ("Fix the CPU controls"), in play order
ROLES = {"cpu": "the CPU controls", "numa": "the NUMA controls", "pcie": "the PCIe controls", "iommu": "the IOMMU mode",
         "kernel": "the kernel", "nvidia": "the NVIDIA controls", "lxc": "the containers' GPUs",
         "guest": "the CUDA runtimes", "storage": "the storage controls", "health": "the GPUs' health",
         "bios": "the firmware's settings"}

# the variables no single control owns; the control-ID lists get the catalog as choices
GENERAL_PARAMS = (
    Param("gpuhost_controls_skip", "list", [], "controls_skip", "Control IDs to leave out on this host (reported na).",
          elements="str", roles=("*",)),
    Param("gpuhost_waivers", "list", [], "waivers",
          "Accepted findings, each {control, reason, expires: YYYY-MM-DD, a UTC date the waiver holds through; the "
          "reason is shown as written, never rendered}; waived until it expires, one per control.",
          elements="dict", roles=("*",)),
    Param("gpuhost_container_host", "str", "", "container_host",
          "The Proxmox host a container runs on, named in its na findings.", roles=("lxc",)),
    Param("gpuhost_reboot_ok", "bool", False, None,
          "Let the play reboot a host whose fixes wait for a boot (a handler, at the end of the play); "
          "gpuhost_reboot_required says whether one is needed either way.", roles=("*",)),
    Param("gpuhost_controls", "list", [], "controls",
          "The control IDs this run covers (the CLI's --controls); empty: the controls --tags selects, else all.",
          elements="str", roles=("*",)),
    Param("gpuhost_audit_fail_on", "str", "none", None,
          "Fail the host when a finding is at this level or worse: none, drift (drift, pending_reboot, manual, "
          "error), manual (manual, error) or error; for AWX job templates and workflows (gpuhost's CLI has its own "
          "exit status).", pattern=r"^(none|drift|manual|error)$", what="none, drift, manual or error", roles=("*",)),
    Param("gpuhost_apply", "bool", True, None,
          "Run the fixes (in check mode they report what they would change, with --diff how); false: judge only, one "
          "task per host.", roles=("*",), checked=False),
)
CONTROL_ID_LISTS = ("gpuhost_controls_skip", "gpuhost_controls")


class Registry:
    """The controls of one collection (the shipped ones, or those plus a control under test)."""

    def __init__(self, modules=CONTROL_MODULES, roles: dict[str, str] | None = None):
        self.modules = tuple(modules)
        self.roles = dict(ROLES if roles is None else roles)
        self.catalog: tuple[Control, ...] = tuple(m.CONTROL for m in self.modules)
        self.by_id = {c.id: c for c in self.catalog}
        if len(self.by_id) != len(self.catalog):
            raise ValueError("two controls declare the same ID")
        for c in self.catalog:
            if c.role not in self.roles:
                raise ValueError(f"{c.id}: role {c.role!r} is not one of the registry's roles")
            if "." not in c.id or c.id.split(".", 1)[0] != c.role:
                raise ValueError(f"{c.id}: a control's ID starts with its role ({c.role}.)")
        self.judges = {m.CONTROL.id: m.judge for m in self.modules}
        self.host_level = {c.id for c in self.catalog if c.host_level}
        ids = tuple(c.id for c in self.catalog)
        general = tuple(Param(**{**p.__dict__, "choices": ids}) if p.name in CONTROL_ID_LISTS else p
                        for p in GENERAL_PARAMS)
        self.params: tuple[Param, ...] = tuple(p for c in self.catalog for p in c.params) + general
        if len({p.name for p in self.params}) != len(self.params):
            raise ValueError("two controls declare the same variable")
        self.owner = {p.name: c for c in self.catalog for p in c.params}
        # the probe's watch lists (plugins/module_utils/watchlist.py is written from these)
        self.units = tuple(dict.fromkeys(u for c in self.catalog for u in c.units))
        self.sysctls = tuple(dict.fromkeys(s for c in self.catalog for s in c.sysctls))

    def role_params(self, role: str) -> list[Param]:
        """The variables a control role takes: its controls' own, then the general ones it reads."""
        own = [p for c in self.catalog if c.role == role for p in c.params]
        return own + [p for p in self.params if p.name not in self.owner and ("*" in p.roles or role in p.roles)]

    def with_control(self, module, role_title: str | None = None) -> "Registry":
        """This registry and one more control (a new one under test, or a site's own)."""
        roles = dict(self.roles)
        roles.setdefault(module.CONTROL.role, role_title or module.CONTROL.role)
        return Registry(self.modules + (module,), roles)


DEFAULT = Registry()
