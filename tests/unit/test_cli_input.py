"""Command-line input refused in one line naming the flag, before any host is touched (issue 19:
-e JSON and file errors were not named as such; --private-key to a missing file was silently
without effect)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("args, line", [
    (["-e", "{bad"], "error: -e: not valid JSON or YAML: expected ',' or '}', but got '<stream end>' (line 1, column 5)"),
    (["-e", "[1, 2]"], "error: -e: must be a mapping of variables, not a list"),
    (["-e", "justaword"], "error: -e 'justaword': give KEY=VALUE, a JSON object, or @FILE"),
    (["-e", "@{tmp}/none.yml"], "error: -e @{tmp}/none.yml: cannot read the file: No such file or directory"),
    (["-e", "@{tmp}/bad.yml"], "error: -e @{tmp}/bad.yml: not YAML or JSON: expected the node content, but found "
                               "'<stream end>' (line 2, column 1)"),
    (["--private-key", "{tmp}/no-key"], "error: --private-key: no readable key file at {tmp}/no-key"),
])
def test_bad_connection_flags_are_one_line_naming_the_flag(tmp_path, args, line):
    (tmp_path / "bad.yml").write_text("a: [\n")
    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    gpu1: {ansible_host: 127.0.1.250, ansible_port: 2}\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    for verb in (["audit"], ["fix", "--yes"]):
        res = subprocess.run([sys.executable, "-m", "gpuhost.cli", *verb, "-i", str(tmp_path / "inv.yml"), *argv],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path)
        assert res.returncode == 1 and res.stderr.splitlines() == [line.replace("{tmp}", str(tmp_path))], res.stderr
        assert "unreachable" not in res.stdout + res.stderr


def test_the_command_exits_with_its_code_and_all_it_printed():
    # `gpuhost` skips the interpreter's teardown (cli.run): what sits in stdout's buffer when
    # main() returns must still be written, and the exit code kept
    import json

    from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG

    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}     # as a shell runs it
    for args, read in ((["controls"], lambda out: [line.split()[0] for line in out.splitlines()]),   # a line a print
                       (["controls", "--json"], lambda out: [c["id"] for c in json.loads(out)])):    # one large print
        res = subprocess.run([sys.executable, "-m", "gpuhost.cli", *args], env=buffered,
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert res.returncode == 0 and res.stdout.endswith("\n"), res.stderr
        assert read(res.stdout) == [c.id for c in CATALOG]
    res = subprocess.run([sys.executable, "-m", "gpuhost.cli", "audit", "--controls", "no.such"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 1 and res.stderr.startswith("error: --controls: unknown control 'no.such'")
