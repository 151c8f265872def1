"""The producer's writer fails the batch's futures with any error, and re-raises one that is
not an ``Exception`` (KeyboardInterrupt, SystemExit, a cancellation): it ends the writer and
surfaces from ``close()`` instead of being kept as the batch's outcome (issue 16)."""

from __future__ import annotations

from typing import Any

import pytest

import postroom


class Halt(BaseException):
    """Stands for KeyboardInterrupt/SystemExit, without interrupting the test run."""


# The sync writer thread ends with it, which threading reports too.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_base_exception_in_the_writer_fails_the_sends_and_reaches_close(
    client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.create_topic("t")
    producer = client.producer(linger_ms=0)

    def halt(*args: Any, **kwargs: Any) -> Any:
        raise Halt("stop now")

    for method in ("append_values", "append"):
        monkeypatch.setattr(producer._appender, method, halt)
    future = producer.send("t", b"x")
    with pytest.raises(Halt):
        future.result(timeout=10)
    with pytest.raises(Halt, match="stop now"):  # before the fix: swallowed, close() returned
        producer.close()
