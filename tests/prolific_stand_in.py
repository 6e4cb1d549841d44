"""A stand-in for Prolific's API on 127.0.0.1 (real HTTP): it records every request and answers
as Prolific documents, or as a test scripts it (refusals, throttling, faults, delays). Shared by
the API client's tests and the payment tests."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

TOKEN = "tok-s3cr3t-0123456789"


class StandIn(ThreadingHTTPServer):
    """Prolific's endpoints; ``script[path]`` (or ``script["METHOD path"]``, for that method
    alone) lists the first answers to that path as (status, body, headers) or ("sleep",
    seconds); later requests get Prolific's usual answer."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.script: dict[str, list[tuple[Any, ...]]] = {}
        self.groups: list[dict[str, Any]] = []  # the participant groups made, as listed
        self.studies: list[dict[str, Any]] = []  # the draft studies made, as Prolific keeps them
        self.bonuses: list[dict[str, Any]] = []  # the bulk bonuses set up, "paid" once paid
        self.subscriptions: list[dict[str, Any]] = []  # webhook subscriptions, "confirmed" or not

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out has hung up before the (delayed) answer: no traceback.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/api/v1/"

    def sent(self, method: str | None = None) -> list[tuple[str, str, Any]]:
        return [(r["method"], r["path"], r["body"]) for r in self.requests
                if method is None or r["method"] == method]

    def usual(self, method: str, path: str, body: Any) -> tuple[Any, ...]:
        parts = path.split("?")[0].strip("/").split("/")[2:]
        if parts[:2] == ["hooks", "subscriptions"]:
            return self.hooks(method, path, parts[2:], body)
        if parts[:1] == ["submissions"] and parts[-1] == "transition":
            status = {"APPROVE": "APPROVED", "REJECT": "REJECTED"}[body["action"]]
            return 200, {"id": parts[1], "status": status, "participant": f"p-{parts[1]}"}
        if parts == ["submissions", "bulk-approve"]:
            return 200, {}
        if parts == ["submissions", "bonus-payments"]:
            amounts = [line.split(",") for line in body["csv_bonuses"].splitlines()]
            made = {"id": f"bulk-{len(self.bonuses) + 1}", "study": body["study_id"],
                    "amount": sum(float(amount) for _, amount in amounts),
                    "csv_bonuses": body["csv_bonuses"], "paid": 0}
            self.bonuses.append(made)
            return 201, {key: made[key] for key in ("id", "study", "amount")}
        if parts[:1] == ["bulk-bonus-payments"] and parts[2:] == ["pay"]:
            for made in self.bonuses:
                if made["id"] == parts[1]:
                    made["paid"] += 1  # not idempotent: a second call pays again
                    return 202, {}
            return 404, {"error": {"detail": "No such bulk bonus"}}
        if parts == ["studies"] and method == "POST":
            made = {**body, "id": f"{len(self.studies) + 1:024x}", "status": "UNPUBLISHED"}
            self.studies.append(made)
            return 201, made
        if parts[:1] == ["projects"] and parts[2:] == ["studies"]:
            return 200, {"results": [study for study in self.studies
                                     if study.get("project") == parts[1]], "_links": {}}
        if parts == ["participant-groups"] and method == "POST":
            made = {"id": f"group-{len(self.groups) + 1}", "name": body["name"],
                    "workspace_id": body["workspace_id"], "participant_count": 0,
                    "is_deleted": False}
            self.groups.append(made)
            return 201, made
        if parts == ["participant-groups"]:
            workspace = parse_qs(urlsplit(path).query).get("filter[workspace_id]", [None])[0]
            return 200, {"results": [group for group in self.groups
                                     if group["workspace_id"] == workspace]}
        if parts[:2] == ["participant-groups", "group-1"] and method == "POST":
            return 200, {"results": []}
        if method == "GET" and parts[-1] == "submissions" or parts[:2] == [
                "participant-groups", "group-1"]:
            return 200, self.page(path, parts)
        return 404, {"error": {"detail": f"Not found: {path}"}}

    def hooks(self, method: str, path: str, rest: list[str], body: Any) -> tuple[Any, ...]:
        """Subscriptions: made with an ``X-Hook-Secret`` header, confirmed with it."""
        if method == "GET":
            workspace = parse_qs(urlsplit(path).query).get("workspace_id", [None])[0]
            return 200, {"results": [{k: v for k, v in made.items() if k != "secret"}
                                     for made in self.subscriptions
                                     if made["workspace_id"] == workspace]}
        if not rest:
            made = {**body, "id": f"hook-{len(self.subscriptions) + 1}", "is_enabled": False,
                    "secret": secrets.token_hex(16), "confirmed": False}
            self.subscriptions.append(made)  # answered as the reference: every subscription
            return 201, {"results": [{k: v for k, v in listed.items() if k != "secret"}
                                     for listed in self.subscriptions]}, {
                "X-Hook-Secret": made["secret"]}
        for made in self.subscriptions:
            if made["id"] == rest[0] and body == {"secret": made["secret"]}:
                made["confirmed"] = made["is_enabled"] = True
                return 200, {k: v for k, v in made.items() if k != "secret"}
        return 400, {"error": {"detail": "Invalid subscription secret"}}

    def page(self, path: str, parts: list[str]) -> dict[str, Any]:
        second = path.endswith("?page=2")
        key = "participant_id"
        if parts[-1] == "submissions":
            items = [{"id": f"s{n}", "participant_id": f"p{n}", "status": "AWAITING REVIEW"}
                     for n in ((3,) if second else (1, 2))]
        else:
            items = [{key: f"p{n}", "datetime_created": "2026-11-25T10:00:00Z"}
                     for n in ((3,) if second else (1, 2))]
        base = f"http://127.0.0.1:{self.server_address[1]}"
        return {"results": items, "meta": {"count": 3},
                "_links": {"next": {"href": None if second else f"{base}{path}?page=2",
                                    "title": "Next"}}}


class _Handler(BaseHTTPRequestHandler):
    server: StandIn

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        with self.server.lock:
            self.server.requests.append({"method": self.command, "path": self.path, "body": body,
                                         "auth": self.headers.get("Authorization")})
            path = self.path.split("?")[0]
            queued = (self.server.script.get(f"{self.command} {path}")
                      or self.server.script.get(path, []))
            reply = queued.pop(0) if queued else None
        if reply is not None and reply[0] == "sleep":
            time.sleep(reply[1])
            reply = None
        status, answer, headers = reply if reply else (*self.server.usual(
            self.command, self.path, body), {})[:3]
        data = json.dumps(answer).encode() if not isinstance(answer, bytes) else answer
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


_Server = TypeVar("_Server", bound=ThreadingHTTPServer)


@contextmanager
def running(server: _Server) -> Iterator[_Server]:
    """``server`` answering in a thread of its own until the block ends."""
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def serving() -> AbstractContextManager[StandIn]:
    """A stand-in answering on a free port until the block ends."""
    return running(StandIn())


def signed_event(event: dict[str, str], secret: str,
                 timestamp: float | None = None) -> tuple[bytes, dict[str, str]]:
    """A webhook call as Prolific signs it (its body and headers): base64(HMAC-SHA256(secret,
    timestamp + body)), the timestamp now unless given."""
    body = json.dumps(event).encode()
    stamp = str(int(time.time() if timestamp is None else timestamp))
    signature = base64.b64encode(hmac.new(secret.encode(), stamp.encode() + body,
                                          hashlib.sha256).digest()).decode()
    return body, {"X-Prolific-Request-Signature": signature,
                  "X-Prolific-Request-Timestamp": stamp, "Content-Type": "application/json"}


def status_change(submission: str, status: str) -> dict[str, str]:
    """Prolific's ``submission.status.change`` event for ``submission``."""
    return {"event_type": "submission.status.change", "resource_id": submission,
            "participant_id": secrets.token_hex(12), "status": status}
