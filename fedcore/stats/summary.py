"""'mean ± std over seeds': the one definition every table, figure and report of fedcore uses.

The std is the *sample* standard deviation (divisor n - 1). The seeds are a sample of the runs a
user could have made, and a table's ± estimates how much a method's score moves from one seed to
another; the population std (divisor n) describes only the seeds at hand and, at the usual three
seeds, understates that spread by a factor sqrt(2/3).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def mean_std(values: Iterable[float | None]) -> tuple[float, float]:
    """(mean, sample std) of the finite values; None and NaN (a run that did not log the value, or
    diverged) are left out.

    No value gives (nan, nan). One value gives (value, 0.0): there is no spread to estimate, and 0
    keeps error bars and written numbers plain; tables print a lone value without its ±.
    """
    vals = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return math.nan, math.nan
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0
