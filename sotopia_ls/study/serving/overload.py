"""Overload is answered, never dropped: a saturated gateway process tells a participant at once
to come back in a moment (503 with ``Retry-After``), instead of queueing the request until
something gives up on it; the dashboard comes after the participants, and a flood of wrong
dashboard tokens gets 429 for little cost. README.md ("Overload is answered, never dropped")
gives the limits; docs/gateway.md, "Serving", how the guard counts.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio.to_thread
from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .load import Load

PARTICIPANT_PREFIX = "/s/"
RESEARCHER_PREFIX = "/researcher/"
# Wrong dashboard tokens a client may send: a researcher mistypes a few, a script guessing
# is held to these.
WRONG_TOKENS = tuple(parse_many("5/second;30/minute"))


@dataclass(frozen=True)
class Limits:
    """When a gateway process counts as saturated, and what it then tells the participant."""

    # Starlette's thread pool (40 by default): each participant request holds at most one
    # thread at a time, and each thread at most one database connection, so with the writer's
    # and the running agreement's threads they fit the PostgreSQL pool (``store.open_store``):
    # a request never waits for a connection once it has a thread.
    threads: int = 24
    # Past this many in progress, a new request would only queue for a thread.
    most_in_flight: int = 64
    longest_wait: float = 5.0  # seconds
    retry_after: int = 2  # seconds, the least a participant is asked to wait
    # The researcher's dashboard: a page and its polls, a sign-in now and then.
    most_researcher_in_flight: int = 4


GATEWAY_LIMITS = Limits()

BUSY_MESSAGE = "The study is busy for a moment; your rating is kept. Trying again shortly."


def client_address(scope: Scope) -> str:
    """The request's client address (the proxy's ``X-Forwarded-For`` where uvicorn trusts it)."""
    return scope["client"][0] if scope.get("client") else ""


class Throttle:
    """Failures per client address (e.g. wrong tokens), in this process's memory: a client past
    one of ``rates`` (moving windows, ``limits``) waits until it is back under."""

    def __init__(self, rates: tuple[RateLimitItem, ...] = WRONG_TOKENS) -> None:
        self.rates = rates
        self.limiter = MovingWindowRateLimiter(MemoryStorage())

    def failed(self, client: str) -> None:
        for rate in self.rates:
            self.limiter.hit(rate, client)

    def wait(self, client: str) -> int:
        """Seconds until ``client`` is under every rate again; 0 when it is."""
        stats = [self.limiter.get_window_stats(rate, client) for rate in self.rates]
        until = max((window.reset_time for window in stats if window.remaining <= 0),
                    default=0.0)
        return max(math.ceil(until - time.time()), 0)


def _has_body(scope: Scope) -> bool:
    headers = dict(scope["headers"])
    return (headers.get(b"content-length", b"0") != b"0"
            or b"transfer-encoding" in headers)


class OverloadGuard:
    """Pure ASGI middleware: participant requests counted in ``load``; a saturated process
    answers them 503 with ``Retry-After`` (``busy_page``: the HTML page that reloads itself
    after the given seconds; JSON for ``json_paths``). The researcher's requests come after
    them, and a client ``throttle`` holds is refused them (429)."""

    def __init__(self, app: ASGIApp, load: Load, *, busy_page: Callable[[int], str],
                 json_paths: tuple[str, ...], limits: Limits = GATEWAY_LIMITS,
                 throttle: Throttle | None = None) -> None:
        self.app, self.load, self.limits = app, load, limits
        self.busy_page, self.json_paths = busy_page, json_paths
        self.throttle = throttle or Throttle()
        self.researchers = 0  # the researcher's requests in progress

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            anyio.to_thread.current_default_thread_limiter().total_tokens = self.limits.threads
        if scope["type"] == "http" and scope["path"].startswith(RESEARCHER_PREFIX):
            await self.researcher(scope, receive, send)
            return
        if scope["type"] != "http" or not scope["path"].startswith(PARTICIPANT_PREFIX):
            await self.app(scope, receive, send)
            return
        if self.saturated():
            await self.answer_busy(scope, send)
            return
        ticket = self.load.began()
        if not _has_body(scope):
            self.load.read(ticket)

        async def receive_timed() -> Message:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                self.load.read(ticket)
            return message

        async def send_timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.load.answered(ticket)
            await send(message)

        try:
            await self.app(scope, receive_timed, send_timed)
        finally:
            self.load.ended(ticket)

    async def researcher(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A dashboard request: served unless its client is throttled (429), the participants
        saturate the process or the researcher's own requests are at their bound (503)."""
        if seconds := self.throttle.wait(client_address(scope)):
            # Answered a second late, costing the process nothing meanwhile: a client sending
            # guesses one after another sends one a second on each connection.
            await anyio.sleep(1)
            await _answer(send, 429, seconds, b"Too many wrong tokens from this address: "
                          b"try again later.")
        elif self.saturated() or self.researchers >= self.limits.most_researcher_in_flight:
            await _answer(send, 503, self.limits.retry_after, b"The gateway is busy with "
                          b"participants: try again in a moment.")
        else:
            self.researchers += 1
            try:
                await self.app(scope, receive, send)
            finally:
                self.researchers -= 1

    def saturated(self) -> bool:
        return (self.load.in_flight >= self.limits.most_in_flight
                or self.load.longest_wait() > self.limits.longest_wait)

    async def answer_busy(self, scope: Scope, send: Send) -> None:
        seconds = random.randint(self.limits.retry_after, 2 * self.limits.retry_after)
        if scope["path"].endswith(self.json_paths):
            body = json.dumps({"busy": BUSY_MESSAGE, "retry_after": seconds}).encode()
            kind = b"application/json"
        else:
            body = self.busy_page(seconds).encode()
            kind = b"text/html; charset=utf-8"
        await _answer(send, 503, seconds, body, kind)


async def _answer(send: Send, status: int, seconds: int, body: bytes,
                  kind: bytes = b"text/plain; charset=utf-8") -> None:
    """``body`` as the whole answer, asking the client to come back after ``seconds``."""
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", kind), (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(seconds).encode())]})
    await send({"type": "http.response.body", "body": body})
