"""A stand-in for a remote LLM: an OpenAI-compatible chat-completions server on 127.0.0.1.

It answers ``POST /v1/chat/completions`` over real HTTP with Sotopia-shaped evaluations whose
scores are drawn from the model and episode names, so a test knows what each judge said. A
script can make the first replies of one model on one episode a 429, a 401, a body cut off
half-way, or any text; ``delay`` holds back every answer. A test may answer each prompt itself
(``respond``), with any text, or "hang" (no answer until the client gives up) or "huge" (300 MB
announced, as much sent as the client reads).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hostile_server import CLAIMED, LIMIT
from sotopia_ls.dimensions import AGENTS, DIMENSIONS


def answer(model: str, episode: str) -> str:
    """A valid Sotopia answer, its scores drawn from the model and episode names."""
    seed = hashlib.sha256(f"{model}/{episode}".encode()).digest()
    return json.dumps({
        f"agent_{agent}_evaluation": {
            d.key: [f"{model} on {d.label}", d.range_low + seed[i + 8 * agent] % (d.range_high - d.range_low + 1)]
            for i, d in enumerate(DIMENSIONS)
        }
        for agent in AGENTS
    })


def out_of_range(model: str, episode: str) -> str:
    document = json.loads(answer(model, episode))
    document["agent_2_evaluation"]["believability"][1] = 12
    return json.dumps(document)


class ChatStub(ThreadingHTTPServer):
    """POST /v1/chat/completions on 127.0.0.1. ``script[(model, episode)]`` lists the first
    replies ("429" with Retry-After 0, "429 <Retry-After>", "401", "cut off", or a text);
    every later request gets a valid answer. With ``refuse_when`` set to N, a 401 is sent only
    once N requests are in, and every valid answer only after that 401, so a test knows the
    order whatever the machine's load. An episode is known by its participants line, unique
    among the sample episodes."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.calls: Counter[tuple[str, str]] = Counter()
        self.auth: set[str | None] = set()
        self.script: dict[tuple[str, str], list[str]] = {}
        self.refuse_when = 0
        self.arrived = threading.Semaphore(0)
        self.refused = threading.Event()
        # (model, prompt) → the reply; its calls are counted by (model, prompt).
        self.respond: Callable[[str, str], str] | None = None
        self.closing = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def reply(self, model: str, prompt: str, auth: str | None) -> str:
        if self.respond is not None:
            with self.lock:
                self.calls[(model, prompt)] += 1
            return self.respond(model, prompt)
        episode = re.search(r"^Participants: (.+)$", prompt, flags=re.M).group(1)
        with self.lock:
            attempt = self.calls[(model, episode)]
            self.calls[(model, episode)] += 1
            self.auth.add(auth)
        self.arrived.release()
        script = self.script.get((model, episode), [])
        return script[attempt] if attempt < len(script) else answer(model, episode)


class _Handler(BaseHTTPRequestHandler):
    server: ChatStub

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/v1/chat/completions"
        reply = self.server.reply(body["model"], body["messages"][0]["content"],
                                  self.headers.get("Authorization"))
        if reply == "cut off":  # a chunk announced, then the connection closes
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n40\r\n{\"choices\": [")
            self.close_connection = True
            return
        if reply == "hang":  # until the client gives up, or the stand-in closes
            self.server.closing.wait(30)
            self.close_connection = True
            return
        if reply == "huge":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % CLAIMED)
            self.close_connection = True
            try:
                for _ in range(LIMIT // 2**16):
                    self.wfile.write(b"\0" * 2**16)
            except OSError:
                pass  # the client stopped reading: that is the point
            return
        if reply == "401" and self.server.refuse_when:
            for _ in range(self.server.refuse_when):
                assert self.server.arrived.acquire(timeout=60), "fewer requests than expected"
        if reply.startswith("429") or reply == "401":
            self.send_response(int(reply[:3]))
            if reply.startswith("429"):
                self.send_header("Retry-After", reply[4:] or "0")
            self.send_header("Content-Length", "0")
            self.end_headers()
            if reply == "401":
                self.server.refused.set()
            return
        if self.server.refuse_when:
            assert self.server.refused.wait(timeout=60), "the refusal never went out"
        payload = json.dumps({"object": "chat.completion", "model": body["model"], "choices": [
            {"index": 0, "message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        try:
            self.wfile.write(payload)
        except OSError:
            pass  # a client that stops reading an answer over its limit closes the connection

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def chat_stub() -> Iterator[ChatStub]:
    server = ChatStub()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.closing.set()
        server.shutdown()
        server.server_close()
