"""When a worker's fetcher claims more jobs, with no I/O of its own (one object for both
flavours of the fetcher)."""

from __future__ import annotations


def low_water(prefetch: int) -> int:
    """The buffer's low-water mark: the next claim begins once the buffer holds this many
    jobs or fewer, three quarters of ``prefetch``. A claim of hundreds of rows takes
    about as long as the slots take to run them: begun at half the buffer, it often came
    back after the buffer ran dry and the slots waited for it."""
    return 3 * prefetch // 4
