"""ACPI's preferred power-management profiles, which decide what cpufreq drivers do by default.
"""
from __future__ import annotations


SERVER_PROFILES = (4, 5, 7)            # ACPI FADT preferred PM profile: enterprise/SOHO/performance server
NR_PM_PROFILES = 9                     # include/acpi/actbl.h: profiles 0..8; above counts as undefined
