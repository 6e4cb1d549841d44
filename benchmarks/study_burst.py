"""A burst of participants through the study gateway, against Label Studio on PostgreSQL.

Simulated participants (async httpx, no browser) go the whole way, from the Prolific link to
the completion page, at once or at people's pace (``--study-paced``), with hidden gold,
adaptive extra raters or the dashboard open as asked; afterwards every rating must be in Label
Studio once. The load, what is measured and the figures are in docs/benchmarks.md, "Study
gateway burst".
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
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import psycopg

from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, RUBRIC, rating_name
from sotopia_ls.labelstudio.client import Client, create_project, project_task_data
from sotopia_ls.labelstudio.push import push_episodes
from sotopia_ls.labelstudio.tasks import EPISODE_ID
from sotopia_ls.study.process import GatewayProcess, start_gateway
from sotopia_ls.study.settings import (
    DATABASE_ENV,
    SECRET_ENV,
    StudyFile,
    without_password,
)

from . import load, servers
from .study_client import Browser, Unexpected, kind
from .study_pace import Leaving, Pace, Person

BOOT = re.compile(r'<script type="application/json" id="boot">(.*?)</script>', re.S)
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
# The page's static files (their addresses hold their content's hash).
ASSETS = re.compile(r'(?:src|href)="(/static/[^"]+)"')
SUBMIT_TARGET_MS = 500.0
# Enough gold episodes that each participant's gold differs from most others'.
GOLD_EPISODES = 10
# The dashboard page's script waits this long after each answer before asking again.
POLL_SECONDS = 3.0


@dataclass
class Figures:
    """What the burst or the paced scenario measured and what it found afterwards."""

    participants: int
    episodes: int
    raters: int
    gateways: int
    gold_share: float = 0.0
    adaptive: bool = False
    added_slots: int = 0  # extra slots adaptive raters opened
    page_ready_ms: list[float] = field(default_factory=list)
    submit_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # each failure's kind (``study_client``)
    completed: int = 0
    seconds: float = 0.0
    episodes_with_k: int = 0
    ratings_in_label_studio: int = 0
    gold_ratings: int = 0  # of those, on gold episodes
    ratings_recorded: int = 0
    top_ups: int = 0  # participants recruited afterwards to fill the last open slots
    turned_away: int = 0  # of the completed, sent to the end on arrival: nothing left to rate
    saved_after_ms: list[float] = field(default_factory=list)  # submitted → in Label Studio
    drained_seconds: float = 0.0  # after the last participant, until every rating was saved
    dashboard: bool = False
    dashboard_ms: list[float] = field(default_factory=list)  # each answered poll of the figures
    dashboard_errors: list[str] = field(default_factory=list)
    dashboard_with_agreement: int = 0  # answers holding the running agreement on some rating
    window: float = 60.0  # seconds the crowd arrives within, at people's pace
    pace: Pace | None = None  # None: the burst
    busy: list[str] = field(default_factory=list)  # each 503 + Retry-After waited out, by kind
    left: list[str] = field(default_factory=list)  # each leaving in the middle, and its end
    episode_minutes: list[float] = field(default_factory=list)  # drawn, unscaled
    surplus: int = 0  # ratings submitted after their slot went to another participant
    expired: int = 0  # leases that expired, their slot given to another participant

    @staticmethod
    def percentile(values: list[float], share: float) -> float:
        if not values:
            return float("nan")
        return statistics.quantiles(values, n=100, method="inclusive")[round(share * 100) - 1]


def _prolific_id() -> str:
    return secrets.token_hex(12)


async def _participant(url: str, name: str, delay: float, person: Person,
                       answers: list[list[dict[str, Any]]], figures: Figures,
                       rng: random.Random) -> None:
    await asyncio.sleep(delay)
    visit = _Visit(url, name, figures, person, rng)
    try:
        await visit.journey(answers)
    except Exception as error:  # noqa: BLE001  (every failure is counted by its kind)
        figures.errors.append(kind(error))
    finally:
        await visit.close()


class _Visit:
    """One participant's way through the study, paced by ``person`` (the burst's takes no
    time); ``rng`` (the participant's own, so that the seed decides the answers and the times
    whatever order the requests interleave in) picks each rating."""

    def __init__(self, url: str, name: str, figures: Figures, person: Person,
                 rng: random.Random) -> None:
        self.url, self.name, self.figures, self.person, self.rng = url, name, figures, person, rng
        self.ids = {"PROLIFIC_PID": _prolific_id(), "STUDY_ID": "b" * 24,
                    "SESSION_ID": _prolific_id()}
        self.browsers: list[Browser] = []
        self.browser = self._new_browser()

    def _new_browser(self) -> Browser:
        """A browser with an empty cache and no cookie."""
        self.browsers.append(Browser(self.url, self.figures.busy))
        self.assets_loaded = False
        return self.browsers[-1]

    async def close(self) -> None:
        await asyncio.gather(*(browser.aclose() for browser in self.browsers))

    async def _wait(self, minutes: float) -> None:
        if minutes:
            await asyncio.sleep(self.person.seconds(minutes))

    def _arrive(self) -> Awaitable[httpx.Response]:
        return self.browser.request("GET", f"/s/{self.name}", follow_redirects=True,
                                    params=self.ids)

    def _next(self) -> Awaitable[httpx.Response]:
        return self.browser.request("GET", f"/s/{self.name}/rate", follow_redirects=True)

    async def journey(self, answers: list[list[dict[str, Any]]]) -> None:
        arrived = await self._arrive()
        if arrived.url.path.endswith("/done"):  # nothing left to rate: ended before instructions
            self.figures.completed += 1
            self.figures.turned_away += 1
            return
        form = CSRF.search(arrived.text)
        if form is None:
            raise Unexpected(f"GET /s/{self.name}: landed on {arrived.url.path}, "
                             "no instructions form")
        await self._wait(self.person.instructions_minutes)
        await self.browser.request("POST", f"/s/{self.name}/instructions",
                                   data={"csrf": form.group(1)})
        page = await self._rate_page(self._next())
        episode = 0
        while page is not None:
            results = self.rng.choice(answers)
            minutes = self.person.episode_minutes(episode, page["task"]["data"], results)
            if minutes:
                self.figures.episode_minutes.append(minutes)
            if not await self._rate(episode, page, results, minutes):
                return
            episode += 1
            page = await self._rate_page(self._next())
        self.figures.completed += 1

    async def _rate_page(self, asked: Awaitable[httpx.Response]) -> dict[str, Any] | None:
        """The rate page's boot data (None: the visit is done), its page ready time recorded;
        the editor's files the first time in this browser."""
        started = time.perf_counter()
        page = await asked
        if page.url.path.endswith("/done"):
            return None
        self.figures.page_ready_ms.append((time.perf_counter() - started) * 1000)
        boot = BOOT.search(page.text)
        if boot is None:
            raise Unexpected(f"GET {page.url.path}: no episode on the page")
        if not self.assets_loaded:  # a browser fetches the editor once, then keeps it
            await asyncio.gather(*(self.browser.request("GET", path)
                                   for path in ASSETS.findall(page.text)))
            self.assets_loaded = True
        return json.loads(boot.group(1))

    async def _rate(self, episode: int, page: dict[str, Any], results: list[dict[str, Any]],
                    minutes: float) -> bool:
        """Spend ``minutes`` on the episode, leaving in the middle if the person does, and
        submit the rating; False: the visit ended there (abandoned, or ended while away)."""
        shown_at = time.perf_counter()
        person = self.person
        if person.leaving is not None and person.leaves_at == episode:
            await self._wait(minutes * person.leaves_after)
            if person.leaving is Leaving.ABANDON:
                self.figures.left.append(Leaving.ABANDON.value)
                return False
            again = await self._come_back()
            if again is None:
                self.figures.left.append(f"{person.leaving.value}: the visit had ended")
                self.figures.completed += 1
                return False
            same = again["assignment"] == page["assignment"]
            self.figures.left.append(f"{person.leaving.value}: "
                                     f"{'the same episode' if same else 'another episode'}")
            page, shown_at = again, time.perf_counter()
            minutes *= 1 - person.leaves_after
        await self._wait(minutes)
        await self._submit(page, results, time.perf_counter() - shown_at)
        return True

    async def _come_back(self) -> dict[str, Any] | None:
        """The rate page again: reloaded, or after a pause from the study link in a new
        browser."""
        if self.person.leaving is Leaving.RETURN:
            await self._wait(self.person.pause_minutes)
            self.browser = self._new_browser()
            return await self._rate_page(self._arrive())
        return await self._rate_page(self._next())

    async def _submit(self, page: dict[str, Any], results: list[dict[str, Any]],
                      seconds: float) -> None:
        """The rating as the page sends it: the answers, the characters typed per rationale and
        the seconds the page was shown."""
        typing = {result["from_name"]: {"pasted": 0,
                                        "typed": len(" ".join(result["value"]["text"]))}
                  for result in results if result["type"] == "textarea"}
        started = time.perf_counter()
        await self.browser.request(
            "POST", f"/s/{self.name}/submit", headers={"X-CSRF-Token": page["csrf"]},
            json={"assignment": page["assignment"], "results": results, "typing": typing,
                  "visible_seconds": round(seconds, 3)})
        self.figures.submit_ms.append((time.perf_counter() - started) * 1000)


async def _poll_figures(browser: Browser, name: str, figures: Figures) -> None:
    started = time.perf_counter()
    try:
        shown = (await browser.request("GET", f"/researcher/{name}/figures")).json()
    except Exception as error:  # noqa: BLE001  (every failure is counted by its kind)
        figures.dashboard_errors.append(kind(error))
        return
    figures.dashboard_ms.append((time.perf_counter() - started) * 1000)
    figures.dashboard_with_agreement += bool((shown.get("agreement") or {}).get("ratings"))


async def _watch(url: str, name: str, token: str, figures: Figures,
                 finished: asyncio.Event) -> None:
    """The researcher's dashboard open until ``finished``: the page once (signing in with the
    token, which sets the dashboard's cookie), then its figures, as the page's script reads
    them."""
    browser = Browser(url, figures.busy)
    try:
        await browser.request("GET", f"/researcher/{name}",
                              headers={"Authorization": f"Bearer {token}"})
        while not finished.is_set():
            await _poll_figures(browser, name, figures)
            try:
                await asyncio.wait_for(finished.wait(), POLL_SECONDS)
            except TimeoutError:
                pass
    except Exception as error:  # noqa: BLE001  (every failure is counted by its kind)
        figures.dashboard_errors.append(kind(error))
    finally:
        await browser.aclose()


async def _crowd(urls: list[str], name: str, people: list[Person], window: float,
                 figures: Figures, seed: int, dashboard_token: str | None = None) -> None:
    """``people`` arriving within ``window`` s, spread over the gateways; with
    ``dashboard_token``, the dashboard open on the first gateway meanwhile."""
    rng = random.Random(seed)
    answers = load.real_ratings()
    finished = asyncio.Event()
    watching = (asyncio.create_task(_watch(urls[0], name, dashboard_token, figures, finished))
                if dashboard_token else None)
    try:
        await asyncio.gather(*(
            _participant(urls[n % len(urls)], name, rng.uniform(0, window), person, answers,
                         figures, random.Random(rng.random()))
            for n, person in enumerate(people)
        ))
    finally:
        finished.set()
        if watching is not None:
            await watching


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
            figures.errors.append("check: a participant rated an episode twice")
        if task.id in gold:
            figures.gold_ratings += len(annotations)
        else:
            matching += len(users) == slots.get(task.id)
        figures.ratings_in_label_studio += len(annotations)
    figures.episodes_with_k = matching
    figures.added_slots = sum(slots.values()) - figures.raters * len(slots)


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


def _takeable_slots(database: str) -> tuple[int, float | None]:
    """Slots a participant arriving now could take (free, or their lease expired), and the
    seconds until the next lease still held expires (None: no lease held)."""
    with psycopg.connect(database) as db:
        takeable, wait = db.execute(
            "SELECT count(*) FILTER (WHERE state = 'free' OR (state = 'leased' AND expires_at < "
            "now())), extract(epoch FROM min(expires_at) FILTER (WHERE state = 'leased' AND "
            "expires_at >= now()) - now()) FROM slots").fetchone()
    return takeable, None if wait is None else float(wait)


def _recruit(urls: list[str], name: str, database: str, figures: Figures, pace: Pace | None,
             per_participant: int, seed: int) -> None:
    """Participants recruited after the crowd, as a study on Prolific recruits a few more,
    until every slot is taken (at most a tenth more than the crowd): the greedy assignment
    can leave a last slot on an episode its only remaining participant already rated, and a
    participant who abandoned leaves a lease that only frees its slot when it expires. They
    keep the crowd's pace but never leave in the middle."""
    rng = random.Random(seed)
    most = max(1, figures.participants // 10)
    while figures.top_ups < most:
        takeable, wait = _takeable_slots(database)
        if takeable:
            count = min(most - figures.top_ups, -(-takeable // per_participant))
            figures.top_ups += count
            people = [pace.person(rng, per_participant) if pace else Person.hurried()
                      for _ in range(count)]
            asyncio.run(_crowd(urls, name, people, 0.0, figures, rng.randrange(2**32)))
        elif wait is not None:
            time.sleep(wait + 1)
        else:
            return


def _count_outcomes(database: str, figures: Figures) -> None:
    """Ratings kept apart (submitted after their slot went to another participant) and leases
    that expired."""
    with psycopg.connect(database) as db:
        counts = dict(db.execute("SELECT state, count(*) FROM assignments WHERE state IN "
                                 "('surplus', 'expired') GROUP BY state").fetchall())
    figures.surplus, figures.expired = counts.get("surplus", 0), counts.get("expired", 0)


def measure_burst(participants: int = 200, *, window: float = 60.0, gateways: int = 1,
                  raters: int = 2, per_participant: int = 2, gold_share: float = 0.0,
                  adaptive: bool = False, dashboard: bool = False, pace: Pace | None = None,
                  seed: int = 0) -> Figures:
    """Run the burst (with ``pace``: the paced scenario) on fresh servers and check the
    outcome; see the module's docstring.

    The project holds exactly the ordinary episodes the participants can fill
    (participants × per_participant × (1 - gold_share) / raters, one rater more with
    ``adaptive``); participants recruited afterwards (``_recruit``) take any slot left open.
    With ``dashboard``, the dashboard is open while the crowd comes (not while those are
    recruited). With ``pace``, the study's lease is scaled as the pace is.
    """
    most_raters = raters + 1 if adaptive else raters
    episodes = int(participants * per_participant * (1 - gold_share)) // most_raters
    gold = GOLD_EPISODES if gold_share else 0
    figures = Figures(participants, episodes, raters, gateways, gold_share, adaptive,
                      dashboard=dashboard, window=window, pace=pace)
    token = secrets.token_urlsafe(32) if dashboard else None
    lease_minutes = StudyFile.model_fields["lease_minutes"].default * (pace.scale if pace else 1)
    rng = random.Random(seed)
    people = (pace.people(participants, per_participant, rng) if pace
              else [Person.hurried()] * participants)
    with tempfile.TemporaryDirectory(prefix="sotopia-study-bench-") as folder:
        work = Path(folder)
        with servers.started(work / "label-studio", "postgresql") as (running, settings):
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
                episodes_per_participant=per_participant, lease_minutes=lease_minutes,
                completion_code="BURST1", completion_url="http://127.0.0.1:9/complete?cc=BURST1",
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
                urls = [g.url for g in started]
                begun = time.perf_counter()
                asyncio.run(_crowd(urls, study.name, people, window * (pace.scale if pace else 1),
                                   figures, seed, token))
                figures.seconds = time.perf_counter() - begun
                _recruit(urls, study.name, database, figures, pace, per_participant, seed + 1)
                _drain(database, figures)
                _count_outcomes(database, figures)
            finally:
                for running_gateway in started:
                    running_gateway.stop()
            _check(client, project.id, figures, _slots_per_episode(database),
                   _gold_tasks(database))
    return figures


def rows(figures: Figures) -> list[dict[str, Any]]:
    """The burst or the paced scenario as rows of the benchmark table: one row per kind of
    error and of busy answer."""
    scenario = "paced" if figures.pace else "burst"
    gold = (f", gold {figures.gold_share:.0%} (+{GOLD_EPISODES} gold episodes)"
            if figures.gold_share else "")
    adaptive = (f", adaptive extra raters ({figures.added_slots} slots added)"
                if figures.adaptive else "")
    dashboard = ", dashboard open" if figures.dashboard else ""
    pace = (f" at people's pace (every time x {figures.pace.scale:g})" if figures.pace else "")
    size = (f"{figures.participants} participants within {figures.window:,.0f} s{pace}, "
            f"{figures.episodes} episodes{gold}, k={figures.raters}{adaptive}{dashboard}, "
            f"{figures.gateways} gateway process(es), Label Studio and gateway on PostgreSQL")
    p95_submit = figures.percentile(figures.submit_ms, 0.95)
    outcome = (f"{len(figures.errors)} errors; {figures.completed} completed "
               f"({figures.turned_away} of them on arrival, nothing left to rate; "
               f"{figures.top_ups} recruited afterwards for the last open slots); "
               f"{figures.episodes_with_k}/{figures.episodes} episodes with as many "
               f"distinct raters as slots (k={figures.raters}, or more when added); "
               f"{figures.ratings_in_label_studio} ratings in Label Studio "
               f"({figures.gold_ratings} of them gold), {figures.ratings_recorded} recorded by "
               f"the gateway; {figures.surplus} kept apart as surplus, {figures.expired} leases "
               "expired")
    return [
        {"benchmark": f"study: {scenario}, page ready (rate page)", "size": size,
         "seconds": f"{figures.seconds:,.1f}",
         "figures": f"p50 {figures.percentile(figures.page_ready_ms, 0.5):,.0f} ms, "
                    f"p95 {figures.percentile(figures.page_ready_ms, 0.95):,.0f} ms "
                    f"({len(figures.page_ready_ms)} pages)"},
        {"benchmark": f"study: {scenario}, submit (validated and recorded)", "size": size,
         "figures": f"p50 {figures.percentile(figures.submit_ms, 0.5):,.0f} ms, "
                    f"p95 {p95_submit:,.0f} ms ({len(figures.submit_ms)} submissions)",
         "target": f"p95 <= {SUBMIT_TARGET_MS:.0f} ms", "met": p95_submit <= SUBMIT_TARGET_MS},
        {"benchmark": f"study: {scenario}, rating in Label Studio (written behind)",
         "size": size, "seconds": f"{figures.drained_seconds:,.1f}",
         "figures": f"after submit p50 {figures.percentile(figures.saved_after_ms, 0.5):,.0f} ms, "
                    f"p95 {figures.percentile(figures.saved_after_ms, 0.95):,.0f} ms; the last "
                    f"saved {figures.drained_seconds:,.1f} s after the last participant"},
        *([_pace_row(figures, size)] if figures.pace else []),
        *([_dashboard_row(figures, size)] if figures.dashboard else []),
        *_kind_rows(f"study: {scenario}, errors by kind", figures.errors, size),
        *_kind_rows(f"study: {scenario}, busy answers waited out (503 + Retry-After)",
                    figures.busy, size),
        {"benchmark": f"study: {scenario}, outcome", "size": size, "figures": outcome,
         "target": "0 errors, every episode k raters, nothing lost",
         "met": (not figures.errors and figures.episodes_with_k == figures.episodes
                 and figures.ratings_in_label_studio == figures.ratings_recorded
                 == figures.episodes * figures.raters + figures.added_slots
                 + figures.gold_ratings)},
    ]


def counted(kinds: list[str]) -> dict[str, int]:
    """Each kind with how often it happened, the most frequent first."""
    return dict(Counter(kinds).most_common())


def _kind_rows(benchmark: str, kinds: list[str], size: str) -> list[dict[str, Any]]:
    """One row per kind, with its count (one row saying none when there is none)."""
    return [{"benchmark": benchmark, "size": size, "figures": f"{count} x {kind_}"}
            for kind_, count in counted(kinds).items()] or [
        {"benchmark": benchmark, "size": size, "figures": "none"}]


def _pace_row(figures: Figures, size: str) -> dict[str, Any]:
    """What the participants' pace drew, and how those who left in the middle came back."""
    left = "; ".join(f"{count} {how}" for how, count in counted(figures.left).items())
    return {"benchmark": "study: paced, minutes per episode (drawn, at people's pace)",
            "size": size,
            "figures": f"p50 {figures.percentile(figures.episode_minutes, 0.5):,.1f}, "
                       f"p95 {figures.percentile(figures.episode_minutes, 0.95):,.1f} min "
                       f"({len(figures.episode_minutes)} episodes); left in the middle: "
                       f"{left or 'nobody'}"}


def _dashboard_row(figures: Figures, size: str) -> dict[str, Any]:
    """The dashboard's polls during the burst, as a row of the benchmark table."""
    errors = "; ".join(f"{count} x {kind_}"
                       for kind_, count in counted(figures.dashboard_errors).items())
    return {"benchmark": f"study: burst, dashboard figures (read every {POLL_SECONDS:.0f} s)",
            "size": size,
            "figures": f"{len(figures.dashboard_ms)} answered, p50 "
                       f"{figures.percentile(figures.dashboard_ms, 0.5):,.0f} ms, p95 "
                       f"{figures.percentile(figures.dashboard_ms, 0.95):,.0f} ms; "
                       f"{figures.dashboard_with_agreement} with the running agreement; "
                       f"{len(figures.dashboard_errors)} failed" + (f" ({errors})" if errors else ""),
            "target": "every poll answered, the agreement shown",
            "met": not figures.dashboard_errors and figures.dashboard_with_agreement > 0}
