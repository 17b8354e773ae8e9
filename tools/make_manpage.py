"""docs/gpuhost.1, the manual page, made from the CLI's own parser (argparse-manpage), so that
it says what `gpuhost --help` says; dated the collection's latest release (its changelog), so
that the page changes only with the program.

    .venv/bin/python tools/make_manpage.py [OUTPUT]        # make man
"""
import datetime
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
import gpuhost  # noqa: E402

releases = yaml.safe_load((ROOT / "ansible_collections/gpuhost/stack/changelogs/changelog.yaml").read_text())["releases"]
latest = releases[max(releases, key=lambda v: tuple(int(x) for x in v.split(".")))]
day = datetime.datetime.strptime(str(latest["release_date"]), "%Y-%m-%d").replace(tzinfo=datetime.timezone.utc)
out = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "docs/gpuhost.1")
subprocess.run([str(Path(sys.executable).parent / "argparse-manpage"), "--module", "gpuhost.cli", "--function",
                "build_parser", "--project-name", "gpuhost", "--prog", "gpuhost", "--version", gpuhost.__version__,
                "--author", "gpuhost", "--description", "audit and repair the system stack under GPU inference servers",
                "--manual-title", "gpuhost manual", "--output", out],
               check=True, env={**os.environ, "SOURCE_DATE_EPOCH": str(int(day.timestamp())),
                                "PYTHONPATH": str(ROOT / "src")})
