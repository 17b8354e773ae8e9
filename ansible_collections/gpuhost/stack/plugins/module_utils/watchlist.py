# Made by make generate from the controls' declarations; a test fails while it is stale.
# The probe reads these back on every host.
"""What the probe reads back for the controls: their sysctls (CONTROL.sysctls) and their
systemd units (CONTROL.units)."""

WATCHED_SYSCTLS = ("kernel.numa_balancing",)
OWNED_UNITS = ("gpuhost-cpu-governor.service", "gpuhost-cpu-boost.service", "gpuhost-cpu-cstates.service",
               "gpuhost-pcie-mrrs.service", "gpuhost-pcie-acs.service", "nvidia-persistenced.service",
               "gpuhost-nvidia-power-limit.service", "gpuhost-nvidia-compute-mode.service",
               "nvidia-fabricmanager.service", "gpuhost-nvidia-uvm.service", "gpuhost-storage-scheduler.service")
