"""``episodelog``: Sotopia's ``EpisodeLog`` as JSON (one object, a list, or JSON lines).

Keys ``pk, environment, agents, tag, models, messages, reasoning, rewards, rewards_prompt``.
The context comes from the agents' first observations (``sotopia_ls.importer.messages``), the
stored evaluation from ``rewards`` and ``reasoning`` with ``models[0]`` as the evaluator.
``rewards_prompt`` here is whatever prompt the run used last, not the context: ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from ..episode import Episode
from .evaluation import Reward, stored_evaluation
from .messages import Message, action_turns, context_views, merge_views
from .records import EpisodeLogHeader, build_episode, in_field, validate

FORMAT = "episodelog"


def detects(keys: Set[str]) -> bool:
    """The messages, or at least the agents and their rewards."""
    return "messages" in keys or {"agents", "rewards"} <= keys


class EpisodeLogRecord(EpisodeLogHeader):
    messages: list[list[Message]]
    reasoning: str | None = ""
    rewards: list[Reward] | None = None


def parse_episodelog(record: Mapping[str, Any], file: str = "", label: str = "") -> Episode:
    log = validate(EpisodeLogRecord, record)
    with in_field("messages"):
        scenario, agents = merge_views(context_views(log.messages))
        turns = action_turns(log.messages)
    return build_episode(
        id=log.pk,
        scenario=scenario,
        agents=agents,
        turns=turns,
        source=log.source(FORMAT, file, label),
        evaluation=stored_evaluation(
            log.rewards, log.reasoning or "", log.models[0] if log.models else ""
        ),
    )
