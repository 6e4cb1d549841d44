"""Keys and passwords never reach a message, however a server or a user makes it happen.

A real stub server on 127.0.0.1 plays the misbehaving peer: it echoes the request's headers
(the API key among them) in a long error page, or answers /health on the port the demo wants.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from sotopia_ls.cli import main
from sotopia_ls.labelstudio import server
from sotopia_ls.labelstudio.server import free_port

KEY = "0123456789abcdef0123456789abcdef01234567"


class Echo(BaseHTTPRequestHandler):
    """Answers everything with a 500 page that repeats the request's headers, 5 KB long; and
    remembers every Authorization header it was sent."""

    seen: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        Echo.seen.append(self.headers.get("Authorization", ""))
        if self.path == "/health":
            body = b'{"status": "UP"}'
            self.send_response(200)
        else:
            body = (str(self.headers) + "x" * 5000).encode()
            self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo() -> Iterator[str]:
    Echo.seen = []
    stub = ThreadingHTTPServer(("127.0.0.1", free_port()), Echo)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{stub.server_address[1]}"
    stub.shutdown()


def run(*args: str, **env: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.output


def test_a_server_that_echoes_the_key_gets_it_cut_out_and_its_page_cut_short(echo):
    code, output = run("check", "--project", "1", LABEL_STUDIO_URL=f"http://{echo}",
                       LABEL_STUDIO_API_KEY=KEY)
    assert code == 1 and "HTTP 500" in output
    assert KEY[:6] not in output and "Authorization: Token *" in output
    assert len(output) < 500


def test_a_password_in_the_url_is_never_shown(echo):
    code, output = run("check", "--project", "1",
                       LABEL_STUDIO_URL=f"http://researcher:hunter2-secret@{echo}",
                       LABEL_STUDIO_API_KEY=KEY)
    assert code == 1 and "hunter2-secret" not in output and "***@" in output


def test_a_key_read_from_a_crlf_file_is_refused_without_being_shown(echo):
    code, output = run("check", "--project", "1", LABEL_STUDIO_URL=f"http://{echo}",
                       LABEL_STUDIO_API_KEY=KEY + "\r")
    assert code == 1 and "line break or another control character" in output
    assert KEY not in output and Echo.seen == []


def test_up_never_talks_to_a_server_it_did_not_start(echo, tmp_path):
    host, port = echo.split(":")
    code, output = run("up", "--no-serve", "--port", port, "--data-dir", str(tmp_path / "ls"))
    assert code == 1 and f"{host}:{port} is already in use by another program" in output
    assert all("Token" not in header for header in Echo.seen)


def test_the_demo_login_and_data_folder_are_private(tmp_path):
    folder = tmp_path / "var" / "label-studio"
    credentials = server.Credentials.load_or_create(folder / "credentials.json")
    assert (folder / "credentials.json").stat().st_mode & 0o777 == 0o600
    assert folder.stat().st_mode & 0o777 == 0o700
    assert server.Credentials.load_or_create(folder / "credentials.json") == credentials
    assert credentials.api_key not in repr(credentials)


def test_the_backend_password_is_cut_from_connect_messages(echo):
    code, output = run("connect", "--project", "1", LABEL_STUDIO_URL=f"http://{echo}",
                       LABEL_STUDIO_API_KEY=KEY, ML_SERVER_BASIC_AUTH_USER="ml",
                       ML_SERVER_BASIC_AUTH_PASS="backend-secret-9")
    assert code == 1 and "backend-secret-9" not in output and KEY not in output

