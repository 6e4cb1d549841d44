"""Gold episodes: a qualification round serves nothing else, a main study hides a share of
them among its assignments, and nothing a participant receives tells them apart.

The first tests run on the gateway's database alone (as tests/test_study_leases.py does); the
later ones read references from a CSV or from Label Studio's ground-truth annotations, and
serve participants through the gateway on the session's real Label Studio.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pandas as pd
import pytest
from click.testing import CliRunner
from playwright.sync_api import Browser, expect
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Response as PlaywrightResponse
from sqlalchemy import Engine, event, func, select
from starlette.testclient import TestClient

from browser import CHROMIUM, VIEWPORT, submit
from conftest import results_of
from study_support import (
    BOOT,
    EDITOR,
    SAMPLE_EPISODES,
    Participant,
    answers,
    check_invariants,
    gateway_env,
    make_study,
    prolific_id,
    study_project,
)
from test_postgres import study_database
from test_study import fill, open_rating
from test_study_leases import visitor
from sotopia_ls.cli import main
from sotopia_ls.dimensions import rating_name
from sotopia_ls.errors import StudyError
from sotopia_ls.exporter.tables import WIDE_COLUMNS
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import Client, import_batch, project_task_data
from sotopia_ls.labelstudio.push import task_payload
from sotopia_ls.labelstudio.tasks import EPISODE_ID
from sotopia_ls.labelstudio.tasks import GOLD as GOLD_MARKS
from sotopia_ls.study.outbox.saving import save_all_waiting
from sotopia_ls.study.process import gateway
from sotopia_ls.study.screening.gold import csv_references
from sotopia_ls.study.serving import arrival
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.settings import StudyFile
from sotopia_ls.study.slots import leases
from sotopia_ls.study.store import assignments, episodes, gold, open_store, slots

SECRET = secrets.token_urlsafe(32)
ORDINARY = list(range(1, 41))
GOLD = [101, 102, 103, 104]
SCORES = {"stand-in": 0}  # settle stores whatever scores it is given
QUALIFICATION = {"screen_out_code": "SCR33N", "screen_out_url": "http://127.0.0.1:9/out"}


def on_database(tmp_path: Path, **fields: object) -> tuple[Engine, StudyFile]:
    """A study's database holding the ordinary tasks and the gold ones (with references)."""
    study = make_study(tmp_path, 1, **fields)
    engine = open_store(study.database)
    leases.add_episodes(engine, study.name, {task: {} for task in ORDINARY + GOLD},
                        study.raters_per_episode,
                        references={task: {"believability_1": 7} for task in GOLD})
    return engine, study


def lease(engine: Engine, study: StudyFile, visit: arrival.Visit,
          seconds: float | None = None) -> leases.Assignment | None:
    return leases.lease_for_visit(engine, study.name, visit.id, visit.participant_id,
                                  lease_seconds=seconds or study.lease_seconds,
                                  gold_share=leases.GoldShare.of(study))


def whole_visit(engine: Engine, study: StudyFile) -> list[int]:
    """A participant takes and submits episodes until the visit is over: the tasks rated."""
    visit, rated = visitor(engine, study), []
    while len(rated) < study.episodes_per_participant:
        taken = lease(engine, study, visit)
        if taken is None:
            break
        assert leases.settle(engine, taken, SCORES, study.raters_per_episode).state == "saving"
        rated.append(taken.task_id)
    return rated


def test_gold_episodes_get_no_slots(tmp_path):
    engine, _ = on_database(tmp_path, gold_share=0.2)

    with engine.connect() as conn:
        slotted = set(conn.execute(select(slots.c.task_id)).scalars())
    assert slotted == set(ORDINARY)


def test_a_qualification_round_serves_only_gold_each_to_any_number_of_participants(tmp_path):
    engine, study = on_database(tmp_path, qualification=QUALIFICATION,
                                episodes_per_participant=3, raters_per_episode=2)

    visits = [whole_visit(engine, study) for _ in range(6)]

    assert all(len(rated) == 3 and len(set(rated)) == 3 and set(rated) <= set(GOLD)
               for rated in visits)
    served = Counter(task for rated in visits for task in rated)
    # Six participants, three each, over four gold episodes: each beyond k = 2, evenly.
    assert sum(served.values()) == 18 and min(served.values()) > study.raters_per_episode
    assert max(served.values()) - min(served.values()) <= 2
    check_invariants(engine, study)


def test_a_qualification_round_with_fewer_gold_episodes_than_m_gives_what_exists(tmp_path):
    engine, study = on_database(tmp_path, qualification=QUALIFICATION,
                                episodes_per_participant=6)

    assert sorted(whole_visit(engine, study)) == GOLD


def test_hidden_gold_at_20_percent_is_one_in_five_for_every_participant(tmp_path):
    engine, study = on_database(tmp_path, gold_share=0.2, episodes_per_participant=5)

    visits = [whole_visit(engine, study) for _ in range(12)]

    assert [sum(task in GOLD for task in rated) for rated in visits] == [1] * 12
    positions = Counter(next(i for i, task in enumerate(rated) if task in GOLD)
                        for rated in visits)
    assert len(positions) > 1, "the gold episode is always at the same position"
    check_invariants(engine, study)


def test_a_share_between_whole_numbers_is_met_on_average_and_within_one_per_visit(tmp_path):
    # m = 4 and 30%: 1.2 gold a visit, so 1 or 2, 2 about one visit in five.
    share = leases.GoldShare(0.3, 4)
    counts = [len(share.positions(visit, arrival.now())) for visit in range(2000)]

    assert set(counts) == {1, 2}
    assert sum(counts) / (4 * len(counts)) == pytest.approx(0.3, abs=0.015)


def test_every_request_of_a_visit_finds_the_same_gold_positions(tmp_path):
    share, arrived = leases.GoldShare(0.4, 10), arrival.now()

    drawn = share.positions(7, arrived)

    assert len(drawn) == 4 and share.positions(7, arrived) == drawn
    assert len({share.positions(visit, arrived) for visit in range(50)}) > 10


def test_a_participant_who_had_every_gold_episode_gets_ordinary_ones(tmp_path):
    engine, study = on_database(tmp_path, gold_share=0.5, episodes_per_participant=10)
    visit = visitor(engine, study)
    rated = []
    for _ in range(10):
        taken = lease(engine, study, visit)
        leases.settle(engine, taken, SCORES, study.raters_per_episode)
        rated.append(taken.task_id)

    assert len(set(rated)) == 10 and sorted(set(rated) & set(GOLD)) == GOLD


def test_gold_is_work_for_an_arrival_until_they_had_every_gold_episode(tmp_path):
    engine, study = on_database(tmp_path, qualification=QUALIFICATION,
                                episodes_per_participant=len(GOLD) + 1)
    visit = visitor(engine, study)
    for _ in GOLD:
        assert leases.has_work(engine, study.name, visit.id, visit.participant_id,
                               leases.GoldShare.of(study))
        leases.settle(engine, lease(engine, study, visit), SCORES, study.raters_per_episode)

    # A qualification round serves gold only: with every one had, nothing is left.
    assert not leases.has_work(engine, study.name, visit.id, visit.participant_id,
                               leases.GoldShare.of(study))
    assert lease(engine, study, visit) is None


def test_a_gold_lease_is_renewed_never_expires_and_records_one_submission(tmp_path):
    engine, study = on_database(tmp_path, qualification=QUALIFICATION)
    visit = visitor(engine, study)
    held = lease(engine, study, visit, seconds=0.1)
    time.sleep(0.2)

    assert lease(engine, study, visit, seconds=0.1).key == held.key
    first = leases.settle(engine, held, SCORES, study.raters_per_episode)
    again = leases.settle(engine, held, {"other": 1}, study.raters_per_episode)

    assert (first.state, first.scores) == ("saving", SCORES) and again == first
    assert arrival.load_visit(engine, study.name, visit.id).rated == 1
    with engine.connect() as conn:
        assert conn.execute(select(assignments.c.state)).scalars().all() == ["saving"]


def statements_of_each_lease(engine: Engine, study: StudyFile,
                             visit: arrival.Visit) -> list[tuple[bool, list[str]]]:
    """The visit takes and submits its m episodes: for each lease, whether it was gold and
    the SQL statements taking it ran."""
    ran: list[str] = []
    event.listen(engine, "before_cursor_execute",
                 lambda _c, _cur, statement, *_: ran.append(" ".join(statement.split())))
    taken = []
    for _ in range(study.episodes_per_participant):
        ran.clear()
        held = lease(engine, study, visit)
        taken.append((held.task_id in GOLD, list(ran)))
        leases.settle(engine, held, SCORES, study.raters_per_episode)
    return taken


def test_a_gold_lease_reads_what_an_ordinary_one_reads_and_only_takes_no_slot(tmp_path):
    engine, study = on_database(tmp_path, gold_share=0.5, episodes_per_participant=4)

    taken = statements_of_each_lease(engine, study, visitor(engine, study))

    gold_turn = next(statements for is_gold, statements in taken if is_gold)
    ordinary_turn = next(statements for is_gold, statements in taken if not is_gold)
    assert Counter(gold_turn) <= Counter(ordinary_turn)
    only_ordinary = Counter(ordinary_turn) - Counter(gold_turn)
    assert only_ordinary and all("slots" in statement for statement in only_ordinary)


def test_a_task_served_as_an_ordinary_episode_stays_ordinary_with_one_warning(tmp_path, caplog):
    engine, study = on_database(tmp_path, gold_share=0.2)

    # Ground truth marked later on tasks 1 and 2, already served: the gateway starts all the same.
    added = leases.add_episodes(engine, study.name, {105: {}}, study.raters_per_episode,
                                references={1: {"believability_1": 7}, 2: {"believability_1": 6},
                                            105: {"believability_1": 5}})

    with engine.connect() as conn:
        golden = set(conn.execute(select(gold.c.task_id)).scalars())
        slotted = set(conn.execute(select(slots.c.task_id)).scalars())
    assert golden == {*GOLD, 105} and added.gold == 1
    assert {1, 2} <= slotted and 105 not in slotted
    warned = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert warned == [("study pilot: task(s) 1, 2 have a reference but were served as ordinary "
                       "episodes first, so they stay ordinary, never gold (to make them gold, "
                       "import them again as new tasks)")]


@pytest.mark.postgres
def test_two_gateways_starting_at_once_on_postgresql_record_every_episode_once(tmp_path):
    study = make_study(tmp_path, 1, name=f"race{secrets.token_hex(4)}", gold_share=0.2)
    shown = {task: {"n": task} for task in ORDINARY + GOLD}
    references = {task: {"believability_1": 7} for task in GOLD}
    with study_database() as url:
        engines = [open_store(url) for _ in range(2)]  # two processes: a pool each

        # Many starts at once, as when a load balancer's gateways all start together.
        with ThreadPoolExecutor(max_workers=8) as pool:
            started = list(pool.map(lambda engine: leases.add_episodes(
                engine, study.name, shown, study.raters_per_episode, references), engines * 4))

        assert len(started) == 8  # none raised an IntegrityError
        with engines[0].connect() as conn:
            golden = sorted(conn.execute(select(gold.c.task_id)
                                         .where(gold.c.study == study.name)).scalars())
            counted = conn.execute(select(func.count()).select_from(slots)
                                   .where(slots.c.study == study.name)).scalar_one()
            recorded = conn.execute(select(func.count()).select_from(episodes)
                                    .where(episodes.c.study == study.name)).scalar_one()
        assert golden == GOLD and recorded == len(shown)
        assert counted == len(ORDINARY) * study.raters_per_episode
        for engine in engines:
            engine.dispose()


def test_a_reference_read_again_replaces_the_one_recorded(tmp_path):
    engine, study = on_database(tmp_path, gold_share=0.2)

    leases.add_episodes(engine, study.name, {}, study.raters_per_episode,
                        references={101: {"believability_1": 3}})

    with engine.connect() as conn:
        stored = dict(conn.execute(select(gold.c.task_id, gold.c.reference)).all())
    assert stored[101] == {"believability_1": 3} and stored[102] == {"believability_1": 7}


# --- references, read at the gateway's start ------------------------------------------------


def reference_of(seed: int) -> dict[str, int]:
    """A valid reference: the ratings of ``answers(seed)``."""
    return {rating_name(key, agent): score for agent, pairs in answers(seed).items()
            for key, (_, score) in pairs.items()}


def write_references(path: Path, rows: list[dict[str, object]]) -> Path:
    """A CSV in the oTree layout: the export's wide columns, rationales left empty."""
    table = pd.DataFrame([{column: "" for column in WIDE_COLUMNS} | row for row in rows],
                         columns=list(WIDE_COLUMNS))
    table.to_csv(path, index=False)
    return path


class GoldStudy:
    """A study on a fresh project of ``episodes`` sample episodes, its first ``golden`` ones
    gold, with its gateway app in this process."""

    def __init__(self, client: Client, tmp: Path, *, episodes: int, golden: int,
                 **fields: object) -> None:
        self.client = client
        self.project = study_project(client, f"test_gold_{prolific_id()[:8]}", episodes)
        data = project_task_data(client, self.project)
        self.episode_ids = {task: d[EPISODE_ID] for task, d in sorted(data.items())}
        self.gold = {task: reference_of(seed)
                     for seed, task in enumerate(sorted(data)[:golden], start=1)}
        references = write_references(tmp / "references.csv", [
            {"pk": self.episode_ids[task], **reference} for task, reference in self.gold.items()])
        self.settings = make_study(tmp, self.project, gold_references=str(references), **fields)
        self.engine = open_store(self.settings.database)
        self.app = create_app(prepare_gateway(self.settings, client, self.engine),
                              secret=SECRET, editor=EDITOR, https_only=False)

    def participant(self) -> Recorded:
        return Recorded(TestClient(self.app, base_url="http://127.0.0.1"))

    def gold_keys(self) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.execute(select(assignments.c.key).where(
                assignments.c.task_id.in_(list(self.gold)))).scalars())


@dataclass
class Recorded(Participant):
    """A participant whose client keeps every response it receives, redirects included."""

    def __post_init__(self) -> None:
        self.received: list[httpx.Response] = []
        self.pages: list[tuple[str, httpx.Response]] = []  # (assignment key, its rate page)
        self.http.event_hooks = {"response": [self._keep]}

    def _keep(self, response: httpx.Response) -> None:
        response.read()
        self.received.append(response)

    def open_episode(self) -> httpx.Response:
        page = super().open_episode()
        if self.boot is not None:
            self.pages.append((self.boot["assignment"], page))
        return page


def test_references_from_a_csv_in_the_otree_layout_make_their_episodes_gold(
        ls_client, tmp_path):
    study = GoldStudy(ls_client, tmp_path, episodes=4, golden=2, gold_share=0.2)

    with study.engine.connect() as conn:
        stored = dict(conn.execute(select(gold.c.task_id, gold.c.reference)).all())
        slotted = set(conn.execute(select(slots.c.task_id)).scalars())
    assert stored == study.gold
    assert slotted == set(study.episode_ids) - set(study.gold)


def test_references_from_ground_truth_annotations_when_the_study_names_no_csv(
        ls_client, tmp_path):
    project = study_project(ls_client, f"test_gold_{prolific_id()[:8]}", episodes=3)
    first, second, third = sorted(project_task_data(ls_client, project))
    expert = ls_client.users.create(username=f"expert-{prolific_id()[:6]}",
                                    email=f"expert-{prolific_id()[:6]}@gold.test").id
    for task, seed, marked in ((first, 4, True), (second, 5, False)):
        ls_client.annotations.create(id=task, result=results_of(answers(seed)),
                                     completed_by=expert, ground_truth=marked)
    study = make_study(tmp_path, project, qualification=QUALIFICATION)
    engine = open_store(study.database)

    prepare_gateway(study, ls_client, engine)

    with engine.connect() as conn:
        assert dict(conn.execute(select(gold.c.task_id, gold.c.reference)).all()) == {
            first: reference_of(4)}


def test_a_ground_truth_rating_out_of_range_is_refused_naming_task_annotation_and_field(
        ls_client, tmp_path):
    project = study_project(ls_client, f"test_gold_{prolific_id()[:8]}", episodes=1)
    (task,) = project_task_data(ls_client, project)
    result = [r if r["from_name"] != "secret_2" else r | {"value": {"choices": ["5"]}}
              for r in results_of(answers(1))]
    made = ls_client.annotations.create(id=task, result=result, ground_truth=True).id
    study = make_study(tmp_path, project, gold_share=0.2)

    with pytest.raises(StudyError) as refused:
        prepare_gateway(study, ls_client, open_store(study.database))

    assert str(refused.value) == (f"project {project} [task {task} annotation {made}]: "
                                  "secret_2: secret score 5 is outside -10 to 0")


def test_a_study_that_uses_gold_without_any_reference_is_refused_at_start_with_the_fix(
        ls_client, tmp_path):
    project = study_project(ls_client, f"test_gold_{prolific_id()[:8]}", episodes=1)
    study = make_study(tmp_path, project, gold_share=0.2)

    with pytest.raises(StudyError, match=(
            rf"study pilot serves gold episodes but project {project} has no ground-truth "
            r"annotation: give the reference ratings in a CSV .* as the study's "
            r"gold_references, or mark an annotation .* as ground truth")):
        prepare_gateway(study, ls_client, open_store(study.database))


TASKS_BY_EPISODE = {"ep-one": 1, "ep-two": 2}
GOOD = {"pk": "ep-one", **reference_of(1)}


@pytest.mark.parametrize("rows, where, field, reason", [
    ([GOOD | {"believability_2": "11"}], "row 2", "believability_2",
     "believability score 11 is outside 0 to 10"),
    ([GOOD, GOOD | {"pk": "ep-two", "secret_1": "3"}], "row 3", "secret_1",
     "secret score 3 is outside -10 to 0"),
    ([GOOD | {"goal_1": ""}], "row 2", "goal_1", "missing rating"),
    ([GOOD | {"knowledge_2": "3.5"}], "row 2", "knowledge_2", "not an integer: '3.5'"),
    ([GOOD | {"pk": "01H-NOT-IMPORTED"}], "row 2", "pk",
     "episode '01H-NOT-IMPORTED' is no task of project 7: import it first, or drop its row"),
    ([GOOD, GOOD | {"goal_1": str(10 - GOOD["goal_1"])}], "row 3", "goal_1",
     f"{10 - GOOD['goal_1']} where row 2 has {GOOD['goal_1']} for the same episode"),
])
def test_a_bad_reference_csv_is_refused_in_one_line_naming_file_row_and_field(
        tmp_path, rows, where, field, reason):
    path = write_references(tmp_path / "references.csv", rows)

    with pytest.raises(StudyError) as refused:
        csv_references(path, TASKS_BY_EPISODE, project=7)

    message = str(refused.value)
    assert message.startswith(f"{path} [{where}]: {field}: {reason}")
    assert "\n" not in message


def test_a_reference_csv_without_a_rating_column_is_refused_naming_the_column(tmp_path):
    path = tmp_path / "references.csv"
    pd.DataFrame([GOOD]).drop(columns=["goal_2"]).to_csv(path, index=False)

    with pytest.raises(StudyError, match=rf"^{re.escape(str(path))} \[row 1\]: goal_2: no such "
                                         r"column"):
        csv_references(path, TASKS_BY_EPISODE, project=7)


def test_the_same_reference_written_twice_is_one_reference(tmp_path):
    path = write_references(tmp_path / "references.csv", [GOOD, GOOD])

    assert csv_references(path, TASKS_BY_EPISODE, project=7) == {1: reference_of(1)}


def test_study_sync_with_a_bad_reference_csv_exits_with_one_line_and_no_traceback(
        ls_client, label_studio, tmp_path):
    study = GoldStudy(ls_client, tmp_path, episodes=2, golden=1, gold_share=0.2)
    first = study.episode_ids[min(study.gold)]
    write_references(Path(study.settings.gold_references),
                     [{"pk": first, **reference_of(1), "goal_2": "12"}])
    study_file = tmp_path / "study.json"
    study_file.write_text(study.settings.model_dump_json())

    result = CliRunner().invoke(main, ["study", "sync", "--study", str(study_file)], env={
        "LABEL_STUDIO_URL": label_studio.url,
        "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key})

    assert result.exit_code != 0
    assert (f"{study.settings.gold_references} [row 2]: goal_2: goal score 12 is outside 0 to 10"
            in result.output)
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_study_sync_counts_new_ordinary_episodes_and_new_gold_episodes_apart(
        ls_client, label_studio, tmp_path):
    study = GoldStudy(ls_client, tmp_path, episodes=2, golden=1, gold_share=0.2)
    # The researcher imports two more episodes and gives the first of them a reference.
    more = load_episodes(SAMPLE_EPISODES).episodes[2:4]
    import_batch(ls_client, study.project, [task_payload(e, with_predictions=False) for e in more])
    data = project_task_data(ls_client, study.project)
    new_gold = data[min(set(data) - set(study.episode_ids))][EPISODE_ID]
    write_references(Path(study.settings.gold_references), [
        {"pk": study.episode_ids[task], **reference} for task, reference in study.gold.items()]
        + [{"pk": new_gold, **reference_of(9)}])
    study_file = tmp_path / "study.json"
    study_file.write_text(study.settings.model_dump_json())

    synced = CliRunner().invoke(main, ["study", "sync", "--study", str(study_file)], env={
        "LABEL_STUDIO_URL": label_studio.url,
        "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key})

    assert synced.exit_code == 0, synced.output
    assert synced.output == ("study pilot: 1 new episode(s) with 2 rating slot(s), 1 new gold "
                             "episode(s)\n")


def test_a_gateway_started_again_asks_nothing_about_gold_episodes_already_marked(
        ls_client, label_studio, tmp_path):
    study = GoldStudy(ls_client, tmp_path, episodes=3, golden=2, gold_share=0.2)
    sent: list[str] = []
    counted = Client(base_url=label_studio.url, api_key=label_studio.credentials.api_key,
                     httpx_client=httpx.Client(timeout=60, event_hooks={
                         "request": [lambda request: sent.append(
                             f"{request.method} {request.url.path}")]}))

    prepare_gateway(study.settings, counted, study.engine)

    # the labeling config and the tasks, no task's meta read or written again
    assert sent == [f"GET /api/projects/{study.project}/", "GET /api/tasks/"]
    marks = {task: (ls_client.tasks.get(id=str(task)).meta or {}).get(GOLD_MARKS)
             for task in study.episode_ids}
    assert marks == {task: {study.settings.name: True} if task in study.gold else None
                     for task in study.episode_ids}


# --- what participants receive -------------------------------------------------------------

BOOT_OR_COUNT = re.compile(
    r'(<script type="application/json" id="boot">).*?(</script>)|\d+', re.DOTALL)
EDITOR_FILES = "/static/editor/"  # the address of Label Studio's editor's files
# Headers that differ between any two responses, gold or not.
VARYING = {"date", "content-length", "set-cookie"}


def shape(value: object) -> object:
    """What a value looks like, not what it holds: keys, kinds, and the form of an id."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return sorted({repr(shape(item)) for item in value})
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{32}", value):
        return "key"
    return type(value).__name__


def as_received(response: httpx.Response) -> tuple[object, ...]:
    """A response with everything that differs between any two episodes left out: status,
    address, header names and values (but the varying ones), the page with its boot data and
    numbers blanked, and the shape of its boot data."""
    found = BOOT.search(response.text)
    headers = tuple(sorted((name, value) for name, value in response.headers.items()
                           if name not in VARYING))
    return (response.status_code, response.request.method, BOOT_OR_COUNT.sub(
        lambda match: "".join(part or "" for part in match.groups()), response.text),
        re.sub(r"\d+", "N", str(response.url)), headers,
        json.dumps(shape(json.loads(found.group(1))), sort_keys=True) if found else None)


def leaks(body: str, references: dict[int, dict[str, int]]) -> list[str]:
    """Anything in ``body`` that would tell gold apart: the word, or a reference's rating
    (the instructions speak of references: only the JSON form of one would be a leak)."""
    found = [word for word in ("gold", "ground_truth") if word in body.lower()]
    return found + [f"{name}={score}" for reference in references.values()
                    for name, score in reference.items()
                    if re.search(rf'"{name}"\s*:\s*{score}\b', body)]


@pytest.fixture(scope="module")
def crowd_at_20_percent(ls_client, tmp_path_factory) -> tuple[GoldStudy, list[Recorded]]:
    """Twenty participants, five episodes each, 20% gold: three gold episodes among twelve
    ordinary ones rated by ten participants each."""
    study = GoldStudy(ls_client, tmp_path_factory.mktemp("crowd"), episodes=15, golden=3,
                      gold_share=0.2, episodes_per_participant=5, raters_per_episode=10)
    people = [study.participant() for _ in range(20)]
    for seed, someone in enumerate(people):
        someone.begin()
        for turn in range(5):
            assert someone.rate(seed * 10 + turn).status_code == 200
            someone.open_episode()
    return study, people


def test_gold_at_20_percent_reaches_every_participant_at_that_rate(crowd_at_20_percent):
    study, people = crowd_at_20_percent
    gold_keys = study.gold_keys()

    shares = [sum(key in gold_keys for key, _ in someone.pages[:5]) / 5 for someone in people]

    assert shares == [0.2] * len(people)
    with study.engine.connect() as conn:
        states = Counter(conn.execute(select(assignments.c.state)).scalars())
    assert states == {"saving": 100}
    saved = save_all_waiting(study.engine, study.client, study.settings.name)
    assert saved == 100
    gold_annotations = [a for task in study.gold for a in study.client.annotations.list(id=task)]
    assert len(gold_annotations) == 20  # any number of raters: far beyond k on some
    check_invariants(study.engine, study.settings)


def test_nothing_a_participant_received_tells_a_gold_episode_from_another(crowd_at_20_percent):
    study, people = crowd_at_20_percent
    gold_keys = study.gold_keys()
    pages: dict[bool, set[tuple[object, ...]]] = {True: set(), False: set()}
    for someone in people:
        for key, page in someone.pages[:5]:
            pages[key in gold_keys].add(as_received(page))
        for response in someone.received:
            assert not leaks(response.text, study.gold), response.url
            assert not leaks(json.dumps(dict(response.headers)), study.gold), response.url

    assert len(pages[True]) == 1 and pages[True] == pages[False]
    # What follows a rating's submission does not depend on what was rated either.
    answers_to_submits = {as_received(r) for someone in people for r in someone.received
                          if r.request.method == "POST" and r.url.path.endswith("/submit")}
    assert len(answers_to_submits) == 2  # "the next episode" and, after the fifth, "done"


def test_a_qualification_round_serves_only_gold_episodes_through_the_gateway(
        ls_client, tmp_path):
    study = GoldStudy(ls_client, tmp_path, episodes=4, golden=2, qualification=QUALIFICATION,
                      episodes_per_participant=2, raters_per_episode=1)
    people = [study.participant() for _ in range(3)]

    for seed, someone in enumerate(people):
        someone.begin()
        assert someone.rate(seed).status_code == 200
        someone.open_episode()
        assert someone.rate(seed + 1).status_code == 200

    assert {key for someone in people for key, _ in someone.pages} == study.gold_keys()
    assert save_all_waiting(study.engine, study.client, study.settings.name) == 6
    for task in study.gold:  # k is 1, yet each gold episode has all three raters
        assert len(study.client.annotations.list(id=task)) == 3
    for task in set(study.episode_ids) - set(study.gold):
        assert study.client.annotations.list(id=task) == []


# --- what a browser receives ---------------------------------------------------------------


@dataclass
class Seen:
    """One response as Chromium received it."""

    method: str
    url: str
    status: int
    headers: dict[str, str]
    body: str


def seen_in_chromium(browser: Browser, url: str, chosen: list[dict]) -> tuple[list[Seen], list]:
    """A participant rates one episode per entry of ``chosen``: every response the browser
    received, and where each rate page's responses begin (its assignment key and index)."""
    page = browser.new_context(viewport=VIEWPORT).new_page()
    received: list[Seen] = []

    def keep(response: PlaywrightResponse) -> None:
        try:  # Label Studio's editor (megabytes, the same for all) is never read: left out
            body = ("" if EDITOR_FILES in response.url
                    else response.body().decode("utf-8", "replace"))
        except PlaywrightError:  # a redirect has no body to read
            body = ""
        received.append(Seen(response.request.method, response.url, response.status,
                             response.all_headers(), body))

    page.on("response", keep)
    page.goto(f"{url}/s/pilot?PROLIFIC_PID={prolific_id()}&STUDY_ID={prolific_id()}"
              f"&SESSION_ID={prolific_id()}")
    page.get_by_role("button", name=re.compile("start rating")).click()
    starts = []
    for number, answers_given in enumerate(chosen, 1):
        # The address stays /rate from one episode to the next: the page's own counter says
        # the next one has loaded.
        expect(page.get_by_text(f"Episode {number} of {len(chosen)}")).to_be_visible()
        open_rating(page)
        # Every gateway response of the page is in once it has loaded and the editor shows:
        # what comes later is the editor's own static files, left out of the comparison.
        # ("networkidle" is not waited for: Playwright calls it unreliable, and on CI it once
        # never came.)
        page.wait_for_load_state("load")
        key = page.evaluate("JSON.parse(document.getElementById('boot').textContent)")
        starts.append((key["assignment"], next(i for i in range(len(received) - 1, -1, -1)
                                               if received[i].url.endswith("/s/pilot/rate"))))
        fill(page, answers_given)
        submit(page)
    page.wait_for_url(re.compile(r"/s/pilot/done$"))
    page.context.close()
    return received, starts


def page_of(received: list[Seen], start: int) -> list[Seen]:
    """A rate page and what it brought from the gateway (not its static files, which the
    browser may take from its cache), up to its submission."""
    end = next(i for i in range(start, len(received))
               if received[i].url.endswith("/s/pilot/submit"))
    return [seen for seen in received[start:end] if "/static/" not in seen.url]


def as_seen(responses: list[Seen]) -> list[tuple[object, ...]]:
    """What a rate page brought, with what differs between any two episodes left out."""
    kept = []
    for seen in responses:
        found = BOOT.search(seen.body)
        kept.append((seen.method, re.sub(r"\d+", "N", seen.url), seen.status,
                     sorted((k, v) for k, v in seen.headers.items() if k not in VARYING),
                     BOOT_OR_COUNT.sub(lambda m: "".join(p or "" for p in m.groups()), seen.body),
                     json.dumps(shape(json.loads(found.group(1))), sort_keys=True)
                     if found else None))
    return kept


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Chromium is not installed at {CHROMIUM}")
def test_every_response_chromium_received_is_the_same_for_a_gold_and_an_ordinary_episode(
        ls_client, label_studio, browser, tmp_path):
    study = GoldStudy(ls_client, tmp_path, episodes=3, golden=1, gold_share=0.5,
                      episodes_per_participant=2)
    study_file = tmp_path / "study.json"
    study_file.write_text(study.settings.model_dump_json())
    env = gateway_env(label_studio.url, label_studio.credentials.api_key, SECRET)
    with gateway(study_file, env) as running:
        received, starts = seen_in_chromium(browser, running.url, [answers(1), answers(2)])

    gold_keys = study.gold_keys()
    assert [key in gold_keys for key, _ in starts].count(True) == 1
    pages = {key in gold_keys: as_seen(page_of(received, start)) for key, start in starts}
    # Each rate page and whatever it brought from the gateway, up to its submission, alike.
    assert pages[True] == pages[False] and pages[True][0][1].endswith("/s/pilot/rate")
    submits = [seen for seen in received if seen.url.endswith("/s/pilot/submit")]
    assert [(s.status, sorted(s.headers.keys() - VARYING)) for s in submits] == [
        (submits[0].status, sorted(submits[0].headers.keys() - VARYING))] * 2
    for seen in received:
        if EDITOR_FILES not in seen.url:  # Label Studio's own editor, the same for all
            assert not leaks(seen.body, study.gold), seen.url
            assert not leaks(json.dumps(seen.headers), study.gold), seen.url
