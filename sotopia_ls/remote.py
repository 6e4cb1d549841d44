"""One HTTP discipline for every remote service the package asks (Prolific's API, an LLM's chat
endpoint), built on ``requests``: no redirect followed, one deadline per request, answers
bounded, passing failures retried (docs/internals.md, "Remote services").

    RemoteError   no usable answer; the message never names a credential
    ├── Unsendable, Redirected, TooLarge, Unavailable

Any other answer, a 4xx refusal included, is the caller's to read (``Answer``).
"""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from .errors import redacted

MAX_BYTES = 8 * 2**20
# Statuses after which the same request may succeed (with every 5xx).
_PASSING_STATUSES = frozenset({408, 429})
_LONGEST_WAIT = 60.0
_CHUNK = 64 * 1024


# Headers cut off at the deadline fail urllib3's parsing, which it logs with a traceback, though
# the deadline's own error says what happened.
logging.getLogger("urllib3.connection").addFilter(
    lambda record: not record.getMessage().startswith("Failed to parse headers"))


class RemoteError(Exception):
    """No usable answer; the message says why."""


class Unsendable(RemoteError):
    pass


class Redirected(RemoteError):
    pass


class TooLarge(RemoteError):
    pass


class Unavailable(RemoteError):
    pass


@dataclass(frozen=True)
class Answer:
    """A whole answer that is no redirect and no passing failure."""

    status: int
    reason: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is none."""
        return json.loads(self.body)


def send(method: str, url: str, *, deadline: float, retries: int = 0, backoff: float = 1.0,
         max_bytes: int = MAX_BYTES, headers: Mapping[str, str] | None = None,
         body: Any = None, name: str | None = None,
         stop: threading.Event | None = None) -> Answer:
    """The answer to ``method url`` with the JSON ``body``, under the rules above; ``name``
    is how messages call the service (default: the address without credentials)."""
    name = name or redacted(url)
    stop = stop or threading.Event()
    wait = backoff
    for tries_left in range(retries, -1, -1):
        if stop.is_set():
            raise RemoteError("stopped before an answer came")
        try:
            return _once(method, url, dict(headers or {}), body, deadline, max_bytes, name)
        except _Passing as exc:
            if not tries_left:
                tries = f" ({retries + 1} tries)" if retries else ""
                raise Unavailable(f"{exc}{tries}") from exc
            stop.wait(min(exc.retry_after if exc.retry_after is not None else wait,
                          _LONGEST_WAIT))
            wait *= 2
    raise AssertionError("unreachable")  # the loop returns or raises


def _once(method: str, url: str, headers: dict[str, str], body: Any, deadline: float,
          max_bytes: int, name: str) -> Answer:
    watch = _Watch()
    timer = threading.Timer(deadline, watch.expire)
    timer.daemon = True
    late = _Passing(f"no complete answer within {deadline:g} s from {name}")
    with requests.Session() as session:
        adapter = _Adapter(watch)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        timer.start()
        try:
            with session.request(method, url, json=body, headers=headers, timeout=deadline,
                                 allow_redirects=False, stream=True) as response:
                status = response.status_code
                if 300 <= status < 400:
                    raise Redirected(_redirect(name, status, url, response.headers))
                if status in _PASSING_STATUSES or status >= 500:
                    raise _Passing(f"{name} answered HTTP {status}",
                                   _seconds(response.headers.get("Retry-After")))
                content = _body(response, max_bytes, name)
                if watch.expired:  # what the cut left may parse as a whole answer: it is not
                    raise late
                return Answer(status, response.reason or "", content,
                              CaseInsensitiveDict(response.headers))
        except (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema,
                requests.exceptions.MissingSchema, requests.exceptions.InvalidHeader) as exc:
            raise Unsendable(f"cannot send a request to {name} ({type(exc).__name__})") from exc
        except (requests.ConnectionError, requests.Timeout,
                requests.exceptions.ChunkedEncodingError,
                requests.exceptions.ContentDecodingError) as exc:
            if watch.expired or isinstance(exc, requests.Timeout):
                raise late from exc
            if isinstance(exc, requests.ConnectionError):
                raise _Passing(f"cannot reach {name}") from exc
            raise _Passing(f"the answer from {name} was cut off") from exc
        except requests.RequestException as exc:
            raise RemoteError(f"the request to {name} failed ({type(exc).__name__})") from exc
        finally:
            timer.cancel()
            watch.end()


def _body(response: requests.Response, max_bytes: int, name: str) -> bytes:
    """The body, read no further than ``max_bytes`` (after decompression)."""
    body = bytearray()
    for chunk in response.iter_content(_CHUNK):
        body += chunk
        if len(body) > max_bytes:
            raise TooLarge(f"the answer from {name} is longer than {max_bytes:,} bytes; "
                           "not read further")
    return bytes(body)


def _redirect(name: str, status: int, url: str, headers: Mapping[str, str]) -> str:
    location = headers.get("Location")
    if not location:
        return f"{name} answered HTTP {status} (a redirect); not followed"
    target = urlsplit(urljoin(url, location))
    host = target.hostname or "?"
    return (f"{name} answered HTTP {status}, a redirect to "
            f"{host}{f':{target.port}' if target.port else ''}; not followed")


class _Watch:
    """The sockets of one request, shut at its end: the deadline (``expire``), or the
    answer read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._ended = False
        self.expired = False

    def expire(self) -> None:
        self.expired = True
        self.end()

    def opened(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self._ended:
                _shut(sock)

    def end(self) -> None:
        with self._lock:
            self._ended = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Wake whatever waits on ``sock``; the base class's ``shutdown`` leaves a TLS socket's
    state to the thread reading it, which then meets the end of the stream."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # closed already


class _Adapter(HTTPAdapter):
    """requests' adapter, whose connections hand their socket to ``watch`` once open."""

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch
        super().__init__()

    def get_connection_with_tls_context(self, *args: Any, **kwargs: Any) -> Any:
        pool = super().get_connection_with_tls_context(*args, **kwargs)
        opened = self.watch.opened

        class Watched(pool.ConnectionCls):  # type: ignore[name-defined,misc]
            def connect(self) -> None:
                super().connect()
                opened(self.sock)

        pool.ConnectionCls = Watched
        return pool


class _Passing(Exception):
    """A failure the same request may not meet again; ``retry_after``: the server's wait."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


def _seconds(header: str | None) -> float | None:
    """``Retry-After`` given in seconds; its date form, and a number that is no finite
    number of seconds (``nan``, ``inf``), are ignored (the backoff applies)."""
    try:
        seconds = float(header) if header is not None else math.nan
    except ValueError:
        return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None
