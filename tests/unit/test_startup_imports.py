"""What loads before an audit's play can start, and what judging a host loads on the controller.

`gpuhost audit` starts ansible-playbook as soon as its options are checked: rich, the
controls' registry and the report's modules load with the play's first event, while
ansible-playbook runs (app.py). Judging a host (the audit action, in ansible-playbook's own
process, which compiles the collection's Python from source) loads the controls, not the
probe that runs on hosts. Each is read in a fresh interpreter, as the command line starts.
"""
import json
import subprocess
import sys

import pytest

from conftest import ROOT

from ansible_collections.gpuhost.stack.plugins.module_utils import controls
from ansible_collections.gpuhost.stack.plugins.module_utils.cpulist import parse_cpulist

MU = "ansible_collections.gpuhost.stack.plugins.module_utils"


def loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_the_command_line_reaches_the_play_without_rich_or_the_registry():
    mods = loaded_after("from gpuhost import cli, app, options, runner, progress\n"
                        "options.parse_limit('gpu*'); options.parse_controls(None)\n"
                        "app.App(options.Options(json='r.json')).extravars()")
    assert "ansible_runner" in mods          # what starts the play is there
    early = sorted(m for m in mods if m.split(".")[0] == "rich" or m.startswith(f"{MU}.controls")
                   or m in ("gpuhost.report", "gpuhost.terminal", "gpuhost.junit", "gpuhost.plan", "gpuhost.inventory"))
    assert early == []


def test_what_the_command_line_defers_still_loads_when_asked_for():
    # --controls is checked against the registry before any host is touched
    mods = loaded_after("from gpuhost import options\noptions.parse_controls('pcie.mrrs')")
    assert f"{MU}.controls" in mods
    from gpuhost.app import App, Options

    app = App(Options(no_color=True, json="-"))
    assert app.console.no_color and app.console.stderr          # made when first used, as asked
    assert app.err.soft_wrap and app.err.stderr and app.err is app.err


def test_a_fix_loads_what_its_signal_handler_prints_with_before_the_handler_is_set():
    # a SIGINT during the first event's import of rich would otherwise import it again, half-loaded
    mods = loaded_after("import signal\nfrom gpuhost.app import App, Options\napp = App(Options())\n"
                        "with app.interruptible():\n"
                        "    assert app._err is not None and signal.getsignal(signal.SIGINT) is not signal.default_int_handler")
    assert {"rich.console", "rich.markup", "gpuhost.report"} <= mods


def test_judging_a_host_does_not_load_the_probe():
    mods = loaded_after(f"from {MU}.controls import evaluate\nfrom {MU}.variables import settings_from")
    assert f"{MU}.controls.lxc_cpuset" in mods
    assert sorted(m for m in mods if m.startswith(f"{MU}.probe")) == []


@pytest.mark.parametrize("text, cpus", [
    ("0-3,8,10-11\n", [0, 1, 2, 3, 8, 10, 11]),
    ("", []),
    ("5", [5]),
    ("8190-9000", [8190, 8191]),          # NR_CPUS is 8192 at most: a list never names more
])
def test_the_kernel_cpu_list_format(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["0-a", "x", "1-3-5", "-4"])
def test_a_cpu_list_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpulist(text)


class Tagged(str):
    """What Ansible 2.19 hands a plugin: a str subclass carrying tags."""


class TaggedDict(dict):
    pass


def test_plain_copies_tagged_values_as_plain_ones_and_keeps_the_rest():
    value = TaggedDict({Tagged("a"): [Tagged("x"), (1, 2.5, True, None)], 3: {"b": Tagged("y")}})
    out = controls.plain(value)
    assert out == {"a": ["x", [1, 2.5, True, None]], "3": {"b": "y"}}
    assert type(out) is dict and [type(k) for k in out] == [str, str]
    assert type(out["a"][0]) is str and type(out["a"][1]) is list and type(out["3"]["b"]) is str
    assert type(controls.plain(True)) is bool and type(controls.plain(7)) is int
