"""The collection's changelog (antsibull-changelog): its fragments and changelogs/changelog.yaml
pass the tool's own lint, CHANGELOG.rst is what the tool generates from them, every version
the project states is the latest release's, and that release says how many controls it holds."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

import gpuhost
from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "ansible_collections/gpuhost/stack"
TOOL = str(Path(sys.executable).parent / "antsibull-changelog")
WORDS = {14: "fourteen", 28: "twenty-eight", 29: "twenty-nine", 30: "thirty", 39: "thirty-nine"}


def tool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONWARNINGS": "ignore",
           "ANSIBLE_COLLECTIONS_PATH": str(ROOT)}
    return subprocess.run([TOOL, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_the_tool_lints_the_fragments_and_the_changelog():
    for args in (("lint",), ("lint-changelog-yaml", "changelogs/changelog.yaml")):
        run = tool(*args, cwd=COLLECTION)
        assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_changelog_rst_is_what_the_tool_generates(tmp_path):
    copy = tmp_path / "stack"
    shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns("__pycache__", ".plugin-cache.yaml"))
    (copy / "CHANGELOG.rst").unlink()
    run = tool("generate", cwd=copy)
    assert run.returncode == 0, run.stderr
    assert (copy / "CHANGELOG.rst").read_text() == (COLLECTION / "CHANGELOG.rst").read_text()


def test_every_stated_version_is_the_latest_release_and_it_tells_the_truth():
    releases = yaml.safe_load((COLLECTION / "changelogs/changelog.yaml").read_text())["releases"]
    latest = max(releases, key=lambda v: tuple(int(x) for x in v.split(".")))
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())["version"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert galaxy == project == gpuhost.__version__ == latest
    summary = releases[latest]["changes"]["release_summary"].lower()
    assert summary.startswith(WORDS[len(CATALOG)] + " controls"), summary
