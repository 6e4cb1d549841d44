"""A lab that outgrows SQLite runs Label Studio on PostgreSQL, and nothing else changes.

``scripts/postgres`` installs Debian's PostgreSQL when it is missing and starts a cluster of
its own on 127.0.0.1; Label Studio is started on it (its tables restored from a dump of one
migrated once per release) with the settings it documents
(``DJANGO_DB=default`` and ``POSTGRE_*``). Then the whole path runs against that server: the
sample episodes are imported (twice: the rerun adds nothing), two annotators rate tasks through
the SDK, and the exporter gets every score back. The rows are counted in PostgreSQL itself,
so the test cannot pass on a server that quietly fell back to SQLite.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from conftest import MIGRATED, invoke, results_of
from study_support import Participant, answers, gateway_env, make_study, study_project
from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, RUBRIC
from sotopia_ls.exporter import export_project
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio import migrated as migrated_database
from sotopia_ls.labelstudio import server
from sotopia_ls.labelstudio.client import Client, create_project
from sotopia_ls.labelstudio.push import push_episodes
from sotopia_ls.study.process import gateway

pytestmark = pytest.mark.postgres

POSTGRES = Path(__file__).resolve().parents[1] / "scripts" / "postgres"
ANNOTATED_TASKS = 3


@dataclass
class OnPostgres:
    client: Client
    database: dict[str, str]  # Label Studio's DJANGO_DB / POSTGRE_* settings
    running: server.LocalServer

    def count(self, table: str, project_id: int) -> int:
        """Rows of ``table`` belonging to the project, read straight from PostgreSQL."""
        with psycopg.connect(
            host=self.database["POSTGRE_HOST"],
            port=int(self.database["POSTGRE_PORT"]),
            dbname=self.database["POSTGRE_NAME"],
            user=self.database["POSTGRE_USER"],
            password=self.database["POSTGRE_PASSWORD"],
        ) as connection:
            query = f"SELECT count(*) FROM {table} WHERE project_id = %s"  # table: a constant
            return connection.execute(query, (project_id,)).fetchone()[0]


def start_postgres() -> Path:
    """The cluster's folder; its ``label-studio.env`` holds the settings."""
    run = subprocess.run([str(POSTGRES), "start"], capture_output=True, text=True)
    if run.returncode != 0:
        pytest.fail(f"scripts/postgres could not start PostgreSQL:\n{run.stderr}")
    return Path(run.stdout.strip()).parent


def database_settings(cluster: Path) -> dict[str, str]:
    lines = (cluster / "label-studio.env").read_text().splitlines()
    return dict(line.removeprefix("export ").split("=", 1) for line in lines if "=" in line)


@contextmanager
def study_database() -> Iterator[str]:
    """A cluster started for a gateway test: its database's URL, as ``--database`` takes it;
    stopped at the end."""
    cluster = start_postgres()
    try:
        env = database_settings(cluster)
        yield (f"postgresql://{env['POSTGRE_USER']}:{env['POSTGRE_PASSWORD']}@"
               f"{env['POSTGRE_HOST']}:{env['POSTGRE_PORT']}/{env['POSTGRE_NAME']}")
    finally:
        subprocess.run([str(POSTGRES), "stop", str(cluster)], check=False)


@pytest.fixture(scope="module")
def on_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OnPostgres]:
    cluster = start_postgres()
    try:
        settings = database_settings(cluster)
        credentials = server.Credentials(
            username="pg-tester@example.com", password="test-password-1", api_key=uuid.uuid4().hex
        )
        data_dir = tmp_path_factory.mktemp("label-studio-postgres")
        migrated_database.postgresql(settings, MIGRATED)
        with server.start(data_dir, credentials, extra_env=settings) as running:
            client = Client(base_url=running.url, api_key=credentials.api_key)
            yield OnPostgres(client, settings, running)
    finally:
        subprocess.run([str(POSTGRES), "stop", str(cluster)], check=False)
        shutil.rmtree(cluster, ignore_errors=True)


def chosen_scores(task_number: int, annotator: int) -> dict[int, dict[str, tuple[str, int]]]:
    """Different valid answers per task and annotator, reaching both ends of every range."""
    scores: dict[int, dict[str, tuple[str, int]]] = {}
    for agent in AGENTS:
        scores[agent] = {}
        for index, key in enumerate(DIMENSION_KEYS):
            values = RUBRIC[key].values
            score = values[(task_number * 3 + annotator * 5 + agent + index) % len(values)]
            scores[agent][key] = (f"annotator {annotator} on {key} for agent {agent}", score)
    return scores


def test_import_annotate_export_on_postgresql(
    on_postgres: OnPostgres, sample_data: Path, project_title: str, tmp_path: Path
) -> None:
    client = on_postgres.client
    loaded = load_episodes([sample_data / "otree_episodes", sample_data / "episodelog"])
    assert not loaded.problems
    project = create_project(client, project_title)

    first = push_episodes(client, project.id, loaded.episodes, with_predictions=True, progress=False)
    rerun = push_episodes(client, project.id, loaded.episodes, with_predictions=True, progress=False)

    assert first.imported == len(loaded.episodes) == 43
    assert (rerun.imported, rerun.already_present) == (0, 43)
    assert on_postgres.count("task", project.id) == 43
    assert on_postgres.count("prediction", project.id) == first.with_predictions > 0

    names = [f"rater{n}-{uuid.uuid4().hex[:8]}" for n in (1, 2)]
    annotators = [client.users.create(email=f"{name}@example.com", username=name) for name in names]
    tasks = sorted(client.tasks.list(project=project.id, include="id,data"), key=lambda t: t.id)
    given = {}
    for number, task in enumerate(tasks[:ANNOTATED_TASKS]):
        for annotator_number, user in enumerate(annotators, start=1):
            scores = chosen_scores(number, annotator_number)
            annotation = client.annotations.create(
                id=task.id, result=results_of(scores), completed_by=user.id, lead_time=30.0
            )
            given[annotation.id] = (f"annotator-{user.id}", scores)
    assert on_postgres.count("task_completion", project.id) == len(given) == 6

    export = export_project(client, project.id, tmp_path / "export")

    assert export.tally.exported == export.tally.total == 6
    assert export.tally.balanced
    long = export.scores_long
    assert len(long) == 6 * 2 * len(DIMENSION_KEYS)
    for row in long.itertuples():
        annotator, scores = given[row.annotation_id]
        assert row.annotator_id == annotator
        assert (row.rationale, row.score) == scores[row.agent][row.dimension]
    assert (tmp_path / "export" / "annotations.jsonl").read_text().count("\n") == 6


# Rationales PostgreSQL or the rubric could trip on, each in one participant's rating.
UNUSUAL_RATIONALES = {
    "NUL inside": "calm\x00 and kind",
    "only zero-width spaces": "\u200b\u200b",
    "100 kB": "long " * 20_000,
    "100 kB in every rationale": "long " * 20_000,
}


def test_a_participants_rating_is_saved_or_refused_at_once_on_postgresql(
    on_postgres: OnPostgres, project_title: str, tmp_path: Path
) -> None:
    """Acknowledged means saved: whatever a rationale holds, the participant is either told
    which field to fix, or their rating reaches Label Studio's PostgreSQL within a minute."""
    project = study_project(on_postgres.client, project_title, episodes=3)
    study_file = tmp_path / "study.json"
    study_file.write_text(make_study(tmp_path, project).model_dump_json())
    env = gateway_env(on_postgres.running.url, on_postgres.running.credentials.api_key,
                      secrets.token_urlsafe(32))
    acknowledged = 0
    with gateway(study_file, env) as running:
        for case, text in UNUSUAL_RATIONALES.items():
            someone = Participant.of(running.url)
            someone.begin()
            results = results_of(answers(len(case)))
            for result in results:
                if "text" in result["value"] and (
                        "every" in case or result["from_name"] == "believability_reasoning_1"):
                    result["value"]["text"] = [text]
            answer = someone.submit(results)
            assert answer.status_code in (200, 413, 422), (case, answer.text)
            if answer.status_code == 422:
                assert answer.json()["problems"] == [
                    "Believability rationale for agent 1: empty rationale"], case
            if answer.status_code == 413:
                assert "rationales together" in answer.json()["error"], case
            acknowledged += answer.status_code == 200
        deadline = time.monotonic() + 60
        while True:
            shown = invoke(main, "study", "status", "--study", str(study_file)).output
            if (f"{acknowledged} saved in Label Studio," in shown
                    and "waiting to be saved:  none" in shown):
                break
            assert time.monotonic() < deadline, shown
            time.sleep(1)

    # Refused at once: the zero-width rationale as empty, 100 kB in each rationale as too
    # long a rating.
    assert acknowledged == 2
    assert on_postgres.count("task_completion", project) == acknowledged
