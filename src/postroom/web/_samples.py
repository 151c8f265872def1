"""The dashboard's samples and the chart series made from them (no I/O).

A :class:`Sample` is what the sampler reads in one round; :func:`to_points` and
:func:`from_points` turn it into the JSON object ``web_samples.points`` holds (migration 0036)
and back. Every value of a sample stands on its own, so that samples recorded by different
dashboard processes make one series: counters (topics' high water marks, groups' cursor sums)
and gauges (lag, failed jobs) are the database's, the same whoever reads them, and the jobs
done are a rate over the recording sampler's own round. :func:`pick` makes one chart's values
from a sample and the one before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

POINTS_VERSION = 1
"""The shape of ``points``; a sample of another version is skipped when read."""


@dataclass
class Sample:
    at: float  # seconds since the epoch: the database's clock when recorded there
    topic_high_water: dict[str, int]
    group_lag: dict[str, int]
    group_consumed: dict[str, int]
    done_rate: dict[str, float]  # jobs done per second during the sampler's round
    jobs_failed: dict[str, int]
    run_seconds: dict[str, float]  # mean run time of the jobs done during the round


def to_points(sample: Sample) -> dict[str, Any]:
    """The JSON object ``web_samples.points`` holds for ``sample`` (its time is the row's)."""
    return {
        "v": POINTS_VERSION,
        "topics": sample.topic_high_water,
        "lag": sample.group_lag,
        "consumed": sample.group_consumed,
        "done_rate": sample.done_rate,
        "failed": sample.jobs_failed,
        "run_seconds": sample.run_seconds,
    }


def from_points(at: float, points: Mapping[str, Any]) -> Sample | None:
    """The sample a ``points`` object recorded at ``at`` holds; None if it is of another
    version or not a sample (nothing a dashboard of this version can draw)."""
    if points.get("v") != POINTS_VERSION:
        return None
    try:
        return Sample(
            at,
            {str(k): int(v) for k, v in points["topics"].items()},
            {str(k): int(v) for k, v in points["lag"].items()},
            {str(k): int(v) for k, v in points["consumed"].items()},
            {str(k): float(v) for k, v in points["done_rate"].items()},
            {str(k): int(v) for k, v in points["failed"].items()},
            {str(k): float(v) for k, v in points["run_seconds"].items()},
        )
    except (KeyError, AttributeError, TypeError, ValueError):
        return None


PICKS = (
    "rate",
    "lag",
    "consumed",
    "relayed",
    "relay_pending",
    "done",
    "failed",
    "failures",
    "runtime",
)
RELAY_PREFIX = "relay."  # the relay groups' names (client.relay_status' default)


def pick(name: str, sample: Sample, previous: Sample | None) -> dict[str, float]:
    """The values of chart ``name`` (one of :data:`PICKS`) at ``sample``; the rates need the
    sample before it (``previous``; None: no rates yet)."""
    if name == "lag":
        return {k: float(v) for k, v in sample.group_lag.items()}
    if name == "relay_pending":
        return {k: float(v) for k, v in sample.group_lag.items() if k.startswith(RELAY_PREFIX)}
    if name == "failed":
        return {k: float(v) for k, v in sample.jobs_failed.items()}
    if name == "runtime":
        return dict(sample.run_seconds)
    if name == "done":
        return dict(sample.done_rate)
    if previous is None:
        return {}
    elapsed = max(sample.at - previous.at, 1e-6)
    if name == "rate":
        return _rates(sample.topic_high_water, previous.topic_high_water, elapsed)
    if name == "consumed":
        return _rates(sample.group_consumed, previous.group_consumed, elapsed)
    if name == "relayed":
        rates = _rates(sample.group_consumed, previous.group_consumed, elapsed)
        return {k: v for k, v in rates.items() if k.startswith(RELAY_PREFIX)}
    if name == "failures":
        # New failed jobs (a retry or delete in the same interval hides as many).
        return _rates(sample.jobs_failed, previous.jobs_failed, elapsed, new_from=0)
    return {}


def _rates(
    now: dict[str, int], before: dict[str, int], elapsed: float, new_from: int | None = None
) -> dict[str, float]:
    """Per name, how much ``now`` grew since ``before`` per second (0 if it went back: a reset).
    A name ``before`` lacks grew from ``new_from`` (None: it did not grow; a new topic or group
    starts where it starts)."""
    return {
        k: max(v - before.get(k, v if new_from is None else new_from), 0) / elapsed
        for k, v in now.items()
    }
