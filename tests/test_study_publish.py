"""A researcher creates the study's Prolific study from the study file with `study publish`: a
dry run shows the draft and sends nothing; --send makes one draft whose link, codes, filter,
places and reward are the study file's, records its id in the study file, and a rerun makes
nothing, also when the first run lost Prolific's answer.

Prolific is the stand-in of ``prolific_stand_in`` (real HTTP on 127.0.0.1); the gateway's
database is SQLite in a temporary folder, its episodes given slots as `study sync` gives them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from prolific_stand_in import TOKEN, StandIn
from sqlalchemy import insert
from study_support import CODE, NO_SLOTS, make_study

from sotopia_ls.cli import main
from sotopia_ls.errors import StudyError
from sotopia_ls.study.payment.hourly import HourlyPay
from sotopia_ls.study.payment.prolific import Prolific, ProlificUnavailable
from sotopia_ls.study.payment.publish import publish_study
from sotopia_ls.study.settings import Reward, StudyFile, read_study, write_study
from sotopia_ls.study.slots.leases import add_episodes
from sotopia_ls.study.store import now, open_store, prolific_groups

GATEWAY = "https://rate.example.org"
PROJECT = "6530aa0f" * 3
PLACEHOLDERS = "PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"


def study_file(tmp_path: Path, episodes: int = 5, **fields: object) -> Path:
    """A study of ``episodes`` episodes, k=2 and m=3, paying £2.00, written to study.json."""
    study = make_study(tmp_path, 1, raters_per_episode=2, episodes_per_participant=3,
                       reward={"cents": 200, "currency": "GBP"}, **fields)
    add_episodes(open_store(study.database), study.name,
                 {task: {"text": f"episode {task}"} for task in range(1, episodes + 1)},
                 study.raters_per_episode, third_rater_share=study.third_rater_share)
    return write_study(study, tmp_path / "study.json")


def publish(path: Path, stand_in: StandIn, *options: str, token: str = TOKEN) -> Result:
    return CliRunner().invoke(main, [
        "study", "publish", "--study", str(path), "--prolific-project", PROJECT,
        "--gateway", GATEWAY, "--prolific-url", stand_in.base_url, *options],
        env={"PROLIFIC_TOKEN": token})


def test_a_dry_run_shows_the_draft_and_sends_nothing(tmp_path, prolific):
    path = study_file(tmp_path)

    result = publish(path, prolific, "--minutes", "10")

    assert result.exit_code == 0, result.output
    assert f"  link:    {GATEWAY}/s/pilot?{PLACEHOLDERS}" in result.output
    assert "  places:  4, 10 min each, reward 200" in result.output
    assert ("           places 10 slots (5 episodes × k 2) ÷ 3 episodes a session, rounded up"
            in result.output)
    assert f"  code:    {CODE} COMPLETED MANUALLY_REVIEW" in result.output
    assert f"  code:    {NO_SLOTS} OTHER MANUALLY_REVIEW" in result.output
    assert result.output.endswith("dry run: nothing was sent to Prolific (add --send to create "
                                  "the draft)\n")
    assert prolific.requests == []
    assert read_study(path).prolific is None


def test_sending_makes_one_draft_equal_to_the_study_file_and_a_rerun_makes_none(
        tmp_path, prolific):
    path = study_file(tmp_path)

    first = publish(path, prolific, "--minutes", "10", "--send")

    assert first.exit_code == 0, first.output
    assert TOKEN not in first.output
    (made,) = prolific.studies
    assert made["external_study_url"] == f"{GATEWAY}/s/pilot?{PLACEHOLDERS}"
    assert made["prolific_id_option"] == "url_parameters"
    assert made["completion_codes"] == [
        {"code": CODE, "code_type": "COMPLETED", "actions": [{"action": "MANUALLY_REVIEW"}]},
        {"code": NO_SLOTS, "code_type": "OTHER", "actions": [{"action": "MANUALLY_REVIEW"}]}]
    assert (made["total_available_places"], made["estimated_completion_time"],
            made["reward"], made["filters"], made["project"]) == (4, 10, 200, [], PROJECT)
    recorded = read_study(path).prolific
    assert (recorded.study_id, recorded.project_id) == (made["id"], PROJECT)
    assert f"created the draft study {made['id']}" in first.output

    again = publish(path, prolific, "--minutes", "10", "--send")

    assert again.exit_code == 0, again.output
    assert again.output.endswith(f"already on Prolific as study {made['id']}: nothing "
                                 "created\n")
    assert len(prolific.studies) == 1 and len(prolific.sent("POST")) == 1


def test_a_draft_whose_answer_was_lost_is_found_by_the_rerun_not_made_twice(tmp_path, prolific):
    path = study_file(tmp_path)
    study = read_study(path)
    engine = open_store(study.database)
    impatient = Prolific(TOKEN, base_url=prolific.base_url, timeout=0.5, retries=0)
    prolific.script["POST /api/v1/studies/"] = [("sleep", 1.5)]  # made, its answer too late

    with pytest.raises(ProlificUnavailable, match="no complete answer"):
        publish_study(engine, study, path, study_url=GATEWAY, project_id=PROJECT,
                      prolific=impatient, send=True, minutes=10)
    assert read_study(path).prolific is None
    deadline = time.monotonic() + 10
    while not prolific.studies and time.monotonic() < deadline:  # Prolific made it meanwhile
        time.sleep(0.05)

    rerun = publish(path, prolific, "--minutes", "10", "--send")

    assert rerun.exit_code == 0, rerun.output
    (made,) = prolific.studies
    assert read_study(path).prolific.study_id == made["id"]
    assert len(prolific.sent("POST")) == 1  # the one whose answer was lost


def test_places_count_the_third_raters_planned_and_leave_out_the_gold_positions(
        tmp_path, prolific):
    path = study_file(tmp_path, gold_share=0.25, third_rater_share=0.4)

    result = publish(path, prolific, "--minutes", "10", "--send")

    assert result.exit_code == 0, result.output
    assert ("           places 12 slots (5 episodes × k 2 + 2 third rater(s)) ÷ 2.25 episodes "
            "a session (m 3 less 25% gold), rounded up") in result.output
    assert prolific.studies[0]["total_available_places"] == 6  # not 5 × 2 ÷ 3 = 4


def test_a_main_study_is_filtered_on_its_qualification_round_s_group(tmp_path, prolific):
    path = study_file(tmp_path, requires_qualification="qual-round")

    refused = publish(path, prolific, "--minutes", "10", "--send")

    assert refused.exit_code != 0
    assert "Traceback" not in refused.output and len(refused.output.splitlines()) == 1
    assert "of qual-round only, and that round has no participant group on Prolific yet" \
        in refused.output
    assert prolific.requests == []

    with open_store(read_study(path).database).begin() as conn:
        conn.execute(insert(prolific_groups).values(
            qualification="qual-round", group_id="group-9", name="passed", created_at=now()))
    sent = publish(path, prolific, "--minutes", "10", "--send")

    assert sent.exit_code == 0, sent.output
    assert prolific.studies[0]["filters"] == [
        {"filter_id": "participant_group_allowlist", "selected_values": ["group-9"]}]


def test_a_qualification_round_s_codes_carry_the_screen_out_and_the_group(tmp_path, prolific):
    path = study_file(tmp_path, name="qual-round", no_slots_code=None, no_slots_url=None,
                      qualification={"screen_out_code": "SCR33N",
                                     "screen_out_url": "http://127.0.0.1:9/complete?cc=SCR33N"})
    with open_store(read_study(path).database).begin() as conn:
        conn.execute(insert(prolific_groups).values(
            qualification="qual-round", group_id="group-1", name="passed", created_at=now()))

    needs_places = publish(path, prolific, "--minutes", "5")
    sent = publish(path, prolific, "--minutes", "5", "--places", "40", "--send")

    assert "give the number of places with --places N" in needs_places.output
    assert sent.exit_code == 0, sent.output
    assert prolific.studies[0]["completion_codes"] == [
        {"code": CODE, "code_type": "COMPLETED", "actions": [
            {"action": "MANUALLY_REVIEW"},
            {"action": "ADD_TO_PARTICIPANT_GROUP", "participant_group": "group-1"}]},
        {"code": "SCR33N", "code_type": "FIXED_SCREENOUT",
         "actions": [{"action": "MANUALLY_REVIEW"}]}]
    assert prolific.studies[0]["total_available_places"] == 40


def test_a_paid_screen_out_is_sent_with_its_reward_and_every_screen_out_code_is_sent(
        tmp_path, prolific):
    chosen = StudyFile.from_options(  # what `study init` makes of its options
        name="qual-round", project=1, completion_code=CODE, is_qualification=True,
        screen_out_code="SCR33N", screen_out_reward=0.4, reward=1.5, currency="GBP",
        practice_references=tmp_path / "practice.csv", practice_screen_out_code="P1OUT",
        database=f"sqlite:///{tmp_path / 'gateway.sqlite3'}")
    path = write_study(chosen, tmp_path / "study.json")

    dry = publish(path, prolific, "--minutes", "5", "--places", "30")
    sent = publish(path, prolific, "--minutes", "5", "--places", "30", "--send")

    assert chosen.qualification.screen_out_reward == 40
    assert ("  code:    SCR33N FIXED_SCREENOUT FIXED_SCREEN_OUT_PAYMENT 40 to each, up to 30 "
            "screen-outs") in dry.output
    assert "  code:    P1OUT FIXED_SCREENOUT MANUALLY_REVIEW" in dry.output
    assert sent.exit_code == 0, sent.output
    assert prolific.studies[0]["completion_codes"][1:] == [
        {"code": "SCR33N", "code_type": "FIXED_SCREENOUT", "actor": "participant",
         "actions": [{"action": "FIXED_SCREEN_OUT_PAYMENT", "fixed_screen_out_reward": 40,
                      "slots": 30}]},
        {"code": "P1OUT", "code_type": "FIXED_SCREENOUT",
         "actions": [{"action": "MANUALLY_REVIEW"}]}]


def test_a_screen_out_reward_needs_a_reward_one_paid_code_and_prolific_s_minimum(tmp_path,
                                                                               prolific):
    options = {"name": "qual-round", "project": 1, "completion_code": CODE,
               "is_qualification": True, "screen_out_code": "SCR33N",
               "database": f"sqlite:///{tmp_path / 'gateway.sqlite3'}"}
    with pytest.raises(StudyError, match="screen_out_reward is in hundredths of the reward's "
                       "currency: give the reward too"):
        StudyFile.from_options(**options, screen_out_reward=0.4)
    with pytest.raises(StudyError, match="pays a fixed screen-out on one code only"):
        StudyFile.from_options(**options, screen_out_reward=0.4, reward=1.5, currency="GBP",
                               practice_references=tmp_path / "practice.csv",
                               practice_screen_out_code="P1OUT",
                               practice_screen_out_reward=0.2)
    with pytest.raises(StudyError, match="--screen-out-reward: 0.405 has more than two"):
        StudyFile.from_options(**options, screen_out_reward=0.405, reward=1.5, currency="GBP")
    cheap = write_study(StudyFile.from_options(**options, screen_out_reward=0.05, reward=1.5,
                                               currency="GBP"), tmp_path / "study.json")

    warned = publish(cheap, prolific, "--minutes", "5", "--places", "30")

    assert "⚠ a screen-out reward of £0.05 is under Prolific's minimum of £0.10" in warned.output


def test_a_reward_under_prolific_s_minimum_is_warned_of(tmp_path, prolific):
    path = study_file(tmp_path)

    result = publish(path, prolific, "--minutes", "30")

    assert ("⚠ £2.00 for 30 min is under Prolific's minimum of £6.00 an hour: raise the "
            "reward to at least £3.00") in result.output


def test_without_minutes_or_a_pilot_nothing_is_sent(tmp_path, prolific):
    path = study_file(tmp_path)

    result = publish(path, prolific, "--send")

    assert result.exit_code != 0
    assert "--minutes N, or a pilot" in result.output
    assert prolific.requests == []


def test_a_pilot_s_measured_minutes_are_rounded_up_and_a_study_without_reward_is_refused(
        tmp_path, prolific):
    pilot = HourlyPay(Reward(cents=200, currency="GBP"), visits=3, median_minutes=11.2,
                      visible=3, lead=0)
    path = study_file(tmp_path)
    study = read_study(path)

    drafted = publish_study(open_store(study.database), study, path, study_url=GATEWAY,
                            project_id=PROJECT, prolific=None, pilot=pilot)
    unpaid = publish(write_study(study.model_copy(update={"reward": None}), path,
                                 overwrite=True), prolific, "--minutes", "10")

    assert drafted.body["estimated_completion_time"] == 12
    assert unpaid.exit_code != 0
    assert "has no reward: write it with `sotopia-ls study init --reward" in unpaid.output
    assert prolific.requests == []
