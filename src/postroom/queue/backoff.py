"""Retry delays: exponential backoff with jitter (sans-IO)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry ``n`` (after the n-th failed attempt): ``base * factor**(n-1)``, capped
    at ``max_delay``, then scaled by a random factor in ``[1 - jitter, 1 + jitter]`` so that jobs
    failing together do not retry together.

        Backoff()                                # 1 s, 2 s, 4 s, ... up to 1 hour, +-20 %
        Backoff(base=0.5, factor=3, jitter=0)    # 0.5 s, 1.5 s, 4.5 s, ...
    """

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        for name, value, low in (
            ("base", self.base, 0.0),
            ("factor", self.factor, 1.0),
            ("max_delay", self.max_delay, 0.0),
        ):
            if not isinstance(value, int | float) or not math.isfinite(value) or value < low:
                raise InvalidArgument(f"invalid backoff {name} {value!r}: a number >= {low}")
        if not isinstance(self.jitter, int | float) or not 0 <= self.jitter <= 1:
            raise InvalidArgument(f"invalid backoff jitter {self.jitter!r}: from 0 to 1")

    def nominal(self, attempt: int) -> float:
        """The delay after failed attempt ``attempt`` (1-based), before jitter."""
        if attempt < 1:
            raise InvalidArgument(f"invalid attempt {attempt!r}: attempts count from 1")
        exponent = min(attempt - 1, 1000)  # factor**1000 overflows long after max_delay caps it
        try:
            raw = self.base * self.factor**exponent
        except OverflowError:
            raw = math.inf
        return min(raw, self.max_delay)

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """The jittered delay after failed attempt ``attempt``, in seconds."""
        return self.nominal(attempt) * (1 - self.jitter + 2 * self.jitter * rand())
