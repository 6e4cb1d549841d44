"""The researcher's live dashboard, against the session's real Label Studio.

A researcher follows a running study on a page of the gateway behind a token of its own: its
running agreement is the report's on the same ratings, participants never reach it nor see its
token, it refreshes itself in Chromium as ratings arrive, and computing it never holds up a
participant's submission.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pandas as pd
import pytest
from playwright.sync_api import expect
from sqlalchemy import Engine, func, select
from starlette.testclient import TestClient

from browser import chromium_page
from conftest import invoke, project_sections
from study_support import (
    EDITOR,
    Participant,
    gateway_env,
    make_study,
    study_project,
    wait_until_saved,
)
from test_study_leases import rate, setup, visitor
from test_study_qualification import completed, round_database
from sotopia_ls.cli import main
from sotopia_ls.dimensions import RUBRIC
from sotopia_ls.errors import StudyError
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.statistics.bootstrap import DEFAULT_RESAMPLES
from sotopia_ls.study.live import snapshots as live
from sotopia_ls.study.live.dashboard import participant_rows
from sotopia_ls.study.screening.flags import Annotation, Flag, FlagThresholds
from sotopia_ls.study.process import GatewayProcess, gateway
from sotopia_ls.study.serve import dashboard_notice
from sotopia_ls.study.serving import arrival
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.settings import DASHBOARD_TOKEN_ENV, StudyFile
from sotopia_ls.study.status import study_status
from sotopia_ls.study.store import agreement_snapshots, now, open_store

pytestmark = pytest.mark.server

# The report's column of each dashboard figure.
REPORT_COLUMNS = {"alpha": ("agreement", "alpha"), "alpha_low": ("agreement", "alpha_ci_low"),
                  "alpha_high": ("agreement", "alpha_ci_high"), "ac": ("gwet", "ac2"),
                  "ac_low": ("gwet", "ac2_ci_low"), "ac_high": ("gwet", "ac2_ci_high")}


@dataclass
class Served:
    """A study whose gateway is a `study serve` process with the dashboard on."""

    running: GatewayProcess
    study: StudyFile
    study_file: Path
    engine: Engine
    project: int
    token: str

    def participant(self) -> Participant:
        return Participant.of(self.running.url)

    def researcher(self) -> httpx.Client:
        return httpx.Client(base_url=self.running.url, timeout=60,
                            headers={"Authorization": f"Bearer {self.token}"})


@contextmanager
def served_study(client: Client, server: LocalServer, tmp: Path, *, episodes: int,
                 **fields: object) -> Iterator[Served]:
    project = study_project(client, f"test_dashboard_{secrets.token_hex(4)}", episodes=episodes)
    study = make_study(tmp, project, **fields)
    study_file = tmp / "study.json"
    study_file.write_text(study.model_dump_json())
    token = secrets.token_urlsafe(32)
    env = gateway_env(server.url, server.credentials.api_key, secrets.token_hex(16))
    with gateway(study_file, {**env, DASHBOARD_TOKEN_ENV: token}) as running:
        yield Served(running, study, study_file, open_store(study.database), project, token)


def wait_for(found: Callable[[], object], what: str, timeout: float = 90.0) -> object:
    deadline = time.monotonic() + timeout
    while not (value := found()):
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.3)
    return value


def rate_all(participant: Participant, seeds: list[int]) -> list[str]:
    """Arrive, read the instructions, rate one episode per seed, finish: every page's text."""
    pages = [participant.arrive().text, participant.read_instructions().text]
    for seed in seeds:
        pages.append(participant.open_episode().text)
        answer = participant.rate(seed)
        assert answer.status_code == 200
        pages.append(answer.text)
    pages.append(participant.http.get(f"/s/{participant.study}/done",
                                      follow_redirects=True).text)
    return pages


# --- the acceptance, on a served gateway -----------------------------------------------------


def test_the_dashboard_shows_the_reports_agreement_and_participants_never_reach_it(
        ls_client: Client, label_studio: LocalServer, tmp_path: Path):
    with served_study(ls_client, label_studio, tmp_path, episodes=6) as served:
        # Six episodes, two raters each, two episodes a participant: six participants.
        participants = [served.participant() for _ in range(6)]
        pages = [page for number, someone in enumerate(participants)
                 for page in rate_all(someone, [3 * number, 3 * number + 1])]
        wait_until_saved(served.engine, 12)
        snapshot = wait_for(lambda: (found := live.latest_snapshot(served.engine, "pilot"))
                            and found.ratings == 12 and found, "snapshot of the twelve ratings")

        # The page shows the snapshot once the worker has made the participants' rows too.
        with served.researcher() as researcher:
            shown = wait_for(lambda: (got := researcher.get("/researcher/pilot/figures").json())
                             ["agreement"] and got["agreement"]["ratings"] == 12 and got,
                             "the snapshot on the dashboard")
        report = project_sections(ls_client, served.project, "agreement", "gwet",
                                  bootstrap=DEFAULT_RESAMPLES)
        by_dimension = {name: getattr(report, name).set_index("dimension")
                        for name in ("agreement", "gwet")}

        assert shown["agreement"]["ratings"] == 12
        dimensions = {d["key"]: d for d in shown["agreement"]["dimensions"]}
        assert list(dimensions) == list(RUBRIC.keys)
        for key, figures in dimensions.items():
            assert figures == {"key": key, "label": RUBRIC[key].label, **snapshot.figures[key]}
            for figure, (table, column) in REPORT_COLUMNS.items():
                expected = by_dimension[table].at[key, column]
                assert figures[figure] == (None if pd.isna(expected) else expected), \
                    (key, figure)
        assert any(d["alpha_low"] is not None for d in dimensions.values())
        assert shown["progress"]["episodes_done"] == 6
        assert shown["progress"]["slots_saved"] == 12
        assert {row["participant"] for row in shown["participants"]} == \
            {someone.pid for someone in participants}

        # A participant's cookie, no cookie and a wrong token all meet the 404 of an address
        # that does not exist.
        nowhere = participants[0].http.get("/no-such-path")
        for path in ("/researcher/pilot", "/researcher/pilot/figures"):
            for answer in (participants[0].http.get(path),
                           httpx.get(served.running.url + path),
                           participants[1].http.get(path, headers={
                               "Authorization": f"Bearer {secrets.token_urlsafe(32)}"})):
                assert (answer.status_code, answer.text) == (404, nowhere.text)

        status = invoke(main, "study", "status", "--study", str(served.study_file))
        assert "running agreement on 12 ratings" in status.output
        for key, figures in dimensions.items():
            if figures["alpha"] is not None:
                assert f"{key:<18} α {figures['alpha']:.2f} " in status.output

        served.running.stop()
        log = served.running.log.read_text()
    assert served.token not in "".join(pages)
    assert served.token not in log and served.token not in status.output
    assert "researcher dashboard: http://127.0.0.1:" in log


def test_the_dashboard_page_updates_itself_as_ratings_arrive(
        ls_client: Client, label_studio: LocalServer, tmp_path: Path):
    with served_study(ls_client, label_studio, tmp_path, episodes=2,
                      episodes_per_participant=1) as served, chromium_page() as page:
        # The first rating: no episode has two raters yet.
        rate_all(served.participant(), [1])
        wait_for(lambda: (found := live.latest_snapshot(served.engine, "pilot"))
                 and found.ratings == 1, "snapshot of the first rating")

        page.goto(f"{served.running.url}/researcher/pilot/sign-in")
        page.fill("input[name=token]", served.token)
        page.click("button[type=submit]")
        page.wait_for_url(f"{served.running.url}/researcher/pilot")
        goal = page.locator('#agreement tr[data-key="goal"]')
        expect(page.locator("#agreement-note")).to_contain_text("On 1 ratings")
        expect(goal.locator('[data-figure="pairs"]')).to_have_text("0")
        expect(goal.locator('[data-figure="alpha"]')).to_have_text("–")
        # The first episode's stored Sotopia evaluation is a judge: no episode has three
        # raters yet, so the page says how many more need one (15, of two agents each).
        tested = page.locator('#alt-test tr[data-key="goal"]')
        expect(tested).to_contain_text("too few items")
        expect(tested.locator('[data-figure="third_raters_needed"]')).to_have_text("15")
        # Each agent model's scores: the episode's two models, the judge on both.
        models = page.locator("#models")
        expect(models.locator('tr[data-model="togethercomputer/llama-2-70b-chat"]'
                              '[data-key="goal"]')).to_have_count(3)  # people, judge, both
        expect(models).to_contain_text("prediction-powered")
        page.evaluate("window.notReloaded = true")

        # The second participant gets the same episode (pairs complete first).
        rate_all(served.participant(), [2])

        expect(page.locator("#agreement-note")).to_contain_text("On 2 ratings", timeout=60_000)
        expect(goal.locator('[data-figure="pairs"]')).to_have_text("2")
        expect(page.locator('#progress [data-figure="episodes_done"]')).to_have_text("1")
        assert page.evaluate("window.notReloaded") is True
        assert served.token not in page.content()


def test_guesses_at_the_dashboard_token_are_held_to_a_few_and_participants_stay_served(
        ls_client: Client, label_studio: LocalServer, tmp_path: Path):
    with served_study(ls_client, label_studio, tmp_path, episodes=2) as served:
        participant = served.participant()
        participant.arrive()
        sign_in = f"{served.running.url}/researcher/pilot/sign-in"

        script = httpx.Client(timeout=60)  # wrong tokens set no cookie to send again

        def guess(_: int) -> httpx.Response:
            return script.post(sign_in, data={"token": secrets.token_urlsafe(32)})

        # A script sends 100 wrong tokens at once, 20 at a time; a participant reads a page
        # meanwhile.
        with script, ThreadPoolExecutor(max_workers=20) as pool:
            guessing = pool.map(guess, range(100))
            started = time.monotonic()
            page = participant.http.get("/s/pilot/instructions")
            page_took = time.monotonic() - started
            answers = list(guessing)

        statuses = Counter(answer.status_code for answer in answers)
        assert set(statuses) <= {403, 429, 503}, statuses
        # Five a second, thirty a minute (and the few in progress when the last one failed);
        # each further guess is answered 429, a second late.
        assert statuses[403] <= 30 + 3 and statuses[429] >= 50, statuses
        held = next(answer for answer in answers if answer.status_code == 429)
        assert 1 <= int(held.headers["retry-after"]) <= 60
        assert page.status_code == 200 and page_took < 2.0

        # Wrong Bearer headers are held the same (whether the flood filled the minute's
        # window or only the second's, six in a row pass five a second); the researcher, at
        # another address, is not.
        with httpx.Client(timeout=60) as script:
            bearers = [script.get(f"{served.running.url}/researcher/pilot/figures", headers={
                "Authorization": f"Bearer {secrets.token_urlsafe(32)}"}) for _ in range(6)]
        assert 429 in {bearer.status_code for bearer in bearers}
        elsewhere = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"))
        with elsewhere:
            assert elsewhere.post(sign_in, data={"token": served.token}).status_code == 303


def test_a_hostile_address_is_logged_as_one_line_without_terminal_escapes(
        ls_client: Client, label_studio: LocalServer, tmp_path: Path):
    with served_study(ls_client, label_studio, tmp_path, episodes=2) as served:
        for path in ("/s/pilot/%0aFAKE%1b[31m", "/researcher/pilot/%0d%0aFORGED 200 1 ms"):
            assert httpx.get(served.running.url + path).status_code == 404
        served.running.stop()
        log = served.running.log.read_text()

    assert "\x1b" not in log and "\r" not in log
    lines = log.splitlines()
    assert not [line for line in lines if line.startswith(("FAKE", "FORGED"))]
    assert "GET /s/pilot/\\nFAKE\\x1b[31m 404" in log
    assert "GET /researcher/pilot/\\r\\nFORGED 200 1 ms 404" in log


# --- in this process -------------------------------------------------------------------------


@dataclass
class InProcess:
    study: StudyFile
    engine: Engine
    app: object


def in_process(client: Client, tmp: Path, token: str | None, **options: object) -> InProcess:
    project = study_project(client, f"test_dashboard_{secrets.token_hex(4)}", episodes=2)
    study = make_study(tmp, project, episodes_per_participant=1)
    engine = open_store(study.database)
    app = create_app(prepare_gateway(study, client, engine), secret=secrets.token_urlsafe(32),
                     editor=EDITOR, https_only=False, dashboard_token=token,
                     **options)  # type: ignore[arg-type]
    return InProcess(study, engine, app)


def _fires_on_every_rating(annotation: Annotation, limits: FlagThresholds) -> tuple[bool, str]:
    return True, "the researcher's own check"


# A flag of the researcher's own, at a module's top level: the live worker process gets it.
OWN_FLAG = Flag("own_check", "a check of the researcher's own", _fires_on_every_rating)


def test_the_dashboard_judges_participants_by_the_flags_the_gateway_was_given(
        ls_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A researcher adds a flag of their own: the running gateway's dashboard (computed in its
    worker process) lists it, and the built-in flags it was not given are not run."""
    monkeypatch.setattr(live, "CHECK_SECONDS", 0.2)
    token = secrets.token_urlsafe(32)
    setup = in_process(ls_client, tmp_path, token, flags=(OWN_FLAG,))
    with TestClient(setup.app, base_url="http://127.0.0.1") as http:
        rate_all(Participant(http), [1])
        rows = wait_for(lambda: http.get("/researcher/pilot/figures", headers={
            "Authorization": f"Bearer {token}"}).json()["participants"], "participants")
    assert [row["flags"] for row in rows] == ["own_check 1/1"]


def test_a_flag_the_worker_cannot_receive_is_refused_at_start(ls_client: Client,
                                                              tmp_path: Path):
    unsendable = Flag("inline", "made in place", lambda annotation, limits: None)
    with pytest.raises(StudyError, match="^quality flag 'inline' cannot be sent to the "
                       "dashboard's worker process"):
        in_process(ls_client, tmp_path, secrets.token_urlsafe(32), flags=(unsendable,))


def test_a_submission_never_waits_for_the_running_agreement(
        ls_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The figures are computed off the request path: held there as long as the test likes,
    they hold up no participant, and are saved once let go."""
    held, release = threading.Event(), threading.Event()
    computed = live.LiveFigures.computed

    def slow(self: live.LiveFigures, pool: object, figures: bool = True) -> object:
        held.set()
        release.wait(120)
        return computed(self, pool, figures)

    monkeypatch.setattr(live.LiveFigures, "computed", slow)
    monkeypatch.setattr(live, "CHECK_SECONDS", 0.2)
    setup = in_process(ls_client, tmp_path, secrets.token_urlsafe(32))
    with TestClient(setup.app, base_url="http://127.0.0.1") as first, \
            TestClient(setup.app, base_url="http://127.0.0.1") as second:
        rate_all(Participant(first), [1])
        assert held.wait(30), "the running agreement was never computed"
        pages: list[list[str]] = []
        submitted = threading.Thread(target=lambda: pages.append(rate_all(Participant(second),
                                                                           [2])))
        submitted.start()
        submitted.join(60)
        release.set()
        assert pages, "the submission waited for the running agreement (or failed)"
        wait_for(lambda: (found := live.latest_snapshot(setup.engine, "pilot"))
                 and found.ratings == 2, "snapshot of both ratings")


def test_a_gateway_keeps_the_running_agreement_only_for_a_reader_and_status_computes_its_own(
        ls_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Without a dashboard (nor adaptive raters stopping at a width) nothing in the gateway
    reads the figures, so it spends no CPU on them; ``study status`` computes them itself."""
    started: list[live.LiveFigures] = []

    async def run(self: live.LiveFigures) -> None:
        started.append(self)

    monkeypatch.setattr(live.LiveFigures, "run", run)
    unread = in_process(ls_client, tmp_path / "unread", token=None)
    with TestClient(unread.app, base_url="http://127.0.0.1") as http:
        rate_all(Participant(http), [1])
    assert started == []
    assert live.latest_snapshot(unread.engine, "pilot") is None
    computed = study_status(unread.engine, unread.study, agreement=True).agreement
    assert computed is not None and computed.ratings == 1

    read = in_process(ls_client, tmp_path / "read", secrets.token_urlsafe(32))
    with TestClient(read.app, base_url="http://127.0.0.1"):
        assert len(started) == 1


def test_without_its_token_the_dashboard_is_not_there(ls_client: Client, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(DASHBOARD_TOKEN_ENV, raising=False)
    setup = in_process(ls_client, tmp_path, token=None)
    http = TestClient(setup.app, base_url="http://127.0.0.1")

    assert http.get("/researcher/pilot/sign-in").status_code == 404
    assert dashboard_notice(setup.study, "http://127.0.0.1:8000") == (
        f"researcher dashboard: off (set {DASHBOARD_TOKEN_ENV} to a random token to serve it)")

    monkeypatch.setenv(DASHBOARD_TOKEN_ENV, "x" * 40)
    with pytest.raises(StudyError, match=f"^{DASHBOARD_TOKEN_ENV} must hold a random token"):
        setup.study.dashboard_token()


def test_signing_in_with_a_wrong_token_sets_no_cookie(ls_client: Client, tmp_path: Path):
    token = secrets.token_urlsafe(32)
    http = TestClient(in_process(ls_client, tmp_path, token).app, base_url="http://127.0.0.1")

    refused = http.post("/researcher/pilot/sign-in", data={"token": token[::-1]},
                        follow_redirects=False)
    assert refused.status_code == 403 and not http.cookies
    assert http.get("/researcher/pilot").status_code == 404

    signed_in = http.post("/researcher/pilot/sign-in", data={"token": token},
                          follow_redirects=False)
    assert signed_in.status_code == 303
    cookie = signed_in.headers["set-cookie"]
    assert "Path=/researcher/pilot" in cookie and "HttpOnly" in cookie
    assert "SameSite=strict" in cookie and token not in cookie
    assert http.get("/researcher/pilot").status_code == 200
    assert http.get("/researcher/pilot/figures").json()["study"] == "pilot"


def test_study_status_computes_the_agreement_once_when_no_gateway_has(ls_client: Client,
                                                                      tmp_path: Path):
    setup = in_process(ls_client, tmp_path, token=None)
    rate_all(Participant(TestClient(setup.app, base_url="http://127.0.0.1")), [1])
    study_file = tmp_path / "study.json"
    study_file.write_text(setup.study.model_dump_json())

    shown = invoke(main, "study", "status", "--study", str(study_file))

    assert shown.exit_code == 0, shown.output
    assert "running agreement on 1 ratings" in shown.output
    assert f"{'goal':<18} α – (no interval yet)" in shown.output
    assert live.latest_snapshot(setup.engine, "pilot") is None  # a gateway keeps the snapshot


def test_two_gateways_writing_the_snapshot_leave_one_row(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'gateway.sqlite3'}"
    gateways = [open_store(url), open_store(url)]  # two processes' engines on one database
    figures = {key: {"alpha": None, "pairs": 0} for key in RUBRIC.keys}
    first = live.Snapshot(now(), 10, figures)
    later = live.Snapshot(now(), 12, {**figures, "goal": {"alpha": 0.5, "pairs": 3}})

    for engine, snapshot in zip(gateways * 2, (first, later, first, later)):
        live.save_snapshot(engine, "pilot", snapshot)

    with gateways[0].connect() as conn:
        assert conn.execute(select(func.count()).select_from(agreement_snapshots)).scalar_one() == 1
    assert live.latest_snapshot(gateways[1], "pilot") == later


# --- on the gateway's database alone ---------------------------------------------------------


def test_a_failing_computation_still_refreshes_progress_and_is_retried_a_minute_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    engine, study = setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path)
    rate(engine, study, visitor(engine, study))
    tries: list[float] = []

    def failing(self: live.LiveFigures, pool: object, figures: bool = True) -> object:
        tries.append(time.monotonic())
        raise RuntimeError("the computation failed")

    monkeypatch.setattr(live.LiveFigures, "computed", failing)
    monkeypatch.setattr(live, "CHECK_SECONDS", 0.05)
    refreshed: list[object] = []
    figures = live.LiveFigures(engine, study, also=refreshed.append)

    async def run_a_while() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(figures.run(), timeout=1.5)

    asyncio.run(run_a_while())

    assert len(tries) == 1, "retried at once"
    assert len(refreshed) >= 5 and set(refreshed) == {None}
    failed = [record for record in caplog.records if record.levelname == "ERROR"]
    assert len(failed) == 1 and "tried again in 60 s" in failed[0].getMessage()


def test_the_participants_follow_arrivals_without_recomputing_the_agreement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    engine, study = setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path)
    rate(engine, study, visitor(engine, study))
    monkeypatch.setattr(live, "BUSY_FACTOR", 0.0)
    shown: list[object] = []
    figures = live.LiveFigures(engine, study, extra=participant_rows, also=shown.append)
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert figures.check(pool)
        computed_at = live.latest_snapshot(engine, "pilot").computed_at
        assert not figures.check(pool)  # nothing new

        newcomer = visitor(engine, study)  # arrives, has rated nothing yet
        assert figures.check(pool)
        arrival.finish(engine, newcomer.id, "no_slots")
        assert figures.check(pool)

    assert [len(rows) if rows is not None else None for rows in shown] == [1, None, 2, 2]
    assert [row["outcome"] for row in shown[-1]] == ["unfinished", "no_slots"]
    assert live.latest_snapshot(engine, "pilot").computed_at == computed_at


def _statistics_held() -> list[str]:
    """In a worker process: the statistics libraries it holds."""
    return [name for name in ("pandas", "scipy", "ppi_py") if name in sys.modules]


def test_each_worker_process_starts_with_the_statistics_libraries_imported_once_for_all(
        tmp_path: Path):
    """The fork server imports the statistics libraries once: a worker started after another
    died, or by another gateway of the same process, holds them before its first computation
    rather than spending seconds of CPU importing them again, and computes the same snapshot."""
    engine, study = setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path)
    rate(engine, study, visitor(engine, study))
    snapshots = []
    for _ in range(2):  # a worker, then the one started after it ended
        pool = live._worker(figures=True)
        try:
            assert pool.submit(_statistics_held).result() == ["pandas", "scipy", "ppi_py"]
            assert live.LiveFigures(engine, study).check(pool)
        finally:
            pool.shutdown()
        snapshots.append(live.latest_snapshot(engine, "pilot"))
    first, again = snapshots
    assert (again.ratings, again.figures) == (first.ratings, first.figures)


def test_a_qualification_round_computes_no_agreement_and_status_says_none(tmp_path: Path):
    engine, study = round_database(tmp_path)
    completed(engine, study, {}, {})

    assert live.arrivals(engine, study.name)[0] == 0  # gold ratings change no figure
    shown = "\n".join(study_status(engine, study, agreement=True).lines(study, ""))
    assert "gold episodes:" in shown and "running agreement" not in shown


def test_the_next_computation_waits_on_the_last_ones_length_not_the_workers_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A worker's start and imports (seconds, once) are not the computation's length: the second
    rating's figures are not put off by them."""
    engine, study = setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path)
    rate(engine, study, visitor(engine, study))
    monkeypatch.setattr(live, "BUSY_FACTOR", 1.0)
    starting = 5.0

    class SlowToStart(ThreadPoolExecutor):
        """A pool whose worker takes ``starting`` seconds to start, as a process importing the
        statistics libraries on a loaded machine."""

        def submit(self, *args: object, **kwargs: object) -> object:
            if not self._threads:
                time.sleep(starting)
            return super().submit(*args, **kwargs)

    figures = live.LiveFigures(engine, study)
    with SlowToStart(max_workers=1) as pool:
        assert figures.check(pool)
        first = live.latest_snapshot(engine, "pilot").computed_at
        rate(engine, study, visitor(engine, study))
        second = time.monotonic()
        while not figures.check(pool):
            time.sleep(0.05)
        waited = time.monotonic() - second

    assert waited < starting
    assert live.latest_snapshot(engine, "pilot").computed_at > first
