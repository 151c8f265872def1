"""A TCP proxy (tests/proxy.py) that cuts a connection while its COMMIT is in flight.

``arm(after_reply=True)``: the next client message holding ``COMMIT`` reaches the server, and
the connection is cut the moment the server answers, before the answer reaches the client:
the transaction committed and the client cannot know. ``after_reply=False``: the connection
is cut instead of forwarding that COMMIT: nothing committed, and the client cannot know that
either. One cut per ``arm()``; ``cut_done`` is set once it happened.
"""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import postroom

from .blocking import Blocking, EventLoopThread
from .proxy import Proxy


class CommitCutter(Proxy):
    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self._armed: bool | None = None  # None: pass everything; else cut after the reply?
        self._arm_lock = threading.Lock()
        self.cut_done = threading.Event()

    def arm(self, *, after_reply: bool) -> None:
        with self._arm_lock:
            self.cut_done.clear()
            self._armed = after_reply

    def _take_arm(self) -> bool | None:
        with self._arm_lock:
            armed, self._armed = self._armed, None
            return armed

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        cut_on_reply = False
        with selectors.DefaultSelector() as selector:
            try:
                for sock in peers:
                    selector.register(sock, selectors.EVENT_READ)
                while True:
                    for key, _ in selector.select(timeout=0.5):
                        ready = key.fileobj
                        assert isinstance(ready, socket.socket)
                        data = ready.recv(65536)
                        if not data:
                            return
                        if ready is server and cut_on_reply:
                            self.cut_done.set()
                            return  # the server committed; its answer is lost
                        if ready is client and b"COMMIT" in data and self._armed is not None:
                            after_reply = self._take_arm()
                            if after_reply is False:
                                self.cut_done.set()
                                return  # the COMMIT never reaches the server
                            cut_on_reply = after_reply is True
                        peers[ready].sendall(data)
            except (OSError, ValueError):
                return
            finally:
                for sock in peers:
                    sock.close()


@contextmanager
def cut_client(dsn: str, loop: EventLoopThread | None) -> Iterator[tuple[Any, CommitCutter]]:
    """A client (sync, or the async one made blocking on ``loop``, as ``any_client``) whose
    connections go through a ``CommitCutter``; yields both."""
    with CommitCutter(dsn) as proxy:
        if loop is None:
            with postroom.connect(proxy.dsn) as client:
                yield client, proxy
            return
        real = loop.run(postroom.connect_async(proxy.dsn))
        try:
            yield cast(postroom.Client, Blocking(real, loop)), proxy
        finally:
            loop.run(real.close())
