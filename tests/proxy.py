"""A TCP proxy in front of PostgreSQL that a test can cut (psycopg's fix_proxy idea).

Listens on 127.0.0.1 and forwards to the server's TCP port or Unix socket. ``cut()`` closes every
open connection at once, as a network failure or a failover would.
"""

from __future__ import annotations

import selectors
import socket
import threading
from typing import Self

from psycopg.conninfo import conninfo_to_dict, make_conninfo


class Proxy:
    def __init__(self, dsn: str) -> None:
        params = conninfo_to_dict(dsn)
        host = str(params.get("host") or "127.0.0.1")
        port = int(params.get("port") or 5432)
        self._upstream: tuple[int, object] = (
            (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
            if host.startswith("/")
            else (socket.AF_INET, (host, port))
        )
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.dsn = make_conninfo(dsn, host="127.0.0.1", port=str(self.port))
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            family, address = self._upstream
            server = socket.socket(family, socket.SOCK_STREAM)
            try:
                server.connect(address)  # type: ignore[arg-type]
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
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
                        peers[ready].sendall(data)
            except (OSError, ValueError):  # ValueError: select() on a socket cut() closed
                return
            finally:
                for sock in peers:
                    sock.close()

    def cut(self) -> int:
        """Close every proxied connection; returns how many were cut."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
        return len(pairs)

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()
        self.cut()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
