"""The server's clock decides: what a rating page measures (its visible time, its typing
counts) is the browser's word, and a browser can be made to say anything.

The gateway keeps no visible time above the time it saw pass itself, from the page first shown
to the submission, and counts every rating it clipped; it judges typing counts against the
text it received and that time, and shows a rating without believable counts as not measured;
it records both once, in the transaction that settles the rating, so a replay with other
figures changes nothing.

Participants rate through the gateway app in this process (Starlette's TestClient), in front
of the session's real Label Studio; a lying page is a participant posting what no page sends.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import results_of
from sqlalchemy import Engine, event, select
from starlette.testclient import TestClient
from study_support import (
    EDITOR,
    Participant,
    answers,
    make_study,
    prolific_id,
    spend_time,
    study_project,
    typed,
)

from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.serving import arrival
from sotopia_ls.study.slots import leases
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.arrival import ProlificParameters
from sotopia_ls.study.screening.flags import RATIONALE_FIELDS, Typing
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.payment.hourly import hourly_pay
from sotopia_ls.study.screening.review import review_rows
from sotopia_ls.study.settings import StudyFile
from sotopia_ls.study.status import study_status
from sotopia_ls.study.store import assignments, open_store
from sotopia_ls.study.screening.typing_counts import recorded_typing
from sotopia_ls.study.screening.visible import clipped, recorded_visible

A_DAY = 24 * 3600.0
# Minutes the honest participant spends on their episode, 4 of them with the page in front.
MINUTES, VISIBLE_MINUTES = 5, 4


@dataclass
class Served:
    """A study of one episode per participant, paying £2 a visit, served in this process."""

    study: StudyFile
    engine: Engine
    app: object

    def participant(self) -> Participant:
        return Participant(TestClient(self.app, base_url="http://127.0.0.1"))

    def assignment(self, key: str) -> int:
        with self.engine.connect() as conn:
            return conn.execute(select(assignments.c.id).where(assignments.c.key == key)
                                ).scalar_one()


@pytest.fixture
def served(ls_client: Client, label_studio: LocalServer, project_title: str,
           tmp_path: Path) -> Served:
    project = study_project(ls_client, project_title, episodes=3)
    study = make_study(tmp_path, project, episodes_per_participant=1,
                       reward={"cents": 200, "currency": "GBP"})
    engine = open_store(study.database)
    app = create_app(prepare_gateway(study, ls_client, engine), secret=secrets.token_urlsafe(32),
                     editor=EDITOR, https_only=False)
    return Served(study, engine, app)


@pytest.mark.server
def test_a_page_claiming_a_day_on_a_rating_sent_at_once_is_clipped_and_counted(served):
    # A tampered page: submitted as soon as shown, claiming a day in front of the episode and
    # 400 characters typed, none pasted, for every rationale.
    liar = served.participant()
    lying = liar.begin()
    claimed = {name: {"pasted": 0, "typed": 400} for name in RATIONALE_FIELDS}
    assert liar.submit(results_of(answers(41)), typing=claimed,
                       visible_seconds=A_DAY).status_code == 200
    # A participant whose page was in front of them 4 of the 5 minutes they spent.
    honest = served.participant()
    key = honest.begin()
    spend_time(served.engine, key, MINUTES)
    results = results_of(answers(42, "my own reading"))
    assert honest.submit(results, typing=typed(results),
                         visible_seconds=VISIBLE_MINUTES * 60.0).status_code == 200

    lied = served.assignment(lying)
    with served.engine.connect() as conn:
        observed = conn.execute(select(assignments.c.lead_time)
                                .where(assignments.c.id == lied)).scalar_one()
    assert observed < 60
    assert recorded_visible(served.engine, [lied]) == {lied: observed}  # stored clipped
    assert clipped(served.engine, [lied, served.assignment(key)]) == {lied: A_DAY}

    rows = review_rows(served.engine, served.study).set_index("participant")
    flagged, clean = rows.loc[liar.pid], rows.loc[honest.pid]
    assert flagged["minutes"] < 1 and flagged["too_fast.fired"] == 1
    assert flagged["pasted_rationale.judged"] == 0  # 5,600 characters in a second: not measured
    assert flagged[["suggested", "rule"]].tolist() == ["look", "time_clipped"]
    assert (f"time_clipped: the page claimed 86400 s, the gateway saw {observed:.0f} s pass"
            in flagged["details"])
    assert (f"typing_not_measured: the page claims {400 * len(RATIONALE_FIELDS)} characters "
            f"typed in {observed:.0f} s on task") in flagged["details"]
    assert clean[["minutes", "suggested", "rule", "details"]].tolist() == [
        VISIBLE_MINUTES, "approve", "clean", ""]

    shown = study_status(served.engine, served.study).lines(served.study, "")
    assert ("  visible time clipped: 1 rating whose page claimed more time than passed from its "
            "first showing to its submission, counted as that time (`study review` names "
            "them)") in shown
    # The pay per hour over the median visit: 2 minutes (0 and 4), not 722 (a day and 4).
    assert hourly_pay(served.engine, served.study).median_minutes == pytest.approx(
        VISIBLE_MINUTES / 2, abs=0.1)


@pytest.mark.server
def test_a_replay_with_other_figures_changes_nothing_and_is_answered_as_the_first(served):
    someone = served.participant()
    key = someone.begin()
    spend_time(served.engine, key, MINUTES)
    results = results_of(answers(43))

    first = someone.submit(results)  # a page that measured nothing
    again = someone.submit(results, typing=typed(results), visible_seconds=120.0)

    assert first.status_code == again.status_code == 200 and again.json() == first.json()
    assignment = served.assignment(key)
    assert recorded_typing(served.engine, [assignment]) == {}
    assert recorded_visible(served.engine, [assignment]) == {}
    row = review_rows(served.engine, served.study).set_index("participant").loc[someone.pid]
    assert row["rule"] == "typing_not_measured"


@pytest.mark.server
@pytest.mark.parametrize("figures", [
    {"typing": {RATIONALE_FIELDS[0]: {"pasted": True, "typed": 40}}},
    {"typing": {RATIONALE_FIELDS[0]: {"pasted": 0, "typed": "40"}}},
    {"typing": {RATIONALE_FIELDS[0]: {"pasted": 0, "typed": 40.0}}},
    {"visible_seconds": "120"},
    {"visible_seconds": True},
])
def test_figures_that_are_no_json_numbers_are_refused_naming_them(served, figures):
    someone = served.participant()
    key = someone.begin()

    refused = someone.submit(results_of(answers(44)), **figures)

    assert refused.status_code == 400
    assert refused.json()["error"].startswith(
        f"This is not a rating the study can read: {next(iter(figures))}"), refused.json()
    with served.engine.connect() as conn:
        assert conn.execute(select(assignments.c.state).where(assignments.c.key == key)
                            ).scalar_one() == "leased"


def test_the_figures_are_written_in_the_transaction_that_settles_the_rating(tmp_path):
    # Were they written after it, a gateway stopped in between would keep a rating without
    # them, and a replay would then record the figures it sent.
    study = make_study(tmp_path, 1)
    engine = open_store(study.database)
    leases.add_episodes(engine, study.name, {1: {}}, study.raters_per_episode)
    visit = arrival.arrive(engine, study.name, ProlificParameters(
        PROLIFIC_PID=prolific_id(), STUDY_ID="a" * 24, SESSION_ID=prolific_id()))
    taken = leases.lease_for_visit(engine, study.name, visit.id, visit.participant_id,
                                   lease_seconds=study.lease_seconds)
    leases.mark_shown(engine, taken.id)
    transactions: list[list[str]] = []
    event.listen(engine, "begin", lambda conn: transactions.append([]))
    event.listen(engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *rest: transactions and transactions[-1].append(
                     " ".join(statement.split()[:3])))

    leases.settle(engine, taken, [{"stand-in": True}], study.raters_per_episode,
                  typing={RATIONALE_FIELDS[0]: Typing(pasted=0, typed=40)}, visible_seconds=0.0)

    settling = [statements for statements in transactions
                if "UPDATE assignments SET" in statements]
    assert len(settling) == 1
    assert {"INSERT INTO typing", "INSERT INTO visible_time"} <= set(settling[0])
    assert not any("INSERT INTO typing" in statements or "INSERT INTO visible_time" in statements
                   for statements in transactions if statements is not settling[0])
    assert recorded_visible(engine, [taken.id]) == {taken.id: 0.0}
