"""Reviewing a crowd study: the review file, the researcher's edits read back, the marks in
Label Studio.

Participants rate through the gateway app in this process (Starlette's TestClient), saving
into the session's real Label Studio; the researcher runs `sotopia-ls study review`.
"""

from __future__ import annotations

import csv
import io
import secrets
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner, Result
from conftest import results_of
from sqlalchemy import Engine, Row, insert, select, update
from starlette.testclient import TestClient
from study_support import (
    EDITOR,
    SAMPLE_EPISODES,
    Participant,
    make_study,
    spend_time,
    study_project,
    typed,
)

from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, RUBRIC, rating_name, reasoning_name
from sotopia_ls.importer import load_episodes
from sotopia_ls.errors import LabelStudioError, StudyError
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.outbox.saving import checked_results, save_all_waiting
from sotopia_ls.study.payment.prolific import MIN_REJECTION_MESSAGE
from sotopia_ls.study.live.dashboard import participant_rows
from sotopia_ls.study.screening.flags import FLAGS, Flag, FlagResult, FlagThresholds
from sotopia_ls.study.screening.qualification import score_visit
from sotopia_ls.study.screening.review import (
    APPROVE,
    PARTICIPANT_WORDING,
    RULES,
    SCREENED_OUT,
    UNFINISHED,
    Rated,
    ReviewedVisit,
    participant_message,
    mark_annotations,
    read_review,
    record_decisions,
    record_review,
    review_rows,
    suggestion,
    write_review,
)
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.settings import StudyFile, write_study
from sotopia_ls.study.status import study_status
from sotopia_ls.study.store import (
    assignments,
    decisions,
    episodes,
    gold,
    open_store,
    participants,
    qualification_results,
    typing,
    visible_time,
    visits,
)

SECRET = secrets.token_urlsafe(32)
# Minutes each participant spends on an episode before submitting it: more than reading takes.
MINUTES_PER_EPISODE = 5


def scores_of(seed: int) -> dict[str, int]:
    """Ratings spread over each dimension's range, by rating field."""
    return {rating_name(key, agent): RUBRIC[key].values[(seed + agent + i) % len(RUBRIC[key].values)]
            for agent in AGENTS for i, key in enumerate(DIMENSION_KEYS)}


def rating(scores: dict[str, int], rationale: str) -> list[dict]:
    """Results with ``scores`` and, per field, ``rationale`` naming its dimension and agent."""
    return results_of({agent: {key: (rationale.format(key=key, agent=agent),
                                     scores[rating_name(key, agent)])
                               for key in DIMENSION_KEYS} for agent in AGENTS})


GOOD = rating(scores_of(1), "I read the whole exchange and the {key} of agent {agent} "
                            "shows in how they answered the other's proposal")
STRAIGHT = rating(dict.fromkeys(scores_of(1), 0),
                  "Considering every turn together, my impression of {key} for agent {agent} "
                  "stays the same from start to finish")
# Short rationales, one of them a spreadsheet formula.
SHORT = [dict(result, value={"text": ['=HYPERLINK("http://x","ok")']})
         if result["from_name"] == "believability_reasoning_1" else result
         for result in rating(scores_of(1), "ok {key} {agent}")]


class RatedStudy:
    """A study of three episodes, k = 2, m = 2, its database and its study file; three
    participants rated through the gateway, each spending ``MINUTES_PER_EPISODE`` on an episode:
    one straight-lining, one careful, one with short rationales (in that order)."""

    def __init__(self, client: Client, server: LocalServer, title: str, tmp: Path) -> None:
        self.client, self.server, self.tmp = client, server, tmp
        self.project = study_project(client, title, episodes=3)
        self.settings: StudyFile = make_study(tmp, self.project)
        self.path = write_study(self.settings, tmp / "study.json")
        self.engine: Engine = open_store(self.settings.database)
        app = create_app(prepare_gateway(self.settings, client, self.engine), secret=SECRET,
                         editor=EDITOR, https_only=False)
        self.people: dict[str, Participant] = {}
        for name, results in (("straight", STRAIGHT), ("good", GOOD), ("short", SHORT)):
            someone = Participant(TestClient(app, base_url="http://127.0.0.1"))
            someone.arrive()
            someone.read_instructions()
            while someone.open_episode().url.path.endswith("/rate"):
                self.spend_time(someone.boot["assignment"])
                assert someone.submit(results, typing=typed(results)).status_code == 200
            self.people[name] = someone
        save_all_waiting(self.engine, client, "pilot")

    def spend_time(self, key: str) -> None:
        """The participant looked at the episode ``MINUTES_PER_EPISODE`` before submitting."""
        spend_time(self.engine, key, MINUTES_PER_EPISODE)

    def tasks_of(self, name: str) -> set[int]:
        with self.engine.connect() as conn:
            return set(conn.execute(
                select(assignments.c.task_id).where(assignments.c.state == "saved",
                       assignments.c.participant_id == self._participant_id(name))).scalars())

    def _participant_id(self, name: str) -> int:
        with self.engine.connect() as conn:
            return conn.execute(select(participants.c.id).where(
                participants.c.external_id == self.people[name].pid)).scalar_one()

    def review(self, *args: str) -> Result:
        return CliRunner().invoke(main, ["study", "review", "--study", str(self.path), *args])

    def decide(self, edited: Path) -> Result:
        return CliRunner().invoke(main, [
            "study", "decide", str(edited), "--study", str(self.path), "--url", self.server.url,
            "--api-key", self.server.credentials.api_key])

    def decisions(self) -> dict[int, Row]:
        with self.engine.connect() as conn:
            return {row.visit_id: row for row in conn.execute(select(decisions))}

    def metas(self) -> dict[int, dict]:
        return {task.id: dict(task.meta or {})
                for task in self.client.tasks.list(project=self.project, include="id,meta")}

    def marks(self) -> dict[str, str]:
        """Every annotation's mark in its task's meta, by annotation id."""
        return {annotation: decision for meta in self.metas().values()
                for annotation, decision in meta.get("sotopia_review", {}).items()}

    def annotations_of(self, name: str) -> set[str]:
        with self.engine.connect() as conn:
            return {str(a) for a in conn.execute(select(assignments.c.ls_annotation_id).where(
                assignments.c.participant_id == self._participant_id(name))).scalars()}


@pytest.fixture
def rated(ls_client: Client, label_studio: LocalServer, project_title: str,
          tmp_path: Path) -> RatedStudy:
    study = RatedStudy(ls_client, label_studio, project_title, tmp_path)
    # The researchers' reference for an episode the first two rated: the careful one's scores.
    shared = study.tasks_of("straight") & study.tasks_of("good") - study.tasks_of("short")
    assert shared, "the straight-liner and the careful participant share no episode"
    with study.engine.begin() as conn:
        conn.execute(insert(gold).values(study="pilot", task_id=min(shared),
                                         reference=scores_of(1)))
    return study


def rows_by_name(study: RatedStudy, path: Path) -> dict[str, pd.Series]:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    by_pid = {row["participant"]: row for _, row in frame.iterrows()}
    return {name: by_pid[someone.pid] for name, someone in study.people.items()}


# --- the review file ------------------------------------------------------------------------


@pytest.mark.server
def test_the_review_file_suggests_a_decision_per_submission_with_a_reason_for_the_participant(
        rated, tmp_path):
    written = rated.review("-o", str(tmp_path / "review.csv"))

    assert written.exit_code == 0, written.output
    assert "3 submission(s); suggested: approve 1, look 1, reject 1" in written.output
    rows = rows_by_name(rated, tmp_path / "review.csv")
    straight, good, short = rows["straight"], rows["good"], rows["short"]
    assert [row["submission"] for row in rows.values()] == [
        someone.session for someone in rated.people.values()]

    assert (straight["decision"], straight["rule"], straight["category"]) == (
        "reject", "far_from_gold", "FAILED_CHECK")
    assert (straight["straight_lining.fired"], straight["straight_lining.judged"]) == ("2", "2")
    assert (straight["gold_episodes"], straight["episodes"]) == ("1", "1")
    assert int(straight["gold_distance"]) > rated.settings.flags.gold_distance
    assert len(straight["message"]) >= MIN_REJECTION_MESSAGE
    assert "the same score for every question in 2 of 2 conversations" in straight["message"]

    assert (good["decision"], good["rule"], good["message"], good["gold_distance"]) == (
        "approve", "clean", "", "0")
    assert all(good[f"{flag.name}.fired"] == "0" for flag in FLAGS)
    assert float(good["minutes"]) == pytest.approx(2 * MINUTES_PER_EPISODE, abs=0.1)
    assert float(good["median_minutes"]) == pytest.approx(MINUTES_PER_EPISODE, abs=0.1)

    assert (short["decision"], short["rule"], short["gold_distance"]) == ("look", "flagged", "")
    assert (short["short_rationale.fired"], short["short_rationale.judged"]) == ("1", "1")
    assert "explanations shorter than 5 words in 1 of 1 conversations" in short["message"]
    for row in rows.values():  # nothing of another participant in anyone's message
        others = [p.pid for p in rated.people.values()] + ["HYPERLINK", "reasoning"]
        assert not any(other in row["message"] for other in others)


@pytest.mark.server
def test_no_cell_of_the_review_file_starts_a_spreadsheet_formula(rated, tmp_path):
    assert rated.review("-o", str(tmp_path / "review.csv")).exit_code == 0
    # A researcher's message that starts like a formula is recorded, then written again.
    frame = pd.read_csv(tmp_path / "review.csv", dtype=str, keep_default_na=False)
    frame["message"] = "-" * 3 + " " + "Your explanations were too short to show the reading " \
                       "the study asked for; please read the instructions again next time."
    frame.to_csv(tmp_path / "edited.csv", index=False)
    assert rated.decide(tmp_path / "edited.csv").exit_code == 0

    assert rated.review("-o", str(tmp_path / "again.csv")).exit_code == 0

    text = (tmp_path / "again.csv").read_text()
    cells = [cell for record in csv.reader(io.StringIO(text)) for cell in record]
    assert cells and not [cell for cell in cells if cell[:1] in ("=", "+", "-", "@")]
    assert "=HYPERLINK" not in text
    # Read back unchanged: the quote that made it text is no part of the message.
    unchanged = rated.decide(tmp_path / "again.csv")
    assert "decisions recorded: none; 3 as recorded before" in unchanged.output


# --- the researcher's decisions read back ---------------------------------------------------


@pytest.mark.server
def test_edited_decisions_are_recorded_and_marked_on_the_label_studio_tasks(rated, tmp_path):
    assert rated.review("-o", str(tmp_path / "review.csv")).exit_code == 0
    frame = pd.read_csv(tmp_path / "review.csv", dtype=str, keep_default_na=False)
    short = frame["participant"] == rated.people["short"].pid
    straight = frame["participant"] == rated.people["straight"].pid
    frame.loc[short, ["decision", "category"]] = ["reject", "LOW_EFFORT"]
    frame.loc[straight, "category"] = "LOW_EFFORT"
    frame.to_csv(tmp_path / "review.csv", index=False)
    metas = rated.metas()

    recorded = rated.decide(tmp_path / "review.csv")

    assert recorded.exit_code == 0, recorded.output
    assert "decisions recorded: approve 1, reject 2; 0 as recorded before" in recorded.output
    assert "5 annotation(s) marked in Label Studio" in recorded.output
    kept = {row.decision: row for row in rated.decisions().values()}
    assert kept["approve"].message is None
    assert sorted(row.category for row in rated.decisions().values() if row.category) == [
        "LOW_EFFORT", "LOW_EFFORT"]
    marks = rated.marks()
    assert {marks[a] for a in rated.annotations_of("good")} == {"approve"}
    assert {marks[a] for a in rated.annotations_of("short")} == {"reject"}
    assert {marks[a] for a in rated.annotations_of("straight")} == {"reject"}
    # The rest of each task's meta (a stored model evaluation) is kept.
    assert any(metas.values())
    assert {task: {k: v for k, v in meta.items() if k != "sotopia_review"}
            for task, meta in rated.metas().items()} == metas

    # Changed again: the new decision replaces the earlier one, in the database and the marks.
    first = {visit: row.recorded_at for visit, row in rated.decisions().items()}
    frame.loc[straight, ["decision", "message", "category"]] = ["approve", "", ""]
    frame.to_csv(tmp_path / "review.csv", index=False)
    again = rated.decide(tmp_path / "review.csv")
    assert "decisions recorded: approve 1; 2 as recorded before" in again.output
    later = rated.decisions()
    assert sum(later[visit].recorded_at > first[visit] for visit in later) == 1
    assert {rated.marks()[a] for a in rated.annotations_of("straight")} == {"approve"}
    assert len(rated.marks()) == 5


@pytest.mark.server
def test_decisions_recorded_while_label_studio_is_away_are_marked_by_the_same_command_again(
        rated, tmp_path):
    assert rated.review("-o", str(tmp_path / "review.csv")).exit_code == 0
    away = Client(base_url="http://127.0.0.1:9", api_key="k" * 40)  # nothing listens there

    with pytest.raises(LabelStudioError, match="recorded, but marking them in Label Studio "
                                               "failed.*run the same command again"):
        record_review(tmp_path / "review.csv", rated.engine, rated.settings, away)

    assert len(rated.decisions()) == 3 and rated.marks() == {}
    again = rated.decide(tmp_path / "review.csv")
    assert "decisions recorded: none; 3 as recorded before" in again.output
    assert "5 annotation(s) marked in Label Studio" in again.output and len(rated.marks()) == 5


@pytest.mark.server
def test_a_meta_written_meanwhile_by_another_process_is_kept_by_the_marks(
        rated, tmp_path, monkeypatch):
    assert rated.review("-o", str(tmp_path / "review.csv")).exit_code == 0
    decided = read_review(tmp_path / "review.csv", rated.engine, rated.settings)
    last = max(rated.tasks_of("straight") | rated.tasks_of("good") | rated.tasks_of("short"))
    update = rated.client.tasks.update

    def then_another_process(*args, **kwargs):
        """Each update, then (once) `evaluate` in another process storing a model evaluation
        on the last task the marks reach."""
        answer = update(*args, **kwargs)
        if not wrote:
            wrote.append(last)
            meta = dict(rated.client.tasks.get(id=str(last)).meta or {})
            update(id=str(last), meta=meta | {"stored_elsewhere": {"model": "judge"}})
        return answer

    wrote: list[int] = []
    monkeypatch.setattr(rated.client.tasks, "update", then_another_process)

    marked = mark_annotations(rated.engine, rated.settings, rated.client, decided)

    assert wrote == [last] and marked.annotations == 5
    meta = rated.metas()[last]
    assert meta["stored_elsewhere"] == {"model": "judge"} and meta["sotopia_review"]


@pytest.mark.server
@pytest.mark.parametrize("edit, line_column", [
    ({"decision": "reject", "category": "LOW_EFFORT", "message": "x" * 40}, "column message"),
    ({"decision": "maybe"}, "column decision"),
    ({"submission": "f" * 24}, "column submission"),
    ({"participant": "0" * 24}, "column participant"),
    ({"decision": "reject", "category": "TOO_BAD"}, "column category"),
])
def test_a_bad_edited_file_names_file_line_and_column_and_records_nothing(
        rated, tmp_path, edit, line_column):
    assert rated.review("-o", str(tmp_path / "review.csv")).exit_code == 0
    frame = pd.read_csv(tmp_path / "review.csv", dtype=str, keep_default_na=False)
    for column, value in edit.items():
        frame.loc[2, column] = value  # the third row: line 4 of the file
    frame.to_csv(tmp_path / "review.csv", index=False)

    refused = rated.decide(tmp_path / "review.csv")

    assert refused.exit_code != 0
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.output
    assert f"{tmp_path / 'review.csv'}: line 4, {line_column}:" in lines[0]
    assert rated.decisions() == {} and rated.marks() == {}


# --- the gateway's records, without Label Studio ---------------------------------------------


def recorded_visit(engine: Engine, name: str, outcome: str | None,
                   ratings: list[tuple[int, list[dict], float]], study: str = "pilot",
                   state: str = "saved", measured: bool = True) -> int:
    """A visit as the gateway records it: ``(task, results, seconds)`` per rating, each in
    ``state`` (saved ones not yet given an annotation id) and, when ``measured``, with the
    typing counts of rationales typed key by key; its id."""
    moment = datetime.now(UTC)
    with engine.begin() as conn:
        person = conn.execute(insert(participants).values(
            study=study, external_id=name * 24, arrived_at=moment)).inserted_primary_key[0]
        visit_id = conn.execute(insert(visits).values(
            participant_id=person, prolific_study_id="a" * 24, prolific_session_id=name * 24,
            arrived_at=moment, outcome=outcome)).inserted_primary_key[0]
        for number, (task, results, seconds) in enumerate(ratings):
            assignment = conn.execute(insert(assignments).values(
                key=f"{name * 30}{number:02d}", study=study, task_id=task,
                participant_id=person, visit_id=visit_id, state=state, assigned_at=moment,
                results=checked_results(results)[0],  # the scores, as the gateway stores them
                lead_time=seconds, ls_annotation_id=None)
            ).inserted_primary_key[0]
            if measured:
                conn.execute(insert(typing).values(assignment_id=assignment,
                                                   counts=typed(results)))
    return visit_id


def assignment_of(engine: Engine, visit_id: int) -> int:
    """The one assignment of a visit."""
    with engine.connect() as conn:
        return conn.execute(select(assignments.c.id).where(
            assignments.c.visit_id == visit_id)).scalar_one()


def test_typing_qualification_and_unfinished_visits_reach_the_review(tmp_path):
    study = make_study(tmp_path, 1)
    engine = open_store(study.database)
    with engine.begin() as conn:
        conn.execute(insert(episodes), [{"study": "pilot", "task_id": task, "shown": {
            "dialogue": [{"author": "A", "text": "word " * 500}]}} for task in (1, 2)])
    pasted = recorded_visit(engine, "a", "completed", [(1, GOOD, 600.0)], measured=False)
    passed = recorded_visit(engine, "b", "completed", [(2, GOOD, 60.0)])
    recorded_visit(engine, "c", None, [])
    assignment = assignment_of(engine, pasted)
    with engine.begin() as conn:
        conn.execute(insert(typing).values(
            assignment_id=assignment,
            counts={"believability_reasoning_1": {"pasted": 900, "typed": 100}}))
        conn.execute(insert(qualification_results).values(
            visit_id=passed, passed=True, largest_distance=1, scored_at=datetime.now(UTC)))

    rows = review_rows(engine, study).set_index("participant")

    assert rows.loc["a" * 24, ["pasted_rationale.fired", "pasted_rationale.judged"]].tolist() == [1, 1]
    assert rows.loc["a" * 24, ["too_fast.fired", "too_fast.judged"]].tolist() == [0, 1]
    assert rows.loc["a" * 24, "copied_rationale.judged"] == 0  # nobody else rated episode 1
    assert rows.loc["a" * 24, ["suggested", "qualification"]].tolist() == ["look", ""]
    # 500 words take 2 minutes at 250 words a minute: one was spent.
    assert rows.loc["b" * 24, ["too_fast.fired", "qualification"]].tolist() == [1, "passed"]
    assert rows.loc["c" * 24, ["outcome", "suggested", "rule", "category"]].tolist() == [
        UNFINISHED, "look", UNFINISHED, "NO_CODE"]


def test_a_flag_added_to_the_list_is_judged_in_the_review_file_and_on_the_dashboard(tmp_path):
    study = make_study(tmp_path, 1)
    engine = open_store(study.database)
    recorded_visit(engine, "a", "completed", [(1, GOOD, 600.0)])
    # The study's own flag, with the built-in ones: it fires on every rating.
    mine = Flag("read_aloud", "a rationale was read aloud", lambda annotation, limits: (
        True, "the rater said so"))
    flags = (*FLAGS, mine)
    path = tmp_path / "review.csv"

    write_review(engine, study, path, flags=flags)
    (shown,) = participant_rows(engine, study, flags)

    row = pd.read_csv(path, dtype=str, keep_default_na=False).iloc[0]
    assert row[["read_aloud.fired", "read_aloud.judged", "suggested", "rule", "details"]
               ].tolist() == ["1", "1", "look", "flagged", "task 1: read_aloud: the rater said so"]
    assert row["message"].endswith("They found a rationale was read aloud in 1 of 1 "
                                   "conversations. The instructions asked for a considered "
                                   "score and a written explanation of your own for every "
                                   "question.")
    assert [shown["flags"], shown["suggested"]] == ["read_aloud 1/1", "look"]


def test_a_rating_without_typing_counts_is_not_measured_never_clean(tmp_path):
    study = make_study(tmp_path, 1)
    engine = open_store(study.database)
    recorded_visit(engine, "a", "completed", [(1, GOOD, 600.0)], measured=False)
    recorded_visit(engine, "b", "completed", [(2, GOOD, 600.0)])

    rows = review_rows(engine, study).set_index("participant")

    unmeasured, measured = rows.loc["a" * 24], rows.loc["b" * 24]
    assert unmeasured[["pasted_rationale.fired", "pasted_rationale.judged"]].tolist() == [0, 0]
    assert unmeasured[["suggested", "rule", "details"]].tolist() == [
        "look", "typing_not_measured", "task 1: typing_not_measured: no typing counts came "
        "with the rating"]
    assert measured[["pasted_rationale.judged", "suggested", "rule", "details"]].tolist() == [
        1, "approve", "clean", ""]


def test_only_the_later_of_two_matching_rationales_is_flagged_and_names_the_first(tmp_path):
    study = make_study(tmp_path, 1)
    engine = open_store(study.database)
    # "a" arrived first but submitted a minute after "b": the same rationales, word for word.
    copier = recorded_visit(engine, "a", "completed", [(1, GOOD, 600.0)])
    author = recorded_visit(engine, "b", "completed", [(1, GOOD, 600.0)])
    for visit_id, minute in ((author, 0), (copier, 1)):
        with engine.begin() as conn:
            conn.execute(update(assignments).where(assignments.c.visit_id == visit_id).values(
                submitted_at=datetime(2026, 1, 1, 12, minute, tzinfo=UTC)))

    write_review(engine, study, tmp_path / "review.csv")
    rows = pd.read_csv(tmp_path / "review.csv", dtype=str,
                       keep_default_na=False).set_index("participant")

    first, later = rows.loc["b" * 24], rows.loc["a" * 24]
    assert (first["copied_rationale.fired"], first["copied_rationale.judged"]) == ("0", "0")
    assert (first["suggested"], first["message"], first["details"]) == ("approve", "", "")
    assert (later["copied_rationale.fired"], later["copied_rationale.judged"]) == ("1", "1")
    assert (later["suggested"], later["rule"]) == ("look", "flagged")
    assert f"(participant {'b' * 24})" in later["details"]  # the source, for the researcher
    assert "match another participant's in 1 of 1" in later["message"]
    assert "b" * 24 not in later["message"]


def test_time_on_task_is_the_visible_time_where_the_page_measured_it(tmp_path):
    study = make_study(tmp_path, 1)
    engine = open_store(study.database)
    with engine.begin() as conn:
        conn.execute(insert(episodes), [{"study": "pilot", "task_id": 1, "shown": {
            "dialogue": [{"author": "A", "text": "word " * 500}]}}])
    # Both had the page open 10 minutes; one looked at it for 30 s, the other for 5 minutes.
    elsewhere = recorded_visit(engine, "a", "completed", [(1, GOOD, 600.0)])
    reading = recorded_visit(engine, "b", "completed", [(1, GOOD, 600.0)])
    recorded_visit(engine, "c", "completed", [(1, GOOD, 600.0)])
    measured = [{"assignment_id": assignment_of(engine, visit_id), "seconds": seconds}
                for visit_id, seconds in ((elsewhere, 30.0), (reading, 300.0))]
    with engine.begin() as conn:
        conn.execute(insert(visible_time), measured)

    rows = review_rows(engine, study).set_index("participant")
    status = study_status(engine, study).lines(study, "--study study.json")

    # 500 words take 2 minutes at 250 words a minute.
    assert rows.loc["a" * 24, "too_fast.fired"] == 1
    assert rows.loc["b" * 24, "too_fast.fired"] == 0
    assert rows.loc["c" * 24, "too_fast.fired"] == 0  # no measure: the lead time counts
    assert ("  visible time per episode: median 2.8 min (quartiles 1.6 to 3.9 min; 2 ratings "
            "measured)") in status


# --- the suggestion rules, on plain data ----------------------------------------------------


def visit(outcome: str = "completed", *, claimed: float | None = None, unmeasured: str = "",
          **fired: list[bool]) -> ReviewedVisit:
    """A visit whose ratings gave, per flag named, these results (one per rating); its first
    rating's page ``claimed`` more time than passed, or its typing is ``unmeasured``."""
    count = max(map(len, fired.values()), default=1)
    return ReviewedVisit(1, "p" * 24, "s" * 24, outcome, tuple(
        Rated(task, False, 300.0, None, tuple(FlagResult(name, results[task], "")
                                             for name, results in fired.items()),
              *((claimed, unmeasured) if task == 0 else ()))
        for task in range(count)), "")


@pytest.mark.parametrize("shown, rule", [
    (visit(gold_distance=[True, True, False]), "far_from_gold"),
    (visit(gold_distance=[True, False], straight_lining=[True, True]), "straight_lining"),
    (visit(straight_lining=[True, False]), "flagged"),
    (visit(UNFINISHED, short_rationale=[False]), UNFINISHED),
    (visit(too_fast=[False, True]), "flagged"),
    (visit(too_fast=[False, False]), "clean"),
    (visit("no_slots"), "clean"),
    (visit(claimed=86400.0, too_fast=[True, False]), "time_clipped"),
    (visit(unmeasured="no typing counts", too_fast=[False]), "typing_not_measured"),
    (visit(unmeasured="no typing counts", too_fast=[True]), "flagged"),
])
def test_the_first_rule_that_applies_suggests_the_decision(shown, rule):
    assert suggestion(shown).name == rule


def test_every_flag_has_wording_for_the_participant_and_every_rejection_is_long_enough():
    assert set(PARTICIPANT_WORDING) == {flag.name for flag in FLAGS}
    thresholds = FlagThresholds()
    for rule in RULES:
        message = participant_message(visit(short_rationale=[True]), rule, thresholds)
        if rule.decision in ("reject", "look"):
            assert len(message) >= MIN_REJECTION_MESSAGE, rule.name
        else:  # approved, screened out or refused at admission: Prolific is sent no message
            assert message == "", rule.name
    assert participant_message(visit(), APPROVE, thresholds) == ""


def test_a_message_of_a_main_study_never_tells_of_hidden_gold():
    far = visit(gold_distance=[True, True, False], too_fast=[False, False, True])
    rule = suggestion(far)

    message = participant_message(far, rule, FlagThresholds())

    assert rule.name == "far_from_gold"
    assert "scores far from what the conversations support" in message
    # Nothing of references, and no count of the conversations that had one (2 of 3 here).
    for telling in ("reference", "agreed", "researchers'", "2 of 3", "had them"):
        assert telling not in message.lower(), telling
    assert "less time on 1 of 3 conversations" in message


# --- a qualification round: the verdict decides ---------------------------------------------


def off_by(points: int) -> dict[str, int]:
    """``scores_of(1)`` with its first rating that can move ``points`` moved that far."""
    scores = scores_of(1)
    for key in DIMENSION_KEYS:
        name = rating_name(key, AGENTS[0])
        if scores[name] + points in RUBRIC[key].values:
            return scores | {name: scores[name] + points}
        if scores[name] - points in RUBRIC[key].values:
            return scores | {name: scores[name] - points}
    raise AssertionError(f"no rating can move {points} points")


def careful(scores: dict[str, int]) -> list[dict]:
    return rating(scores, "I read the whole exchange and the {key} of agent {agent} shows in "
                          "how they answered the other's proposal")


@pytest.fixture
def round_study(tmp_path: Path) -> StudyFile:
    """A qualification round that lets ratings be 3 points from the reference (the flags'
    own gold distance stays at its default, 2), with one gold episode."""
    study = make_study(tmp_path, 1, name="screening", qualification={
        "max_distance": 3, "screen_out_code": "SCR33N",
        "screen_out_url": "http://127.0.0.1:9/complete?cc=SCR33N"})
    engine = open_store(study.database)
    with engine.begin() as conn:
        conn.execute(insert(episodes).values(study="screening", task_id=1, shown={
            "dialogue": [{"author": "A", "text": "word " * 100}]}))
        conn.execute(insert(gold).values(study="screening", task_id=1, reference=scores_of(1)))
    return study


def scored_visit(engine: Engine, study: StudyFile, name: str, scores: dict[str, int]) -> int:
    """A completed visit of the round with one rating of the gold episode, scored as the
    gateway scores it."""
    visit_id = recorded_visit(engine, name, "completed", [(1, careful(scores), 300.0)],
                              study=study.name)
    score_visit(engine, study.name, visit_id, study.qualification.max_distance)
    return visit_id


def test_in_a_qualification_round_passers_are_approved_and_the_others_screened_out(
        round_study, tmp_path):
    engine = open_store(round_study.database)
    scored_visit(engine, round_study, "a", off_by(3))  # within the round's 3: passed
    scored_visit(engine, round_study, "b", off_by(4))

    rows = review_rows(engine, round_study).set_index("participant")

    passed, failed = rows.loc["a" * 24], rows.loc["b" * 24]
    assert passed[["qualification", "gold_distance", "suggested", "rule", "message"]].tolist() \
        == ["passed", 3, "approve", "qualified", ""]
    # The round's max_distance judges its gold, never the flags' default of 2.
    assert passed[["gold_distance.fired", "gold_distance.judged"]].tolist() == [0, 1]
    assert failed[["qualification", "suggested", "rule", "decision", "message", "category"]
                  ].tolist() == ["failed", SCREENED_OUT, SCREENED_OUT, SCREENED_OUT, "", ""]
    assert failed["gold_distance.fired"] == 1

    # Read back as written: recorded as such, and screened_out is refused for the passer.
    write_review(engine, round_study, tmp_path / "review.csv")
    recorded = record_decisions(engine, read_review(tmp_path / "review.csv", engine,
                                                    round_study))
    assert recorded == {"approve": 1, SCREENED_OUT: 1}
    frame = pd.read_csv(tmp_path / "review.csv", dtype=str, keep_default_na=False)
    frame.loc[frame["participant"] == "a" * 24, "decision"] = SCREENED_OUT
    frame.to_csv(tmp_path / "review.csv", index=False)
    with pytest.raises(StudyError, match="line 2, column decision: screened_out is only for a "
                                         "submission that failed the qualification round"):
        read_review(tmp_path / "review.csv", engine, round_study)


def test_someone_refused_at_admission_gets_no_suggestion_and_may_stay_undecided(tmp_path):
    study = make_study(tmp_path, 1)
    engine = open_store(study.database)
    recorded_visit(engine, "a", "not_admitted", [])
    recorded_visit(engine, "b", "completed", [(1, GOOD, 600.0)])
    write_review(engine, study, tmp_path / "review.csv")

    rows = pd.read_csv(tmp_path / "review.csv", dtype=str, keep_default_na=False)

    refused = rows.set_index("participant").loc["a" * 24]
    assert refused[["outcome", "suggested", "rule", "decision", "message"]].tolist() == [
        "not_admitted", "", "not_admitted", "", ""]
    decided = read_review(tmp_path / "review.csv", engine, study)
    assert [d.decision for d in decided] == ["approve"]  # the refused one: nothing recorded


# --- the review file on disk ------------------------------------------------------------------


def test_writing_the_review_file_again_refuses_to_lose_edits_not_read_back(tmp_path):
    study = make_study(tmp_path, 1)
    engine = open_store(study.database)
    recorded_visit(engine, "a", "completed", [(1, GOOD, 600.0)])
    study_file = write_study(study, tmp_path / "study.json")
    path = tmp_path / "review.csv"

    def write(*options: str) -> Result:
        return CliRunner().invoke(main, ["study", "review", "--study", str(study_file),
                                         "-o", str(path), *options])

    assert write().exit_code == 0
    assert write().exit_code == 0  # the same decisions: nothing to lose
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.loc[0, "decision"] = "look"
    frame.to_csv(path, index=False)
    edited = path.read_text()

    refused = write()

    assert refused.exit_code != 0 and "Traceback" not in refused.output
    assert refused.output.strip().splitlines() == [
        f"Error: {path}: line 2 holds decisions not recorded (an edited review file?): record "
        "them with `study decide`, or give --force to replace it"]
    assert path.read_text() == edited
    assert write("--force").exit_code == 0
    assert pd.read_csv(path, dtype=str)["decision"].tolist() == ["approve"]


def test_a_rejection_prolific_would_refuse_is_one_line_naming_all_it_lacks(tmp_path):
    study = make_study(tmp_path, 1)
    engine = open_store(study.database)
    recorded_visit(engine, "a", "completed", [(1, GOOD, 600.0)])
    write_review(engine, study, tmp_path / "review.csv")
    frame = pd.read_csv(tmp_path / "review.csv", dtype=str, keep_default_na=False)
    frame.loc[0, ["decision", "message", "category"]] = ["reject", "x" * 40, "TOO_BAD"]
    frame.to_csv(tmp_path / "review.csv", index=False)

    with pytest.raises(StudyError) as refused:
        read_review(tmp_path / "review.csv", engine, study)

    assert str(refused.value).startswith(f"{tmp_path / 'review.csv'}: line 2, column message: ")
    assert "at least 100 characters (Prolific's minimum), not 40" in str(refused.value)
    assert "rejection category 'TOO_BAD' is none of Prolific's" in str(refused.value)


def test_ratings_not_yet_saved_in_label_studio_are_counted_for_a_later_run(tmp_path):
    study = make_study(tmp_path, 1)
    engine = open_store(study.database)
    recorded_visit(engine, "a", "completed", [(1, GOOD, 600.0), (2, GOOD, 600.0)],
                   state="saving")
    write_review(engine, study, tmp_path / "review.csv")
    # Nothing to mark yet, so Label Studio is not even asked (nothing listens there).
    away = Client(base_url="http://127.0.0.1:9", api_key="k" * 40)

    done = record_review(tmp_path / "review.csv", engine, study, away)

    assert done.recorded == {"approve": 1}
    assert (done.marked.annotations, done.marked.unsaved) == (0, 2)


def test_a_rationale_pasted_from_the_stored_judge_is_flagged_in_the_review(
        ls_client: Client, project_title: str, tmp_path: Path):
    """The episode's task holds GPT-4's evaluation in its meta, never shown to a participant;
    one who pastes its reasoning anyway (a sentence added) is flagged in the review, the
    judge named, and the rest of their rationales are their own."""
    project = study_project(ls_client, project_title, episodes=1)
    study = make_study(tmp_path, project, episodes_per_participant=1)
    engine = open_store(study.database)
    app = create_app(prepare_gateway(study, ls_client, engine), secret=SECRET, editor=EDITOR,
                     https_only=False)
    judge = load_episodes(SAMPLE_EPISODES).episodes[0].evaluation
    field = reasoning_name("goal", 1)
    pasted = f"{judge.flat()[field]} I agree."
    results = [dict(result, value={"text": [pasted]}) if result["from_name"] == field
               else result for result in GOOD]
    someone = Participant(TestClient(app, base_url="http://127.0.0.1"))
    someone.arrive()
    someone.read_instructions()
    assert someone.open_episode().url.path.endswith("/rate")
    assert judge.flat()[field] not in str(someone.boot)  # the page never holds it
    assert someone.submit(results, typing=typed(results)).status_code == 200

    [row] = review_rows(engine, study).to_dict("records")
    assert (row["rationale_echoes_judge.fired"], row["rationale_echoes_judge.judged"]) == (1, 1)
    assert (f"rationale_echoes_judge: matches a judge's reasoning on the episode: {field} "
            f"({judge.evaluator})") in row["details"]
