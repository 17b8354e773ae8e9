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
    median's relative move; *noise* the larger of the two spreads. Within the noise: "no
    measurable effect"; beyond it "better" or "worse" in the path's own sense (a bandwidth is
    better higher, a latency lower)."""
    if how not in HOW:
        raise ValueError("how: %r is neither measured nor modelled" % (how,))
    b, a = summary(before), summary(after)
    change = (a["median"] - b["median"]) / b["median"]
    noise = max(b["spread"], a["spread"])
    if abs(change) <= noise:
        word = "no measurable effect"
    else:
        word = "better" if (change > 0) == bool(higher_is_better) else "worse"
    return {"before": b, "after": a, "change": change, "noise": noise, "verdict": word, "how": how}
