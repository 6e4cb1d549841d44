"""``episodelog``: Sotopia's ``EpisodeLog`` as JSON (one object, a list, or JSON lines).

Keys ``pk, environment, agents, tag, models, messages, reasoning, rewards, rewards_prompt``.
The context comes from the agents' first observations (``sotopia_ls.importer.messages``), the
stored evaluation from ``rewards`` and ``reasoning`` with ``models[0]`` as the evaluator.
``rewards_prompt`` here is whatever prompt the run used last, not the context: ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..episode import Episode, Source
from .evaluation import Reward, stored_evaluation
from .messages import Message, action_turns, context_views, merge_views
from .records import build_episode, in_field, validate

FORMAT = "episodelog"


class EpisodeLogRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    pk: str = Field(min_length=1)
    environment: str = ""
    tag: str | None = ""
    models: list[str] | None = None
    messages: list[list[Message]]
    reasoning: str | None = ""
    rewards: list[Reward] | None = None


def parse_episodelog(record: Mapping[str, Any], file: str = "", label: str = "") -> Episode:
    log = validate(EpisodeLogRecord, record)
    models = tuple(log.models or ())
    with in_field("messages"):
        scenario, agents = merge_views(context_views(log.messages))
        turns = action_turns(log.messages)
    return build_episode(
        id=log.pk,
        scenario=scenario,
        agents=agents,
        turns=turns,
        source=Source(
            format=FORMAT,
            file=file,
            record=label,
            tag=log.tag or "",
            models=models,
            environment=log.environment,
        ),
        evaluation=stored_evaluation(log.rewards, log.reasoning or "", models[0] if models else ""),
    )
