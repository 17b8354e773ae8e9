"""The verify oracle's reads (ansible_collections/gpuhost/stack/tests/verify/conftest.py):
a batch of reads made in one round trip answers exactly what each read made alone answers."""
from __future__ import annotations

import importlib.util

import pytest
import testinfra

from gpuhost import COLLECTION

_spec = importlib.util.spec_from_file_location("gpuhost_verify_conftest", COLLECTION / "tests/verify/conftest.py")
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)


class Counted:
    """testinfra's host, counting the commands it runs (each is a round trip over SSH)."""

    def __init__(self, host, refuse_batches: bool = False):
        self._host, self.runs, self.refuse = host, [], refuse_batches
        self.backend = host.backend

    def run(self, command: str):
        self.runs.append(command)
        if self.refuse and command.startswith("python3 -c "):
            return self._host.run("echo 'python3: not found' >&2; exit 127")
        return self._host.run(command)


COMMANDS = [
    "echo out; echo err >&2; exit 3",           # both streams apart, and the status
    "printf 'no newline'",
    "printf '\\377\\376 binary\\n'",              # bytes that are not UTF-8
    "cat -- /nonexistent/gpuhost-file",          # a failing read says why
    "echo \"$((6 * 7))\" '%s' \"it's\" | tr 4 X",  # quotes, a pipe, %: as the shell has them
    "test -e /proc/self",
    "command -v sh",
    "command -v no-such-command-gpuhost",
]


def test_a_batch_reads_what_each_read_alone_reads_in_one_round_trip():
    host = testinfra.get_host("local://")
    counted = Counted(host)
    reads = oracle.Reads(counted, {})
    reads.prefetch(COMMANDS + COMMANDS[:2])          # a command twice is run once
    assert len(counted.runs) == 1
    for command in COMMANDS:
        alone, batched = host.run(command), reads.run(command)
        assert (batched.rc, batched.stdout_bytes, batched.stderr_bytes) == \
            (alone.rc, alone.stdout_bytes, alone.stderr_bytes), command
    assert len(counted.runs) == 1                    # every answer came from the batch
    reads.prefetch(COMMANDS)                         # nothing left to read: no round trip
    assert len(counted.runs) == 1
    assert reads.exists("sh") and not reads.exists("no-such-command-gpuhost")
    assert reads.check_output("printf 'no newline'") == "no newline"
    with pytest.raises(AssertionError, match="Unexpected exit code 3"):
        reads.check_output("echo out; echo err >&2; exit 3")


def test_a_file_read_through_the_batch_is_what_testinfra_reads(tmp_path):
    host = testinfra.get_host("local://")
    path = tmp_path / "it's a file"
    path.write_text("line one\nline two\n")
    counted = Counted(host)
    reads = oracle.Reads(counted, {})
    reads.prefetch([f"test -e {oracle.shlex.quote(str(path))}", f"cat -- {oracle.shlex.quote(str(path))}"])
    assert reads.file(str(path)).exists is host.file(str(path)).exists is True
    assert reads.file(str(path)).content_string == host.file(str(path)).content_string == "line one\nline two\n"
    assert len(counted.runs) == 1
    assert reads.file(str(tmp_path / "missing")).exists is False
    with pytest.raises(RuntimeError):
        reads.file(str(tmp_path / "missing")).content_string


def test_a_host_that_cannot_run_the_batch_is_read_one_command_at_a_time():
    host = testinfra.get_host("local://")
    counted = Counted(host, refuse_batches=True)
    reads = oracle.Reads(counted, {})
    reads.prefetch(COMMANDS[:3])
    assert len(counted.runs) == 1                    # the batch was tried, and kept nothing
    out = reads.run(COMMANDS[0])
    assert (out.rc, out.stdout, out.stderr) == (3, "out\n", "err\n")
    assert counted.runs[1:] == [COMMANDS[0]]


PREFETCHED = ("EVERY_HOST", "HOST_LEVEL", "EVERY_GPU")


def _strings_of(path) -> set[str]:
    """Every string a module writes, but for the prefetch lists themselves: its literals, and
    its f-strings where what they format is the CPU directory or a GPU's address (kept as the
    lists' {bdf} template)."""
    import ast

    names = {"CPU": oracle.CPU, "bdf": "{bdf}"}
    tree = ast.parse(path.read_text())
    skipped = {id(n) for top in tree.body if isinstance(top, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id in PREFETCHED for t in top.targets) for n in ast.walk(top)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
        elif isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append(v.value)
                elif isinstance(v.value, ast.Name) and v.value.id in names:
                    parts.append(names[v.value.id])
                else:
                    break
            else:
                out.add("".join(parts))
    return out


def test_every_read_fetched_ahead_is_one_a_test_makes():
    """A prefetched read no test asks for would run on every host for nothing: each is written
    as a test (or View, or testinfra's File and exists: cat --, test -e, command -v) writes it."""
    verify = COLLECTION / "tests/verify"
    written = _strings_of(verify / "test_desired_state.py") | _strings_of(verify / "conftest.py")
    made = written | {f"{verb} {s}" for s in written for verb in ("cat --", "test -e", "command -v")}
    reads = [r for name in PREFETCHED for r in getattr(oracle, name)]
    assert len(reads) > 40
    assert [r for r in reads if r not in made] == []
