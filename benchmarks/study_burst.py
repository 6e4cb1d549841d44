"""A burst of participants through the study gateway, against Label Studio on PostgreSQL.

200 simulated participants (async httpx, no browser) arrive at random moments within 60 s and
each goes the whole way: the Prolific link, the instructions, two episodes (each a rate page,
the editor's files once, and a submission with the 28 answers of a real row of the sample
human-evaluation CSVs), the completion page. The gateway is ``sotopia-ls study serve`` as a
researcher runs it (one or more processes sharing the gateway's PostgreSQL database; the
simulated participants spread over them as a load balancer would); Label Studio and the
gateway's database are a fresh PostgreSQL cluster of ``scripts/postgres``.

Measured: page ready (the rate page's HTML with its episode, from request to last byte),
submit (the rating's POST until the gateway answers where to go next: validated and recorded
in the gateway's database) and, read from that database, how long each rating then waited
until the gateway's writer had saved it in Label Studio. Checked afterwards, once every rating
is saved: no request failed, every episode has exactly k distinct raters in Label Studio,
every rating the gateway recorded is there, and nothing more.

With ``gold_share`` (``--study-gold-share``) the project also holds ``GOLD_EPISODES`` gold
episodes, their references in a CSV in the oTree layout (random valid ratings), and the
gateway hides that share of each participant's assignments among the others: the ordinary
episodes are then as many as the rest of the ratings fill, and the gold ones are rated by any
number of participants (counted apart in the outcome).

With ``adaptive`` (``--study-adaptive``) the study adds an extra rater to each episode whose
ratings differ by more than 2 (the answers are rows of real studies, so most do): the project
then holds as many episodes as k + 1 raters each fill, and each episode is checked to have as
many distinct raters as its slots (k, or k + 1 once one was added).

With ``dashboard`` (``--study-dashboard``) the gateways have the researcher dashboard's token
(so each also keeps the dashboard's figures, participants included, in its worker process) and
a researcher has the dashboard open on the first gateway during the burst: the page opened
once with ``Authorization: Bearer``, then its figures read every ``POLL_SECONDS`` after the
last answer, as the page's script does. Counted: the answers, the failed polls, and the answers
that held the running agreement on at least one rating.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import secrets
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import psycopg

from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, RUBRIC, rating_name
from sotopia_ls.labelstudio import server
from sotopia_ls.labelstudio.client import Client, create_project, project_task_data
from sotopia_ls.labelstudio.push import push_episodes
from sotopia_ls.labelstudio.tasks import EPISODE_ID
from sotopia_ls.study.process import GatewayProcess, start_gateway
from sotopia_ls.study.settings import DATABASE_ENV, SECRET_ENV, StudyFile, without_password

from . import load, servers

BOOT = re.compile(r'<script type="application/json" id="boot">(.*?)</script>', re.S)
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
ASSETS = ("/static/editor/main.js", "/static/editor/main.css", "/static/gateway.js",
          "/static/gateway.css")
SUBMIT_TARGET_MS = 500.0
# Enough gold episodes that each participant's gold differs from most others'.
GOLD_EPISODES = 10
# The dashboard page's script waits this long after each answer before asking again.
POLL_SECONDS = 3.0


@dataclass
class Figures:
    """What the burst measured and what it found afterwards."""

    participants: int
    episodes: int
    raters: int
    gateways: int
    gold_share: float = 0.0
    adaptive: bool = False
    added_slots: int = 0  # extra slots adaptive raters opened
    page_ready_ms: list[float] = field(default_factory=list)
    submit_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    completed: int = 0
    seconds: float = 0.0
    episodes_with_k: int = 0
    ratings_in_label_studio: int = 0
    gold_ratings: int = 0  # of those, on gold episodes
    ratings_recorded: int = 0
    top_ups: int = 0  # participants recruited after the burst to fill the last open slots
    turned_away: int = 0  # of the completed, sent to the end on arrival: nothing left to rate
    saved_after_ms: list[float] = field(default_factory=list)  # submitted → in Label Studio
    drained_seconds: float = 0.0  # after the last participant, until every rating was saved
    dashboard: bool = False
    dashboard_ms: list[float] = field(default_factory=list)  # each answered poll of the figures
    dashboard_errors: list[str] = field(default_factory=list)
    dashboard_with_agreement: int = 0  # answers holding the running agreement on some rating

    @staticmethod
    def percentile(values: list[float], share: float) -> float:
        if not values:
            return float("nan")
        return statistics.quantiles(values, n=100, method="inclusive")[round(share * 100) - 1]


def _prolific_id() -> str:
    return secrets.token_hex(12)


async def _participant(http: httpx.AsyncClient, name: str, delay: float,
                       answers: list[list[dict[str, Any]]], figures: Figures,
                       rng: random.Random) -> None:
    await asyncio.sleep(delay)
    try:
        await _journey(http, name, answers, figures, rng)
    except (httpx.HTTPError, AssertionError, ValueError, KeyError) as error:
        figures.errors.append(_failure(error))


async def _journey(http: httpx.AsyncClient, name: str, answers: list[list[dict[str, Any]]],
                   figures: Figures, rng: random.Random) -> None:
    """One participant's whole way; ``rng`` (the participant's own, so that the seed decides
    the answers whatever order the requests interleave in) picks each rating."""
    arrived = await http.get(f"/s/{name}", follow_redirects=True, params={
        "PROLIFIC_PID": _prolific_id(), "STUDY_ID": "b" * 24, "SESSION_ID": _prolific_id()})
    _ok(arrived)
    if arrived.url.path.endswith("/done"):  # nothing left to rate: ended before instructions
        figures.completed += 1
        figures.turned_away += 1
        return
    form = CSRF.search(arrived.text)
    if form is None:
        raise AssertionError(f"GET /s/{name}: landed on {arrived.url.path}, no instructions form")
    token = form.group(1)
    _ok(await http.post(f"/s/{name}/instructions", data={"csrf": token}))
    assets_loaded = False
    while True:
        started = time.perf_counter()
        page = await http.get(f"/s/{name}/rate", follow_redirects=True)
        _ok(page)
        if page.url.path.endswith("/done"):
            figures.completed += 1
            return
        figures.page_ready_ms.append((time.perf_counter() - started) * 1000)
        if not assets_loaded:  # a browser fetches the editor once, then keeps it
            for asset in await asyncio.gather(*(http.get(path) for path in ASSETS)):
                _ok(asset)
            assets_loaded = True
        boot = json.loads(BOOT.search(page.text).group(1))
        started = time.perf_counter()
        sent = await http.post(f"/s/{name}/submit", headers={"X-CSRF-Token": boot["csrf"]},
                               json={"assignment": boot["assignment"],
                                     "results": rng.choice(answers)})
        _ok(sent)
        figures.submit_ms.append((time.perf_counter() - started) * 1000)


def _failure(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:200]


def _ok(response: httpx.Response) -> None:
    if response.status_code >= 400:
        raise AssertionError(f"{response.request.method} {response.url.path}: "
                             f"HTTP {response.status_code}")


async def _poll_figures(http: httpx.AsyncClient, name: str, figures: Figures) -> None:
    started = time.perf_counter()
    try:
        answer = await http.get(f"/researcher/{name}/figures")
        _ok(answer)
        shown = answer.json()
    except (httpx.HTTPError, AssertionError, ValueError) as error:
        figures.dashboard_errors.append(_failure(error))
        return
    figures.dashboard_ms.append((time.perf_counter() - started) * 1000)
    figures.dashboard_with_agreement += bool((shown.get("agreement") or {}).get("ratings"))


async def _watch(url: str, name: str, token: str, figures: Figures,
                 finished: asyncio.Event) -> None:
    """The researcher's dashboard open until ``finished``: the page once (signing in with the
    token, which sets the dashboard's cookie), then its figures, as the page's script reads
    them."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        try:
            _ok(await http.get(f"/researcher/{name}",
                               headers={"Authorization": f"Bearer {token}"}))
        except (httpx.HTTPError, AssertionError) as error:
            figures.dashboard_errors.append(_failure(error))
            return
        while not finished.is_set():
            await _poll_figures(http, name, figures)
            try:
                await asyncio.wait_for(finished.wait(), POLL_SECONDS)
            except TimeoutError:
                pass


async def _burst(urls: list[str], name: str, participants: int, window: float,
                 figures: Figures, seed: int, dashboard_token: str | None = None) -> None:
    """The participants arriving within ``window`` s; with ``dashboard_token``, the dashboard
    open on the first gateway meanwhile."""
    rng = random.Random(seed)
    answers = load.real_ratings()
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
    clients = [httpx.AsyncClient(base_url=urls[n % len(urls)], timeout=120, limits=limits)
               for n in range(participants)]
    finished = asyncio.Event()
    watching = (asyncio.create_task(_watch(urls[0], name, dashboard_token, figures, finished))
                if dashboard_token else None)
    try:
        await asyncio.gather(*(
            _participant(client, name, rng.uniform(0, window), answers, figures,
                         random.Random(rng.random()))
            for client in clients
        ))
    finally:
        finished.set()
        if watching is not None:
            await watching
        await asyncio.gather(*(client.aclose() for client in clients))


@contextmanager
def _label_studio_on_postgres(work: Path) -> Iterator[tuple[server.LocalServer, dict[str, str]]]:
    """A fresh Label Studio on a fresh PostgreSQL cluster; the cluster's settings."""
    credentials = server.Credentials(username="bench@example.com", password=uuid.uuid4().hex,
                                     api_key=uuid.uuid4().hex)
    with ExitStack() as stack:
        settings = stack.enter_context(servers.postgres())
        running = stack.enter_context(server.start(work / "label-studio", credentials,
                                                   extra_env=settings))
        yield running, settings


def _gateway_database(settings: dict[str, str]) -> str:
    """A database of its own for the gateway, in Label Studio's PostgreSQL cluster."""
    connection = dict(host=settings["POSTGRE_HOST"], port=int(settings["POSTGRE_PORT"]),
                      user=settings["POSTGRE_USER"], password=settings["POSTGRE_PASSWORD"])
    with psycopg.connect(dbname=settings["POSTGRE_NAME"], autocommit=True, **connection) as db:
        db.execute("CREATE DATABASE study_gateway")
    return (f"postgresql://{connection['user']}:{connection['password']}@{connection['host']}:"
            f"{connection['port']}/study_gateway")


def _write_references(client: Client, project_id: int, gold: int, path: Path,
                      seed: int) -> None:
    """Random valid reference ratings for the project's last ``gold`` tasks, in the oTree
    layout."""
    rng = random.Random(seed)
    data = project_task_data(client, project_id)
    rows = [{"pk": data[task][EPISODE_ID],
             **{rating_name(key, agent): rng.choice(RUBRIC[key].values)
                for agent in AGENTS for key in DIMENSION_KEYS}}
            for task in sorted(data)[-gold:]]
    pd.DataFrame(rows).to_csv(path, index=False)


def _gold_tasks(database: str) -> set[int]:
    with psycopg.connect(database) as db:
        return {task for (task,) in db.execute("SELECT task_id FROM gold").fetchall()}


def _slots_per_episode(database: str) -> dict[int, int]:
    with psycopg.connect(database) as db:
        return dict(db.execute("SELECT task_id, count(*) FROM slots GROUP BY task_id").fetchall())


def _check(client: Client, project_id: int, figures: Figures, slots: dict[int, int],
           gold: set[int]) -> None:
    """Every ordinary episode has as many distinct raters as slots (k, or more with adaptive
    extra raters), nobody rated one twice; the ratings counted."""
    matching = 0
    for task in client.tasks.list(project=project_id, include="id"):
        annotations = client.annotations.list(id=task.id)
        users = {annotation.completed_by for annotation in annotations}
        if len(users) != len(annotations):
            figures.errors.append(f"task {task.id}: a participant rated it twice")
        if task.id in gold:
            figures.gold_ratings += len(annotations)
        else:
            matching += len(users) == slots.get(task.id)
        figures.ratings_in_label_studio += len(annotations)
    figures.episodes_with_k = matching
    figures.added_slots = sum(slots.values()) - figures.raters * len(slots)


def _open_slots(database: str) -> int:
    with psycopg.connect(database) as db:
        return db.execute("SELECT count(*) FROM slots WHERE state <> 'done'").fetchone()[0]


def _drain(database: str, figures: Figures, timeout: float = 600.0) -> None:
    """Wait until the writers saved every recorded rating; then read the save delays."""
    started = time.perf_counter()
    with psycopg.connect(database) as db:
        while db.execute("SELECT count(*) FROM assignments WHERE state = 'saving'").fetchone()[0]:
            if time.perf_counter() - started > timeout:
                figures.errors.append(f"ratings still waiting to be saved after {timeout:.0f} s")
                break
            time.sleep(0.5)
        figures.drained_seconds = time.perf_counter() - started
        delays = db.execute("SELECT extract(epoch FROM saved_at - submitted_at) FROM assignments "
                            "WHERE state = 'saved'").fetchall()
    figures.saved_after_ms = [float(seconds) * 1000 for (seconds,) in delays]
    figures.ratings_recorded = len(delays)


def measure_burst(participants: int = 200, *, window: float = 60.0, gateways: int = 1,
                  raters: int = 2, per_participant: int = 2, gold_share: float = 0.0,
                  adaptive: bool = False, dashboard: bool = False, seed: int = 0) -> Figures:
    """Run the burst on fresh servers and check the outcome; see the module's docstring.

    The project holds exactly the ordinary episodes the participants can fill
    (participants × per_participant × (1 - gold_share) / raters, one rater more with
    ``adaptive``); participants recruited after the burst (at most a tenth more) take any slot
    the greedy assignment left open. With ``dashboard``, the dashboard is open during the
    burst (not while those are recruited).
    """
    most_raters = raters + 1 if adaptive else raters
    episodes = int(participants * per_participant * (1 - gold_share)) // most_raters
    gold = GOLD_EPISODES if gold_share else 0
    figures = Figures(participants, episodes, raters, gateways, gold_share, adaptive,
                      dashboard=dashboard)
    token = secrets.token_urlsafe(32) if dashboard else None
    with tempfile.TemporaryDirectory(prefix="sotopia-study-bench-") as folder:
        work = Path(folder)
        with _label_studio_on_postgres(work) as (running, settings):
            client = Client(base_url=running.url, api_key=running.credentials.api_key)
            project = create_project(client, f"bench_study_{uuid.uuid4().hex[:8]}",
                                     annotations_per_task=raters)
            push_episodes(client, project.id,
                          load.episodes(load.seed_episodes(), episodes + gold), progress=False)
            references = work / "references.csv"
            if gold:
                _write_references(client, project.id, gold, references, seed)
            database = _gateway_database(settings)
            study = StudyFile(
                name="burst", project=project.id, raters_per_episode=raters,
                episodes_per_participant=per_participant, completion_code="BURST1",
                completion_url="http://127.0.0.1:9/complete?cc=BURST1",
                database=without_password(database), gold_share=gold_share,
                gold_references=str(references) if gold else None,
                adaptive={} if adaptive else None)
            study_file = work / "study.json"
            study_file.write_text(study.model_dump_json())
            env = {**os.environ, "LABEL_STUDIO_URL": running.url,
                   "LABEL_STUDIO_API_KEY": running.credentials.api_key,
                   SECRET_ENV: secrets.token_urlsafe(32), DATABASE_ENV: database}
            # Without --study-dashboard, no dashboard whatever this shell has set.
            env.pop(study.dashboard_token_env, None)
            if token:
                env[study.dashboard_token_env] = token
            started: list[GatewayProcess] = []
            try:
                for _ in range(gateways):
                    started.append(start_gateway(study_file, env))
                begun = time.perf_counter()
                asyncio.run(_burst([g.url for g in started], study.name, participants, window,
                                   figures, seed, token))
                figures.seconds = time.perf_counter() - begun
                # Greedy assignment can leave a last slot on an episode its only remaining
                # participant already rated; like a study on Prolific, recruit a few more.
                while _open_slots(database) and figures.top_ups < participants // 10:
                    figures.top_ups += 1
                    asyncio.run(_burst([started[0].url], study.name, 1, 0.0, figures,
                                       seed + figures.top_ups))
                _drain(database, figures)
            finally:
                for running_gateway in started:
                    running_gateway.stop()
            _check(client, project.id, figures, _slots_per_episode(database),
                   _gold_tasks(database))
    return figures


def rows(figures: Figures) -> list[dict[str, Any]]:
    """The burst as rows of the benchmark table."""
    gold = (f", gold {figures.gold_share:.0%} (+{GOLD_EPISODES} gold episodes)"
            if figures.gold_share else "")
    adaptive = (f", adaptive extra raters ({figures.added_slots} slots added)"
                if figures.adaptive else "")
    dashboard = ", dashboard open" if figures.dashboard else ""
    size = (f"{figures.participants} participants within 60 s, {figures.episodes} episodes"
            f"{gold}, k={figures.raters}{adaptive}{dashboard}, {figures.gateways} gateway "
            "process(es), "
            "Label Studio and gateway on PostgreSQL")
    p95_submit = figures.percentile(figures.submit_ms, 0.95)
    errors = f" ({_distinct(figures.errors)})" if figures.errors else ""
    outcome = (f"{len(figures.errors)} errors{errors}; {figures.completed} completed "
               f"({figures.turned_away} of them on arrival, nothing left to rate; "
               f"{figures.top_ups} recruited after the burst for the last open slots); "
               f"{figures.episodes_with_k}/{figures.episodes} episodes with as many "
               f"distinct raters as slots (k={figures.raters}, or more when added); {figures.ratings_in_label_studio} ratings in "
               f"Label Studio ({figures.gold_ratings} of them gold), "
               f"{figures.ratings_recorded} recorded by the gateway")
    return [
        {"benchmark": "study: burst, page ready (rate page)", "size": size,
         "seconds": f"{figures.seconds:,.1f}",
         "figures": f"p50 {figures.percentile(figures.page_ready_ms, 0.5):,.0f} ms, "
                    f"p95 {figures.percentile(figures.page_ready_ms, 0.95):,.0f} ms "
                    f"({len(figures.page_ready_ms)} pages)"},
        {"benchmark": "study: burst, submit (validated and recorded)", "size": size,
         "figures": f"p50 {figures.percentile(figures.submit_ms, 0.5):,.0f} ms, "
                    f"p95 {p95_submit:,.0f} ms ({len(figures.submit_ms)} submissions)",
         "target": f"p95 <= {SUBMIT_TARGET_MS:.0f} ms", "met": p95_submit <= SUBMIT_TARGET_MS},
        {"benchmark": "study: burst, rating in Label Studio (written behind)", "size": size,
         "seconds": f"{figures.drained_seconds:,.1f}",
         "figures": f"after submit p50 {figures.percentile(figures.saved_after_ms, 0.5):,.0f} ms, "
                    f"p95 {figures.percentile(figures.saved_after_ms, 0.95):,.0f} ms; the last "
                    f"saved {figures.drained_seconds:,.1f} s after the last participant"},
        *([_dashboard_row(figures, size)] if figures.dashboard else []),
        {"benchmark": "study: burst, outcome", "size": size, "figures": outcome,
         "target": "0 errors, every episode k raters, nothing lost",
         "met": (not figures.errors and figures.episodes_with_k == figures.episodes
                 and figures.ratings_in_label_studio == figures.ratings_recorded
                 == figures.episodes * figures.raters + figures.added_slots
                 + figures.gold_ratings)},
    ]


def _distinct(errors: list[str]) -> str:
    """The distinct error messages, shortened for the table."""
    return "; ".join(sorted(set(errors)))[:200]


def _dashboard_row(figures: Figures, size: str) -> dict[str, Any]:
    """The dashboard's polls during the burst, as a row of the benchmark table."""
    errors = _distinct(figures.dashboard_errors)
    return {"benchmark": f"study: burst, dashboard figures (read every {POLL_SECONDS:.0f} s)",
            "size": size,
            "figures": f"{len(figures.dashboard_ms)} answered, p50 "
                       f"{figures.percentile(figures.dashboard_ms, 0.5):,.0f} ms, p95 "
                       f"{figures.percentile(figures.dashboard_ms, 0.95):,.0f} ms; "
                       f"{figures.dashboard_with_agreement} with the running agreement; "
                       f"{len(figures.dashboard_errors)} failed" + (f" ({errors})" if errors else ""),
            "target": "every poll answered, the agreement shown",
            "met": not figures.dashboard_errors and figures.dashboard_with_agreement > 0}
