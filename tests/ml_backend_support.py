"""What the backend's tests share: its environment, a backend process, and the app in-process.

The backend runs from its own environment (``.venv-ml``), so its Flask app cannot be imported
here; ``in_process`` runs ``ml_backend_inprocess.py`` there, which sends requests through
Flask's test client and reports the answers.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import TLS
from sotopia_ls.labelstudio import server
from sotopia_ls.ml_backend.commands import backend_env

REPO = Path(__file__).resolve().parents[1]
AUTH = ("backend-user", "backend-password-1")
AUTH_SETTINGS = {"ML_SERVER_BASIC_AUTH_USER": AUTH[0], "ML_SERVER_BASIC_AUTH_PASS": AUTH[1]}


@dataclass
class Backend:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def rss_mb(self) -> float:
        """The server's resident memory."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        (line,) = [line for line in status.splitlines() if line.startswith("VmRSS:")]
        return int(line.split()[1]) / 1024

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


def start_backend(command: list[str], port: int, env: dict[str, str], log_path: Path) -> Backend:
    """Run ``command``, a backend listening on ``port``, until /health answers."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, env={**os.environ, "LOG_LEVEL": "INFO", **env},
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    backend = Backend(f"http://127.0.0.1:{port}", process, log_path)
    auth = AUTH if "ML_SERVER_BASIC_AUTH_USER" in env else None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, backend.log()
        try:
            if httpx.get(f"{backend.url}/health", auth=auth, timeout=2, verify=TLS).status_code == 200:
                return backend
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    backend.stop()
    pytest.fail(f"the backend did not come up:\n{backend.log()}")


def serve(ml_python: Path, log_path: Path, provider: str = "stored", **env: str) -> Backend:
    """The backend's WSGI server, started the way `sotopia-ls ml-backend` starts it."""
    port = server.free_port()
    settings = backend_env("127.0.0.1", port, provider, threads=4)
    return start_backend([str(ml_python), "-m", "sotopia_ls.ml_backend._wsgi"], port, {**settings, **env}, log_path)


@dataclass(frozen=True)
class Call:
    """One request: ``body`` is sent as it is (bytes), as JSON (anything else), or not at all."""

    method: str
    path: str
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()

    def content(self) -> bytes | None:
        if self.body is None or isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode()

    def all_headers(self) -> dict[str, str]:
        return {"Content-Type": "application/json", **dict(self.headers)}


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: str
    headers: dict[str, str]  # names in lower case

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", {name.lower(): value for name, value in self.headers.items()})


@dataclass(frozen=True)
class InProcess:
    answers: list[Answer]
    log: str
    routes: dict[str, list[str]]
    library_routes: dict[str, list[str]]
    traced_bytes: list[int]


def in_process(
    ml_python: Path, calls: list[Call], *, traced: bool = False, failing_route: bool = False, **env: str
) -> InProcess:
    """``calls`` sent to ``create_app()`` through Flask's test client in the backend's environment
    (see ml_backend_inprocess.py for ``traced`` and ``failing_route``)."""
    spec = {
        "traced": traced,
        "failing_route": failing_route,
        "requests": [
            {"method": c.method, "path": c.path, "headers": c.all_headers(),
             "body": None if c.content() is None else base64.b64encode(c.content()).decode()}
            for c in calls
        ],
    }
    done = subprocess.run(
        [str(ml_python), str(REPO / "tests" / "ml_backend_inprocess.py")],
        input=json.dumps(spec), capture_output=True, text=True, timeout=300,
        env={**os.environ, "LOG_LEVEL": "INFO", **env},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    return InProcess(
        answers=[Answer(**answer) for answer in report["answers"]], log=done.stderr,
        routes=report["routes"], library_routes=report["library_routes"], traced_bytes=report["traced"],
    )


def over_http(url: str, call: Call, auth: tuple[str, str] | None = None) -> Answer:
    response = httpx.request(
        call.method, f"{url}{call.path}", content=call.content(), headers=call.all_headers(),
        auth=auth, timeout=60, verify=TLS,
    )
    return Answer(response.status_code, response.headers.get("content-type", ""), response.text, dict(response.headers))
