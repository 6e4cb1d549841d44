"""A researcher pays bonuses once: `study pay --bonus-per-extra` gives each approved submission a
bonus per rating on a slot the adaptive rule added, sets them up on Prolific as a bulk bonus
and pays it, each step recorded, so a second run pays nothing, a pay call left unanswered is
never sent again, and the protocol record counts the bonuses and their totals.

Prolific is the stand-in of ``prolific_stand_in`` (real HTTP on 127.0.0.1), whose pay call
pays again each time it is called, as Prolific's does. The gateway's database is SQLite in a
temporary folder; visits, ratings and decisions are written as the gateway records them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner, Result
from prolific_stand_in import TOKEN, StandIn
from sqlalchemy import Engine, insert, select
from conftest import flat_of
from study_support import answers, make_study, prolific_id

from sotopia_ls.cli import main
from sotopia_ls.errors import StudyError
from sotopia_ls.study.payment.apply import apply_decisions
from sotopia_ls.study.payment.bonus import BonusRule
from sotopia_ls.study.payment.prolific import Prolific
from sotopia_ls.study.protocol import study_protocol
from sotopia_ls.study.screening.review import read_review, record_decisions
from sotopia_ls.study.serving import arrival
from sotopia_ls.study.serving.arrival import ProlificParameters
from sotopia_ls.study.settings import StudyFile, write_study
from sotopia_ls.study.states import AssignmentState
from sotopia_ls.study.store import (
    added_ratings,
    assignments,
    bonus_payments,
    decisions,
    gold,
    now,
    open_store,
)

PROLIFIC_STUDY = "ef" * 12
PAY = "/api/v1/bulk-bonus-payments/{}/pay/"


@pytest.fixture
def study(tmp_path: Path) -> StudyFile:
    return make_study(tmp_path, 1, adaptive={"max_raters": 3},
                      reward={"cents": 200, "currency": "GBP"})


def submission(engine: Engine, study: StudyFile, decision: str, extra: int
               ) -> ProlificParameters:
    """A visit that rated ``extra`` episodes on added slots (and one on an ordinary slot),
    with its recorded decision."""
    link = ProlificParameters(PROLIFIC_PID=prolific_id(), STUDY_ID=PROLIFIC_STUDY,
                              SESSION_ID=prolific_id())
    visit = arrival.arrive(engine, study.name, link)
    with engine.begin() as conn:
        for task in range(extra + 1):
            made = conn.execute(insert(assignments).values(
                key=prolific_id(), study=study.name, task_id=task, state=AssignmentState.SAVED,
                participant_id=visit.participant_id, visit_id=visit.id, assigned_at=now(),
                submitted_at=now(), results={}))
            if task:
                conn.execute(insert(added_ratings).values(
                    assignment_id=made.inserted_primary_key[0], slot=3))
        conn.execute(insert(decisions).values(visit_id=visit.id, decision=decision,
                                              recorded_at=now()))
    return link


def pay(path: Path, stand_in: StandIn, *options: str) -> Result:
    return CliRunner().invoke(main, [
        "study", "pay", "--study", str(path), "--prolific-url", stand_in.base_url,
        "--bonus-per-extra", "0.30", *options], env={"PROLIFIC_TOKEN": TOKEN})


def test_bonuses_for_extra_ratings_are_set_up_and_paid_once_across_two_runs(
        tmp_path, study, prolific, export_file):
    engine = open_store(study.database)
    extra_rater = submission(engine, study, "approve", extra=2)
    submission(engine, study, "approve", extra=0)  # no added slot: no bonus
    submission(engine, study, "look", extra=1)  # not approved: no bonus
    path = write_study(study, tmp_path / "study.json")

    dry = pay(path, prolific)

    assert dry.exit_code == 0, dry.output
    assert (f"bonus    submission {extra_rater.SESSION_ID} (participant "
            f"{extra_rater.PROLIFIC_PID}): £0.60 for 2 rating(s) on added slots") in dry.output
    assert prolific.requests == []

    first = pay(path, prolific, "--send")

    assert first.exit_code == 0, first.output
    (bulk,) = prolific.bonuses
    assert (bulk["study"], bulk["csv_bonuses"]) == (PROLIFIC_STUDY,
                                                    f"{extra_rater.SESSION_ID},0.60\n")
    assert bulk["paid"] == 1
    assert ("sent: 2 approved, 0 rejected, bonuses of 1 submission(s) set up in 1 bulk "
            "bonus(es), 1 bulk bonus(es) paid") in first.output
    assert TOKEN not in first.output

    second = pay(path, prolific, "--send")

    assert second.exit_code == 0, second.output
    assert len(prolific.bonuses) == 1 and bulk["paid"] == 1
    assert "bonus    " not in second.output
    assert study_protocol(engine, study)["bonuses"] == {
        "submissions": 1, "total": 0.6, "paid_submissions": 1, "paid_total": 0.6,
        "currency": "GBP"}
    out = tmp_path / "out"
    exported = CliRunner().invoke(main, ["export", "--from-file", str(export_file), "-o",
                                         str(out), "--study", str(path)])
    assert exported.exit_code == 0, exported.output
    assert "1 session got a bonus, 0.60 GBP in all, paid through Prolific." in " ".join(
        (out / "protocol.md").read_text().split())


def test_a_pay_call_left_unanswered_is_never_sent_again(tmp_path, study, prolific):
    engine = open_store(study.database)
    submission(engine, study, "approve", extra=1)
    impatient = Prolific(TOKEN, base_url=prolific.base_url, timeout=0.5, retries=2,
                         backoff=0.01)
    prolific.script[PAY.format("bulk-1")] = [("sleep", 1.5)]  # paid, its answer too late

    first = apply_decisions(engine, study, prolific=impatient, send=True,
                            bonus_rule=BonusRule(per_extra=30))

    assert first.sent.stopped and "no complete answer" in first.sent.failures[0]
    deadline = time.monotonic() + 10
    while not prolific.bonuses[0]["paid"] and time.monotonic() < deadline:
        time.sleep(0.05)

    again = pay(write_study(study, tmp_path / "study.json"), prolific, "--send")

    assert again.exit_code == 0, again.output
    assert ("unknown  bulk bonus bulk-1: its pay call was sent and no answer came; check it "
            "on Prolific (it is never sent again)") in again.output
    assert [path for _, path, _ in prolific.sent("POST")].count(PAY.format("bulk-1")) == 1
    assert prolific.bonuses[0]["paid"] == 1


def test_a_refused_pay_call_paid_nothing_and_is_sent_by_the_next_run(tmp_path, study, prolific,
                                                                     export_file):
    engine = open_store(study.database)
    submission(engine, study, "approve", extra=1)
    prolific.script[PAY.format("bulk-1")] = [
        (400, {"error": {"detail": "Insufficient funds"}}, {})]
    path = write_study(study, tmp_path / "study.json")

    refused = pay(path, prolific, "--send")

    assert refused.exit_code != 0
    assert "pay bulk bonus bulk-1: Prolific answered HTTP 400: Insufficient funds" \
        in refused.output
    with engine.connect() as conn:
        assert conn.execute(select(bonus_payments.c.state)).scalars().all() == ["set_up"]
    out = tmp_path / "out"
    assert CliRunner().invoke(main, ["export", "--from-file", str(export_file), "-o", str(out),
                                     "--study", str(path)]).exit_code == 0
    assert ("1 session got a bonus, 0.30 GBP in all; 0 of them (0.00 GBP) paid through "
            "Prolific, the others recorded or set up there and not paid yet.") in " ".join(
        (out / "protocol.md").read_text().split())

    paid = pay(path, prolific, "--send")

    assert paid.exit_code == 0, paid.output
    assert "pay      bulk bonus bulk-1 (set up before)" in paid.output
    assert len(prolific.bonuses) == 1 and prolific.bonuses[0]["paid"] == 1


def test_a_bonus_per_gold_rating_counts_only_those_within_the_distance(tmp_path, study,
                                                                         prolific):
    engine = open_store(study.database)
    link = submission(engine, study, "approve", extra=0)
    scores = flat_of(answers(1))
    near = {name: score for name, score in scores.items() if isinstance(score, int)}
    far = {**near, "believability_1": near["believability_1"] + 5}
    with engine.begin() as conn:
        conn.execute(assignments.update().values(results=scores))
        visit_id = conn.execute(select(assignments.c.visit_id)).scalar_one()
        participant = conn.execute(select(assignments.c.participant_id)).scalar_one()
        for task, reference in ((101, near), (102, far)):  # gold episodes it rated
            conn.execute(insert(gold).values(study=study.name, task_id=task,
                                             reference=reference))
            conn.execute(insert(assignments).values(
                key=prolific_id(), study=study.name, task_id=task, results=scores,
                state=AssignmentState.SAVED, participant_id=participant, visit_id=visit_id,
                assigned_at=now(), submitted_at=now()))

    result = pay(write_study(study, tmp_path / "study.json"), prolific, "--bonus-per-gold",
                 "0.10")

    assert result.exit_code == 0, result.output
    assert (f"bonus    submission {link.SESSION_ID} (participant {link.PROLIFIC_PID}): £0.10 "
            "for 1 gold rating(s) within 2") in result.output


def test_a_bonus_written_in_the_review_file_is_recorded_once_and_paid_once(
        tmp_path, study, prolific):
    engine = open_store(study.database)
    links = [ProlificParameters(PROLIFIC_PID=prolific_id(), STUDY_ID=PROLIFIC_STUDY,
                                SESSION_ID=prolific_id()) for _ in range(2)]
    for link in links:
        arrival.arrive(engine, study.name, link)
    path = write_study(study, tmp_path / "study.json")
    review = tmp_path / "review.csv"
    assert CliRunner().invoke(main, ["study", "review", "--study", str(path), "-o",
                                     str(review)]).exit_code == 0
    edited = pd.read_csv(review, dtype=str, keep_default_na=False)
    edited["decision"], edited["message"], edited["category"] = ["approve", "look"], "", ""
    edited["bonus"] = ["0.50", "0.25"]  # the second is not approved
    edited.to_csv(review, index=False)

    with pytest.raises(StudyError, match=r"line 3, column bonus: only an approved submission"):
        read_review(review, engine, study)
    edited["bonus"] = ["0.50", ""]
    edited.to_csv(review, index=False)
    record_decisions(engine, read_review(review, engine, study))
    record_decisions(engine, read_review(review, engine, study))  # again: recorded once

    first = pay(path, prolific, "--send")
    second = pay(path, prolific, "--send")

    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    (bulk,) = prolific.bonuses
    assert (bulk["csv_bonuses"], bulk["paid"]) == (f"{links[0].SESSION_ID},0.50\n", 1)
    edited["bonus"] = ["0.75", ""]
    edited.to_csv(review, index=False)
    with pytest.raises(StudyError, match=r"recorded as 0\.50 already"):
        record_decisions(engine, read_review(review, engine, study))


def test_a_bonus_written_after_study_decide_is_not_lost_when_the_review_file_is_rewritten(
        tmp_path, study):
    engine = open_store(study.database)
    link = ProlificParameters(PROLIFIC_PID=prolific_id(), STUDY_ID=PROLIFIC_STUDY,
                              SESSION_ID=prolific_id())
    arrival.arrive(engine, study.name, link)
    path, review = write_study(study, tmp_path / "study.json"), tmp_path / "review.csv"

    def write_review() -> Result:
        return CliRunner().invoke(main, ["study", "review", "--study", str(path), "-o",
                                         str(review)])

    assert write_review().exit_code == 0
    edited = pd.read_csv(review, dtype=str, keep_default_na=False)
    edited["decision"], edited["message"], edited["category"] = "approve", "", ""
    edited.to_csv(review, index=False)
    record_decisions(engine, read_review(review, engine, study))  # decided, no bonus
    assert write_review().exit_code == 0
    edited = pd.read_csv(review, dtype=str, keep_default_na=False)
    edited["bonus"] = "0.5"  # a bonus given afterwards, not recorded yet
    edited.to_csv(review, index=False)
    with_bonus = review.read_text()

    refused = write_review()

    assert refused.exit_code != 0 and "Traceback" not in refused.output
    assert "line 2 holds decisions not recorded" in refused.output
    assert review.read_text() == with_bonus
    record_decisions(engine, read_review(review, engine, study))
    assert write_review().exit_code == 0  # recorded as 0.50: the same amount, nothing lost
    assert pd.read_csv(review, dtype=str)["bonus"].tolist() == ["0.50"]
