"""Episode → a Label Studio task: ``data`` (what the annotator sees) and ``meta`` (what not).

The data's keys are the labeling config's ``$variables``, all plain text. Model evaluations go
into ``meta``, since the Data Manager shows every data field to annotators and a model's scores
anchor them. The study's review, added-slot and gold marks are kept there too, each an object
keyed by annotation or study, so that a new mark merges with the others.
"""

from __future__ import annotations

from typing import Any

from ..config import DIALOGUE, agent_field
from ..episode import ACTION_WORDING, PROFILE_FIELDS, Agent, Episode, Profile, Turn

EPISODE_ID = "episode_id"
EVALUATION = "sotopia_evaluation"
JUDGES = "sotopia_judges"
REVIEW = "sotopia_review"
GOLD = "sotopia_gold"
ADDED_SLOTS = "sotopia_added_slots"
# The decision whose annotations an export can leave out (``--exclude-rejected``).
REJECT = "reject"
REVIEW_DECISIONS: tuple[str, ...] = ("approve", "look", REJECT)
# The name of a stored evaluation whose source does not name its evaluator.
UNNAMED_EVALUATOR = "sotopia-evaluation"
AGENTS_KEY = "agents"
# The model behind each agent, in agent order ([] when unknown): the export's per-row model.
AGENT_MODELS = "agent_models"
SOURCE_ENVIRONMENT = "source_environment"

# What the background card shows, in this order; the secret has a box of its own.
_SHOWN_PROFILE = tuple(name for name in PROFILE_FIELDS if name != "secret")

# Turns that carry no text: Sotopia's words for them are shown in brackets, as stage directions.
_WITHOUT_TEXT = frozenset({"none", "leave"})


def profile_text(agent: Agent) -> str:
    """The background an annotator reads, one labelled line per known field."""
    return "\n".join(
        f"{Profile.model_fields[name].title}: {value}"
        for name in _SHOWN_PROFILE
        if (value := getattr(agent, name))
    )


def turn_text(turn: Turn) -> str:
    """What the dialogue shows for a turn: speech as said; non-verbal turns and actions say
    what they are, in Sotopia's words (``ACTION_WORDING``)."""
    if turn.kind == "speak":
        return turn.text
    worded = ACTION_WORDING[turn.kind].format(text=turn.text)
    return f"({worded})" if turn.kind in _WITHOUT_TEXT else worded


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
    """The task ``data`` for one episode: what the labeling config shows, and its sources."""
    data: dict[str, Any] = {
        EPISODE_ID: episode.id,
        "scenario": episode.scenario,
        DIALOGUE: dialogue(episode),
        "source_format": episode.source.format,
        "source_file": episode.source.file,
        "source_tag": episode.source.tag,
        # The Sotopia environment id the file named, for the export's EpisodeLog records.
        SOURCE_ENVIRONMENT: episode.source.environment,
        "models": list(episode.source.models),
        AGENT_MODELS: list(episode.source.agent_models),
        # The agents as parsed, for exports; the fields below are what the screen shows.
        AGENTS_KEY: [agent.model_dump() for agent in episode.agents],
    }
    for number, agent in enumerate(episode.agents, start=1):
        data[agent_field(number, "name")] = agent.name
        data[agent_field(number, "profile")] = profile_text(agent)
        data[agent_field(number, "secret")] = agent.secret or "(none stated)"
        data[agent_field(number, "goal")] = agent.goal
    return data


def episode_meta(episode: Episode) -> dict[str, Any]:
    """The task ``meta`` for one episode: its stored model evaluation, if it has one."""
    if episode.evaluation is None:
        return {}
    return {EVALUATION: episode.evaluation.model_dump(mode="json")}


def stored_judges(meta: Any) -> dict[str, Any]:
    """``judge name → its evaluation as stored`` (not validated) in a task's ``meta``: the
    stored evaluation first, under its evaluator's name, then each one of ``JUDGES``."""
    if not isinstance(meta, dict):
        return {}
    found: dict[str, Any] = {}
    stored = meta.get(EVALUATION)
    if stored:
        evaluator = stored.get("evaluator") if isinstance(stored, dict) else None
        found[evaluator if isinstance(evaluator, str) and evaluator else UNNAMED_EVALUATOR] = stored
    judges = meta.get(JUDGES)
    if isinstance(judges, dict):
        for name, evaluation in judges.items():
            found.setdefault(str(name), evaluation)
    return found
