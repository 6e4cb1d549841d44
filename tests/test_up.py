"""`sotopia-ls up` owns the Label Studio it starts, and opens it to colleagues and a local
backend only as asked.

Each run starts a real Label Studio through `up` (the data folder is shared between runs, its
database migrated before the first: a fresh folder is the wheel's and the demo's tests), then
stops `up` with one signal and checks that nothing listens on the port afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from sotopia_ls.cli import main
from sotopia_ls.labelstudio.client import Client, find_project, register_backend
from sotopia_ls.labelstudio.server import Credentials, free_port, port_in_use

from conftest import migrated

pytestmark = pytest.mark.server


class Backend(BaseHTTPRequestHandler):
    """The least a pre-annotation backend answers: /health and /setup."""

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"status": "UP", "model_version": "stub"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


@pytest.fixture(scope="module")
def up_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data folder every `up` here serves from."""
    return migrated(tmp_path_factory.mktemp("up-data"))


@pytest.fixture(scope="module")
def local_backend() -> Iterator[str]:
    stub = ThreadingHTTPServer(("127.0.0.1", free_port()), Backend)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{stub.server_address[1]}"
    stub.shutdown()


def start_up(data_dir: Path, port: int, *extra: str,
             printed: list[str] | None = None) -> subprocess.Popen[str]:
    """`sotopia-ls up` as a script's background job (`sotopia-ls up &`) starts it: with SIGINT
    ignored, which the command inherits. What it prints until it is ready goes to ``printed``."""
    process = subprocess.Popen(
        ["sh", "-c", 'trap "" INT; exec "$@"', "sh", sys.executable, "-m", "sotopia_ls", "up",
         "--port", str(port), "--data-dir", str(data_dir), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 300
    assert process.stdout is not None
    for line in process.stdout:
        if printed is not None:
            printed.append(line)
        if "Press Ctrl-C to stop." in line or time.monotonic() > deadline:
            break
    assert process.poll() is None, "up exited before it was ready"
    return process


def port_freed(port: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not port_in_use("127.0.0.1", port):
            return True
        time.sleep(0.5)
    return False


# SIGTERM, with a backend connected first, is the last step of the demo's own test below.
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGHUP],
                         ids=lambda number: signal.Signals(number).name)
def test_every_stop_signal_stops_label_studio_too(number, up_data, local_backend):
    port = free_port()
    process = start_up(up_data, port)
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()["status"] == "UP"
        if number == signal.SIGINT:
            refused_backend_named_with_its_fix(f"http://127.0.0.1:{port}", up_data, local_backend)
        process.send_signal(number)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert port_freed(port), f"Label Studio still listens on {port} after {number!r}"


def refused_backend_named_with_its_fix(url: str, data_dir: Path, backend: str) -> None:
    """Label Studio as `up` starts it by default: its SSRF guard refuses a backend on
    127.0.0.1, and `connect` names the fix."""
    api_key = Credentials.load_or_create(data_dir / "credentials.json").api_key
    project = find_project(Client(base_url=url, api_key=api_key), "Sotopia human evaluation (demo)")
    result = CliRunner().invoke(
        main, ["connect", "--project", str(project.id), "--backend-url", backend],
        env={"LABEL_STUDIO_URL": url, "LABEL_STUDIO_API_KEY": api_key})
    assert result.exit_code == 1
    assert result.output == (
        f"Error: Label Studio will not call {backend}: the address is in 127.0.0.0/8, which it "
        "blocks by default. Start Label Studio with ML_BLOCK_LOCAL_IP=false USE_DEFAULT_BANNED_SUBNETS=false "
        "(`sotopia-ls up --allow-local-backends` does), or give a --backend-url it may call "
        f"(project {project.id})\n"
    )


def test_a_fresh_demo_is_owned_by_its_owner_and_an_earlier_demo_keeps_its_login(tmp_path):
    fresh = Credentials.load_or_create(tmp_path / "fresh" / "credentials.json")
    assert fresh.username == "owner@example.com"
    earlier = tmp_path / "earlier" / "credentials.json"
    earlier.parent.mkdir()
    login = {"username": "annotator@example.com", "password": "p", "api_key": "k"}
    earlier.write_text(json.dumps(login))
    assert Credentials.load_or_create(earlier) == Credentials(**login)
    assert json.loads(earlier.read_text()) == login


def test_commands_run_beside_the_demo_find_its_server_and_key_and_say_so(up_data, tmp_path,
                                                                         local_backend):
    """After scripts/demo, a newcomer runs a command with no --url or --api-key: it uses the
    demo's server and the owner's key, saying where they came from. Started with
    --allow-local-backends, the demo accepts a backend on 127.0.0.1. Once SIGTERM stops the
    demo, Label Studio is stopped too, and a command asks for the server again."""
    data_dir = up_data
    port = free_port()
    printed: list[str] = []
    process = start_up(data_dir, port, "--allow-local-backends", printed=printed)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LABEL_STUDIO_")},
           "SOTOPIA_LS_DATA_DIR": str(data_dir)}

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sotopia_ls", "check", "--project",
                               "Sotopia human evaluation (demo)", "--no-repair"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    try:
        used = check()
        invited = subprocess.run([sys.executable, "-m", "sotopia_ls", "annotators"], cwd=tmp_path,
                                 env=env, capture_output=True, text=True, timeout=120)
        client = Client(base_url=f"http://127.0.0.1:{port}",
                        api_key=Credentials.load_or_create(data_dir / "credentials.json").api_key)
        project = find_project(client, "Sotopia human evaluation (demo)")
        assert register_backend(client, project.id, local_backend).state == "CO"
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert port_freed(port), f"Label Studio still listens on {port} after SIGTERM"
    assert "  login:    owner@example.com (the owner, Label Studio's admin)\n" in printed
    assert any(line.strip().endswith("sotopia-ls export --project 1 -o results/")
               for line in printed), printed
    assert used.returncode == 0, used.stderr
    assert "every episode is in exactly one task" in used.stdout
    assert used.stderr == (f"no --url or --api-key given: using the demo's Label Studio at "
                           f"http://127.0.0.1:{port} and the key in "
                           f"{data_dir / 'credentials.json'}\n")
    # A link printed beside the demo is whole: it opens pasted into a browser.
    assert invited.stdout.startswith("invite link (anyone holding it can sign up): "
                                     f"http://127.0.0.1:{port}/user/signup/?token="), invited
    stopped = check()
    assert stopped.returncode == 1 and "no Label Studio URL" in stopped.stderr
    # Label Studio's start asks PyPI for a newer release unless told not to: it never is here.
    assert "pypi.org" not in (data_dir / "server.log").read_text(encoding="utf-8")


def test_a_command_beside_a_demo_that_was_killed_says_it_is_not_running(tmp_path):
    """`up` killed with SIGKILL leaves its address behind; a command run without --url or
    --api-key says the demo is gone and how to go on, instead of a connection error."""
    data_dir = tmp_path / "label-studio"
    Credentials.load_or_create(data_dir / "credentials.json")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    (data_dir / "address.json").write_text(json.dumps({"url": dead}))

    result = CliRunner().invoke(main, ["check", "--project", "1"], env={
        "LABEL_STUDIO_URL": None, "LABEL_STUDIO_API_KEY": None,
        "SOTOPIA_LS_DATA_DIR": str(data_dir)})

    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: the demo's Label Studio at {dead} (named in {data_dir / 'address.json'}) is "
        "not running: start it with scripts/demo, or pass --url and --api-key"]


def test_a_public_host_cannot_open_label_studio_to_private_backends(tmp_path):
    result = CliRunner().invoke(main, ["up", "--no-serve", "--host", "0.0.0.0",
                                       "--allow-local-backends", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "only for a server bound to a loopback" in result.output
    assert not any(tmp_path.iterdir())


def test_annotators_get_the_invite_link_and_the_label_stream_link(label_studio, ls_client,
                                                                   project_title):
    from sotopia_ls.labelstudio.client import create_project

    project = create_project(ls_client, project_title)
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}
    result = CliRunner().invoke(main, ["annotators", "--project", str(project.id)], env=env,
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = dict(line.split(": ", 1) for line in result.output.splitlines())
    invite = lines["invite link (anyone holding it can sign up)"]
    stream = lines[f"label-stream link for project {project.id}"]
    assert invite.startswith(f"{label_studio.url}/user/signup/?token=")
    assert stream == f"{invite}&next=/projects/{project.id}/data%3Flabeling%3D1"
    # Signup is closed to anyone without the link, open with it.
    assert sign_up(f"{label_studio.url}/user/signup/", f"{project_title}-x@a.test") == 403
    assert sign_up(invite, f"{project_title}-y@a.test") == 302
    assert label_studio.credentials.api_key not in result.output


def sign_up(page: str, email: str) -> int:
    """Label Studio's own signup form, filled as a browser does (with its CSRF cookie)."""
    with httpx.Client() as browser:
        browser.get(page)
        token = browser.cookies["csrftoken"]
        answer = browser.post(page, data={"email": email, "password": "a-long-password-1",
                                          "csrfmiddlewaretoken": token},
                              headers={"Referer": page})
    return answer.status_code


def test_a_researcher_makes_two_annotator_accounts_that_log_in_with_the_password_given(
        label_studio, project_title):
    """`annotators --add` signs people up through the invite link, as they would themselves;
    the password comes from the environment and is never printed; a rerun leaves them."""
    emails = [f"{project_title}-{k}@lab.test" for k in (1, 2)]
    password = "a-long-password-never-shown"
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key,
           "SOTOPIA_LS_ANNOTATOR_PASSWORD": password}
    add = ["annotators", "--add", emails[0], "--add", emails[1]]

    made = CliRunner().invoke(main, add, env=env)
    again = CliRunner().invoke(main, add, env=env)
    refused = CliRunner().invoke(main, ["annotators", "--add", f"{project_title}-3@lab.test",
                                        "--password", "short"], env=env)

    assert made.exit_code == 0, made.output
    assert made.output.startswith(
        f"{emails[0]}: account made\n{emails[1]}: account made\n"
        f"log in with the email and the password at {label_studio.url}/user/login/\n")
    assert all(log_in(label_studio.url, email, password) for email in emails)
    assert not log_in(label_studio.url, emails[0], "another-password-1")
    assert again.exit_code == 0 and f"{emails[1]}: has an account already" in again.output
    assert refused.exit_code == 1 and refused.output.startswith(
        f"Error: {project_title}-3@lab.test: Label Studio refused the account: ")
    assert "8–128 characters" in refused.output and "short" not in refused.output
    for result in (made, again, refused):
        assert password not in result.output and label_studio.credentials.api_key not in result.output


def log_in(url: str, email: str, password: str) -> bool:
    """Label Studio's login form, as a browser fills it: True when it lets the person in."""
    with httpx.Client() as browser:
        page = f"{url}/user/login/"
        browser.get(page)
        answer = browser.post(page, headers={"Referer": page}, data={
            "email": email, "password": password,
            "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
    return answer.is_redirect
