"""How soon to try the database again after it went away: one policy for every loop (sans-IO).

The pools, the worker's loops, group members, producers and the relay all wait
``reconnect_delay(n)`` after the n-th failure in a row: 0.05 s doubling to a 0.5 s cap, with
jitter so that many clients do not reconnect in step. Work resumes within about half a second
of the server accepting connections again, and a server that is still down sees at most two
attempts a second from each loop (psycopg_pool's own backoff doubles from 1 s without a cap:
after a 15 s outage it was 16 s before a pool tried again).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from psycopg_pool.base import AttemptWithBackoff

RECONNECT_BASE = 0.05
"""Seconds before the first retry."""
RECONNECT_CAP = 0.5
"""The longest wait between two attempts, before jitter."""
RECONNECT_JITTER = 0.2
"""Each delay is scaled by a random factor in ``[1 - jitter, 1 + jitter]``."""


def reconnect_delay(failures: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait after ``failures`` failed attempts in a row (1-based)."""
    nominal: float = min(RECONNECT_BASE * 2.0 ** min(max(failures, 1) - 1, 32), RECONNECT_CAP)
    return nominal * (1 - RECONNECT_JITTER + 2 * RECONNECT_JITTER * rand())


class ReconnectAttempt(AttemptWithBackoff):
    """psycopg_pool's attempt state with ``reconnect_delay`` instead of its uncapped backoff.

    The pool asks its attempt for the next delay (``update_delay``) after each failed connect
    and between failed checks of pooled connections; it still gives up after its
    ``reconnect_timeout`` (or the caller's timeout)."""

    def __init__(self, *, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self.failures = 0

    def update_delay(self, now: float) -> None:
        if self.failures == 0:
            self.give_up_at = now + self.timeout
        self.failures += 1
        self.delay = min(reconnect_delay(self.failures), max(0.0, self.give_up_at - now))
