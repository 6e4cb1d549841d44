"""One OpenAI-compatible ``/chat/completions`` endpoint: a hosted API, or a local vLLM or
Ollama server.

    Exception
    ├── InvalidReply      one request gave nothing usable (no answer in time, an error status
    │                     after the retries, a body that is no chat completion)
    └── EndpointRefused   the endpoint refuses the requests themselves (401, 403, 404, …):
                          asking again, for this or any other episode, cannot help

Every request follows the package's HTTP rules (``sotopia_ls.remote``): no redirect followed,
``timeout`` seconds for the whole answer, at most ``max_bytes`` of it read, and a request
answered 429 or 5xx, timed out or cut off sent again at most ``retries`` times (the wait
doubling from ``backoff``, or the server's ``Retry-After``); a ``stop`` event set by the
caller ends the waiting and the retries. An address that is no HTTP URL, or that answers with
a redirect, is refused like a 404 (``EndpointRefused``). The API key goes into the
``Authorization`` header and nowhere else: messages name the endpoint's address without
credentials (``errors.redacted``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from . import remote
from .errors import redacted


class InvalidReply(Exception):
    """One request gave nothing usable; the message says what was wrong."""


class EndpointRefused(Exception):
    """The endpoint refuses the requests themselves; the message says how, and the fix."""


@dataclass(frozen=True)
class ChatEndpoint:
    """``model`` at ``base_url`` (up to ``/v1``); ``timeout`` seconds for each answer, whole;
    ``retries`` and the first ``backoff`` wait (seconds) bound the repeats of a request that
    failed for a passing reason."""

    base_url: str
    model: str
    api_key: str = field(repr=False)
    timeout: float
    retries: int = 0
    backoff: float = 1.0
    max_bytes: int = remote.MAX_BYTES

    @property
    def url(self) -> str:
        return f"{self.base_url.rstrip('/')}/chat/completions"

    def complete(self, messages: list[dict[str, str]], stop: threading.Event | None = None) -> str:
        """The text of the model's answer to ``messages`` (temperature 0). Once ``stop`` is
        set, nothing more is sent and a wait before a retry ends: ``InvalidReply``."""
        try:
            answer = remote.send(
                "POST", self.url, deadline=self.timeout, retries=self.retries,
                backoff=self.backoff, max_bytes=self.max_bytes, stop=stop,
                body={"model": self.model, "messages": messages, "temperature": 0},
                headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})
        except (remote.Unsendable, remote.Redirected) as exc:
            # The address or the key cannot make a request at all: no episode can be asked.
            raise EndpointRefused(f"{exc}: check --base-url (an http:// or https:// address) "
                                  "and the API key") from exc
        except remote.RemoteError as exc:
            raise InvalidReply(str(exc)) from exc
        if answer.status >= 400:
            hint = " (check the API key)" if answer.status in (401, 403) else (
                " (check --base-url and --model)" if answer.status == 404 else "")
            raise EndpointRefused(f"{redacted(self.url)} answered HTTP {answer.status}{hint}")
        try:
            content = answer.json()["choices"][0]["message"]["content"]
        except (ValueError, LookupError, TypeError, RecursionError) as exc:
            raise InvalidReply("the endpoint did not answer with a chat completion") from exc
        if not isinstance(content, str):
            raise InvalidReply("the chat completion holds no text")
        return content
