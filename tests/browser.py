"""A real browser for the HTML report: Debian's headless Chromium, in a network namespace
of its own (unshare --net), so the page can reach nothing, and nothing is contacted."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium") or "chromium-headless-shell"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,900",
         "--disable-background-networking", "--no-first-run"]


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "--net", CHROMIUM, *FLAGS, *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def geometry(page: Path) -> dict[str, str]:
    """What the page's layout probe (?measure) puts on <body>: summary bottom, scroll width."""
    run = chromium("--dump-dom", f"file://{page}?measure")
    body = re.search(r"<body([^>]*)>", run.stdout)
    assert body, run.stderr[-2000:]
    return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(1)))


def screenshot(page: Path, png: Path) -> None:
    run = chromium(f"--screenshot={png}", f"file://{page}")
    assert png.is_file(), run.stderr[-2000:]
