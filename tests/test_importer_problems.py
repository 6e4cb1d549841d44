"""Bad input never stops a load: every broken record becomes one named problem, and no episode
comes out of it. Each case below is written to a temporary file the way a user would have it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from sotopia_ls.errors import InvalidInput, UnknownFormat
from sotopia_ls.importer import FORMATS, load_episodes

OTREE_EPISODE = "GPT3.5-GPT3.5/01H8ZG8A8JW5Z9RSH3G3H5MEN4.json"


@pytest.fixture(scope="module")
def otree_record(sample_data: Path) -> dict:
    return json.loads((sample_data / "otree_episodes" / OTREE_EPISODE).read_text())


@pytest.fixture(scope="module")
def log_record(sample_data: Path) -> dict:
    return json.loads((sample_data / "episodelog" / "fixture_episode.json").read_text())


@pytest.fixture(scope="module")
def dump_record(sample_data: Path) -> dict:
    return json.loads((sample_data / "hf_jsonl" / "episode_tuple_rewards.jsonl").read_text())


def edited(record: dict, **changes: object) -> dict:
    return {**record, **changes}


def prompt_edited(record: dict, pattern: str, replacement: str) -> dict:
    prompt, count = re.subn(pattern, replacement, record["rewards_prompt"], flags=re.M | re.S)
    assert count, f"{pattern!r} not in the prompt"
    return edited(record, rewards_prompt=prompt)


def with_reward(record: dict, dimension: str, score: float) -> dict:
    first, second = record["rewards"]
    return edited(record, rewards=[[first[0], {**first[1], dimension: score}], second])


# (case, file name, file text from the three sample records, field, words in the reason)
CASES: list[tuple[str, str, Callable[[dict, dict, dict], str], str, str]] = [
    (
        "truncated JSON",
        "cut.json",
        lambda otree, log, dump: json.dumps(otree)[:1500],
        "",
        "invalid JSON at line 1, column",
    ),
    (
        "missing participants",
        "no_participants.json",
        lambda otree, log, dump: json.dumps(prompt_edited(otree, r"^Participants:.*?\n", "")),
        "rewards_prompt",
        "missing participants",
    ),
    (
        "one agent only",
        "one_agent.json",
        lambda otree, log, dump: json.dumps(
            prompt_edited(otree, r"^Participants: .*?$", "Participants: Eli Dawson")
        ),
        "rewards_prompt",
        "only one participant (Eli Dawson)",
    ),
    (
        "one agent only, in a dump",
        "one_agent.jsonl",
        lambda otree, log, dump: json.dumps(
            edited(dump, agents_background={"Mia Davis": dump["agents_background"]["Mia Davis"]})
        ),
        "agents_background",
        "1 agent(s) (Mia Davis); an episode needs two",
    ),
    (
        "empty dialogue",
        "no_turns.json",
        lambda otree, log, dump: json.dumps(prompt_edited(otree, r"^Turn #1\n.*", "Turn #1\n")),
        "",
        "empty dialogue",
    ),
    (
        "only 'did nothing' in an EpisodeLog",
        "silent.json",
        lambda otree, log, dump: json.dumps(
            edited(
                log,
                messages=[log["messages"][0][:2] + [["Mia Davis", "Environment", "did nothing"]]],
            )
        ),
        "",
        "empty dialogue",
    ),
    (
        "messages not a list",
        "messages.json",
        lambda otree, log, dump: json.dumps(edited(log, messages="Mia said hello")),
        "messages",
        "Input should be a valid list",
    ),
    (
        "rewards_prompt a number",
        "prompt.json",
        lambda otree, log, dump: json.dumps(edited(otree, rewards_prompt=42)),
        "rewards_prompt",
        "Input should be a valid string",
    ),
    (
        "a goal nobody states",
        "unknown_goal.json",
        lambda otree, log, dump: json.dumps(
            edited(
                log,
                messages=[
                    [m for m in log["messages"][0] if m[1] != "William Brown"],
                    *log["messages"][1:],
                ],
            )
        ),
        "messages",
        "no view states William Brown's goal",
    ),
    (
        "a score out of range",
        "score_11.json",
        lambda otree, log, dump: json.dumps(with_reward(log, "believability", 11.0)),
        "rewards",
        "agent 1: believability score 11 is outside 0 to 10",
    ),
    (
        "a score that is not a whole number",
        "score_half.json",
        lambda otree, log, dump: json.dumps(with_reward(log, "goal", 7.5)),
        "rewards",
        "agent 1: goal score 7.5 is not a whole number",
    ),
    (
        "a turn by a stranger",
        "stranger.jsonl",
        lambda otree, log, dump: json.dumps(
            edited(
                dump,
                raw_messages=[*dump["raw_messages"], [["Zoe Park", "Environment", 'said: "Hi!"']]],
            )
        ),
        "",
        "turns by someone who is not a participant: Zoe Park",
    ),
    (
        "a record of no known format",
        "other.json",
        lambda otree, log, dump: json.dumps({"id": 1, "text": "hello"}),
        "",
        "cannot tell the format from its keys (id, text); accepted formats: " + ", ".join(FORMATS),
    ),
    (
        "not a JSON object",
        "list.jsonl",
        lambda otree, log, dump: "[1, 2]\n",
        "",
        "expected a JSON object, got a list",
    ),
]


@pytest.mark.parametrize(
    "name, text, field, reason", [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_a_bad_record_is_one_named_problem(
    tmp_path, otree_record, log_record, dump_record, name, text, field, reason
):
    path = tmp_path / name
    path.write_text(text(otree_record, log_record, dump_record))

    result = load_episodes([path])

    assert result.episodes == []
    (problem,) = result.problems
    assert problem.file == str(path)
    assert problem.field == field
    assert reason in problem.reason
    assert str(path) in str(problem) and reason in str(problem)


def test_a_bad_line_does_not_stop_the_rest_of_the_file(tmp_path, dump_record):
    good = json.dumps(dump_record)
    path = tmp_path / "dump.jsonl"
    path.write_text(
        "\n".join([good[:200], "", json.dumps(edited(dump_record, episode_id="second")), good])
        + "\n"
    )

    result = load_episodes([path])

    assert [episode.id for episode in result.episodes] == ["second", dump_record["episode_id"]]
    (problem,) = result.problems
    assert problem.record == "line 1"
    assert "invalid JSON at line 1, column" in problem.reason and "truncated" in problem.reason
    assert result.counts == {f"dump:{path}": 2}


def test_problems_name_the_record_and_its_episode_id(tmp_path, log_record):
    path = tmp_path / "logs.json"
    path.write_text(json.dumps([log_record, edited(log_record, pk="broken", messages={})]))

    result = load_episodes([path])

    assert len(result.episodes) == 1
    (problem,) = result.problems
    assert (problem.record, problem.field) == ("item 1, id broken", "messages")
    assert str(problem) == f"{path} [item 1, id broken]: messages: Input should be a valid list"
    with pytest.raises(InvalidInput, match="1 invalid record"):
        result.raise_on_problems()


def test_a_failed_evaluation_is_no_evaluation(tmp_path, log_record):
    path = tmp_path / "failed.json"
    path.write_text(json.dumps(edited(log_record, rewards=[0.0, 0.0])))

    result = load_episodes([path])

    assert result.problems == []
    assert result.episodes[0].evaluation is None


def test_a_folder_walk_records_unreadable_files_and_goes_on(tmp_path, sample_data):
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "latin1.json").write_bytes(b'{"pk": "caf\xe9"}')
    (tmp_path / "notes.txt").write_text("ignored by a folder walk")
    (tmp_path / "episode.json").write_text(
        (sample_data / "otree_episodes" / OTREE_EPISODE).read_text()
    )

    result = load_episodes([tmp_path, tmp_path / "notes.txt", tmp_path / "missing.json"])

    assert len(result.episodes) == 1
    reasons = {Path(problem.file).name: problem.reason for problem in result.problems}
    assert reasons.keys() == {"latin1.json", "notes.txt", "missing.json"}
    assert reasons["latin1.json"].startswith("cannot read the file")
    assert (
        reasons["notes.txt"]
        == "unsupported file type '.txt'; readable: .json, .jsonl, .ndjson, .csv"
    )
    assert reasons["missing.json"] == "no such file or folder"


def test_the_same_episode_twice_is_a_duplicate_not_an_error(sample_data):
    folder = sample_data / "otree_episodes" / "GPT3.5-GPT3.5"

    result = load_episodes([folder, folder / "01H8ZG8A8JW5Z9RSH3G3H5MEN4.json"])

    assert (len(result.episodes), result.duplicates, result.problems) == (14, 1, [])


def test_a_named_format_skips_detection(tmp_path, sample_data):
    result = load_episodes([sample_data / "episodelog"], format="otree")
    (problem,) = result.problems
    assert (
        "no 'Participants:' line" in problem.reason
    )  # an EpisodeLog's rewards_prompt is no context

    with pytest.raises(UnknownFormat) as raised:
        load_episodes([tmp_path], format="mturk")
    assert raised.value.accepted == list(FORMATS)
    assert "unknown format 'mturk'; accepted formats: otree, episodelog, dump, otree-csv" in str(
        raised.value
    )
