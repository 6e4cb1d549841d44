"""What keeps the participant pages safe: headers, the CSRF token, bounded bodies, one-line logs
and data in HTML that cannot break out of its block.

docs/gateway.md, "Serving", says what each piece guards against.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import time
from typing import Any

import h11
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; font-src 'self' data:; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
_NOT_CACHED = {"cache-control": "no-store"}
STATIC_PREFIX = "/static/"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"
_CSRF_KEY = "csrf"



def one_line(text: str) -> str:
    """``text`` with each character ``str.isprintable`` refuses (line breaks, escapes, other
    control and format characters) and each backslash written as Python escapes it: ``\\n``,
    ``\\x1b``, ``\\\\``."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(char if char.isprintable() and char != "\\"
                   else char.encode("unicode_escape").decode("ascii") for char in text)


class OneLine(logging.Filter):
    """Makes each record's message ``one_line`` (a traceback, kept apart, stays as it is)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = one_line(record.getMessage()), None
        return True


log = logging.getLogger("sotopia_ls.study")
log.addFilter(OneLine())


class SecurityHeaders:
    """Pure ASGI middleware: the headers above on every response, and one log line each."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers.update(SECURITY_HEADERS)
                if not scope["path"].startswith(STATIC_PREFIX):
                    headers.update(_NOT_CACHED)
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            log.info("%s %s %d %.0f ms", scope["method"], scope["path"], status,
                     (time.perf_counter() - started) * 1000)


class GatewayH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, its own 400 for an unparsable request with the headers above.

    uvicorn's ``send_400_response`` writes a fixed pair of headers; this writes the same
    plain-text answer with the security headers added (pass the class as ``uvicorn.run(http=)``).
    """

    def send_400_response(self, msg: str) -> None:
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close"),
                   *((name.encode(), value.encode())
                     for name, value in {**SECURITY_HEADERS, **_NOT_CACHED}.items())]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                      h11.Data(data=msg.encode("ascii")), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()


def csrf_token(request: Request) -> str:
    """The session's CSRF token, made on first use."""
    token = request.session.get(_CSRF_KEY)
    if not token:
        token = request.session[_CSRF_KEY] = secrets.token_urlsafe(32)
    return token


def check_csrf(request: Request, sent: str | None) -> None:
    """403 unless ``sent`` is the session's CSRF token."""
    expected = request.session.get(_CSRF_KEY)
    if not expected or not sent or not hmac.compare_digest(expected, sent):
        raise HTTPException(403, "This form has expired: reload the page and try again.")


async def bounded_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 once it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise HTTPException(413, "The request is too large.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, "The request is too large.")
    return bytes(body)


def json_for_html(value: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text
