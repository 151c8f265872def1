"""The consumer's claim policy, with no I/O: which partitions a fetch or a transactional claim
serves first, when ``poll()`` fetches and how long it then waits for a wake-up, and when the
fetcher sends the next fetch ahead (a prefetch) and may use its rows. The consumer
(``consumer_async.py``) and its fetcher (``fetch_async.py``) hold one per consumer and ask it;
it holds the turn counters and nothing else, and reads time only from ``clock``, so tests drive
it with a fake clock (tests/log/test_claim_policy.py).

- **Fairness.** A fetch reads its partitions in the order given, up to ``max_messages`` rows in
  all (``fetch_messages``), so the first partition with a backlog could take every row. Each
  fetch, and each claim, starts one partition further (``order``): with the partitions in use
  unchanged, each is first once in every ``len(partitions)`` calls, so none is starved.
- **Limits.** A fetch asks for the poll's ``max_messages`` and ``max_bytes`` (the server keeps
  both, one message always comes); a prefetch sent for other limits is dropped, never
  delivered (``prefetch_fits``), so a poll never returns more than it asked for.
- **Waiting.** ``poll()`` fetches only when every buffer is empty, then waits for a wake-up
  (a publish to an assigned topic is notified) at most ``poll_interval`` and never past its
  deadline (``wait``); a wake-up ends the wait and the next fetch follows at once. There is
  no growing backoff after empty fetches: an idle consumer polls every ``poll_interval``
  (wake-ups are hints, polling is the truth), and every wait starts afresh.
- **Prefetch.** A full batch means a backlog: the next fetch is sent ahead from where the rows
  end (``prefetch``), one at a time, none once the consumer closes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

POLL_INTERVAL = 0.5
"""Seconds between polls when no notification arrives: wake-ups are hints, polling is the truth."""

PREFETCH_SEND_WAIT = 0.002
"""Seconds ``poll()`` yields to a prefetch so that its query is sent before the rows of this
poll are turned into messages (that loop holds the GIL, or the event loop, for milliseconds,
and the query would wait for it): the wait ends as the query goes out, or after this long on a
busy machine (``fetch_async.py``)."""


class ClaimPolicy:
    """Decides for one consumer; see the module docstring. ``poll_interval`` defaults to
    ``POLL_INTERVAL`` (read when the policy is made). One caller at a time (the consumer's
    flow; the heartbeat never asks it)."""

    def __init__(
        self, poll_interval: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.poll_interval = POLL_INTERVAL if poll_interval is None else poll_interval
        self._clock = clock
        self._turns: dict[str, int] = {}

    def order(self, items: Sequence[T], counter: str) -> list[T]:
        """``items`` (the partitions in use) starting one further at each call with the same
        ``counter`` ("fetch", "claim"), so no partition is always served last."""
        if not items:
            return []
        start = self._turns.get(counter, 0) % len(items)
        self._turns[counter] = start + 1
        return [*items[start:], *items[:start]]

    def deadline(self, timeout: float) -> float:
        """When a ``poll()`` (or a claim) of ``timeout`` seconds gives up: a negative timeout
        is none."""
        return self._clock() + max(timeout, 0)

    def fetch_now(self, buffered: bool) -> bool:
        """Whether ``poll()`` fetches before it takes: only when no message is ``buffered``
        (what is buffered goes first, in position order)."""
        return not buffered

    def wait(self, deadline: float) -> float | None:
        """Seconds to wait for a wake-up before fetching (or claiming) again, after a round that
        found nothing: at most ``poll_interval``, never past ``deadline``; None once the
        deadline has passed (give up, return nothing)."""
        remaining = deadline - self._clock()
        if remaining <= 0:
            return None
        return min(remaining, self.poll_interval)

    def prefetch(self, rows: int, limit: int, *, in_flight: bool, closed: bool) -> bool:
        """Whether a fetch (or a prefetch used) that brought ``rows`` rows for ``limit`` sends
        the next one ahead: after a full batch (a backlog), none while one is ``in_flight``,
        none once the consumer is ``closed``."""
        return rows >= limit and not in_flight and not closed

    def prefetch_fits(self, sent: tuple[int, int], wanted: tuple[int, int]) -> bool:
        """Whether a prefetch ``sent`` for (max_messages, max_bytes) may serve a poll that
        ``wanted`` those: only for the same limits (else its rows are dropped and the poll
        fetches anew)."""
        return sent == wanted
