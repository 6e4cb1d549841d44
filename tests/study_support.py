"""What the study-gateway tests share: a study on a real project, the gateway as a real uvicorn
process, participants as HTTP clients, a stand-in for Prolific, a pausing proxy to Label
Studio, and the database invariants every test ends on.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from http.cookiejar import CookieJar, DefaultCookiePolicy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, func, select, update

from conftest import TLS, results_of
from prolific_stand_in import running
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, RUBRIC
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import Client, create_project, import_batch
from sotopia_ls.labelstudio.push import task_payload
from sotopia_ls.samples import SAMPLES
from sotopia_ls.study.process import start_gateway
from sotopia_ls.study.serving.editor import find_editor
from sotopia_ls.study.settings import DASHBOARD_TOKEN_ENV, SECRET_ENV, StudyFile
from sotopia_ls.study.store import assignments, gold, open_store, slots

EDITOR = find_editor()
CODE = "C0MPL3T3"
NO_SLOTS = "N0SL0TS"
BOOT = re.compile(r'<script type="application/json" id="boot">(.*?)</script>', re.S)
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')



def prolific_id() -> str:
    """A fresh id of Prolific's shape: 24 hexadecimal characters."""
    return secrets.token_hex(12)


SAMPLE_EPISODES = [SAMPLES / "episodelog", SAMPLES / "otree_episodes" / "GPT3.5-GPT3.5"]


def study_project(client: Client, title: str, episodes: int) -> int:
    """A project holding the first ``episodes`` sample episodes (no predictions); the first,
    the EpisodeLog fixture, has a stored model evaluation in its task's meta."""
    loaded = load_episodes(SAMPLE_EPISODES).episodes[:episodes]
    project = create_project(client, title)
    import_batch(client, project.id, [task_payload(e, with_predictions=False) for e in loaded])
    return project.id


def make_study(tmp: Path, project: int, *, completion_base: str = "http://127.0.0.1:9/complete",
               **fields: Any) -> StudyFile:
    settings = {
        "name": "pilot", "project": project, "completion_code": CODE,
        "completion_url": f"{completion_base}?cc={CODE}", "no_slots_code": NO_SLOTS,
        "no_slots_url": f"{completion_base}?cc={NO_SLOTS}",
        "database": f"sqlite:///{tmp / 'gateway.sqlite3'}",
    } | fields
    return StudyFile.model_validate(settings)


def answers(seed: int, text: str = "rationale") -> dict[int, dict[str, tuple[str, int]]]:
    """Valid, distinct answers: every agent and dimension, scores spread over each range."""
    chosen: dict[int, dict[str, tuple[str, int]]] = {}
    for agent in AGENTS:
        chosen[agent] = {}
        for index, key in enumerate(DIMENSION_KEYS):
            values = RUBRIC[key].values
            chosen[agent][key] = (f"{text} {seed} on {key} for agent {agent}",
                                  values[(seed * 3 + agent + index) % len(values)])
    return chosen


def typed(results: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The typing counts the rating page sends for ``results`` typed key by key: each
    rationale's characters typed, none pasted."""
    return {result["from_name"]: {"pasted": 0, "typed": len(result["value"]["text"][0])}
            for result in results if "text" in result["value"]}


# --- the gateway as a real process ----------------------------------------------------------


def gateway_env(ls_url: str, api_key: str, secret: str) -> dict[str, str]:
    return {**os.environ, "LABEL_STUDIO_URL": ls_url, "LABEL_STUDIO_API_KEY": api_key,
            SECRET_ENV: secret}


# --- a participant without a browser --------------------------------------------------------


@dataclass
class Participant:
    """One participant's browser, as plain HTTP: its own cookies, following the pages.

    ``http`` is an ``httpx.Client`` on a gateway process, or Starlette's ``TestClient`` (an
    ``httpx.Client`` too) on the app in this process.
    """

    http: httpx.Client
    study: str = "pilot"
    pid: str = field(default_factory=prolific_id)
    session: str = field(default_factory=prolific_id)
    boot: dict[str, Any] | None = None

    @classmethod
    def of(cls, base: str, **fields: Any) -> Participant:
        return cls(httpx.Client(base_url=base, timeout=60, verify=TLS), **fields)

    def arrive(self, study_id: str = "a" * 24) -> httpx.Response:
        return self.http.get(f"/s/{self.study}", follow_redirects=True, params={
            "PROLIFIC_PID": self.pid, "STUDY_ID": study_id, "SESSION_ID": self.session})

    def read_instructions(self) -> httpx.Response:
        page = self.http.get(f"/s/{self.study}/instructions")
        token = CSRF_FIELD.search(page.text).group(1)
        return self.http.post(f"/s/{self.study}/instructions", data={"csrf": token},
                              follow_redirects=True)

    def begin(self) -> str:
        """Arrive, read the instructions, open the first episode: the lease's key."""
        self.arrive()
        self.read_instructions()
        self.open_episode()
        return self.boot["assignment"]

    def open_episode(self) -> httpx.Response:
        """The rate page; keeps its boot data (assignment key, CSRF token, task data)."""
        page = self.http.get(f"/s/{self.study}/rate", follow_redirects=True)
        found = BOOT.search(page.text)
        self.boot = json.loads(found.group(1)) if found else None
        return page

    def submit(self, results: list[dict[str, Any]], assignment: str | None = None,
               **measures: Any) -> httpx.Response:
        """Post a rating, with what the page measured (``typing``, ``visible_seconds``) if
        given."""
        assert self.boot is not None, "open an episode first"
        return self.http.post(
            f"/s/{self.study}/submit", headers={"X-CSRF-Token": self.boot["csrf"]},
            json={"assignment": assignment or self.boot["assignment"], "results": results,
                  **measures},
        )

    def rate(self, seed: int) -> httpx.Response:
        return self.submit(results_of(answers(seed)))

    def close(self) -> None:
        self.http.close()


# --- Prolific and a pausing proxy, as real local servers ------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        body = (b'<html><head><link rel="icon" href="data:,"></head>'
                b"<body>Prolific stand-in: submission complete</body></html>")
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def prolific_stand_in() -> Iterator[ThreadingHTTPServer]:
    """A local HTTP server standing in for Prolific's completion page; ``.paths`` it was asked."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.paths = []  # type: ignore[attr-defined]
    with running(server):
        yield server


class PausingProxy:
    """A local HTTP proxy (to Label Studio, or to a gateway for a browser) that can hold
    requests until released: annotation POSTs, or the ``method`` requests to a path
    ``held_path`` matches; or answer the next such request itself as a saturated gateway
    does (``answer_busy_once``)."""

    ANNOTATION_POST = re.compile(r"^/api/tasks/\d+/annotations/?")

    def __init__(self, target: str, method: str = "POST",
                 held_path: re.Pattern[str] = ANNOTATION_POST) -> None:
        self.target, self.method, self.held_path = target, method, held_path
        # One client for every forwarded request; it keeps no cookie, so one browser's never
        # goes out with another's request.
        self.http = httpx.Client(timeout=60, verify=TLS, cookies=CookieJar(DefaultCookiePolicy(
            allowed_domains=[])))
        self.hold = threading.Event()
        self.held = threading.Event()      # set once a request is being held
        self.release = threading.Event()
        self.busy_seconds: int | None = None  # the next matching request is answered 503
        self.busy_after_sending = False  # ... once the target has answered it
        self.matched = 0  # requests that matched, answered busy or forwarded
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                matches = self.command == proxy.method and proxy.held_path.match(self.path)
                proxy.matched += bool(matches)
                if matches and proxy.busy_seconds is not None:
                    if proxy.busy_after_sending:
                        self._sent(body)
                    self._busy(proxy.busy_seconds)
                    proxy.busy_seconds = None
                    return
                if matches and proxy.hold.is_set():
                    proxy.held.set()
                    proxy.release.wait(60)
                answer = self._sent(body)
                self.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection",
                                            "content-encoding"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def _sent(self, body: bytes) -> httpx.Response:
                """The request as the target answers it."""
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection")}
                return proxy.http.request(self.command, proxy.target + self.path,
                                          headers=headers, content=body)

            def _busy(self, seconds: int) -> None:
                body = json.dumps({"busy": "busy", "retry_after": seconds}).encode()
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Retry-After", str(seconds))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _forward  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer_busy_once(self, seconds: int, *, after_sending: bool = False) -> None:
        """The next matching request is answered 503 with ``Retry-After: seconds``: unsent, or
        ``after_sending`` it to the target (whose answer is lost)."""
        self.busy_seconds, self.busy_after_sending = seconds, after_sending

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.http.close()


def spend_time(engine: Engine, key: str, minutes: float) -> None:
    """The participant looked at the episode of assignment ``key`` ``minutes`` longer before
    submitting (its first showing moved back)."""
    with engine.begin() as conn:
        shown = conn.execute(select(assignments.c.first_shown_at)
                             .where(assignments.c.key == key)).scalar_one()
        conn.execute(update(assignments).where(assignments.c.key == key).values(
            first_shown_at=shown - timedelta(minutes=minutes)))


def wait_until_saved(engine: Engine, count: int, timeout: float = 60.0) -> None:
    """Until the gateway's writer has saved ``count`` ratings in Label Studio."""
    deadline = time.monotonic() + timeout
    while True:
        with engine.connect() as conn:
            saved = conn.execute(select(func.count()).where(assignments.c.state == "saved")
                                 ).scalar_one()
        if saved >= count:
            return
        assert time.monotonic() < deadline, f"{saved} of {count} ratings saved"
        time.sleep(0.2)


# --- what must hold after any run -----------------------------------------------------------


def check_invariants(engine: Engine, study: StudyFile) -> None:
    """No slot given twice, no episode beyond k, nobody twice on an episode, saves recorded
    (gold episodes have no slots and any number of raters)."""
    with engine.connect() as conn:
        golden = set(conn.execute(select(gold.c.task_id)).scalars())
        held = conn.execute(
            select(slots.c.assignment_id, func.count()).where(slots.c.assignment_id.is_not(None))
            .group_by(slots.c.assignment_id).having(func.count() > 1)).all()
        assert not held, f"assignments holding several slots: {held}"
        per_task = conn.execute(select(slots.c.task_id, func.count()).group_by(slots.c.task_id)).all()
        assert all(count == study.raters_per_episode for _, count in per_task)
        rows = conn.execute(select(assignments)).all()
        holders = set(conn.execute(select(slots.c.assignment_id)).scalars())
    holding = {row.id for row in rows
               if row.state in ("leased", "saving", "saved") and row.task_id not in golden}
    assert holding <= holders, "an assignment counts on a slot that names someone else"
    pairs = [(row.task_id, row.participant_id) for row in rows]
    assert len(pairs) == len(set(pairs)), "a participant was assigned an episode twice"
    counted = [row for row in rows
               if row.state in ("saving", "saved") and row.task_id not in golden]
    per_episode: dict[int, int] = {}
    for row in counted:
        per_episode[row.task_id] = per_episode.get(row.task_id, 0) + 1
    assert all(n <= study.raters_per_episode for n in per_episode.values()), per_episode
    saved_ids = [row.ls_annotation_id for row in rows if row.state == "saved"]
    assert len(saved_ids) == len(set(saved_ids)) and None not in saved_ids


# --- a study run by another program: another install, or an interpreter lacking libraries ---


@dataclass(frozen=True)
class OneRating:
    """What the researcher reads once one participant's rating is saved: the dashboard's
    figures (its JSON) and ``study status``'s output."""

    figures: dict[str, Any]
    status: str


def one_rating_served(program: Sequence[str], env: Mapping[str, str], folder: Path,
                      project: int) -> OneRating:
    """``program`` (a ``sotopia-ls``) writes the study file of ``project`` into ``folder`` and
    serves it with the dashboard; one participant rates an episode, saved in Label Studio;
    then ``program`` reports the study's status. ``env`` carries Label Studio's address and
    key."""
    study_file, database = folder / "study.json", f"sqlite:///{folder / 'gateway.sqlite3'}"

    def run(*args: str) -> str:
        done = subprocess.run([*program, "study", *args], env=dict(env), cwd=folder,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run("init", "--name", "pilot", "--project", str(project), "--completion-code", CODE,
        "--no-slots-code", NO_SLOTS, "--database", database, "-o", str(study_file))
    token = secrets.token_urlsafe(32)
    running = start_gateway(study_file, {**env, SECRET_ENV: secrets.token_urlsafe(32),
                                         DASHBOARD_TOKEN_ENV: token}, program=program)
    participant = Participant.of(running.url)
    try:
        participant.begin()
        assert participant.rate(1).status_code == 200
        wait_until_saved(open_store(database), 1)
        deadline = time.monotonic() + 90
        # The participants come from the dashboard's worker process, after the progress.
        while not (figures := participant.http.get(
                "/researcher/pilot/figures", headers={"Authorization": f"Bearer {token}"}
        ).json())["participants"] and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        participant.close()
        running.stop()
    return OneRating(figures, run("status", "--study", str(study_file)))
