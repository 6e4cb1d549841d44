"""One OpenAI-compatible ``/chat/completions`` endpoint: a hosted API, or a local vLLM or
Ollama server, asked under the package's HTTP rules (``sotopia_ls.remote``).

``InvalidReply``: one request gave nothing usable. ``EndpointRefused``: the endpoint refuses
the requests themselves (401, 403, 404, a redirect), so asking again cannot help. The key goes
into the ``Authorization`` header only.
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
