"""docs/gpuhost.1 is what `make man` makes from the CLI's own parser (a stale page fails
here), with every verb, the examples and the exit status."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_manual_page_is_made_from_the_parser_and_renders(tmp_path):
    fresh = tmp_path / "gpuhost.1"
    subprocess.run([sys.executable, str(ROOT / "tools/make_manpage.py"), str(fresh)], check=True, timeout=120,
                   capture_output=True, stdin=subprocess.DEVNULL)
    assert fresh.read_text() == (ROOT / "docs/gpuhost.1").read_text(), "docs/gpuhost.1 is stale: make man"
    page = fresh.read_text()
    for verb in ("audit", "prove", "diff", "fix", "verify", "controls", "lab"):
        assert f"\\fBgpuhost\\fR \\fI\\,{verb}\\/\\fR" in page, verb
    assert "exit status:" in page and "examples:" in page
    assert page.startswith('.TH GPUHOST "1" ') and ".SH NAME\ngpuhost \\- audit and repair" in page
