"""A periodic status line on stderr for commands that run long (``relay``), so a person at the
terminal sees them work before they end."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .common import err_console


@contextmanager
def every(seconds: float, line: Callable[[], str | None]) -> Iterator[None]:
    """While the block runs, print ``line()`` on stderr every ``seconds`` (a daemon thread;
    a None line prints nothing). ``seconds`` <= 0: no status lines."""
    if seconds <= 0:
        yield
        return
    done = threading.Event()

    def tick() -> None:
        while not done.wait(seconds):
            text = line()
            if text is not None:
                err_console.print(text, style="dim", markup=False)

    thread = threading.Thread(target=tick, name="postroom-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(5)
