"""A webhook receiver for the tests: a real HTTP server on 127.0.0.1 in a thread, recording
what it acknowledged and answering with the status the test chooses."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Webhook:
    """``received``: every body it answered 2xx to, with its headers, in arrival order.
    ``respond(body) -> status`` decides the answer (default 200)."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], Any]] = []
        self.requests = 0
        self.respond: Callable[[Any], int] = lambda body: 200
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                with owner._lock:
                    owner.requests += 1
                    status = owner.respond(body)
                    if 200 <= status < 300:
                        headers = dict(self.headers.items())
                        headers["raw-body"] = raw.decode()
                        owner.received.append((headers, body))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"no" if status >= 300 else b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def messages(self) -> list[dict[str, Any]]:
        """Every acknowledged message envelope, batches flattened, in arrival order."""
        with self._lock:
            bodies = [body for _, body in self.received]
        out: list[dict[str, Any]] = []
        for body in bodies:
            out.extend(body if isinstance(body, list) else [body])
        return out

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
