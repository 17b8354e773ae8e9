# -*- coding: utf-8 -*-
"""Before and after a fix, on the same path with the same repeats: did it move the figure by
more than the figure moves by itself? (issue 38: "a change inside the spread is reported as
'no measurable effect', which is an allowed and useful verdict").

Every figure carries how it was got: "measured" on a real machine, or "modelled" by the lab,
whose models test bookkeeping only and are never evidence that a fix helps.

Standard library only (Python 3.7+).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

HOW = ("measured", "modelled")

# The smallest move counted as an effect: five repeats' range understates how far a second
# run's median lands from the first (two runs of one copy on one machine differ by a percent
# or two), so a move must also clear twice the larger spread, and the two runs' samples must
# not overlap. Assumed, not measured: on a real GPU host the floor is to be checked against
# two runs of `gpuhost prove` with nothing changed between them.
MIN_EFFECT = 0.02


def summary(samples):
    """{n, median, min, max, spread}: *spread* is the range over the median, how much the
    figure moves between repeats of the same measurement."""
    values = sorted(float(v) for v in samples)
    if not values:
        raise ValueError("no samples")
    n = len(values)
    median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    if median <= 0:
        raise ValueError("a median of %r is no figure" % median)
    return {"n": n, "median": median, "min": values[0], "max": values[-1],
            "spread": (values[-1] - values[0]) / median}


def effect(before, after, higher_is_better=True, how="measured"):
    """The verdict on one path: {before, after, change, noise, verdict, how}. *change* is the
    median's relative move; *noise* what a move must clear: twice the larger of the two
    spreads, and MIN_EFFECT at least. Within it, or where the two runs' samples overlap: "no
    measurable effect"; beyond it "better" or "worse" in the path's own sense (a bandwidth is
    better higher, a latency lower)."""
    if how not in HOW:
        raise ValueError("how: %r is neither measured nor modelled" % (how,))
    b, a = summary(before), summary(after)
    change = (a["median"] - b["median"]) / b["median"]
    noise = max(2 * max(b["spread"], a["spread"]), MIN_EFFECT)
    apart = a["min"] > b["max"] or a["max"] < b["min"]
    if abs(change) <= noise or not apart:
        word = "no measurable effect"
    else:
        word = "better" if (change > 0) == bool(higher_is_better) else "worse"
    return {"before": b, "after": a, "change": change, "noise": noise, "verdict": word, "how": how}
