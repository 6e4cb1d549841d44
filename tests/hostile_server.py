"""A remote service that answers every request badly, on 127.0.0.1 over real HTTP: for the
tests of the package's HTTP rules (``sotopia_ls.remote``), through Prolific's client and the
chat client alike.

- ``drip headers``: the status line, then a header one byte at a time;
- ``drip body``: headers announcing 100 bytes, then the body one byte at a time;
- ``huge``: headers announcing 300 MB, then as much as the client reads (at most ``LIMIT``);
- ``redirect``: a 307 to ``location``.

A drip sends a byte every ``DRIP`` seconds for ``DRIP_FOR`` seconds at most, so a client that
never cuts it ends all the same, late.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DRIP, DRIP_FOR = 0.1, 20.0
CLAIMED = 300_000_000
LIMIT = 64 * 2**20
_CHUNK = b"\0" * 2**16


class Hostile(ThreadingHTTPServer):
    """``behaviour`` for every request; ``requests`` counts them, ``written`` counts the bytes
    of body sent (a huge answer's, as far as the client took it)."""

    daemon_threads = True

    def __init__(self, behaviour: str, location: str = "") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behaviour, self.location = behaviour, location
        self.requests = 0
        self.written = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client hung up: that is the point


class _Handler(BaseHTTPRequestHandler):
    server: Hostile
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    def _answer(self) -> None:
        self.server.requests += 1
        behaviour = self.server.behaviour
        self.close_connection = True
        if behaviour == "redirect":
            self.send_response(307)
            self.send_header("Location", self.server.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif behaviour == "drip headers":
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self._drip(b"X-Slow: " + b"a" * 10_000)
        elif behaviour == "drip body":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 100\r\n\r\n")
            self._drip(b"{" * 100)
        elif behaviour == "huge":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % CLAIMED)
            while self.server.written < LIMIT:
                self.wfile.write(_CHUNK)
                self.server.written += len(_CHUNK)
        else:
            raise AssertionError(behaviour)

    def _drip(self, data: bytes) -> None:
        end = time.monotonic() + DRIP_FOR
        for byte in data:
            if time.monotonic() > end:
                return
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(DRIP)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def hostile(behaviour: str, location: str = "") -> Iterator[Hostile]:
    server = Hostile(behaviour, location)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
