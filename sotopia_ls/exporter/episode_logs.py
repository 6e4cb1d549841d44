"""Sotopia ``EpisodeLog`` records of the exported episodes, rebuilt from their task data.

Written as Sotopia's ``arun_one_episode`` writes an episode, so Sotopia loads it and maps each
annotation to its episode whatever the input format was; ids derived from content keep one
agent one id across exports. Rewards are 0: the human ratings are the annotations.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import msgspec
import orjson

from ..episode import ACTION_WORDING, PROFILE_FIELDS
from ..importer.messages import ENVIRONMENT, Message
from ..labelstudio.tasks import AGENTS_KEY, DIALOGUE, SOURCE_ENVIRONMENT
from .wire import Data, Turn

_NOTHING = ACTION_WORDING["none"]
_UNKNOWN_GOAL = "Unknown"
_SENTENCE_ENDS = (".", "!", "?", '"', "…")

# An agent as the importer writes it into the task data (``Agent.model_dump``). Checked with
# msgspec, not by building the pydantic ``Episode``: that costs more per episode than the rest
# of the export's work on it, and the export is benchmarked.
AgentData = msgspec.defstruct(
    "AgentData",
    [("name", str), ("goal", str), *((name, str, "") for name in PROFILE_FIELDS)],
    frozen=True,
)
_AGENTS = tuple[AgentData, AgentData]  # type: ignore[valid-type]


def episode_log(episode_id: str, data: Data) -> dict[str, Any]:  # type: ignore[valid-type]
    """The ``EpisodeLog`` of one episode; ``ValueError`` (naming the task-data field) when its
    task data does not hold a whole episode."""
    agents = _agents(getattr(data, AGENTS_KEY))
    scenario = data.scenario
    if not isinstance(scenario, str) or not scenario.strip():
        raise ValueError("task data scenario: no scenario")
    models, named = data.models, getattr(data, SOURCE_ENVIRONMENT)
    return {
        "pk": episode_id,
        "environment": named if isinstance(named, str) and named else _derived(
            "environment", (scenario, *(agent.goal for agent in agents))),
        "agents": [_derived("agent", tuple(getattr(agent, name) for name in _IDENTITY))
                   for agent in agents],
        "tag": str(data.source_tag or ""),
        "models": [str(model) for model in models] if isinstance(models, list) else [],
        "messages": messages(scenario, agents, getattr(data, DIALOGUE)),
        "reasoning": "",
        "rewards": [0.0] * len(agents),
        "rewards_prompt": "",
    }


# What identifies a person: the name and the profile, not the episode's goal.
_IDENTITY = ("name", *PROFILE_FIELDS)


def _agents(value: Any) -> Sequence[Any]:
    try:
        agents = msgspec.convert(value, _AGENTS)
    except msgspec.ValidationError as error:
        raise ValueError(f"task data {AGENTS_KEY}: {error}") from None
    for number, agent in enumerate(agents, start=1):
        for name in ("name", "goal"):
            if not getattr(agent, name).strip():
                raise ValueError(f"task data {AGENTS_KEY}: agent {number} has no {name}")
    if agents[0].name == agents[1].name:
        raise ValueError(f"task data {AGENTS_KEY}: both agents are named {agents[0].name!r}")
    return agents


# People and settings recur across episodes: each id is made once per worker, mostly.
@lru_cache(maxsize=1 << 10)
def _derived(kind: str, content: tuple[str, ...]) -> str:
    """A stable id made from what identifies the thing: the same content, the same id."""
    return f"{kind}-{hashlib.sha256(orjson.dumps(content)).hexdigest()[:20]}"


def messages(scenario: str, agents: Sequence[Any], turns: list[Turn]) -> list[list[Message]]:
    """Sotopia's ``messages``: a list of turns, each a list of ``(sender, receiver, text)``."""
    first, second = names = (agents[0].name, agents[1].name)
    if not turns:
        raise ValueError(f"task data {DIALOGUE}: no turns")
    out: list[list[Message]] = [[(ENVIRONMENT, name, view)
                                 for name, view in zip(names, context_views(scenario, agents))]]
    for number, turn in enumerate(turns):
        speaker, kind, text = turn.speaker, turn.kind, turn.utterance
        if speaker not in names or not isinstance(text, str):
            raise ValueError(f"task data {DIALOGUE}.{number}: not a turn of either agent")
        if not isinstance(kind, str) or kind not in ACTION_WORDING:
            raise ValueError(f"task data {DIALOGUE}.{number}.kind: not one of {', '.join(ACTION_WORDING)}")
        action = ACTION_WORDING[kind].format(text=text)
        out[-1] += ((first, ENVIRONMENT, action if speaker == first else _NOTHING),
                    (second, ENVIRONMENT, action if speaker == second else _NOTHING))
        told = f"Turn #{number}: {speaker} {action}\n"
        out.append([(ENVIRONMENT, first, told), (ENVIRONMENT, second, told)])
    return out


def context_views(scenario: str, agents: Sequence[Any]) -> tuple[str, str]:
    """The context as each agent is shown it at the start: both backgrounds, only its own
    secret, only its own goal."""
    one, two = agents
    public = [background(agent) for agent in agents]
    secret = [f"{text} {agent.name.split(' ')[0]}'s secrets: {agent.secret}".lstrip()
              if agent.secret else text for agent, text in zip(agents, public)]
    opening = (f"\nHere is the context of this interaction:\nScenario: {scenario}\n"
               f"Participants: {one.name} and {two.name}\n")
    return (
        f"{opening}{one.name}'s background: {secret[0]}\n{two.name}'s background: {public[1]}\n"
        f"{one.name}'s goal: {one.goal}\n{two.name}'s goal: {_UNKNOWN_GOAL}\n"
        "Conversation Starts:\n",
        f"{opening}{one.name}'s background: {public[0]}\n{two.name}'s background: {secret[1]}\n"
        f"{one.name}'s goal: {_UNKNOWN_GOAL}\n{two.name}'s goal: {two.goal}\n"
        "Conversation Starts:\n",
    )


def background(agent: Any) -> str:
    """Sotopia's background sentence for ``agent`` (its ``get_bio``) without the secret, the
    parts it lacks left out; the importer's ``parse_background`` reads it back into the same
    profile."""
    parts = []
    if agent.age:
        parts.append(_sentence(f"{agent.name} is a {agent.age}-year-old {agent.occupation}"))
    if agent.pronouns:
        parts.append(f"{agent.pronouns} pronouns.")
    if agent.interests:
        parts.append(_sentence(agent.interests))
    if agent.personality:
        parts.append(f"Personality and values description: {_sentence(agent.personality)}")
    return " ".join(parts)


def _sentence(text: str) -> str:
    """``text`` with the closing period the importer drops from every profile field."""
    text = text.rstrip()
    return text if text.endswith(_SENTENCE_ENDS) else f"{text}."
