"""A researcher points the importer at Sotopia's published episodes, in every format, and
gets the same normalized episodes out. No Label Studio server is involved."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from sotopia_ls.dimensions import DIMENSION_KEYS
from sotopia_ls.episode import Episode
from sotopia_ls.importer import (
    FORMATS,
    LoadResult,
    episodes_from_dataframe,
    episodes_from_records,
    load_episodes,
)
from sotopia_ls.labelstudio.tasks import episode_to_task
from sotopia_ls.samples import DEMO

SPOT_CHECKED = "01HNBF16SEGD1033KGXQ67BDJV"
FIXTURE_ID = "01H9FG15A2NDTNH8K6F2T5MZN3"


def show_counts(capsys: pytest.CaptureFixture[str], title: str, result: LoadResult) -> None:
    """Print what was parsed per source, visible in the test output even without ``-s``."""
    with capsys.disabled():
        print(f"\n{title}: {len(result.episodes)} episode(s), {len(result.problems)} problem(s)")
        for source, count in result.counts.items():
            print(f"  {source}: {count}")


def content(episode: Episode) -> dict:
    """What an annotator is shown, whatever file it came from."""
    return episode.model_dump(include={"id", "scenario", "agents", "turns", "evaluation"})


def by_id(result: LoadResult) -> dict[str, Episode]:
    return {episode.id: episode for episode in result.episodes}


@pytest.fixture(scope="module")
def otree(sample_data: Path) -> LoadResult:
    return load_episodes([sample_data / "otree_episodes"])


@pytest.fixture(scope="module")
def fixture_record(sample_data: Path) -> dict:
    return json.loads((sample_data / "episodelog" / "fixture_episode.json").read_text())


@pytest.fixture(scope="module")
def dump_record(sample_data: Path) -> dict:
    return json.loads((sample_data / "hf_jsonl" / "episode_tuple_rewards.jsonl").read_text())


def test_the_formats_are_named():
    assert FORMATS == ("otree", "episodelog", "dump", "otree-csv")


def test_every_otree_episode_parses(otree, sample_data, capsys):
    show_counts(capsys, "oTree episode JSON", otree)
    assert otree.problems == []
    assert otree.counts == {
        f"otree:{sample_data / 'otree_episodes' / 'GPT3.5-GPT3.5'}": 14,
        f"otree:{sample_data / 'otree_episodes' / 'GPT3.5-MistralInstruct'}": 28,
    }
    assert len(otree.episodes) == 42
    for episode in otree.episodes:
        assert episode.source.format == "otree"
        assert episode.source.models[0] == "gpt-4"
        assert all(agent.age and agent.occupation and agent.secret for agent in episode.agents)


def test_an_otree_episode_reads_as_the_annotators_saw_it(otree):
    episode = by_id(otree)[SPOT_CHECKED]
    donovan, benjamin = episode.agents
    assert (donovan.name, donovan.age, donovan.occupation, donovan.pronouns) == (
        "Donovan Reeves",
        "27",
        "male software developer",
        "He/him",
    )
    assert (benjamin.name, benjamin.age) == ("Benjamin Jackson", "24")
    assert donovan.secret == "Secretly releasing classified government information online"
    assert benjamin.secret == "Descendant of a wealthy oil tycoon, rejects family fortune"
    assert donovan.interests.startswith("Donovan Reeves is a software developer who")
    assert donovan.personality.endswith(
        "His decision-making style varies according to the situation at hand"
    )
    assert donovan.goal.startswith(
        "You are the buyer for this item and your target price is $30.0."
    )
    assert benjamin.goal.endswith(
        "if you are successful in selling it above the target price, you will receive a bonus."
    )
    assert episode.scenario.startswith(
        "An individual is offering an Antique Oak Accent Table for sale at $60.00"
    )
    assert episode.source.tag and episode.source.environment

    # "Turn #0" to "Turn #15", of which "Turn #10: " is empty: 15 turns
    assert len(episode.turns) == 15
    assert (episode.turns[0].speaker, episode.turns[0].kind, episode.turns[0].text) == (
        "Donovan Reeves",
        "speak",
        "$60.00",
    )
    nodding = episode.turns[8]
    assert (nodding.speaker, nodding.kind, nodding.text) == (
        "Donovan Reeves",
        "non-verbal communication",
        "nodding head in agreement",
    )
    assert (
        episode.turns[12].kind == "action" and episode.turns[12].text == "decline to sell at $30.00"
    )
    assert (episode.turns[-1].speaker, episode.turns[-1].kind, episode.turns[-1].text) == (
        "Benjamin Jackson",
        "leave",
        "",
    )


def test_a_turn_that_recites_the_conversation_stays_one_turn(otree):
    # Baxter's 4th turn quotes "Turn #0: …" to "Turn #6: leave" inside his speech.
    episode = by_id(otree)["01HNBCQQRFA7332019G6ABD7Y6"]
    assert [turn.kind for turn in episode.turns] == [
        "speak",
        "speak",
        "speak",
        "speak",
        "non-verbal communication",
        "speak",
        "leave",
    ]
    assert episode.turns[3].speaker == "Baxter Sterling"
    assert "Turn #5: Sophia James said:" in episode.turns[3].text
    assert episode.turns[4].text == "Smile and nod at Baxter enthusiastically"


def test_empty_turns_are_not_turns(otree):
    # ends "Turn #5\nTurn #6," : neither is a turn
    assert len(by_id(otree)["01HNBB74KK4432MFGFA1QFRHKX"].turns) == 4
    # "Turn #17" has no action and the prompt ends with '",'
    last = by_id(otree)["01HNBENDNDYHZ3P0KD07E3HWZQ"].turns
    assert len(last) == 20
    assert last[-1].text.endswith("we are both getting a fair share of the possessions.")


def mutate(prompt: str) -> str:
    """The same episode written differently: CRLF newlines, blank lines, the other turn-header
    style, and a trailing comma after every turn."""
    start = re.search(r"^Turn #", prompt, re.M).start()
    context, history = prompt[:start], prompt[start:]
    history = re.sub(
        r"^Turn #(\d+)(?::[ ]?|\n)(?=(Turn #)?)",
        lambda m: f"Turn #{m[1]}\n" if ":" in m[0] else f"Turn #{m[1]}: " + ("\n" if m[2] else ""),
        history,
        flags=re.M,
    )
    history = re.sub(r"(?<!\A)\n(?=Turn #)", ",\n\n\n", history)
    text = context.replace("\n", "\n\n") + history + ",\n\n"
    return text.replace("\n", "\r\n")


@pytest.mark.parametrize(
    "pk",
    [
        SPOT_CHECKED,  # "Turn #N: " headers, Turn #0, an empty turn
        "01H8ZG8A8JW5Z9RSH3G3H5MEN4",  # "Turn #N\n" headers, "Prompt after formatting:"
        "01HNBB74KK4432MFGFA1QFRHKX",  # ends with two empty turns
        "01HNBENDNDYHZ3P0KD07E3HWZQ",  # empty turn mid-way, trailing '",'
    ],
)
def test_a_reformatted_otree_episode_parses_the_same(otree, sample_data, tmp_path, pk):
    original = next((sample_data / "otree_episodes").glob(f"*/{pk}.json"))
    record = json.loads(original.read_text())
    record["rewards_prompt"] = mutate(record["rewards_prompt"])
    assert "\r\n\r\n" in record["rewards_prompt"]
    copy = tmp_path / f"{pk}.json"
    copy.write_text(json.dumps(record))

    result = load_episodes([copy])

    assert result.problems == []
    assert content(result.episodes[0]) == content(by_id(otree)[pk])


def test_an_episodelog_and_its_dump_are_the_same_episode(sample_data, capsys):
    log = load_episodes([sample_data / "episodelog" / "fixture_episode.json"])
    dump = load_episodes([sample_data / "hf_jsonl" / "episode_tuple_rewards.jsonl"])
    show_counts(capsys, "EpisodeLog", log)
    show_counts(capsys, "dump", dump)
    assert log.problems == dump.problems == []
    (from_log,), (from_dump,) = log.episodes, dump.episodes
    assert from_log.id == FIXTURE_ID
    assert content(from_log) == content(from_dump)
    assert (from_log.source.format, from_dump.source.format) == ("episodelog", "dump")

    mia, william = from_log.agents
    assert (mia.name, william.name) == ("Mia Davis", "William Brown")
    # each agent's own view holds its secret and goal; both views are merged
    assert mia.secret == "Part of a rebellious punk rock band in her youth"
    assert william.secret == "Sabotaged a competitor's dish to win a cooking contest"
    assert mia.goal.startswith("Share the only blanket available")
    assert william.goal.startswith("Keep the blanket for yourself")
    # five speeches; every "did nothing" is dropped, as Sotopia's render_for_humans does
    assert [turn.speaker for turn in from_log.turns] == ["Mia Davis", "William Brown"] * 2 + [
        "Mia Davis"
    ]
    assert {turn.kind for turn in from_log.turns} == {"speak"}


def test_the_stored_evaluation_is_the_episodes_rewards_and_reasoning(sample_data, fixture_record):
    (episode,) = load_episodes([sample_data / "episodelog"]).episodes
    evaluation = episode.evaluation
    assert evaluation.evaluator == "gpt-4"
    for agent, (_, rewards) in zip((1, 2), fixture_record["rewards"]):
        assert {key: evaluation.pair(agent, key)[1] for key in DIMENSION_KEYS} == {
            key: int(rewards[key]) for key in DIMENSION_KEYS
        }
    assert evaluation.pair(1, "knowledge")[0] == (
        "Mia does not gain any new or important information through this interaction."
    )
    assert evaluation.pair(2, "secret")[0].startswith(
        "William's secret is that he sabotaged a competitor's dish"
    )
    assert evaluation.gaps() == []
    assert all(evaluation.pair(agent, key)[0] for agent in (1, 2) for key in DIMENSION_KEYS)


def test_the_2024_release_shape_of_rewards_parses(dump_record):
    # sotopia_episodes_v1_hf.jsonl: one dimension dict per agent, and no raw_* fields
    record = {key: value for key, value in dump_record.items() if not key.startswith("raw_")}
    record["rewards"] = [scores for _, scores in dump_record["rewards"]]

    result = episodes_from_records([record])
    reference = episodes_from_records([dump_record])

    assert result.problems == []
    # turns now come from the social_interactions text
    assert content(result.episodes[0]) == content(reference.episodes[0])


def test_a_dump_without_raw_messages_reads_its_social_interactions(dump_record):
    record = {key: value for key, value in dump_record.items() if not key.startswith("raw_")}
    record["social_interactions"] = "\n\n".join(
        [
            'Mia Davis said: "It is cold.\n\nSo cold."',
            "William Brown: [non-verbal communication] shivers",
            "Mia Davis: [action] hands over the blanket\nWilliam Brown: did nothing",
            "William Brown: left the conversation",
        ]
    )

    (episode,) = episodes_from_records([record]).episodes

    assert [(turn.speaker, turn.kind, turn.text) for turn in episode.turns] == [
        ("Mia Davis", "speak", "It is cold.\n\nSo cold."),
        ("William Brown", "non-verbal communication", "shivers"),
        ("Mia Davis", "action", "hands over the blanket"),
        ("William Brown", "leave", ""),
    ]


def test_the_human_eval_csvs_hold_the_otree_episodes(sample_data, otree, capsys):
    folder = sample_data / "human_eval"
    result = load_episodes([folder / "gpt3.5_final.csv", folder / "mistral-instruct_final.csv"])
    show_counts(capsys, "oTree human-eval CSV", result)

    assert result.problems == []
    assert result.counts == {
        f"otree-csv:{folder / 'gpt3.5_final.csv'}": 14,
        f"otree-csv:{folder / 'mistral-instruct_final.csv'}": 28,
    }
    from_csv, from_json = by_id(result), by_id(otree)
    assert len(from_csv) == 42 and from_csv.keys() == from_json.keys()
    for pk, episode in from_csv.items():
        for shown, read in zip(episode.agents, from_json[pk].agents):
            assert (shown.name, shown.goal, shown.secret) == (read.name, read.goal, read.secret)


def test_a_csv_row_the_app_could_not_parse_is_covered_by_its_sibling(sample_data, tmp_path):
    rows = pd.read_csv(
        sample_data / "human_eval" / "gpt3.5_final.csv", dtype=str, keep_default_na=False
    )
    pk = rows["pk"].iloc[0]
    siblings = rows.index[rows["pk"] == pk]
    scenario_only = json.dumps({"scenario": json.loads(rows.loc[siblings[0], "data"])["scenario"]})

    rows.loc[siblings[0], "data"] = scenario_only
    rows.to_csv(tmp_path / "one_broken.csv", index=False)
    covered = load_episodes([tmp_path / "one_broken.csv"])
    assert covered.problems == [] and len(covered.episodes) == 14

    rows.loc[siblings, "data"] = scenario_only
    rows.to_csv(tmp_path / "all_broken.csv", index=False)
    uncovered = load_episodes([tmp_path / "all_broken.csv"])
    assert len(uncovered.episodes) == 13 and pk not in by_id(uncovered)
    assert len(uncovered.problems) == len(siblings)
    for problem in uncovered.problems:
        assert problem.field == "data" and pk in problem.record
        assert "could not parse this episode" in problem.reason


def test_dataframes_of_each_format_parse(sample_data, fixture_record, capsys):
    dump_file = sample_data / "hf_jsonl" / "episode_tuple_rewards.jsonl"
    csv_file = sample_data / "human_eval" / "mistral-instruct_final.csv"
    frames = {
        "episodelog": pd.read_json(io.StringIO(json.dumps([fixture_record]))),
        "dump": pd.read_json(dump_file, lines=True),
        "otree-csv": pd.read_csv(csv_file),
    }
    expected = {
        "episodelog": by_id(load_episodes([sample_data / "episodelog"])),
        "dump": by_id(load_episodes([dump_file])),
        "otree-csv": by_id(load_episodes([csv_file])),
    }
    for format, frame in frames.items():
        result = episodes_from_dataframe(frame)
        show_counts(capsys, f"DataFrame of {format}", result)
        assert result.problems == []
        assert {episode.source.format for episode in result.episodes} == {format}
        assert [content(e) for e in result.episodes] == [
            content(e) for e in expected[format].values()
        ]


def test_loading_everything_deduplicates_by_episode_id(sample_data, capsys):
    result = load_episodes([sample_data])
    show_counts(capsys, "the whole sample folder", result)
    assert result.problems == []
    # 42 oTree episodes (also in the CSVs) + the fixture episode (also in the dump)
    assert len(result.episodes) == 43
    assert result.duplicates == 43
    assert sum(result.counts.values()) == len(result.episodes) + result.duplicates


def test_the_demo_episodes_load(capsys):
    result = load_episodes(DEMO)
    show_counts(capsys, "the demo's episodes", result)
    assert result.problems == []
    assert {source.split(":")[0] for source in result.counts} == {"otree", "episodelog", "dump"}
    # the EpisodeLog and the dump hold the same episode
    assert (len(result.episodes), result.duplicates) == (3, 1)


def _texts(value: object) -> list[str]:
    """Every text inside a task's data."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [text for item in value for text in _texts(item)] if isinstance(value, list) else []


ESCAPED = "01HB2683JNVJKDV9KR8XEBXRQ2"  # its scenario: "Here\'s what the seller has to say"


def test_the_annotator_reads_the_text_a_person_wrote_in_every_sample(sample_data):
    """Sotopia's oTree files (and the CSVs' ``data``) hold Python's escaped quotes
    (``Here\\'s``, ``weren\\'t``); the task shows ``Here's``, from every sample file."""
    sources = [*sorted((sample_data / "otree_episodes").iterdir()),
               *sorted((sample_data / "human_eval").glob("*.csv")),
               sample_data / "episodelog", sample_data / "hf_jsonl"]
    for source in sources:
        result = load_episodes([source])
        assert result.episodes and not result.problems, source
        escaped = [text for episode in result.episodes
                   for text in _texts(episode_to_task(episode)) if "\\'" in text]
        assert escaped == [], source
    scenario = by_id(load_episodes([sample_data / "otree_episodes"]))[ESCAPED].scenario
    assert "Here's what the seller" in scenario and "weren't needed. I'm willing" in scenario


def test_a_backslash_of_the_text_itself_is_kept(sample_data):
    path = sample_data / "otree_episodes" / "GPT3.5-GPT3.5" / f"{ESCAPED}.json"
    record = json.loads(path.read_text())
    record["rewards_prompt"] = record["rewards_prompt"].replace(
        "Here\\'s what", "Here\\'s C:\\new\\table and \\\\ what", 1)
    [episode] = episodes_from_records([record]).episodes
    assert "Here's C:\\new\\table and \\\\ what" in episode.scenario
