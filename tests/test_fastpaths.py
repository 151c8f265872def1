"""The fast paths' quarter (issue 16): every CPython internal they rest on, checked on each
version they are switched on for, and loudly failing on a CPython they were never checked on;
the plain fallbacks behind the one seam; a client's ``pause_gc=False``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import inspect
import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import _base
from typing import Any

import pytest

import postroom
from postroom import _fastpaths, _futures

CPYTHON = sys.implementation.name == "cpython"


@pytest.mark.skipif(not CPYTHON, reason="the fast paths are off on other interpreters")
def test_this_cpython_is_one_the_fast_paths_were_checked_on() -> None:
    assert sys.version_info[:2] in _fastpaths.TESTED, (
        f"CPython {sys.version_info[0]}.{sys.version_info[1]} is not in _fastpaths.TESTED: the "
        "fast paths run their plain fallbacks here. Check the internals this file tests, "
        "then add the version to TESTED."
    )
    assert _fastpaths.supported()


def test_concurrent_futures_internals_the_sync_futures_use() -> None:
    future: concurrent.futures.Future[int] = concurrent.futures.Future()
    for name in ("_state", "_condition", "_waiters", "_done_callbacks", "_result", "_exception"):
        assert hasattr(future, name), name
    assert future._state == _base.PENDING
    future.set_result(1)
    assert future._state == _base.FINISHED
    assert {_base.CANCELLED, _base.CANCELLED_AND_NOTIFIED, _base.FINISHED} == set(
        _futures._DONE_STATES
    )
    # Every waiting path takes _condition first: SendFuture builds its state there.
    for method in ("result", "exception", "add_done_callback", "cancel", "set_result"):
        assert "self._condition" in inspect.getsource(getattr(concurrent.futures.Future, method))
    assert "_condition" in inspect.getsource(concurrent.futures.wait)


def test_asyncio_takes_the_duck_typed_future_for_one() -> None:
    async def main() -> None:
        sends = _futures.ASends()
        future = sends.new()
        assert asyncio.isfuture(future)
        sends.set_result(0, 5)
        assert await asyncio.wait_for(asyncio.ensure_future(future), 5) == 5

    asyncio.run(main())


@pytest.mark.skipif(not _fastpaths.FAST, reason="the plain fallback raises nothing in threads")
def test_an_exception_can_be_raised_in_another_thread() -> None:
    class Stop(Exception):
        pass

    started, caught = threading.Event(), threading.Event()

    def spin() -> None:
        started.set()
        try:
            while True:
                pass
        except Stop:
            caught.set()

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    assert started.wait(10)
    assert thread.ident is not None
    assert _fastpaths.raise_in_thread(thread.ident, Stop)
    assert caught.wait(10)


def test_the_plain_sends_behave_as_the_fast_ones() -> None:
    for sends in (_futures.Sends(), _fastpaths.PlainSends()):
        first, second, third = sends.new(), sends.new(), sends.new()
        sends.set_exception(1, ValueError("bad"))
        sends.resolve_positions(lambda p, o: (p, o), 0, 10)
        assert first.result(timeout=1) == (0, 10)
        with pytest.raises(ValueError):
            second.result(timeout=1)
        assert third.result(timeout=1) == (0, 12)


def test_the_seam_picks_the_plain_fallbacks_when_turned_off(dsn: str) -> None:
    code = textwrap.dedent(
        """
        import concurrent.futures, sys
        import postroom
        from postroom import _fastpaths, _futures
        assert _fastpaths.FAST is False
        with postroom.connect(sys.argv[1]) as client:
            client.create_topic("plain")
            with client.producer() as producer:
                future = producer.send("plain", b"x")
                assert type(future) is concurrent.futures.Future, type(future)
                assert future.result(timeout=30) == postroom.Published(0, 0)
            only = [postroom.TopicPartition("plain", 0)]
            with client.consumer(None, "plain", partitions=only) as c:
                assert [m.value for m in c.poll(timeout=10)] == [b"x"]
        print("plain")
        """
    )
    env = {**os.environ, _fastpaths.ENV: "off"}
    result = subprocess.run(
        [sys.executable, "-c", code, dsn], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "plain"


@pytest.mark.parametrize("pause_gc", [True, False])
def test_a_client_turns_the_gc_pause_off(
    dsn: str, monkeypatch: pytest.MonkeyPatch, pause_gc: bool
) -> None:
    disabled: list[Any] = []
    real_disable = gc.disable

    def counting_disable() -> None:
        disabled.append(threading.current_thread().name)
        real_disable()

    with postroom.connect(dsn, pause_gc=pause_gc) as client:
        client.create_topic("t")
        client.publish_batch("t", [b"x"] * 10)
        monkeypatch.setattr(gc, "disable", counting_disable)
        with client.consumer(None, "t", partitions=[postroom.TopicPartition("t", 0)]) as consumer:
            assert len(consumer.poll(timeout=10)) == 10
    assert bool(disabled) == (pause_gc and _fastpaths.FAST), disabled
    assert gc.isenabled()


def test_pause_gc_must_be_a_bool() -> None:
    with pytest.raises(postroom.errors.InvalidArgument, match="invalid pause_gc"):
        postroom.connect("postgresql://nobody@127.0.0.1:1/none", pause_gc="no")  # type: ignore[arg-type]
