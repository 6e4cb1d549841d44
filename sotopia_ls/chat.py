"""One OpenAI-compatible ``/chat/completions`` endpoint: a hosted API, or a local vLLM or
Ollama server.

    Exception
    ├── InvalidReply      one request gave nothing usable (no answer in time, an error status
    │                     after the retries, a body that is no chat completion)
    └── EndpointRefused   the endpoint refuses the requests themselves (401, 403, 404, …):
                          asking again, for this or any other episode, cannot help

A request answered 429 or 5xx, timed out or cut off is sent again, at most ``retries`` times,
after a wait that doubles each time (or the server's ``Retry-After`` in seconds), never longer
than a minute; a ``stop`` event set by the caller ends the waiting and the retries. An address
that is no HTTP URL is refused like a 404 (``EndpointRefused``). The API key goes into the ``Authorization`` header and nowhere else: messages name
the endpoint's address without credentials (``errors.redacted``). Uses ``requests``, which
both the core environment and the backend's have.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import requests

from .errors import redacted

# Statuses after which the same request may succeed (with every 5xx): timeouts, rate limits.
_RETRY_STATUSES = frozenset({408, 429})
_LONGEST_WAIT = 60.0


class InvalidReply(Exception):
    """One request gave nothing usable; the message says what was wrong."""


class EndpointRefused(Exception):
    """The endpoint refuses the requests themselves; the message says how, and the fix."""


@dataclass(frozen=True)
class ChatEndpoint:
    """``model`` at ``base_url`` (up to ``/v1``); ``retries`` and the first ``backoff`` wait
    (seconds) bound the repeats of a request that failed for a passing reason."""

    base_url: str
    model: str
    api_key: str = field(repr=False)
    timeout: float
    retries: int = 0
    backoff: float = 1.0

    @property
    def url(self) -> str:
        return f"{self.base_url.rstrip('/')}/chat/completions"

    def complete(self, messages: list[dict[str, str]], stop: threading.Event | None = None) -> str:
        """The text of the model's answer to ``messages`` (temperature 0). Once ``stop`` is
        set, nothing more is sent and a wait before a retry ends: ``InvalidReply``."""
        stop = stop or threading.Event()
        wait = self.backoff
        for tries_left in range(self.retries, -1, -1):
            if stop.is_set():
                raise InvalidReply("stopped before an answer came")
            try:
                return self._once(messages)
            except _Passing as exc:
                if not tries_left:
                    tries = f" ({self.retries + 1} tries)" if self.retries else ""
                    raise InvalidReply(f"{exc}{tries}") from exc
                stop.wait(min(exc.retry_after if exc.retry_after is not None else wait,
                              _LONGEST_WAIT))
                wait *= 2
        raise AssertionError("unreachable")  # the loop returns or raises

    def _once(self, messages: list[dict[str, str]]) -> str:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            response = requests.post(
                self.url, json={"model": self.model, "messages": messages, "temperature": 0},
                headers=headers, timeout=self.timeout,
            )
        except requests.Timeout as exc:
            raise _Passing(f"no answer within {self.timeout:g} s") from exc
        except requests.ConnectionError as exc:
            raise _Passing(f"cannot reach {redacted(self.url)}") from exc
        except (requests.exceptions.ChunkedEncodingError,
                requests.exceptions.ContentDecodingError) as exc:
            raise _Passing(f"the answer from {redacted(self.url)} was cut off") from exc
        except (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema,
                requests.exceptions.MissingSchema, requests.exceptions.InvalidHeader) as exc:
            # The address or the key cannot make a request at all: no episode can be asked.
            raise EndpointRefused(
                f"cannot send a request to {redacted(self.url)} ({type(exc).__name__}): "
                "check --base-url (an http:// or https:// address) and the API key") from exc
        except requests.RequestException as exc:
            raise InvalidReply(f"the request failed: {type(exc).__name__}") from exc
        status = response.status_code
        if status in _RETRY_STATUSES or status >= 500:
            raise _Passing(f"HTTP {status} from {redacted(self.url)}",
                           _seconds(response.headers.get("Retry-After")))
        if status >= 400:
            hint = " (check the API key)" if status in (401, 403) else (
                " (check --base-url and --model)" if status == 404 else "")
            raise EndpointRefused(f"{redacted(self.url)} answered HTTP {status}{hint}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, LookupError, TypeError) as exc:
            raise InvalidReply("the endpoint did not answer with a chat completion") from exc
        if not isinstance(content, str):
            raise InvalidReply("the chat completion holds no text")
        return content


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
