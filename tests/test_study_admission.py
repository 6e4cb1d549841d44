"""A main study that requires a qualification round: it starts only on a database that held the
round, and a participant it refuses ends their visit as not admitted, for good.

A round's gateway starts on the session's real Label Studio (so the database holds its gold
episodes); the main study's gateway then runs in this process, and participants are HTTP
clients.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, select
from starlette.testclient import TestClient

from conftest import task_ids
from study_support import EDITOR, Participant, make_study, prolific_id, study_project
from test_study_qualification import REFERENCE, ROUND, round_study
from sotopia_ls.cli import main
from sotopia_ls.errors import StudyError
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.flow import NOT_ADMITTED
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.store import allow_list, insert_once, now, open_store, visits

pytestmark = pytest.mark.server


@dataclass
class Studies:
    engine: Engine
    tmp: Path
    project: int
    main_app: object


@pytest.fixture(scope="module")
def studies(ls_client: Client, tmp_path_factory) -> Studies:
    """A round started once on the database (its gold recorded), and a main study requiring it."""
    tmp = tmp_path_factory.mktemp("admission")
    project = study_project(ls_client, f"test_admission_{prolific_id()[:8]}", episodes=2)
    references = tmp / "gold.csv"
    pd.DataFrame([{"pk": episode, **REFERENCE} for episode in task_ids(ls_client, project)]
                 ).to_csv(references, index=False)
    qualifying = round_study(tmp, project, gold_references=str(references))
    engine = open_store(qualifying.database)
    prepare_gateway(qualifying, ls_client, engine)
    main_study = make_study(tmp, project, name="main", requires_qualification=ROUND)
    app = create_app(prepare_gateway(main_study, ls_client, engine),
                     secret=secrets.token_urlsafe(32), editor=EDITOR, https_only=False)
    return Studies(engine, tmp, project, app)


@pytest.fixture
def participant(studies: Studies) -> Iterator[Participant]:
    person = Participant(TestClient(studies.main_app, base_url="http://127.0.0.1"), study="main")
    yield person
    person.close()


def outcome_of(engine: Engine, person: Participant) -> tuple[str | None, object]:
    with engine.connect() as conn:
        return tuple(conn.execute(select(visits.c.outcome, visits.c.finished_at).where(
            visits.c.prolific_session_id == person.session)).one())


def test_a_refused_participant_s_visit_ends_not_admitted(studies, participant):
    page = participant.arrive()

    assert page.url.path == "/s/main/admission" and NOT_ADMITTED in page.text
    assert outcome_of(studies.engine, participant)[0] == "not_admitted"


def test_a_refused_visit_stays_refused_once_its_participant_passes(studies, participant):
    participant.arrive()
    first = outcome_of(studies.engine, participant)
    # The participant passes the round afterwards, then opens the same Prolific session again.
    insert_once(studies.engine, allow_list, {"qualification": ROUND,
                                             "external_id": participant.pid, "added_at": now()})

    again = participant.arrive()

    assert again.url.path == "/s/main/admission" and NOT_ADMITTED in again.text
    assert participant.http.get("/s/main/done", follow_redirects=True).url.path == \
        "/s/main/admission"
    assert outcome_of(studies.engine, participant) == first


def test_a_participant_on_the_allow_list_is_admitted_with_the_visit_under_way(studies,
                                                                              participant):
    insert_once(studies.engine, allow_list, {"qualification": ROUND,
                                             "external_id": participant.pid, "added_at": now()})

    assert participant.arrive().url.path == "/s/main/instructions"
    assert outcome_of(studies.engine, participant) == (None, None)


# --- a round the database never held ------------------------------------------------------


REFUSAL = ("study main: the study file's requires_qualification names 'screenig', but the study "
           "database holds no qualification round of that name (no gold episode, no "
           "allow-list): start that round's gateway on this database first (sotopia-ls study "
           "serve --study <its study file>), or correct the name")


def test_a_misspelt_round_stops_the_gateway_from_starting(studies, ls_client):
    misspelt = make_study(studies.tmp, studies.project, name="main",
                          requires_qualification="screenig")

    with pytest.raises(StudyError) as refused:
        prepare_gateway(misspelt, ls_client, studies.engine)

    assert str(refused.value) == REFUSAL


def test_study_sync_refuses_a_misspelt_round_in_one_line(studies, label_studio: LocalServer):
    study_file = studies.tmp / "misspelt.json"
    study_file.write_text(make_study(studies.tmp, studies.project, name="main",
                                     requires_qualification="screenig").model_dump_json())

    synced = CliRunner().invoke(main, ["study", "sync", "--study", str(study_file)], env={
        "LABEL_STUDIO_URL": label_studio.url,
        "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key})

    assert synced.exit_code != 0 and "Traceback" not in synced.output
    assert synced.output.count("\n") == 1 and REFUSAL in synced.output, synced.output
