"""A researcher whose episodes come as plain-text transcripts, one episode per ``.txt`` file,
adds that format as one ``Format`` object and imports the transcripts beside Sotopia's own
files: detected, parsed, refused with a reason, written as tasks. The importer is not edited."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sotopia_ls.episode import Agent, Episode, Source, Turn
from sotopia_ls.errors import Problem, UnknownFormat
from sotopia_ls.importer import FORMATS, Format, load_episodes
from sotopia_ls.importer.records import RecordError, build_episode
from sotopia_ls.labelstudio.push import write_tasks

PLAN = """\
Two friends plan a weekend together.
goal Alice Chen: Go hiking in the mountains
goal Bob Lee: Stay in town and see a film
Alice Chen: The weather will be perfect for a hike!
Bob Lee: I was hoping to finally see that new film.
"""


def read_transcript(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The whole file is one record, as a file holding one JSON object is; its id under
    Sotopia's key (``pk``), so problems name it."""
    yield "", {"pk": path.stem, "transcript": path.read_text(encoding="utf-8")}


def parse_transcript(record: Mapping[str, Any], file: str, label: str) -> Episode:
    """First line the scenario, ``goal <name>: <goal>`` lines, then ``<name>: <words>``."""
    scenario, *lines = record["transcript"].splitlines()
    said = [line.split(": ", 1) for line in lines if not line.startswith("goal ")]
    goals = dict(line.removeprefix("goal ").split(": ", 1) for line in lines
                 if line.startswith("goal "))
    if len(goals) != 2:
        raise RecordError(f"{len(goals)} goal line(s); an episode needs two", "transcript")
    return build_episode(
        id=record["pk"],
        scenario=scenario,
        agents=[Agent(name=name, goal=goal) for name, goal in goals.items()],
        turns=[Turn(speaker=speaker, kind="speak", text=text) for speaker, text in said],
        source=Source(format="transcript", file=file, record=label),
    )


TRANSCRIPT = Format(
    "transcript",
    detects=lambda keys: "transcript" in keys,
    parse=parse_transcript,
    readers={".txt": read_transcript},
)


@pytest.fixture
def folder(tmp_path: Path, sample_data: Path) -> Path:
    """A transcript beside an EpisodeLog file of Sotopia's."""
    (tmp_path / "plan.txt").write_text(PLAN, encoding="utf-8")
    shutil.copy(sample_data / "episodelog" / "fixture_episode.json", tmp_path)
    return tmp_path


def test_a_new_format_is_one_object_detected_parsed_and_written_as_tasks(folder, tmp_path):
    result = load_episodes([folder], formats=FORMATS + (TRANSCRIPT,))

    assert result.problems == []
    assert result.counts == {f"episodelog:{folder}": 1, f"transcript:{folder}": 1}
    plan = next(episode for episode in result.episodes if episode.id == "plan")
    assert [agent.name for agent in plan.agents] == ["Alice Chen", "Bob Lee"]
    assert [turn.speaker for turn in plan.turns] == ["Alice Chen", "Bob Lee"]

    assert write_tasks(result.episodes, tmp_path / "tasks.json") == 2
    (task,) = [task for task in json.loads((tmp_path / "tasks.json").read_text())
               if task["data"]["source_format"] == "transcript"]
    assert task["data"]["scenario"] == "Two friends plan a weekend together."
    assert "I was hoping to finally see that new film." in json.dumps(task["data"])


def test_a_bad_record_of_the_new_format_names_its_file_and_field(tmp_path):
    (tmp_path / "alone.txt").write_text("A monologue.\ngoal Ann: Talk\nAnn: Hello?\n")

    result = load_episodes([tmp_path], formats=FORMATS + (TRANSCRIPT,))

    assert result.problems == [Problem(
        file=str(tmp_path / "alone.txt"), record="alone",
        reason="1 goal line(s); an episode needs two", field="transcript",
    )]


def test_the_new_format_can_be_named_and_is_listed_with_the_others(folder):
    formats = FORMATS + (TRANSCRIPT,)

    named = load_episodes([folder / "plan.txt"], format="transcript", formats=formats)
    assert [episode.id for episode in named.episodes] == ["plan"]

    with pytest.raises(UnknownFormat) as raised:
        load_episodes([folder], format="txt", formats=formats)
    assert raised.value.accepted == ["otree", "episodelog", "dump", "otree-csv", "transcript"]


def test_without_the_new_format_transcripts_are_not_read(folder):
    result = load_episodes([folder / "plan.txt"])

    (problem,) = result.problems
    assert problem.reason == "unsupported file type '.txt'; readable: .json, .jsonl, .ndjson, .csv"
    assert [episode.source.format for episode in load_episodes([folder]).episodes] == [
        "episodelog"
    ]
