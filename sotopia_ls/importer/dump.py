"""``dump``: the released Sotopia episode dumps (JSON lines, one episode per line).

Written by ``sotopia.database.serialization.episodes_to_jsonl``: ``episode_id, environment_id,
agent_ids, experiment_tag, experiment_model_name_pairs, raw_messages, raw_rewards, scenario,
codename, agents_background {name: background}, social_goals {name: goal},
social_interactions, reasoning, rewards``. Older dumps lack the ``raw_*`` and experiment
fields; the 2024 release stores ``rewards`` as one dimension dict per agent.
Turns come from ``raw_messages`` when present (as in ``episodelog``), else from the
``social_interactions`` text.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from pydantic import Field

from ..episode import Episode
from .context import agent_of, is_unknown_goal, parse_background
from .evaluation import Reward, stored_evaluation
from .messages import Message, action_turns
from .records import EpisodeLogHeader, RecordError, build_episode, in_field, validate
from .transcript import parse_interactions

FORMAT = "dump"


def detects(keys: Set[str]) -> bool:
    """Any of the fields only the dumps name so."""
    return bool(keys & {"episode_id", "agents_background", "social_interactions"})


class DumpRecord(EpisodeLogHeader):
    raw_messages: list[list[Message]] | None = None
    raw_rewards: list[Reward] | None = None
    scenario: str = Field(min_length=1)
    agents_background: dict[str, str]
    social_goals: dict[str, str]
    social_interactions: str | None = ""
    reasoning: str | None = ""
    rewards: list[Reward] | None = None


def parse_dump(record: Mapping[str, Any], file: str = "", label: str = "") -> Episode:
    dump = validate(DumpRecord, record)
    names = list(dump.agents_background)
    if len(names) != 2:
        raise RecordError(
            f"{len(names)} agent(s) ({', '.join(names)}); an episode needs two", "agents_background"
        )
    if set(dump.social_goals) != set(names):
        raise RecordError(
            f"names {', '.join(dump.social_goals) or '(none)'} differ from agents_background's "
            f"{', '.join(names) or '(none)'}",
            "social_goals",
        )
    for name, goal in dump.social_goals.items():
        if is_unknown_goal(goal):
            raise RecordError(f"no goal stated for {name}", "social_goals")
    agents = [
        agent_of(parse_background(dump.agents_background[name], name), name,
                 dump.social_goals[name])
        for name in names
    ]
    if dump.raw_messages:
        with in_field("raw_messages"):
            turns = action_turns(dump.raw_messages)
    else:
        with in_field("social_interactions"):
            turns = parse_interactions(dump.social_interactions or "", names)
    return build_episode(
        id=dump.pk,
        scenario=dump.scenario,
        agents=agents,
        turns=turns,
        source=dump.source(FORMAT, file, label),
        evaluation=stored_evaluation(
            dump.rewards if dump.rewards is not None else dump.raw_rewards,
            dump.reasoning or "",
            dump.models[0] if dump.models else "",
        ),
    )
