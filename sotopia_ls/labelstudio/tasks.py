"""Episode → a Label Studio task: ``data`` (what the annotator sees) and ``meta`` (what not).

The keys of ``episode_to_task`` are the ``$variables`` of the labeling config, so the two are
written against each other: the names are ``sotopia_ls.config``'s (``DIALOGUE``,
``agent_field``), below the Label Studio boundary, which creates projects with that config. Everything is
plain text; Label Studio's ``Text`` and ``Paragraphs`` render it as text, never as markup, so
episode content cannot run in the annotator's browser.

The episode's stored model evaluation goes into the task's ``meta``, never its ``data``: the
Data Manager shows every data field as a column to every annotator, and a model's scores in
view anchor human judgement. Exports and the pre-annotation backend read ``meta``.

A task's model evaluations, its *judges*, are kept by name: the stored evaluation
(``sotopia_evaluation``, named by its evaluator) and those ``sotopia-ls evaluate`` adds under
``sotopia_judges`` (``{model: evaluation}``), beside it so that the importer's field keeps its
meaning. ``stored_judges`` reads both.

A study's review marks its participants' annotations under ``sotopia_review``
(``{"<annotation id>": decision}``, a decision one of ``REVIEW_DECISIONS``), so that an export
made without the gateway's database still sees them. The study gateway marks the ratings
that adaptive extra raters added (slots above k) under ``sotopia_added_slots``
(``{"<annotation id>": slot number}``, an object like the review's, so that marking one is a
merge that keeps the others and a repeated mark changes nothing).

The study gateway marks its gold episodes (tasks with reference ratings, rated by any number
of participants: hidden checks, not part of the sample) under ``sotopia_gold`` (``{"<study
name>": true}``, an object so that a task gold in two studies keeps both marks), so that an
export leaves them out of agreement and counts them apart.
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
