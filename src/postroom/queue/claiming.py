"""When a worker's fetcher claims more jobs and where each claim's scan starts, with no I/O
of its own (one object for both flavours of the fetcher)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any


def low_water(prefetch: int) -> int:
    """The buffer's low-water mark: the next claim begins once the buffer holds this many
    jobs or fewer, three quarters of ``prefetch``. A claim of hundreds of rows takes
    about as long as the slots take to run them: begun at half the buffer, it often came
    back after the buffer ran dry and the slots waited for it."""
    return 3 * prefetch // 4


FLOOR_MARGIN = timedelta(seconds=1)
"""A queue's floor sits this far (in ``run_at``) below the last job claimed from it: a job
enqueued by a transaction that committed up to this long after it began (its ``run_at`` is
the transaction's start) is still above the floor."""
FLOOR_CHECK_SECONDS = 1.0
"""The worker looks for ready jobs below its floors this often, at the most."""
FLOOR_CHECK_SHARE = 0.1
"""... and spends at most this share of the time on it: behind a pinned vacuum horizon the
look walks the dead entries the claim skips, so its interval stretches with its cost."""


class ClaimFloors:
    """Where each queue's next claim starts its scan: the position in claim order
    ``(priority, run_at)`` of the last job claimed from the queue, less ``FLOOR_MARGIN``
    (docs/queue.md "Claim floors"). No floor (at first, and after ``reset``) scans the whole
    queue. Jobs of an earlier priority are always scanned; a ready job of the same priority
    and an earlier ``run_at`` (a rescued job, a past ``run_at``, a long enqueue transaction)
    is what ``lower`` brings back in reach.

    Shared by the fetcher (``arguments`` for each claim, ``claimed`` after it) and the floor
    watch (``lower``), in the sync twin from two threads: each call reads or replaces a
    queue's entry whole. A claim that returns while the watch lowers a floor may raise it
    again; the watch's next look finds the job again."""

    def __init__(self, queues: list[str]) -> None:
        self._queues = queues
        self._floors: dict[str, tuple[int, datetime]] = {}

    def arguments(self) -> dict[str, Any]:
        """The claim's and the watch's floor arguments, one element a queue (None: none)."""
        floors = [self._floors.get(queue) for queue in self._queues]
        return {
            "floor_priorities": [None if f is None else f[0] for f in floors],
            "floor_run_ats": [None if f is None else f[1] for f in floors],
        }

    def any(self) -> bool:
        """Whether some queue has a floor (else the watch has nothing to look below)."""
        return bool(self._floors)

    def claimed(self, rows: Iterable[Sequence[Any]]) -> None:
        """Raise each queue's floor to the last job a claim returned of it: ``rows`` as the
        ``claim_jobs`` query gives them, in claim order (queue second, run_at eighth, priority
        last)."""
        for row in rows:
            self._floors[row[1]] = (row[-1], row[7] - FLOOR_MARGIN)

    def lower(self, queue: str, priority: int, run_at: datetime) -> None:
        """A ready job of ``queue`` sorts at ``(priority, run_at)``: its floor goes no higher."""
        floor = self._floors.get(queue)
        if floor is not None and (priority, run_at) < floor:
            self._floors[queue] = (priority, run_at)

    def reset(self) -> None:
        """No floors: the next claim scans every queue whole (jobs came back below them)."""
        self._floors = {}
