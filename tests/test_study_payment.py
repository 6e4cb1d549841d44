"""A researcher pays a reviewed study on Prolific: the decisions recorded from the review file are
approved in bulk and rejected one by one, a qualification round's passers become a participant
group, a dry run sends nothing, a rerun sends nothing twice, and without a token the same
decisions are written as the files Prolific's own screens take.

Prolific is the stand-in of ``prolific_stand_in`` (real HTTP on 127.0.0.1), which records every
request and can refuse, throttle or fail. The gateway's database is SQLite in a temporary
folder, participants arrive as the gateway records them.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner, Result
from prolific_stand_in import TOKEN, StandIn, serving
from sqlalchemy import Engine, insert, select, update
from study_support import make_study, prolific_id

from sotopia_ls.cli import main
from sotopia_ls.errors import StudyError
from sotopia_ls.study.payment.apply import Payment, apply_decisions
from sotopia_ls.study.payment.prolific import Prolific
from sotopia_ls.study.screening.review import read_review, record_decisions
from sotopia_ls.study.serving import arrival
from sotopia_ls.study.serving.arrival import ProlificParameters
from sotopia_ls.study.settings import StudyFile, write_study
from sotopia_ls.study.store import (
    allow_list,
    decisions,
    now,
    open_store,
    participants,
    prolific_actions,
    prolific_groups,
    visits,
)

PROLIFIC_STUDY = "ab" * 12
REASON = ("Every rationale was the same sentence pasted under all seven dimensions for both "
          "agents, so the ratings could not be used as the instructions asked.")
TRANSITION = "/api/v1/submissions/{}/transition/"
BULK = "/api/v1/submissions/bulk-approve/"


@pytest.fixture
def study(tmp_path: Path) -> StudyFile:
    return make_study(tmp_path, 1)


@pytest.fixture
def engine(study: StudyFile) -> Engine:
    return open_store(study.database)


def client(stand_in: StandIn) -> Prolific:
    return Prolific(TOKEN, base_url=stand_in.base_url, backoff=0.01, retries=2)


def visitor(engine: Engine, study: StudyFile) -> arrival.Visit:
    """A participant who arrived from Prolific (the visit is one submission)."""
    return arrival.arrive(engine, study.name, ProlificParameters(
        PROLIFIC_PID=prolific_id(), STUDY_ID=PROLIFIC_STUDY, SESSION_ID=prolific_id()))


def ids(engine: Engine, visit: arrival.Visit) -> tuple[str, str]:
    """The visit's (submission id, participant id) on Prolific."""
    with engine.connect() as conn:
        row = conn.execute(select(visits.c.prolific_session_id, participants.c.external_id)
                           .join(participants, participants.c.id == visits.c.participant_id)
                           .where(visits.c.id == visit.id)).one()
    return row.prolific_session_id, row.external_id


def decide(engine: Engine, visit: arrival.Visit, decision: str, message: str | None = None,
           category: str | None = None) -> None:
    # Straight into the decisions table, as reading the edited review file records them
    # (study/screening/review.py's read_review); this suite is about what happens after.
    with engine.begin() as conn:
        conn.execute(insert(decisions).values(
            visit_id=visit.id, decision=decision, message=message, category=category,
            recorded_at=now()))


def change(engine: Engine, visit: arrival.Visit, decision: str) -> None:
    with engine.begin() as conn:
        conn.execute(update(decisions).where(decisions.c.visit_id == visit.id)
                     .values(decision=decision))


def reviewed(engine: Engine, study: StudyFile, *kinds: str) -> list[arrival.Visit]:
    """One visit per decision given, each recorded; rejections with a valid message."""
    made = []
    for kind in kinds:
        visit = visitor(engine, study)
        decide(engine, visit, kind, *((REASON, "LOW_EFFORT") if kind == "reject" else ()))
        made.append(visit)
    return made


def pay(engine: Engine, study: StudyFile, stand_in: StandIn | None, **options: object) -> Payment:
    return apply_decisions(engine, study, prolific=client(stand_in) if stand_in else None,
                           **options)


def sent_actions(engine: Engine) -> dict[int, str]:
    with engine.connect() as conn:
        return {row.visit_id: row.action for row in conn.execute(select(prolific_actions))}


def test_a_dry_run_prints_every_action_and_sends_nothing(engine, study, prolific):
    approved, rejected, looked = reviewed(engine, study, "approve", "reject", "look")

    payment = pay(engine, study, prolific)

    lines = payment.lines()
    assert lines[0] == (f"study {study.name}: 1 to approve (in 1 bulk-approve request(s)), "
                        "1 to reject, 1 waiting for your decision, 0 conflict(s), 0 sent before")
    submission, participant = ids(engine, approved)
    assert f"approve  submission {submission} (participant {participant})" in lines
    submission, participant = ids(engine, rejected)
    assert f"reject   submission {submission} (participant {participant}) LOW_EFFORT: {REASON}" \
        in lines
    submission, participant = ids(engine, looked)
    assert any(line.startswith(f"look     submission {submission}") for line in lines)
    assert lines[-1] == "dry run: nothing was sent to Prolific (add --send to send it)"
    assert prolific.requests == []
    assert sent_actions(engine) == {}


def test_sending_approves_and_rejects_exactly_the_decided_rows_and_a_rerun_sends_nothing(
        engine, study, prolific):
    first, second, rejected, looked = reviewed(engine, study, "approve", "approve", "reject",
                                               "look")
    undecided = visitor(engine, study)  # not in the review's decisions yet: left alone

    payment = pay(engine, study, prolific, send=True)

    approvals = [ids(engine, visit)[0] for visit in (first, second)]
    assert prolific.sent() == [
        ("POST", BULK, {"submission_ids": approvals}),
        ("POST", TRANSITION.format(ids(engine, rejected)[0]),
         {"action": "REJECT", "message": REASON, "rejection_category": "LOW_EFFORT"})]
    assert payment.sent.lines() == ["sent: 2 approved, 1 rejected"]
    assert sent_actions(engine) == {first.id: "approve", second.id: "approve",
                                    rejected.id: "reject"}
    assert looked.id not in sent_actions(engine) and undecided.id not in sent_actions(engine)

    again = pay(engine, study, prolific, send=True)

    assert len(prolific.requests) == 2
    assert again.plan.lines()[0].endswith(
        "0 to approve (in 0 bulk-approve request(s)), 0 to reject, 1 waiting for your "
        "decision, 0 conflict(s), 3 sent before")


def test_a_refused_rejection_names_the_participant_and_the_others_are_still_sent(
        engine, study, prolific):
    refused, accepted = reviewed(engine, study, "reject", "reject")
    submission, participant = ids(engine, refused)
    prolific.script[TRANSITION.format(submission)] = [(400, {"error": {
        "detail": {"status": ["Submission is not awaiting review."]}}}, {})]

    payment = pay(engine, study, prolific, send=True)

    assert payment.sent.failures == [
        (f"reject submission {submission}: Prolific answered HTTP 400: status: Submission is "
         f"not awaiting review. (participant {participant})")]
    assert sent_actions(engine) == {accepted.id: "reject"}

    # Once the cause is fixed on Prolific, a rerun sends only the one refused.
    pay(engine, study, prolific, send=True)

    assert [path for _, path, _ in prolific.sent()] == [
        TRANSITION.format(submission), TRANSITION.format(ids(engine, accepted)[0]),
        TRANSITION.format(submission)]
    assert sent_actions(engine) == {accepted.id: "reject", refused.id: "reject"}


def test_a_throttled_bulk_approval_is_sent_again_and_recorded_once(engine, study, prolific):
    (approved,) = reviewed(engine, study, "approve")
    prolific.script[BULK] = [(429, {"detail": "Request was throttled."}, {"Retry-After": "0"})]

    payment = pay(engine, study, prolific, send=True)

    assert payment.sent.failures == []
    assert prolific.sent() == [("POST", BULK, {"submission_ids": [ids(engine, approved)[0]]})] * 2
    assert sent_actions(engine) == {approved.id: "approve"}


def test_prolific_down_stops_the_run_and_keeps_what_was_sent_before(engine, study, prolific):
    approved, first, second = reviewed(engine, study, "approve", "reject", "reject")
    down = TRANSITION.format(ids(engine, first)[0])
    prolific.script[down] = [(500, {"detail": "Server error"}, {})] * 3  # every try of 1 + 2

    payment = pay(engine, study, prolific, send=True)

    assert payment.sent.stopped
    assert payment.sent.failures == [
        (f"reject submission {ids(engine, first)[0]}: Prolific answered HTTP 500 (3 tries) "
         f"(participant {ids(engine, first)[1]})")]
    assert sent_actions(engine) == {approved.id: "approve"}
    assert TRANSITION.format(ids(engine, second)[0]) not in [p for _, p, _ in prolific.sent()]

    pay(engine, study, prolific, send=True)  # Prolific is back

    assert sent_actions(engine) == {approved.id: "approve", first.id: "reject",
                                    second.id: "reject"}
    assert [p for _, p, _ in prolific.sent()].count(BULK) == 1


def test_a_redirect_away_from_prolific_is_not_followed_and_the_rerun_sends_to_prolific(
        engine, study, prolific):
    """Prolific's address answers the approval with a redirect to another host: following
    it would hand the submission ids to that host and record them as approved, so that no
    rerun would ever approve them on Prolific."""
    approved, rejected = reviewed(engine, study, "approve", "reject")
    with serving() as elsewhere:
        prolific.script[BULK] = [(307, b"", {"Location": f"{elsewhere.base_url}submissions/"
                                             "bulk-approve/"})]

        payment = pay(engine, study, prolific, send=True)

        assert elsewhere.requests == []
    assert payment.sent.stopped
    assert payment.sent.failures == [
        f"bulk-approve submissions {ids(engine, approved)[0]} … {ids(engine, approved)[0]} (1): "
        f"Prolific answered HTTP 307, a redirect to 127.0.0.1:{elsewhere.server_address[1]}; "
        "not followed"]
    assert sent_actions(engine) == {}

    pay(engine, study, prolific, send=True)

    assert [path for _, path, _ in prolific.sent()] == [
        BULK, BULK, TRANSITION.format(ids(engine, rejected)[0])]
    assert sent_actions(engine) == {approved.id: "approve", rejected.id: "reject"}


def test_a_decision_changed_after_its_approval_was_sent_is_a_conflict_not_sent(
        engine, study, prolific):
    (visit,) = reviewed(engine, study, "approve")
    pay(engine, study, prolific, send=True)
    change(engine, visit, "reject")

    payment = pay(engine, study, prolific, send=True)

    submission, participant = ids(engine, visit)
    assert (f"conflict submission {submission} (participant {participant}): approved on "
            "Prolific already, now 'reject' in the review; not sent (Prolific cannot undo a "
            "status change)") in payment.plan.lines()
    assert len(prolific.requests) == 1
    assert sent_actions(engine) == {visit.id: "approve"}


def test_a_rejection_prolific_would_refuse_stops_the_plan_naming_the_participant(
        engine, study, prolific):
    visit = visitor(engine, study)
    decide(engine, visit, "reject", "Too fast.", "TOO_QUICKLY")

    with pytest.raises(StudyError) as caught:
        pay(engine, study, prolific, send=True)

    submission, participant = ids(engine, visit)
    assert str(caught.value) == (
        f"study pilot: the rejection of submission {submission} (participant {participant}) "
        f"(visit {visit.id}): the message to the participant must be a text of at least 100 "
        "characters (Prolific's minimum), not 9")
    assert prolific.requests == []


def qualification(tmp_path: Path) -> StudyFile:
    return make_study(tmp_path, 1, name="qual-round", qualification={
        "screen_out_code": "SCR33N", "screen_out_url": "http://127.0.0.1:9/complete?cc=SCR33N"})


def admit(engine: Engine, study: StudyFile, *passers: str) -> None:
    with engine.begin() as conn:
        for passer in passers:
            conn.execute(insert(allow_list).values(qualification=study.name,
                                                   external_id=passer, added_at=now()))


def test_the_allow_list_becomes_a_participant_group_and_a_rerun_adds_only_new_passers(
        tmp_path, prolific):
    study = qualification(tmp_path)
    engine = open_store(study.database)
    first, second, third = (prolific_id() for _ in range(3))
    admit(engine, study, first, second)

    planned = pay(engine, study, prolific, workspace_id="ws-7")
    payment = pay(engine, study, prolific, send=True, workspace_id="ws-7")

    assert (f"group    add 2 passer(s) of qual-round to a new participant group 'qual-round: "
            f"passed the qualification' in workspace ws-7: {first}, {second}") \
        in planned.plan.lines()

    # Looked for by name in the workspace first, then made.
    assert prolific.sent("GET") == [
        ("GET", "/api/v1/participant-groups/?filter%5Bworkspace_id%5D=ws-7", None)]
    assert prolific.sent("POST") == [("POST", "/api/v1/participant-groups/", {
        "name": "qual-round: passed the qualification", "workspace_id": "ws-7",
        "participant_ids": [first, second]})]
    assert payment.sent.lines() == [
        "sent: 0 approved, 0 rejected, 2 added to participant group group-1"]

    admit(engine, study, third)
    pay(engine, study, prolific, send=True, workspace_id="ws-7")
    pay(engine, study, prolific, send=True, workspace_id="ws-7")

    assert prolific.sent()[2:] == [
        ("POST", "/api/v1/participant-groups/group-1/participants/",
         {"participant_ids": [third]})]


def test_making_the_group_without_a_workspace_is_refused_before_anything_is_sent(
        tmp_path, prolific):
    study = qualification(tmp_path)
    engine = open_store(study.database)
    passer = prolific_id()
    admit(engine, study, passer)
    reviewed(engine, study, "approve")

    assert pay(engine, study, prolific).plan.lines()[-1].endswith(
        f"in workspace ? (give --workspace ID to send it): {passer}")
    with pytest.raises(StudyError, match=r"needs the Prolific workspace .*: give --workspace"):
        pay(engine, study, prolific, send=True)

    assert prolific.requests == []


def test_without_a_token_the_files_hold_exactly_the_ids_and_reasons(tmp_path, prolific):
    study = qualification(tmp_path)
    engine = open_store(study.database)
    approved, rejected, _ = reviewed(engine, study, "approve", "reject", "look")
    passer = prolific_id()
    admit(engine, study, passer)
    folder = tmp_path / "for-prolific"

    payment = pay(engine, study, None, files_dir=folder)

    assert sorted(path.name for path in folder.iterdir()) == [
        "allow-list.txt", f"approve-{PROLIFIC_STUDY}.txt", f"reject-{PROLIFIC_STUDY}.csv"]
    assert (folder / f"approve-{PROLIFIC_STUDY}.txt").read_text() == f"{ids(engine, approved)[1]}\n"
    assert (folder / "allow-list.txt").read_text() == f"{passer}\n"
    table = pd.read_csv(folder / f"reject-{PROLIFIC_STUDY}.csv", dtype=str)
    assert table.to_dict("records") == [{
        "participant_id": ids(engine, rejected)[1], "submission_id": ids(engine, rejected)[0],
        "rejection_category": "LOW_EFFORT", "message": REASON}]
    assert payment.files == sorted(folder.iterdir())
    assert prolific.requests == [] and sent_actions(engine) == {}

    # The folder is replaced whole: a decision changed to look leaves no approval behind.
    change(engine, approved, "look")
    pay(engine, study, None, files_dir=folder)

    assert not (folder / f"approve-{PROLIFIC_STUDY}.txt").exists()


def test_sending_without_a_token_says_how_to_go_on(engine, study):
    reviewed(engine, study, "approve")

    with pytest.raises(StudyError, match="set PROLIFIC_TOKEN, or write the files .* "
                                         "--prolific-files DIR"):
        pay(engine, study, None, send=True)


# --- the researcher's commands: the review file edited, read back, then `study pay` ---------


def run(runner: CliRunner, command: str, study_file: Path, *options: str,
        env: dict[str, str] | None = None) -> Result:
    return runner.invoke(main, ["study", command, "--study", str(study_file), *options],
                         env={"PROLIFIC_TOKEN": "", **(env or {})})


def test_apply_approves_and_rejects_exactly_the_edited_rows_and_a_second_apply_sends_nothing(
        tmp_path, study, engine, prolific):
    study_file = write_study(study, tmp_path / "study.json")
    arrived = [visitor(engine, study) for _ in range(4)]
    runner = CliRunner()
    assert run(runner, "review", study_file, "-o", str(tmp_path / "review.csv")).exit_code == 0
    # The researcher edits the file: two approvals, a rejection with its message, one to look
    # at again; the file is read back as `study decide` reads it.
    edited = pd.read_csv(tmp_path / "review.csv", dtype=str, keep_default_na=False)
    decided = dict(zip([ids(engine, visit)[0] for visit in arrived],
                       ["approve", "reject", "approve", "look"], strict=True))
    edited["decision"] = edited["submission"].map(decided)
    edited["message"] = [REASON if d == "reject" else "" for d in edited["decision"]]
    edited["category"] = ["LOW_EFFORT" if d == "reject" else "" for d in edited["decision"]]
    edited.to_csv(tmp_path / "review.csv", index=False)
    record_decisions(engine, read_review(tmp_path / "review.csv", engine, study))

    dry = run(runner, "pay", study_file, "--prolific-url", prolific.base_url)

    assert dry.exit_code == 0, dry.output
    assert "2 to approve (in 1 bulk-approve request(s)), 1 to reject, 1 waiting" in dry.output
    assert dry.output.endswith("dry run: nothing was sent to Prolific (add --send to send "
                               "it)\n")
    assert prolific.requests == []

    sent = run(runner, "pay", study_file, "--send", "--prolific-url", prolific.base_url,
               env={"PROLIFIC_TOKEN": TOKEN})

    assert sent.exit_code == 0, sent.output
    approved = [s for s, d in decided.items() if d == "approve"]
    (rejected,) = [s for s, d in decided.items() if d == "reject"]
    assert prolific.sent() == [
        ("POST", BULK, {"submission_ids": approved}),
        ("POST", TRANSITION.format(rejected),
         {"action": "REJECT", "message": REASON, "rejection_category": "LOW_EFFORT"})]
    assert "sent: 2 approved, 1 rejected" in sent.output
    assert TOKEN not in sent.output

    again = run(runner, "pay", study_file, "--send", "--prolific-url", prolific.base_url,
                env={"PROLIFIC_TOKEN": TOKEN})

    assert again.exit_code == 0, again.output
    assert "0 to approve (in 0 bulk-approve request(s)), 0 to reject" in again.output
    assert len(prolific.requests) == 2


def test_a_failed_action_exits_non_zero_after_saying_which(tmp_path, study, engine, prolific):
    study_file = write_study(study, tmp_path / "study.json")
    (visit,) = reviewed(engine, study, "reject")
    submission, participant = ids(engine, visit)
    prolific.script[TRANSITION.format(submission)] = [(400, {"detail": "Not awaiting review."},
                                                       {})]

    result = run(CliRunner(), "pay", study_file, "--send", "--prolific-url", prolific.base_url,
                 env={"PROLIFIC_TOKEN": TOKEN})

    assert result.exit_code == 1
    assert (f"failed: reject submission {submission}: Prolific answered HTTP 400: Not awaiting "
            f"review. (participant {participant})\n") in result.output
    assert result.output.endswith("Error: 1 action(s) failed (above); run the same command "
                                  "again once fixed: it sends only what is left\n")


def test_sending_without_a_token_is_refused_in_one_line(tmp_path, study):
    study_file = write_study(study, tmp_path / "study.json")

    result = run(CliRunner(), "pay", study_file, "--send")

    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "set PROLIFIC_TOKEN, or write the files for Prolific's own" in result.output


@pytest.mark.parametrize(("options", "moved", "command"), [
    (["--apply"], "--apply", "pay"),
    (["--apply", "--send"], "--apply", "pay"),
    (["--prolific-files", "paid"], "--prolific-files", "pay"),
    (["-o", "r.csv", "--decisions", "r.csv"], "--decisions", "decide"),
])
def test_review_options_that_became_commands_name_the_command(tmp_path, study, options, moved,
                                                               command):
    study_file = write_study(study, tmp_path / "study.json")

    result = run(CliRunner(), "review", study_file, *options)

    assert result.exit_code != 0
    assert result.output == (f"Error: {moved} left `study review`: use "
                             f"`sotopia-ls study {command}`\n")
    assert not (tmp_path / "r.csv").exists()


def test_a_decision_of_another_kind_in_the_database_is_refused_naming_the_visit(
        engine, study, prolific):
    visit = visitor(engine, study)
    decide(engine, visit, "maybe")

    with pytest.raises(StudyError, match=rf"^study pilot: visit {visit.id} has the decision "
                                         r"'maybe', none of approve, look, reject, screened_out; "):
        pay(engine, study, prolific)


def test_a_bulk_approval_refused_whole_is_sent_one_by_one_naming_each_refused_participant(
        engine, study, prolific):
    paid, returned = reviewed(engine, study, "approve", "approve")
    prolific.script[BULK] = [(400, {"detail": "A submission is not awaiting review."}, {})]
    submission, participant = ids(engine, returned)
    prolific.script[TRANSITION.format(submission)] = [
        (400, {"detail": "Submission has been returned."}, {})]

    payment = pay(engine, study, prolific, send=True)

    assert [path for _, path, _ in prolific.sent()] == [
        BULK, TRANSITION.format(ids(engine, paid)[0]), TRANSITION.format(submission)]
    assert sent_actions(engine) == {paid.id: "approve"}
    assert payment.sent.failures[1] == (
        f"approve submission {submission}: Prolific answered HTTP 400: Submission has been "
        f"returned. (participant {participant})")


def test_a_group_whose_making_timed_out_is_made_once_and_taken_by_the_rerun(tmp_path, prolific):
    study = qualification(tmp_path)
    engine = open_store(study.database)
    first, second = prolific_id(), prolific_id()
    admit(engine, study, first, second)
    groups = "/api/v1/participant-groups/"
    # Prolific makes the group but its answer comes after the client stopped waiting.
    prolific.script[f"POST {groups}"] = [("sleep", 1.0)]
    impatient = Prolific(TOKEN, base_url=prolific.base_url, backoff=0.01, retries=2,
                         timeout=0.3)

    payment = apply_decisions(engine, study, prolific=impatient, send=True, workspace_id="ws-7")

    assert payment.sent.stopped and "create participant group" in payment.sent.failures[0]
    assert [path for _, path, _ in prolific.sent("POST")] == [groups]  # never sent again
    time.sleep(1.0)  # the stand-in has answered the request given up on

    pay(engine, study, prolific, send=True, workspace_id="ws-7")

    assert [group["id"] for group in prolific.groups] == ["group-1"]
    assert prolific.sent("POST")[1:] == [
        ("POST", "/api/v1/participant-groups/group-1/participants/",
         {"participant_ids": [first, second]})]
    with engine.connect() as conn:
        assert conn.execute(select(prolific_groups.c.group_id)).scalars().all() == ["group-1"]


def test_a_screened_out_submission_of_a_qualification_round_is_left_alone(tmp_path, prolific):
    study = qualification(tmp_path)
    engine = open_store(study.database)
    approved, screened = reviewed(engine, study, "approve", "screened_out")
    folder = tmp_path / "for-prolific"

    payment = pay(engine, study, prolific, send=True, files_dir=folder)

    assert prolific.sent() == [("POST", BULK, {"submission_ids": [ids(engine, approved)[0]]})]
    assert ("screened out: 1 submission(s) of the qualification round; nothing to send "
            "(Prolific does not await their review)") in payment.plan.lines()
    assert sent_actions(engine) == {approved.id: "approve"}
    assert sorted(path.name for path in folder.iterdir()) == [f"sent-{PROLIFIC_STUDY}.csv"]


def test_the_files_hold_the_same_decisions_before_and_after_sending_the_sent_ones_apart(
        engine, study, prolific, tmp_path):
    approved, refused, rejected, _ = reviewed(engine, study, "approve", "reject", "reject",
                                              "look")
    prolific.script[TRANSITION.format(ids(engine, refused)[0])] = [(400, {"error": {
        "detail": {"status": ["Submission is not awaiting review."]}}}, {})]
    before, after = tmp_path / "before", tmp_path / "after"

    pay(engine, study, None, files_dir=before)
    pay(engine, study, prolific, send=True)  # the first rejection refused, the rest accepted
    pay(engine, study, None, files_dir=after)

    def rejections(folder: Path) -> list[str]:
        path = folder / f"reject-{PROLIFIC_STUDY}.csv"
        return list(pd.read_csv(path, dtype=str)["participant_id"]) if path.exists() else []

    assert sorted(path.name for path in before.iterdir()) == [
        f"approve-{PROLIFIC_STUDY}.txt", f"reject-{PROLIFIC_STUDY}.csv"]
    assert (before / f"approve-{PROLIFIC_STUDY}.txt").read_text() == f"{ids(engine, approved)[1]}\n"
    assert rejections(before) == [ids(engine, refused)[1], ids(engine, rejected)[1]]
    # After: what is left to do by hand, and what Prolific accepted, when.
    assert sorted(path.name for path in after.iterdir()) == [
        f"reject-{PROLIFIC_STUDY}.csv", f"sent-{PROLIFIC_STUDY}.csv"]
    assert rejections(after) == [ids(engine, refused)[1]]
    sent = pd.read_csv(after / f"sent-{PROLIFIC_STUDY}.csv", dtype=str)
    assert sent[["participant_id", "submission_id", "action"]].values.tolist() == [
        [ids(engine, approved)[1], ids(engine, approved)[0], "approve"],
        [ids(engine, rejected)[1], ids(engine, rejected)[0], "reject"]]
    assert sent["sent_at"].str.match(r"\d{4}-\d\d-\d\dT").all()


def test_no_cell_of_the_rejections_file_starts_a_spreadsheet_formula(engine, study, tmp_path):
    visit = visitor(engine, study)
    decide(engine, visit, "reject", '=HYPERLINK("http://x","see") ' + REASON, "LOW_EFFORT")

    pay(engine, study, None, files_dir=tmp_path / "for-prolific")

    text = (tmp_path / "for-prolific" / f"reject-{PROLIFIC_STUDY}.csv").read_text()
    cells = [cell for record in csv.reader(io.StringIO(text)) for cell in record]
    assert cells and not [cell for cell in cells if cell[:1] in ("=", "+", "-", "@")]
    assert "'=HYPERLINK" in text
