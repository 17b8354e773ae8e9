"""Before and after a fix on one path (issue 38's verdicts): a change inside what the figure
moves by itself is "no measurable effect"; every verdict says whether it was measured or
modelled."""
from __future__ import annotations

import pytest

from ansible_collections.gpuhost.stack.plugins.module_utils import proof


def test_a_summary_is_the_median_and_the_range_over_it():
    s = proof.summary([54.0, 55.0, 56.0, 55.5])
    assert s["n"] == 4 and s["median"] == 55.25 and s["min"] == 54.0 and s["max"] == 56.0
    assert round(s["spread"], 4) == round(2.0 / 55.25, 4)
    with pytest.raises(ValueError):
        proof.summary([])


def test_a_move_inside_the_spread_is_no_measurable_effect():
    # a host copy of about 55 GB/s before and after a MaxReadReq change, repeats within 1.5 GB/s
    got = proof.effect([54.6, 55.1, 55.9], [55.0, 55.6, 54.8])
    assert got["verdict"] == "no measurable effect" and got["how"] == "measured"
    assert abs(got["change"]) <= got["noise"]


def test_a_move_beyond_the_spread_is_better_or_worse_in_the_paths_own_sense():
    bandwidth = proof.effect([40.1, 40.3, 40.0], [52.0, 52.4, 51.9])
    assert bandwidth["verdict"] == "better" and round(bandwidth["change"], 2) == 0.3
    # a launch latency that fell from 9 to 6 microseconds is better; one that rose, worse
    assert proof.effect([9.0, 9.1, 8.9], [6.0, 6.1, 5.9], higher_is_better=False)["verdict"] == "better"
    assert proof.effect([6.0, 6.1, 5.9], [9.0, 9.1, 8.9], higher_is_better=False)["verdict"] == "worse"


def test_a_small_move_or_overlapping_runs_are_no_measurable_effect():
    # 1.5 % with tight repeats: under the 2 % floor
    assert proof.effect([55.0, 55.01, 55.02], [55.8, 55.82, 55.81])["verdict"] == "no measurable effect"
    # 10 % between the medians, but one repeat of each run reaches into the other's
    assert proof.effect([50.0, 50.1, 56.0], [55.0, 55.1, 55.2])["verdict"] == "no measurable effect"
    # clear of twice the spread and apart: an effect
    assert proof.effect([50.0, 50.5, 50.2], [55.0, 55.3, 55.1])["verdict"] == "better"


def test_every_verdict_says_how_its_figures_were_got():
    assert proof.effect([1.0, 1.0], [2.0, 2.0], how="modelled")["how"] == "modelled"
    with pytest.raises(ValueError):
        proof.effect([1.0], [2.0], how="estimated")
