"""Who rates which episode: k distinct raters per episode, leases that expire, work never lost.

These run on the gateway's database alone (SQLite in a temporary folder; the last ones also on
PostgreSQL), with participants arriving as the gateway records them.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, update

from conftest import flat_of, results_of
from study_support import check_invariants, make_study, prolific_id
from sotopia_ls.study.serving import arrival
from sotopia_ls.study.serving.arrival import ProlificParameters
from sotopia_ls.study.settings import StudyFile, without_password
from sotopia_ls.study.slots import leases
from sotopia_ls.study.store import assignments, open_store, slots

POSTGRES = Path(__file__).resolve().parents[1] / "scripts" / "postgres"
TASKS = [11, 12, 13]
SCORES = {"stand-in": 0}  # settle stores whatever scores it is given


def setup(url: str, tmp_path: Path, **fields: object) -> tuple[Engine, StudyFile]:
    # The study file never holds a password; the gateway has the whole URL from elsewhere.
    study = make_study(tmp_path, 1, database=without_password(url), **fields)
    engine = open_store(url)
    leases.add_episodes(engine, study.name, {task: {} for task in TASKS}, study.raters_per_episode)
    return engine, study


@pytest.fixture
def sqlite_study(tmp_path: Path) -> tuple[Engine, StudyFile]:
    return setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path)


def visitor(engine: Engine, study: StudyFile) -> arrival.Visit:
    """A participant arriving from Prolific."""
    parameters = ProlificParameters(PROLIFIC_PID=prolific_id(), STUDY_ID="a" * 24,
                                    SESSION_ID=prolific_id())
    return arrival.arrive(engine, study.name, parameters)


def lease(engine: Engine, study: StudyFile, visit: arrival.Visit,
          seconds: float | None = None) -> leases.Assignment | None:
    return leases.lease_for_visit(engine, study.name, visit.id, visit.participant_id,
                                  lease_seconds=seconds or study.lease_seconds)


def rate(engine: Engine, study: StudyFile, visit: arrival.Visit) -> leases.Assignment | None:
    """The visitor takes an episode and submits it at once."""
    taken = lease(engine, study, visit)
    return leases.settle(engine, taken, SCORES, study.raters_per_episode) if taken else None


def raters(engine: Engine) -> Counter[int]:
    with engine.connect() as conn:
        return Counter(conn.execute(select(assignments.c.task_id)
                                    .where(assignments.c.state == "saving")).scalars())


def test_each_episode_gets_exactly_k_distinct_raters_then_nobody_else(sqlite_study):
    engine, study = sqlite_study
    done = [rate(engine, study, visitor(engine, study)) for _ in range(len(TASKS) * 2)]

    assert all(a is not None and a.state == "saving" for a in done)
    assert raters(engine) == {task: 2 for task in TASKS}
    assert rate(engine, study, visitor(engine, study)) is None
    check_invariants(engine, study)


def work_for(engine: Engine, study: StudyFile, visit: arrival.Visit) -> bool:
    return leases.has_work(engine, study.name, visit.id, visit.participant_id)


def test_whether_an_arrival_has_work_is_read_without_taking_a_slot(sqlite_study):
    engine, study = sqlite_study
    latecomer = visitor(engine, study)
    assert work_for(engine, study, latecomer)
    with engine.connect() as conn:
        assert conn.execute(select(assignments)).first() is None  # nothing leased by asking
    holder = visitor(engine, study)
    held = lease(engine, study, holder)
    for _ in range(len(TASKS) * 2 - 1):
        rate(engine, study, visitor(engine, study))

    assert not work_for(engine, study, latecomer)  # the study is full
    assert work_for(engine, study, holder)  # the last lease's holder goes on to rate
    leases.settle(engine, held, SCORES, study.raters_per_episode)
    assert not work_for(engine, study, holder)


def test_the_next_participant_completes_the_episode_that_already_has_a_rater(sqlite_study):
    engine, study = sqlite_study
    first = lease(engine, study, visitor(engine, study))
    second = lease(engine, study, visitor(engine, study))
    third = lease(engine, study, visitor(engine, study))

    assert second.task_id == first.task_id
    assert third.task_id != first.task_id


def test_a_participant_never_gets_an_episode_twice(sqlite_study):
    engine, study = sqlite_study
    visit = visitor(engine, study)
    rated = [rate(engine, study, visit) for _ in TASKS]

    assert sorted(a.task_id for a in rated) == TASKS
    assert rate(engine, study, visit) is None


def test_a_returning_participant_gets_the_same_episode_back(sqlite_study):
    engine, study = sqlite_study
    visit = visitor(engine, study)
    first = lease(engine, study, visit)

    assert lease(engine, study, visit).key == first.key


def test_an_expired_lease_frees_its_slot_for_someone_else(sqlite_study):
    engine, study = sqlite_study
    k = study.raters_per_episode
    holders = [visitor(engine, study) for _ in range(k)]
    held = [lease(engine, study, v, seconds=0.2) for v in holders]
    assert {a.task_id for a in held} == {held[0].task_id}
    time.sleep(0.3)

    newcomer = lease(engine, study, visitor(engine, study))

    assert newcomer.task_id == held[0].task_id
    with engine.connect() as conn:
        states = dict(conn.execute(select(assignments.c.id, assignments.c.state)).all())
    assert sorted(states[a.id] for a in held) == ["expired", "leased"]


def test_a_late_submission_counts_when_its_slot_is_still_free(sqlite_study):
    engine, study = sqlite_study
    visit = visitor(engine, study)
    held = lease(engine, study, visit, seconds=0.1)
    time.sleep(0.2)

    settled = leases.settle(engine, held, SCORES, study.raters_per_episode)

    assert (settled.state, settled.late) == ("saving", True)
    check_invariants(engine, study)


def test_a_late_submission_whose_slot_was_taken_is_kept_as_surplus_not_dropped(sqlite_study):
    engine, study = sqlite_study
    k = study.raters_per_episode
    late_ones = [lease(engine, study, visitor(engine, study), seconds=0.1) for _ in range(k)]
    time.sleep(0.2)
    for _ in range(k):
        rate(engine, study, visitor(engine, study))  # both slots go to newcomers, who submit

    settled = [leases.settle(engine, a, SCORES, k) for a in late_ones]

    assert [(a.state, a.late, a.scores) for a in settled] == [("surplus", True, SCORES)] * k
    assert raters(engine)[late_ones[0].task_id] == k
    check_invariants(engine, study)


def test_submitting_twice_records_once(sqlite_study):
    engine, study = sqlite_study
    held = lease(engine, study, visitor(engine, study))
    first = leases.settle(engine, held, SCORES, study.raters_per_episode)
    again = leases.settle(engine, held, {"other": 1}, study.raters_per_episode)

    assert again == first
    with engine.connect() as conn:
        assert conn.execute(select(slots.c.state).where(slots.c.assignment_id == held.id)
                            ).scalars().all() == ["done"]


def a_rating_stored_by_an_earlier_release_is_read_as_its_scores(url: str, tmp_path: Path,
                                                                 **fields: object) -> None:
    engine, study = setup(url, tmp_path, **fields)
    held = lease(engine, study, visitor(engine, study))
    answers = {agent: {"goal": ("met most of it", 7)} for agent in (1, 2)}
    leases.settle(engine, held, SCORES, study.raters_per_episode)
    with engine.begin() as conn:  # an earlier release stored Label Studio's results
        conn.execute(update(assignments).where(assignments.c.id == held.id)
                     .values(results=results_of(answers)))

    reopened = open_store(url)  # the gateway started again by this release

    assert leases.load(reopened, held.id).scores == flat_of(answers)
    assert leases.load(open_store(url), held.id).scores == flat_of(answers)  # and once more
    reopened.dispose()


def test_a_rating_stored_by_an_earlier_release_is_read_as_its_scores(tmp_path):
    a_rating_stored_by_an_earlier_release_is_read_as_its_scores(
        f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path)


def crowd(engine: Engine, study: StudyFile, people: int) -> list[leases.Assignment | None]:
    """``people`` participants arriving at once, each rating everything they are given."""

    def one(_: int) -> list[leases.Assignment | None]:
        visit = visitor(engine, study)
        return [rate(engine, study, visit) for _ in range(study.episodes_per_participant)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        return [a for done in pool.map(one, range(people)) for a in done]


def test_a_crowd_arriving_at_once_fills_every_episode_exactly_k_times(sqlite_study):
    engine, study = sqlite_study
    done = crowd(engine, study, people=10)

    assert sum(a is not None for a in done) == len(TASKS) * study.raters_per_episode
    assert raters(engine) == {task: study.raters_per_episode for task in TASKS}
    check_invariants(engine, study)


@pytest.mark.postgres
def test_on_postgresql_gateways_sharing_the_database_never_give_a_slot_twice(tmp_path):
    started = subprocess.run([str(POSTGRES), "start"], capture_output=True, text=True, check=True)
    cluster = Path(started.stdout.strip()).parent
    try:
        lines = (cluster / "label-studio.env").read_text().splitlines()
        env = dict(line.removeprefix("export ").split("=", 1) for line in lines if "=" in line)
        url = (f"postgresql://{env['POSTGRE_USER']}:{env['POSTGRE_PASSWORD']}@"
               f"{env['POSTGRE_HOST']}:{env['POSTGRE_PORT']}/{env['POSTGRE_NAME']}")
        engine, study = setup(url, tmp_path)
        # Two engines stand for two gateway processes: separate pools, one database.
        other = open_store(url)
        with ThreadPoolExecutor(max_workers=2) as pool:
            halves = list(pool.map(lambda e: crowd(e, study, people=8), (engine, other)))

        assert sum(a is not None for half in halves for a in half) == 6
        assert raters(engine) == {task: study.raters_per_episode for task in TASKS}
        check_invariants(engine, study)
        engine.dispose()
        other.dispose()
        a_rating_stored_by_an_earlier_release_is_read_as_its_scores(url, tmp_path, name="later")
    finally:
        subprocess.run([str(POSTGRES), "stop", str(cluster)], check=False)
