#!/usr/bin/env python3
"""Remake docs/report-2-hosts.png and docs/report-200-hosts.png: the HTML report of a
synthetic fleet (tests/fleet.py) in headless Chromium at 1400x900, as the test checks it.

    .venv/bin/python docs/make_screenshots.py
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "tests"))

import browser  # noqa: E402
import fleet  # noqa: E402

from gpuhost import htmlreport  # noqa: E402
from gpuhost import report as rep  # noqa: E402

for n in (2, 200):
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        htmlreport.write(rep.build("audit", "2026-12-01T10:00:00Z", fleet.fleet_hosts(n)), page)
        browser.screenshot(page, DOCS / f"report-{n}-hosts.png")
        print(DOCS / f"report-{n}-hosts.png")
