"""The gateway as `sotopia-ls study serve` runs it (uvicorn, its own process) where it meets the
public: uvicorn's own refusals carry the security headers, a participant's Label Studio user is
made with their first saved rating (never by an arrival), the session key must be random, a
PostgreSQL password comes from the environment, never from the study file, and the process loads
none of the export's libraries.
"""

from __future__ import annotations

import base64
import secrets
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from study_support import (
    Participant,
    gateway_env,
    make_study,
    prolific_id,
    study_project,
    wait_until_saved,
)
from test_postgres import database_settings, start_postgres
from sotopia_ls.errors import StudyError
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.process import SOTOPIA_LS, GatewayProcess, gateway, start_gateway
from sotopia_ls.study.serving.security import SECURITY_HEADERS
from sotopia_ls.study.settings import SECRET_ENV, check_secret
from sotopia_ls.study.store import assignments, open_store, participants

POSTGRES = Path(__file__).resolve().parents[1] / "scripts" / "postgres"


# The libraries of the export, the report and the dashboard's worker process, and the cloud
# storage clients the SDK's export helpers bring: none is the gateway's, and each would cost
# every gateway's start. uvicorn is watched too, to show the watch sees the serving imports.
WATCHED = ("pandas", "scipy", "pyarrow", "matplotlib", "boto3", "jsf", "uvicorn")
# `sotopia-ls` as its script runs it, writing to its log each watched library it imports, when
# it imports it: Python's "import" audit event, which a check that one is installed does not
# raise (a spawned worker process does not run this).
WATCHING = f"""
import sys

def watch(event, args):
    if event == "import" and args[0] in {WATCHED!r}:
        print("imported", args[0], file=sys.stderr, flush=True)

sys.addaudithook(watch)
sys.argv[0] = "sotopia-ls"
from sotopia_ls.__main__ import run
run()
"""


@dataclass
class Served:
    running: GatewayProcess
    engine: Engine
    client: Client


@pytest.fixture(scope="module")
def served(ls_client: Client, label_studio: LocalServer,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A study of three episodes, k = 2, its gateway a `study serve` process (``WATCHING``)."""
    tmp = tmp_path_factory.mktemp("served")
    project = study_project(ls_client, f"test_served_{prolific_id()[:8]}", episodes=3)
    study = make_study(tmp, project)
    study_file = tmp / "study.json"
    study_file.write_text(study.model_dump_json())
    # A 128-bit key as `openssl rand -hex 16` makes it: the least `study serve` starts with.
    env = gateway_env(label_studio.url, label_studio.credentials.api_key, secrets.token_hex(16))
    running = start_gateway(study_file, env, program=(sys.executable, "-c", WATCHING))
    try:
        yield Served(running, open_store(study.database), ls_client)
    finally:
        running.stop()


def raw_exchange(url: str, request: bytes) -> tuple[int, dict[str, str], str]:
    """Send ``request`` as raw bytes and read the answer until the server closes:
    status, headers (lower-cased names), body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip()
               for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body.decode("latin-1")


# --- what uvicorn answers itself ------------------------------------------------------------


@pytest.mark.server
@pytest.mark.parametrize("request_bytes", [
    pytest.param(b"GARBAGE\r\n\r\n", id="a malformed request line"),
    pytest.param(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header: x\r\n\r\n",
                 id="an invalid header name"),
    # h11 refuses a header section still unfinished past its size limit.
    pytest.param(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: " + b"a" * 20_000,
                 id="a header section too large"),
])
def test_a_request_uvicorn_cannot_parse_gets_its_400_with_every_security_header(
    served, request_bytes
):
    status, headers, body = raw_exchange(served.running.url, request_bytes)

    assert status == 400
    assert {name: headers.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS
    assert headers["cache-control"] == "no-store"
    assert "Invalid HTTP request received." in body and "Traceback" not in body


# --- a participant's Label Studio user ------------------------------------------------------


@pytest.mark.server
def test_arrivals_make_no_label_studio_user_and_a_first_rating_makes_exactly_one(served):
    lookers = [Participant.of(served.running.url) for _ in range(3)]
    for someone in lookers:  # they arrive, read, open an episode, and never submit
        someone.arrive()
        someone.read_instructions()
        someone.open_episode()
    rater = Participant.of(served.running.url)
    rater.begin()

    assert rater.rate(1).status_code == 200
    wait_until_saved(served.engine, 1)

    users = {user.id: (user.email or "").lower() for user in served.client.users.list()}
    looked = {f"{someone.pid}@prolific.invalid" for someone in lookers}
    assert looked.isdisjoint(users.values())
    made = [user for user, email in users.items() if email == f"{rater.pid}@prolific.invalid"]
    assert len(made) == 1
    with served.engine.connect() as conn:
        saved = conn.execute(select(assignments.c.ls_annotation_id, participants.c.ls_user_id)
                             .join(participants)
                             .where(assignments.c.key == rater.boot["assignment"])).one()
    assert saved.ls_user_id == made[0]
    assert served.client.annotations.get(id=saved.ls_annotation_id).completed_by == made[0]
    for someone in [*lookers, rater]:
        someone.close()


@pytest.mark.server
def test_serving_a_rating_loads_none_of_the_export_s_libraries(served):
    with served.engine.connect() as conn:
        saved = conn.execute(select(func.count()).where(assignments.c.state == "saved")).scalar()
    rater = Participant.of(served.running.url)
    rater.begin()
    assert rater.rate(2).status_code == 200
    wait_until_saved(served.engine, saved + 1)
    rater.close()

    log = served.running.log.read_text(encoding="utf-8").splitlines()
    assert [line for line in log if line.startswith("imported ")] == ["imported uvicorn"]


# --- the session key ------------------------------------------------------------------------


@pytest.mark.parametrize("key", [
    pytest.param(" " * 40, id="spaces"),
    pytest.param("a" * 64, id="one character"),
    pytest.param("ab" * 32, id="two characters repeated"),
    pytest.param("abcdefgh" * 8, id="a short alphabet repeated"),
    pytest.param(secrets.token_hex(8) * 4, id="a random part repeated"),
    pytest.param(secrets.token_urlsafe(16), id="random but short"),
    pytest.param("".join(secrets.choice("abcdefg") for _ in range(64)),
                 id="seven characters drawn at random"),
])
def test_a_session_key_without_real_randomness_is_refused_in_one_line_with_the_fix(key):
    with pytest.raises(StudyError) as refused:
        check_secret(key, SECRET_ENV)

    message = str(refused.value)
    assert message.startswith(f"{SECRET_ENV} must hold a random session key")
    assert "secrets.token_urlsafe(32)" in message and "\n" not in message
    assert not key.strip() or key not in message


@pytest.mark.parametrize("make", [
    pytest.param(lambda: secrets.token_urlsafe(32), id="as the message says"),
    pytest.param(lambda: secrets.token_hex(16), id="secrets.token_hex(16): 128 bits"),
    pytest.param(lambda: secrets.token_hex(32), id="secrets.token_hex(32)"),
    pytest.param(lambda: uuid.uuid4().hex, id="uuid4().hex"),
    pytest.param(lambda: secrets.token_hex(16).upper(), id="hex in capitals"),
    pytest.param(lambda: base64.b64encode(secrets.token_bytes(32)).decode(),
                 id="openssl rand -base64 32"),
])
def test_a_key_made_by_the_usual_tools_is_accepted(make):
    for _ in range(1000):
        key = make()
        assert check_secret(key, SECRET_ENV) == key


# --- PostgreSQL, its password from the environment ------------------------------------------


def _sotopia_ls(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SOTOPIA_LS), *args], check=False, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.server
@pytest.mark.postgres
def test_on_postgresql_the_gateway_takes_the_password_from_the_environment_not_the_file(
    ls_client: Client, label_studio: LocalServer, tmp_path: Path
):
    cluster = start_postgres()
    try:
        db = database_settings(cluster)
        password = db["POSTGRE_PASSWORD"]
        where = f"{db['POSTGRE_HOST']}:{db['POSTGRE_PORT']}/{db['POSTGRE_NAME']}"
        project = study_project(ls_client, f"test_served_pg_{prolific_id()[:8]}", episodes=3)
        study_file = tmp_path / "study.json"
        env = gateway_env(label_studio.url, label_studio.credentials.api_key,
                          secrets.token_urlsafe(32)) | {"HOME": str(tmp_path)}  # no ~/.pgpass
        for name in ("PGPASSWORD", "PGPASSFILE", "SOTOPIA_LS_STUDY_DATABASE"):
            env.pop(name, None)

        made = _sotopia_ls(env, "study", "init", "--name", "pilot", "--project", str(project),
                           "--completion-code", "C0MPL3T3", "-o", str(study_file),
                           "--database", f"postgresql://{db['POSTGRE_USER']}:{password}@{where}")
        assert made.returncode == 0, made.stderr
        assert password not in study_file.read_text() + made.stdout + made.stderr

        without = _sotopia_ls(env, "study", "status", "--study", str(study_file))
        assert without.returncode == 1
        assert without.stderr.startswith("Error: cannot open the study database postgresql://")
        assert without.stderr.count("\n") == 1 and password not in without.stderr

        with_password = env | {"PGPASSWORD": password}
        with gateway(study_file, with_password) as running:
            someone = Participant.of(running.url)
            assert someone.arrive().url.path == "/s/pilot/instructions"
            someone.close()
        status = _sotopia_ls(with_password, "study", "status", "--study", str(study_file))
        assert status.returncode == 0, status.stderr
        assert "participants:         1" in status.stdout
    finally:
        subprocess.run([str(POSTGRES), "stop", str(cluster)], check=False)
