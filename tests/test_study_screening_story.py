"""A researcher screens and pays a crowd study, start to end, as the README tells it.

A qualification round serves two gold episodes (references from a CSV in the oTree layout)
to three participants: one within two points everywhere, one three points off on one rating,
one who leaves halfway; only the first joins the round's allow-list. Later one more participant
passes the round. The main study admits only the allow-list and hides gold among each
participant's five episodes (20%): one of its two participants rates with care, the other
gives one score everywhere with one-word rationales. The researcher writes the review file,
rejects the careless one with a message of their own and approves the careful one, reads the
file back, exports and reports the project (with and without the rejected annotations), pays
on Prolific (a local stand-in) and exports the protocol record for the methods section.

Label Studio is the session's real server; both gateways run in this process (Starlette's
TestClient) on one gateway database; every researcher step is a `sotopia-ls` command.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner, Result
from conftest import results_of
from prolific_stand_in import TOKEN, StandIn, serving
from sqlalchemy import Engine, select
from starlette.testclient import TestClient
from study_support import EDITOR, SAMPLE_EPISODES, Participant, spend_time, typed

from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, RUBRIC, rating_name
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import Client, create_project, import_batch
from sotopia_ls.labelstudio.push import task_payload
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.outbox.saving import save_all_waiting
from sotopia_ls.study.screening import qualification
from sotopia_ls.study.screening.flags import FlagThresholds
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.settings import read_study
from sotopia_ls.study.store import assignments, open_store, participants

ROUND, MAIN = "screening", "main"
PASS, SCREEN_OUT, PAID = "Q1PASS", "Q1OUT", "C1A2B3"
GOLD_EPISODES = 2
# Each rating's reference: the middle of its dimension's range.
REFERENCE = {rating_name(key, agent): RUBRIC[key].values[len(RUBRIC[key].values) // 2]
             for agent in AGENTS for key in DIMENSION_KEYS}
WITHIN_TWO = {name: 2 if number % 2 else -2 for number, name in enumerate(REFERENCE)}
OFF_BY_THREE = {"believability_1": 3}
# Minutes a careful participant spends on an episode: more than reading it takes.
MINUTES = 5
REJECTION = ("Thank you for taking part. We cannot approve this submission: every question got "
             "the same score and each explanation was a single word, so the ratings do not "
             "reflect a reading of the conversations.")
TRANSITION = "/api/v1/submissions/{}/transition/"
BULK = "/api/v1/submissions/bulk-approve/"
GROUPS = "/api/v1/participant-groups/"


def rating(who: str, offsets: dict[str, int] | None = None) -> list[dict]:
    """A careful rating: the reference moved by ``offsets``, a rationale of the participant's
    own for every question."""
    moved = offsets or {}
    return results_of({agent: {key: (
        f"{who} read the whole exchange; the {key} of agent {agent} shows in how they answered",
        REFERENCE[rating_name(key, agent)] + moved.get(rating_name(key, agent), 0))
        for key in DIMENSION_KEYS} for agent in AGENTS})


CARELESS = results_of({agent: {key: ("ok", 0) for key in DIMENSION_KEYS} for agent in AGENTS})


class Researcher:
    """The researcher's shell: `sotopia-ls` commands with Label Studio's address and key."""

    def __init__(self, server: LocalServer, folder: Path) -> None:
        self.folder = folder
        self.env = {"LABEL_STUDIO_URL": server.url,
                    "LABEL_STUDIO_API_KEY": server.credentials.api_key, "PROLIFIC_TOKEN": ""}

    def run(self, *args: str, token: str = "") -> Result:
        result = CliRunner().invoke(main, list(args), env={**self.env, "PROLIFIC_TOKEN": token})
        assert result.exit_code == 0, result.output
        assert "Traceback" not in result.output
        return result

    def path(self, name: str) -> str:
        return str(self.folder / name)


class Gateways:
    """Both studies' gateways, in this process, on the one database the main study shares with
    its qualification round."""

    def __init__(self, client: Client, folder: Path) -> None:
        self.client, self.folder = client, folder
        self.engine: Engine = open_store(f"sqlite:///{folder / 'gateway.sqlite3'}")
        secret = secrets.token_urlsafe(32)
        self.apps = {name: create_app(prepare_gateway(read_study(folder / f"{name}.json"),
                                                      client, self.engine),
                                      secret=secret, editor=EDITOR, https_only=False)
                     for name in (ROUND, MAIN)}

    def participant(self, study: str, pid: str | None = None) -> Participant:
        someone = Participant(TestClient(self.apps[study], base_url="http://127.0.0.1"),
                              study=study)
        if pid is not None:
            someone.pid = pid
        return someone

    def take(self, someone: Participant, ratings: Iterator[list[dict]]) -> str:
        """The participant arrives, reads the instructions and rates until the study ends the
        visit, spending ``MINUTES`` on each episode; the page they end on."""
        someone.arrive()
        someone.read_instructions()
        while someone.open_episode().url.path.endswith("/rate"):
            spend_time(self.engine, someone.boot["assignment"], MINUTES)
            results = next(ratings)
            assert someone.submit(results, typing=typed(results)).status_code == 200
        return someone.http.get(f"/s/{someone.study}/done").text

    def save(self) -> None:
        """The gateways' writers save every recorded rating in Label Studio."""
        for name in (ROUND, MAIN):
            save_all_waiting(self.engine, self.client, name)

    def annotations_of(self, someone: Participant) -> set[int]:
        with self.engine.connect() as conn:
            return set(conn.execute(
                select(assignments.c.ls_annotation_id)
                .join(participants, participants.c.id == assignments.c.participant_id)
                .where(participants.c.study == someone.study,
                       participants.c.external_id == someone.pid)).scalars())


def code_on(page: str) -> str:
    return re.search(r'id="completion-code">([^<]+)<', page).group(1)


def project_of(client: Client, title: str, episodes: list) -> int:
    project = create_project(client, title)
    import_batch(client, project.id, [task_payload(e, with_predictions=False) for e in episodes])
    return project.id


@pytest.fixture
def prolific() -> Iterator[StandIn]:
    with serving() as server:
        yield server


@pytest.mark.server
def test_a_researcher_screens_rates_reviews_pays_and_reports_a_crowd_study(
        label_studio, ls_client, tmp_path, prolific):
    researcher = Researcher(label_studio, tmp_path)
    sample = load_episodes(SAMPLE_EPISODES).episodes
    gold, ordinary = sample[:GOLD_EPISODES], sample[GOLD_EPISODES + 1:GOLD_EPISODES + 5]
    tag = secrets.token_hex(4)
    # The round's project: the gold episodes and one more without a reference (never served).
    round_project = project_of(ls_client, f"test_round_{tag}", sample[:GOLD_EPISODES + 1])
    main_project = project_of(ls_client, f"test_main_{tag}", [*gold, *ordinary])
    pd.DataFrame([{"pk": episode.id, **REFERENCE} for episode in gold]
                 ).to_csv(tmp_path / "gold.csv", index=False)
    database = f"sqlite:///{tmp_path / 'gateway.sqlite3'}"

    # --- the qualification round ---------------------------------------------------------------
    researcher.run("study", "init", "--name", ROUND, "--project", str(round_project),
                   "--completion-code", PASS, "--qualification", "--screen-out-code", SCREEN_OUT,
                   "--gold-references", researcher.path("gold.csv"), "--database", database,
                   "-o", researcher.path(f"{ROUND}.json"))
    researcher.run("study", "init", "--name", MAIN, "--project", str(main_project),
                   "--completion-code", PAID, "--requires-qualification", ROUND,
                   "--gold-share", "0.2", "--gold-references", researcher.path("gold.csv"),
                   "--episodes-per-participant", "5", "--database", database,
                   "-o", researcher.path(f"{MAIN}.json"))
    gateways = Gateways(ls_client, tmp_path)
    status = researcher.run("study", "status", "--study", researcher.path(f"{ROUND}.json"))
    assert "episodes open:        0" in status.output
    assert f"gold episodes:        {GOLD_EPISODES} (the qualification round" in status.output

    passer, failer, quitter = (gateways.participant(ROUND) for _ in range(3))
    assert code_on(gateways.take(passer, iter([rating("P", WITHIN_TWO), rating("P")]))) == PASS
    assert code_on(gateways.take(failer, iter([rating("F"), rating("F", OFF_BY_THREE)]))) \
        == SCREEN_OUT
    quitter.arrive()
    quitter.read_instructions()
    quitter.open_episode()  # and leaves
    assert qualification.allow_list_of(gateways.engine, ROUND) == [passer.pid]
    # The round stays open on Prolific: one more participant passes it.
    latecomer = gateways.participant(ROUND)
    assert code_on(gateways.take(latecomer, iter([rating("L"), rating("L")]))) == PASS

    # --- the main study: the allow-list only, a gold episode hidden among five ------------------
    refused = gateways.participant(MAIN, pid=failer.pid)
    assert refused.arrive().url.path == f"/s/{MAIN}/admission"
    careful = gateways.participant(MAIN, pid=passer.pid)
    careless = gateways.participant(MAIN, pid=latecomer.pid)
    assert code_on(gateways.take(careful, iter([rating("C")] * 5))) == PAID
    assert code_on(gateways.take(careless, iter([CARELESS] * 5))) == PAID
    gateways.save()
    status = researcher.run("study", "status", "--study", researcher.path(f"{MAIN}.json"))
    assert "episodes done:        4" in status.output
    assert f"gold episodes:        {GOLD_EPISODES} (hidden among the episodes at 20%)" \
        in status.output
    rejected = gateways.annotations_of(careless)
    approved = gateways.annotations_of(careful)
    assert len(rejected) == len(approved) == 5

    # --- review: the file written, edited, read back ---------------------------------------------
    main_file = researcher.path(f"{MAIN}.json")
    written = researcher.run("study", "review", "--study", main_file,
                             "-o", researcher.path("review.csv"))
    review = pd.read_csv(tmp_path / "review.csv", dtype=str, keep_default_na=False)
    assert f"{len(review)} submission(s)" in written.output
    rows = review.set_index("participant")
    assert rows.loc[careful.pid, ["suggested", "gold_episodes", "gold_distance"]].tolist() == [
        "approve", "1", "0"]
    assert rows.loc[careless.pid, "suggested"] == "reject"
    edits = {careful.pid: ("approve", "", ""), careless.pid: ("reject", REJECTION, "LOW_EFFORT")}
    for column, position in (("decision", 0), ("message", 1), ("category", 2)):
        review[column] = [edits.get(pid, ("look", "", ""))[position]
                          for pid in review["participant"]]
    review.to_csv(tmp_path / "review.csv", index=False)
    # Any other row (the participant refused at admission) waits: nothing to pay.
    looked = len(review) - len(edits)
    kinds = {"approve": 1, "look": looked, "reject": 1}

    recorded = researcher.run("study", "decide", researcher.path("review.csv"),
                              "--study", main_file)
    assert "decisions recorded: " + ", ".join(
        f"{kind} {count}" for kind, count in kinds.items() if count) in recorded.output
    assert "10 annotation(s) marked in Label Studio" in recorded.output

    # --- export and report: the decisions shown, the rejected left out on demand ------------------
    server = ["--project", str(main_project)]
    researcher.run("export", *server, "-o", researcher.path("all"))
    long = pd.read_csv(tmp_path / "all" / "scores_long.csv", keep_default_na=False)
    decided = long.groupby("annotation_id")["review_decision"].first().to_dict()
    assert decided == {**dict.fromkeys(approved, "approve"), **dict.fromkeys(rejected, "reject")}
    kept = researcher.run("export", *server, "--exclude-rejected", "-o", researcher.path("kept"))
    assert "(5 annotation(s); 5 marked reject in review excluded)" in kept.output
    assert set(pd.read_csv(tmp_path / "kept" / "scores_long.csv")["annotation_id"]) == approved
    researcher.run("report", *server, "--exclude-rejected", "--bootstrap", "0",
                   "-o", researcher.path("report"))
    assert "<h2>Review decisions</h2>" in (tmp_path / "report" / "report.html").read_text()

    # --- paying on Prolific: the main study's decisions, then the round's participant group ------
    stand_in = ["--prolific-url", prolific.base_url]
    dry = researcher.run("study", "pay", "--study", main_file, *stand_in)
    assert "1 to approve (in 1 bulk-approve request(s)), 1 to reject" in dry.output
    assert prolific.sent("POST") == []
    paid = researcher.run("study", "pay", "--study", main_file, "--send", *stand_in,
                          token=TOKEN)
    grouped = researcher.run("study", "pay", "--study", researcher.path(f"{ROUND}.json"),
                             "--send", "--workspace", "ws-1", *stand_in, token=TOKEN)
    assert "sent: 1 approved, 1 rejected" in paid.output and TOKEN not in paid.output
    assert "2 added to participant group" in grouped.output
    assert prolific.sent("POST") == [
        ("POST", BULK, {"submission_ids": [careful.session]}),
        ("POST", TRANSITION.format(careless.session),
         {"action": "REJECT", "message": REJECTION, "rejection_category": "LOW_EFFORT"}),
        ("POST", GROUPS, {"name": f"{ROUND}: passed the qualification", "workspace_id": "ws-1",
                          "participant_ids": [passer.pid, latecomer.pid]})]
    for study_file in (main_file, researcher.path(f"{ROUND}.json")):
        again = researcher.run("study", "pay", "--study", study_file, "--send",
                               "--workspace", "ws-1", *stand_in, token=TOKEN)
        assert "0 to approve (in 0 bulk-approve request(s)), 0 to reject" in again.output
    assert len(prolific.sent("POST")) == 3

    # --- the protocol record for the methods section --------------------------------------------
    researcher.run("export", *server, "--exclude-rejected", "--study",
                   researcher.path(f"{ROUND}.json"), "--study", main_file,
                   "-o", researcher.path("final"))
    record = json.loads((tmp_path / "final" / "protocol.json").read_text())
    screening, study = record["studies"]
    assert screening["qualification"] == {
        "role": "this study is the qualification round",
        "rule": "every rating was within ±2 of the reference rating", "max_distance": 2,
        "scored": 3, "passed": 2, "pass_rate": round(2 / 3, 4)}
    assert (study["gold_share"], study["gold_ratings"], study["ratings"]) == (0.2, 2, 10)
    assert study["qualification"]["round"] == ROUND
    assert study["flag_thresholds"] == FlagThresholds().model_dump()
    assert study["decisions"] == kinds
    assert record["exclusions"] == {"rejected_by_review_excluded": True, "excluded": 5}
    prose = (tmp_path / "final" / "protocol.md").read_text()
    assert "2 of 3 scored participants passed" in prose
    everyone = [passer, failer, quitter, latecomer, careful, careless]
    for text in ((tmp_path / "final" / "protocol.json").read_text(), prose):
        assert not re.search(r"[0-9a-f]{24}", text)
        assert not any(person.pid in text or person.session in text for person in everyone)
        assert not any(code in text for code in (PASS, SCREEN_OUT, PAID))
        assert "sqlite" not in text and "@" not in text and TOKEN not in text
