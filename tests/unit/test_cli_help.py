"""gpuhost --help names the exit status and gives examples, and every example is a command the
parser takes (an example that no longer parses fails here)."""
from __future__ import annotations

import shlex

from gpuhost import cli


def test_help_has_examples_that_parse_and_the_exit_codes():
    text = cli.build_parser().format_help()
    assert "exit status:" in text and "examples:" in text
    for code in ("0 ", "1 ", "2 ", "3 "):
        assert f"\n  {code} " in text, code
    examples = cli.EXAMPLES.splitlines()[1:]
    assert len(examples) >= 8
    for line in examples:
        argv = shlex.split(line.split("   ")[0])
        assert argv[0] == "gpuhost"
        args = cli.build_parser().parse_args(argv[1:])
        assert args.command in ("audit", "fix", "prove", "diff", "lab"), line


def test_each_verb_that_runs_hosts_names_its_exit_status():
    parser = cli.build_parser()
    verbs = parser._subparsers._group_actions[0].choices       # noqa: SLF001 (argparse keeps them there)
    for verb in ("audit", "fix", "prove", "diff"):
        assert "exit status" in verbs[verb].format_help(), verb
