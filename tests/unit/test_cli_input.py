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


@pytest.mark.parametrize("shape", ["link", "open"])
def test_a_run_registry_that_is_a_link_or_open_to_others_is_one_line(tmp_path, monkeypatch, shape):
    """The fault campaign: a run registry that is a link or mode 0777 gave a 27-line
    traceback. Now one line naming it, exit 1, and no host touched."""
    from ansible_collections.gpuhost.stack.plugins.module_utils import runs
    from gpuhost import cli

    registry = tmp_path / "runs"
    if shape == "link":
        (tmp_path / "elsewhere").mkdir()
        registry.symlink_to(tmp_path / "elsewhere")
    else:
        registry.mkdir(mode=0o777)
        os.chmod(registry, 0o777)
    monkeypatch.setattr(runs, "_home_dir", lambda: str(registry))
    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    gpu1: {ansible_host: 127.0.1.250, ansible_port: 2}\n")
    monkeypatch.chdir(tmp_path)
    err = []
    monkeypatch.setattr(sys, "stderr", type("E", (), {"write": lambda self, s: err.append(s), "flush": lambda self: None,
                                                       "isatty": lambda self: False})())
    assert cli.main(["fix", "--yes", "-i", str(tmp_path / "inv.yml")]) == 1
    lines = "".join(err).splitlines()
    assert lines == [f"error: cannot register this run: {registry} is not this user's own private directory: "
                     "gpuhost keeps no run record there"], lines


def test_a_spec_with_a_nul_byte_and_an_inventory_that_is_no_yaml_are_one_line_with_their_line(tmp_path):
    """The fault campaign: a NUL byte in a lab spec gave two lines; an inventory's YAML error
    named no line."""
    (tmp_path / "nul.yml").write_bytes(b"spec: gpuhost.hostspec/v1\nhostname: a\x00b\n")
    res = subprocess.run([sys.executable, "-m", "gpuhost.cli", "lab", "up", str(tmp_path / "nul.yml"), "--dir",
                          str(tmp_path / "lab")], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 1 and res.stderr.splitlines() == [
        f"error: {tmp_path}/nul.yml: not valid YAML (line 2): character #x0000 is not allowed in YAML"], res.stderr
    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    a: {ansible_host: 127.0.1.5\n")
    res = subprocess.run([sys.executable, "-m", "gpuhost.cli", "audit", "-i", str(tmp_path / "inv.yml")],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert res.returncode == 1 and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.strip().endswith("(line 4, column 1: expected ',' or '}', but got '<stream end>')"), res.stderr
