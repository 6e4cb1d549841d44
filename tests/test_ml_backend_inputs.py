"""What the backend does with any request, well-formed or not, on every route it answers.

Each case goes through Flask's test client (the app in-process, in the backend's environment)
and over HTTP to the real server (waitress in its own process). Every answer is 2xx for what
Label Studio sends and 4xx with a short JSON reason for anything else: never a traceback,
never a crash, never a log line a request can forge. Basic auth, when configured, covers every
route; bodies are bounded; a host other than loopback is refused without auth.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sotopia_ls.config import labeling_config
from sotopia_ls.importer import load_episodes
from sotopia_ls.ml_backend import open_host_refusal
from sotopia_ls.ml_backend.commands import ml_backend_command
from sotopia_ls.samples import SAMPLES
from sotopia_ls.labelstudio.push import task_payload

from ml_backend_support import AUTH, AUTH_SETTINGS, Answer, Backend, Call, InProcess, in_process, over_http, serve

CONFIG = labeling_config()
(EPISODE,) = load_episodes([SAMPLES / "episodelog" / "fixture_episode.json"]).episodes
TASK = {"id": 7, **task_payload(EPISODE)}
DEEP = b"[" * 100_000
FORGED = "2026-01-01 00:00:00,000 ERROR forged: the backend was taken over"

POST_ROUTES = ("/setup", "/predict", "/versions", "/webhook", "/train")
GET_ROUTES = ("/", "/health", "/metrics", "/is_training")


@dataclass(frozen=True)
class Case:
    name: str
    call: Call
    status: int
    reason: str  # a fragment of the answer's "error", or of the body when it is 2xx


def _cases() -> list[Case]:
    bad_bodies = {
        "not JSON": (b"{not json", "not valid JSON"),
        "not UTF-8": (b'{"project": "\xff\xfe"}', "not valid JSON"),
        "empty": (b"", "the body is empty"),
        "a JSON array": (b"[]", "must be a JSON object, not an array"),
        "a JSON string": (b'"schema"', "not a string"),
        "JSON null": (b"null", "not null"),
        "nested 100,000 deep": (DEEP, "nested too deeply"),
        "nested deep inside an object": (b'{"tasks": ' + DEEP, "nested too deeply"),
        "a 5,000-digit number": (b'{"project": ' + b"9" * 5000 + b"}", "not valid JSON"),
    }
    wrong_types = {
        "/setup": ({"schema": 3}, "schema 3: Input should be a valid string"),
        "/predict": ({"tasks": "x", "label_config": CONFIG}, "tasks 'x': Input should be a valid list"),
        "/versions": ({"project": [1]}, "project str: Input should be a valid string"),
        "/webhook": ({"action": {"a": 1}}, "action: Input should be a valid string"),
        "/train": ({"action": 7}, "action 7: Input should be a valid string"),
    }
    fine = {
        "/setup": ({"project": "1.1700000000", "schema": CONFIG, "access_token": "t"}, '"model_version"'),
        "/predict": ({"project": "1.1", "label_config": CONFIG, "tasks": [TASK], "params": {}}, '"gpt-4"'),
        "/versions": ({"project": "1.1700000000"}, '"versions":[]'),
        "/webhook": ({"action": "ANNOTATION_CREATED", "annotation": {"id": 1}}, '"ignored"'),
        "/train": ({"annotations": [], "project": "1.1", "label_config": CONFIG}, '"ignored"'),
    }
    cases = [
        Case(f"POST {route} {name}", Call("POST", route, body), 400, reason)
        for route in POST_ROUTES for name, (body, reason) in bad_bodies.items()
    ]
    cases += [Case(f"POST {route} wrong types", Call("POST", route, body), 400, reason)
              for route, (body, reason) in wrong_types.items()]
    cases += [Case(f"POST {route} as Label Studio sends it", Call("POST", route, body), 200, reason)
              for route, (body, reason) in fine.items()]
    cases += [
        Case("GET /versions as Label Studio 1.23 sends it", Call("GET", "/versions"), 200, '"versions":[]'),
        Case("POST /predict with 10,000 bad tasks", Call("POST", "/predict", {"label_config": CONFIG, "tasks": [{"data": 1}] * 10_000}), 400, "(and 9995 more)"),
        Case("POST /predict with a foreign config", Call("POST", "/predict", {"label_config": "<View/>", "tasks": []}), 400, "invalid labeling config"),
        Case("POST /setup with broken XML", Call("POST", "/setup", {"schema": "<View"}), 400, "not valid XML"),
        Case("POST /predict with a task id that is text", Call("POST", "/predict", {"label_config": CONFIG, "tasks": [{**TASK, "id": "7\n" + FORGED}]}), 400, "tasks 0 id"),
    ]
    cases += [Case(f"GET {route}", Call("GET", f"{route}?project=%0a%00", DEEP), 200, "{") for route in GET_ROUTES]
    cases += [
        Case("POST /health (wrong method)", Call("POST", "/health", {}), 405, "method is not allowed"),
        Case("GET /predict (wrong method)", Call("GET", "/predict"), 405, "method is not allowed"),
        Case("DELETE /webhook (wrong method)", Call("DELETE", "/webhook"), 405, "method is not allowed"),
        Case("GET /static/app.js (the library's static route)", Call("GET", "/static/app.js"), 404, "not found"),
        Case("GET /no-such-route", Call("GET", "/no-such-route"), 404, "not found"),
    ]
    return cases


CASES = _cases()


def check(case: Case, answer: Answer) -> None:
    """The expected status, a JSON body with the reason, and nothing of the server's insides."""
    assert answer.status == case.status, answer.body[:500]
    assert answer.content_type.startswith("application/json"), answer.content_type
    body = json.loads(answer.body)
    assert isinstance(body, dict)
    if case.status >= 400:
        assert body["status"] == case.status and case.reason in body["error"], body
        assert len(body["error"]) < 400, body["error"]
    else:
        assert case.reason in answer.body
    for inside in ("Traceback", 'File "', "site-packages", ".py\""):
        assert inside not in answer.body
    if case.status == 405:
        assert answer.headers.get("allow"), answer.headers


@pytest.fixture(scope="module")
def run_in_process(ml_python: Path) -> InProcess:
    return in_process(ml_python, [case.call for case in CASES])


@pytest.fixture(scope="module")
def answered_in_process(run_in_process: InProcess) -> dict[str, Answer]:
    return {case.name: answer for case, answer in zip(CASES, run_in_process.answers, strict=True)}


@pytest.fixture(scope="module")
def backend(ml_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    running = serve(ml_python, tmp_path_factory.mktemp("ml") / "inputs.log")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def answered_over_http(backend: Backend) -> dict[str, Answer]:
    answers = {case.name: over_http(backend.url, case.call) for case in CASES}
    assert backend.process.poll() is None, backend.log()
    return answers


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_in_process(case: Case, answered_in_process: dict[str, Answer]) -> None:
    check(case, answered_in_process[case.name])


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_over_http(case: Case, answered_over_http: dict[str, Answer]) -> None:
    check(case, answered_over_http[case.name])


def test_the_server_survives_every_case_and_logs_no_traceback(backend: Backend, answered_over_http) -> None:
    assert over_http(backend.url, Call("GET", "/health")).status == 200
    assert "Traceback" not in backend.log()


def test_every_route_of_label_studio_ml_is_answered(run_in_process: InProcess) -> None:
    run = run_in_process
    library = {rule: methods for rule, methods in run.library_routes.items() if not rule.startswith("/static")}
    assert set(library) == {"/", "/health", "/metrics", "/is_training", *POST_ROUTES}
    for rule, methods in library.items():
        assert set(methods) <= set(run.routes[rule]), rule
    # The cases above try each of them.
    assert {case.call.path.split("?")[0] for case in CASES} >= set(library)


# --- basic auth ---------------------------------------------------------------------------

ROUTES = [*(Call("GET", route) for route in GET_ROUTES), *(Call("POST", route, {}) for route in POST_ROUTES),
          Call("GET", "/no-such-route")]
WRONG_CREDENTIALS = {
    "none": (),
    "a wrong password": (("Authorization", "Basic YmFja2VuZC11c2VyOndyb25n"),),  # backend-user:wrong
    "a wrong user": (("Authorization", "Basic d3Jvbmc6YmFja2VuZC1wYXNzd29yZC0x"),),  # wrong:backend-password-1
    "not base64": (("Authorization", "Basic !!!"),),
    "not UTF-8": (("Authorization", "Basic //46//4="),),  # \xff\xfe:\xff\xfe
    "a bearer token": (("Authorization", "Bearer backend-password-1"),),
}
AUTH_CASES = [(route, name, headers) for route in ROUTES for name, headers in WRONG_CREDENTIALS.items()]


def _auth_id(case: tuple[Call, str, Any]) -> str:
    return f"{case[0].method} {case[0].path} with {case[1]}"


@pytest.fixture(scope="module")
def auth_backend(ml_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    running = serve(ml_python, tmp_path_factory.mktemp("ml") / "auth.log", **AUTH_SETTINGS)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def refused_in_process(ml_python: Path) -> list[Answer]:
    calls = [Call(route.method, route.path, route.body, headers) for route, _, headers in AUTH_CASES]
    return in_process(ml_python, calls, **AUTH_SETTINGS).answers


@pytest.mark.parametrize("index", range(len(AUTH_CASES)), ids=[_auth_id(case) for case in AUTH_CASES])
def test_every_route_needs_basic_auth_when_it_is_configured(index, refused_in_process, auth_backend) -> None:
    route, _, headers = AUTH_CASES[index]
    call = Call(route.method, route.path, route.body, headers)
    for answer in (refused_in_process[index], over_http(auth_backend.url, call)):
        assert answer.status == 401
        assert answer.headers["www-authenticate"].startswith("Basic realm=")
        assert json.loads(answer.body) == {"status": 401, "error": "authentication required"}


@pytest.mark.parametrize("route", ROUTES, ids=lambda call: f"{call.method} {call.path}")
def test_the_right_credentials_open_every_route(route: Call, auth_backend: Backend) -> None:
    assert over_http(auth_backend.url, route, auth=AUTH).status != 401


# --- body size ----------------------------------------------------------------------------


def _status_line(url: str, path: str, header: str, body: Iterable[bytes] = ()) -> str:
    """POST ``path`` over a bare socket (``header`` lines, then ``body``); the server's status line.

    The server may answer and close before the body is sent: that is the point.
    """
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{header}\r\n\r\n".encode()
        )
        try:
            for part in body:
                connection.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return connection.recv(4096).decode("latin-1").splitlines()[0]


def _chunks(count: int, chunk: bytes) -> Iterator[bytes]:
    for _ in range(count):
        yield f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    yield b"0\r\n\r\n"


def test_a_body_over_the_limit_gets_413_in_process(ml_python: Path) -> None:
    big = {"label_config": CONFIG, "tasks": [TASK] * 200}  # about 1.5 MB
    (answer,) = in_process(ml_python, [Call("POST", "/predict", big)], SOTOPIA_LS_ML_MAX_BODY_MB="1").answers
    assert answer.status == 413
    assert json.loads(answer.body)["error"] == (
        "the body is larger than 1 MB: send fewer tasks at a time, or raise SOTOPIA_LS_ML_MAX_BODY_MB"
    )


def test_bodies_over_the_limit_get_413_before_they_cost_memory(ml_python: Path, tmp_path: Path) -> None:
    backend = serve(ml_python, tmp_path / "limit.log", SOTOPIA_LS_ML_MAX_BODY_MB="1")
    try:
        under = {"project": "1.1", "label_config": CONFIG, "tasks": [TASK] * 100}  # about 0.8 MB
        assert over_http(backend.url, Call("POST", "/predict", under)).status == 200
        before = backend.rss_mb()
        for _ in range(10):
            # 50 MB announced, nothing sent; then 3 MB sent in chunks, its size unannounced.
            declared = _status_line(backend.url, "/predict", f"Content-Length: {50 * 2**20}")
            chunked = _status_line(backend.url, "/webhook", "Transfer-Encoding: chunked", _chunks(48, b" " * 2**16))
            assert declared == chunked == "HTTP/1.1 413 Request Entity Too Large"
        assert backend.rss_mb() - before < 5
        assert over_http(backend.url, Call("GET", "/health")).status == 200
    finally:
        backend.stop()


def test_large_labeling_configs_are_not_kept_after_their_request(ml_python: Path) -> None:
    # 16 different configs of 1 MB each: the controls of each are cached, never its text.
    calls = [Call("POST", "/setup", {"schema": CONFIG + f"<!-- {n} {'x' * 2**20} -->"}) for n in range(16)]
    run = in_process(ml_python, calls, traced=True, SOTOPIA_LS_ML_MAX_BODY_MB="2")
    assert {answer.status for answer in run.answers} == {200}
    assert run.traced_bytes[-1] - run.traced_bytes[0] < 2**20


# --- the log --------------------------------------------------------------------------------

CREDENTIALS = (("Authorization", "Basic " + base64.b64encode(":".join(AUTH).encode()).decode()),)
FORGING = [
    Call("POST", "/webhook", {"action": f"ANNOTATION_CREATED\n{FORGED}"}, CREDENTIALS),
    Call("POST", "/webhook", {"action": f"ANNOTATION_CREATED\r{FORGED}\u2028{FORGED}\x1b[2J"}, CREDENTIALS),
    Call("GET", "/x%0a" + FORGED.replace(" ", "%20")),  # refused: no credentials
]


def assert_not_forged(log: str) -> None:
    assert FORGED in log  # the text is there, escaped …
    assert not [line for line in log.splitlines() if line.startswith("2026-01-01")]  # … never a record
    assert "\x1b" not in log


def test_text_from_a_request_cannot_forge_a_log_line(ml_python: Path, tmp_path: Path) -> None:
    assert_not_forged(in_process(ml_python, FORGING, **AUTH_SETTINGS).log)
    backend = serve(ml_python, tmp_path / "forged.log", **AUTH_SETTINGS)
    try:
        for call in FORGING:
            over_http(backend.url, call)
    finally:
        backend.stop()
    assert_not_forged(backend.log())
    assert re.search(r"ignored event 'ANNOTATION_CREATED\\n2026-01-01 00:00:00,000 ERROR forged", backend.log())


def test_an_unexpected_error_is_logged_and_answered_without_details(ml_python: Path) -> None:
    run = in_process(ml_python, [Call("GET", "/_fail")], failing_route=True)
    (answer,) = run.answers
    assert answer.status == 500
    assert json.loads(answer.body) == {"status": 500, "error": "the backend failed on this request; its log says why"}
    assert "GET '/_fail' failed" in run.log
    assert "\n    Traceback (most recent call last):" in run.log
    assert "    RuntimeError: an unexpected error" in run.log
    assert not [line for line in run.log.splitlines() if line.startswith("2026-01-01")]


def test_label_studio_secrets_stay_out_of_the_log_even_at_debug(ml_python: Path) -> None:
    calls = [
        Call("POST", "/setup", {"project": "1.1", "schema": CONFIG, "access_token": "owner-token-123"}),
        Call("POST", "/predict", {"label_config": CONFIG, "tasks": [TASK], "params": {"password": "task-data-pw"}}),
    ]
    run = in_process(ml_python, calls, LOG_LEVEL="DEBUG")
    assert [answer.status for answer in run.answers] == [200, 200]
    assert "owner-token-123" not in run.log and "task-data-pw" not in run.log


# --- settings ---------------------------------------------------------------------------------


def test_ml_backend_refuses_a_public_host_without_auth(monkeypatch) -> None:
    for name in AUTH_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(ml_backend_command, ["--host", "0.0.0.0", "--python", "/bin/false"])
    assert result.exit_code == 1
    assert result.output == f"Error: {open_host_refusal('0.0.0.0')}\n"
    assert "ML_SERVER_BASIC_AUTH_USER and ML_SERVER_BASIC_AUTH_PASS, or bind 127.0.0.1" in result.output


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"SOTOPIA_LS_ML_HOST": "0.0.0.0"}, open_host_refusal("0.0.0.0")),
        ({"SOTOPIA_LS_ML_HOST": "192.168.1.20"}, open_host_refusal("192.168.1.20")),
        ({"SOTOPIA_LS_ML_MAX_BODY_MB": "lots"}, "SOTOPIA_LS_ML_MAX_BODY_MB='lots' is not a number"),
        ({"SOTOPIA_LS_ML_MAX_BODY_MB": "0"}, "SOTOPIA_LS_ML_MAX_BODY_MB='0' must be positive"),
        ({"SOTOPIA_LS_ML_PORT": "90.5"}, "SOTOPIA_LS_ML_PORT=90.5 must be a whole number"),
        ({"ML_SERVER_BASIC_AUTH_USER": "someone"}, "set both ML_SERVER_BASIC_AUTH_USER and ML_SERVER_BASIC_AUTH_PASS, or neither"),
        ({"SOTOPIA_LS_PROVIDER": "llm", "SOTOPIA_LS_LLM_MODEL": "m", "SOTOPIA_LS_LLM_TIMEOUT": "soon"},
         "SOTOPIA_LS_LLM_WORKERS must be a whole number and SOTOPIA_LS_LLM_TIMEOUT a number of seconds, both positive"),
    ],
)
def test_the_server_refuses_bad_settings_in_one_line(ml_python: Path, settings, message) -> None:
    clean = {name: "" for name in AUTH_SETTINGS}
    done = subprocess.run(
        [str(ml_python), "-m", "sotopia_ls.ml_backend._wsgi"], capture_output=True, text=True, timeout=60,
        env={**os.environ, **clean, **settings},
    )
    assert done.returncode == 1
    assert done.stderr == f"sotopia-ls ml-backend: {message}\n"
