"""Episode → Label Studio task data.

The keys of ``episode_to_task`` are the ``$variables`` of the labeling config, so the two are
written against each other: ``sotopia_ls.config`` uses the names defined here.
Everything is plain text; Label Studio's ``Text`` and ``Paragraphs`` render it as text, never
as markup, so episode content cannot run in the annotator's browser.
"""

from __future__ import annotations

from typing import Any

from .episode import Agent, Episode, Turn

DIALOGUE = "dialogue"
EPISODE_ID = "episode_id"
EVALUATION = "sotopia_evaluation"
AGENTS_KEY = "agents"

PROFILE_LABELS = (
    ("age", "Age"),
    ("occupation", "Occupation"),
    ("pronouns", "Pronouns"),
    ("interests", "Interests"),
    ("personality", "Personality and values"),
)

_KIND_TEXT = {
    "non-verbal communication": "[non-verbal communication] {text}",
    "action": "[action] {text}",
    "none": "(did nothing)",
    "leave": "(left the conversation)",
}


def agent_field(agent: int, part: str) -> str:
    """Task-data key of one agent field: ``agent_1_name``, ``agent_2_goal`` …"""
    return f"agent_{agent}_{part}"


def profile_text(agent: Agent) -> str:
    """The background an annotator reads, one labelled line per known field."""
    lines = [f"{label}: {value}" for key, label in PROFILE_LABELS if (value := getattr(agent, key))]
    return "\n".join(lines)


def turn_text(turn: Turn) -> str:
    """What the dialogue shows for a turn; non-verbal turns and actions say what they are."""
    template = _KIND_TEXT.get(turn.kind, "{text}")
    return template.format(text=turn.text)


def dialogue(episode: Episode) -> list[dict[str, Any]]:
    """Numbered turns for ``<Paragraphs layout="dialogue">``."""
    return [
        {
            "turn": number,
            "speaker": turn.speaker,
            # The number goes with the text: Label Studio colours and filters turns by speaker.
            "text": f"#{number}  {turn_text(turn)}",
            "kind": turn.kind,
            "utterance": turn.text,
        }
        for number, turn in enumerate(episode.turns, start=1)
    ]


def episode_to_task(episode: Episode) -> dict[str, Any]:
    """The task ``data`` for one episode (without the prediction)."""
    data: dict[str, Any] = {
        EPISODE_ID: episode.id,
        "scenario": episode.scenario,
        DIALOGUE: dialogue(episode),
        "source_format": episode.source.format,
        "source_file": episode.source.file,
        "source_tag": episode.source.tag,
        "models": list(episode.source.models),
        # The agents as parsed, for exports; the fields below are what the screen shows.
        AGENTS_KEY: [agent.model_dump() for agent in episode.agents],
    }
    for number, agent in enumerate(episode.agents, start=1):
        data[agent_field(number, "name")] = agent.name
        data[agent_field(number, "profile")] = profile_text(agent)
        data[agent_field(number, "secret")] = agent.secret or "(none stated)"
        data[agent_field(number, "goal")] = agent.goal
    if episode.evaluation is not None:
        data[EVALUATION] = episode.evaluation.model_dump(mode="json")
    return data
