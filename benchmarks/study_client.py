"""A simulated participant's browser for the study gateway's benchmark, and the kinds of its
failures.

``Browser`` waits out a busy answer (503 with ``Retry-After``) as the gateway's pages do,
counting it apart from errors. A failure's kind names what failed without what differs between
participants (status with method and path template, or the exception's class).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx

# A participant looking at a page that keeps saying "busy" gives up at some point; the old
# client's timeout.
MOST_BUSY_SECONDS = 120.0
TIMEOUT_SECONDS = 120.0
MESSAGE_WORDS = 8
_NAMED = re.compile(r"/(s|researcher)/[^/?#\s:]+")


def template(text: str) -> str:
    """``text`` with each study name in a gateway path replaced by ``<name>``."""
    return _NAMED.sub(r"/\1/<name>", text)


def _request_of(error: Exception) -> str:
    """`` on METHOD /path`` of the request an httpx error broke, or nothing."""
    try:
        request = error.request  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError when it has none
        return ""
    return f" on {request.method} {template(request.url.path)}"


class Refused(Exception):
    """The gateway answered with an error status (after any busy answers were waited out)."""

    def __init__(self, response: httpx.Response, note: str = "") -> None:
        super().__init__(f"HTTP {response.status_code} {response.request.method} "
                         f"{template(response.request.url.path)}{note}")


def kind(error: Exception) -> str:
    """What failed, the same for every participant it happened to."""
    if isinstance(error, Refused):
        return str(error)
    head = " ".join(str(error).split()[:MESSAGE_WORDS])
    return template(f"{type(error).__name__}{_request_of(error)}: {head}")


def _retry_after(response: httpx.Response) -> float | None:
    """The seconds a 503 asks to wait, or None for any other answer."""
    if response.status_code != 503:
        return None
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


class Browser:
    """One participant's browser on one gateway (its own cookies and at most four connections,
    as a browser keeps a few per host). ``busy`` collects the kind of each busy answer."""

    def __init__(self, url: str, busy: list[str]) -> None:
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
        self.http = httpx.AsyncClient(base_url=url, timeout=TIMEOUT_SECONDS, limits=limits)
        self.busy = busy

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The answer to the request, busy answers waited out; ``Refused`` for an error."""
        waited = 0.0
        while True:
            response = await self.http.request(method, path, **kwargs)
            seconds = _retry_after(response)
            if seconds is None:
                break
            self.busy.append(str(Refused(response)))
            if waited + seconds > MOST_BUSY_SECONDS:
                raise Refused(response, f", still busy after {MOST_BUSY_SECONDS:.0f} s")
            await asyncio.sleep(seconds)
            waited += seconds
            if method == "GET":  # the busy page refreshes the address it ended on
                path, kwargs = str(response.url), {**kwargs, "params": None}
        if response.status_code >= 400:
            raise Refused(response)
        return response

    async def aclose(self) -> None:
        await self.http.aclose()


class Unexpected(Exception):
    """The gateway answered with a page the participant should not be on."""
