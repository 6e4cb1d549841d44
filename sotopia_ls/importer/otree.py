"""``otree``: the episode JSON read by Sotopia's oTree human-evaluation app.

Keys ``pk, environment, tag, models, rewards_prompt`` (sometimes ``context2``, unused).
Everything an annotator sees is in ``rewards_prompt``, the evaluator's prompt: the context
text (``sotopia_ls.importer.context``) followed by the ``Turn #N`` history
(``sotopia_ls.importer.transcript``). ``models`` is ``[evaluator, agent 1, agent 2]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from ..episode import Episode
from ..episode import Profile
from .context import agent_of, is_unknown_goal, parse_context, split_context
from .records import EpisodeLogHeader, RecordError, build_episode, in_field, validate
from .transcript import parse_history

FORMAT = "otree"


def detects(keys: Set[str]) -> bool:
    """The evaluator's prompt; an ``EpisodeLog`` keeps one too, so this format is tried last."""
    return "rewards_prompt" in keys


class OTreeRecord(EpisodeLogHeader):
    rewards_prompt: str


def parse_otree(record: Mapping[str, Any], file: str = "", label: str = "") -> Episode:
    episode = validate(OTreeRecord, record)
    with in_field("rewards_prompt"):
        context = parse_context(episode.rewards_prompt)
        agents = []
        for name in context.participants:
            goal = context.goals.get(name, "")
            if is_unknown_goal(goal):
                raise RecordError(f"no goal stated for {name}")
            agents.append(agent_of(context.profiles.get(name, Profile()), name, goal))
        turns = parse_history(split_context(episode.rewards_prompt)[1], context.participants)
    return build_episode(
        id=episode.pk,
        scenario=context.scenario,
        agents=agents,
        turns=turns,
        source=episode.source(FORMAT, file, label),
    )
