"""benchmarks/halt_poll.py: the guest halt polling a benchmark runs under is put back after
it, and printed either way (a stand-in file for the module parameter: the test must not
change this machine's)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import halt_poll  # noqa: E402


@pytest.fixture
def param(tmp_path, monkeypatch):
    path = tmp_path / "guest_halt_poll_ns"
    monkeypatch.setattr(halt_poll, "PARAM", path)
    return path


def test_a_value_is_set_for_the_run_and_put_back(param):
    param.write_text("0\n")
    with halt_poll.halt_poll(200000) as ns:
        assert ns == 200000 and param.read_text() == "200000\n"
    assert param.read_text() == "0\n"


def test_it_is_put_back_when_the_run_fails(param):
    param.write_text("0\n")
    with pytest.raises(RuntimeError), halt_poll.halt_poll(200000):
        raise RuntimeError("a benchmark failed")
    assert param.read_text() == "0\n"


def test_without_a_value_or_the_driver_nothing_is_written(param):
    param.write_text("0\n")
    with halt_poll.halt_poll(None) as ns:
        assert ns == 0
    assert param.read_text() == "0\n"
    param.unlink()
    with halt_poll.halt_poll(200000) as ns:
        assert ns is None
    assert not param.exists()


def test_the_setting_is_described():
    assert "off" in halt_poll.describe(0)
    assert "kernel's default" in halt_poll.describe(200000)
    assert "no haltpoll" in halt_poll.describe(None)
