"""Sotopia's ``messages``: a list of turns, each a list of ``[sender, receiver, text]``.

Turn 0 opens with one ``Environment → agent`` observation per agent: the context as that
agent sees it (its own secret and goal; the other's goal ``Unknown``). Agent actions are the
``agent → Environment`` messages; the ``Environment → agent`` messages of later turns only
repeat them as "Turn #N: …" and are skipped, as in ``EpisodeLog.render_for_humans``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..episode import Agent, Turn
from .actions import parse_action
from ..episode import Profile
from .context import Context, agent_of, is_unknown_goal, merged, parse_context
from .records import RecordError

ENVIRONMENT = "Environment"
Message = tuple[str, str, str]


def context_views(messages: Sequence[Sequence[Message]]) -> list[tuple[str, Context]]:
    """Each agent's view of the context, as ``(receiver, context)``, from the first turn."""
    if not messages:
        raise RecordError("empty dialogue: no turns at all")
    views = [
        (receiver, parse_context(text))
        for sender, receiver, text in messages[0]
        if sender == ENVIRONMENT and receiver != ENVIRONMENT and "participants" in text.lower()
    ]
    if not views:
        raise RecordError(
            "missing participants: turn 0 has no 'Environment → agent' context observation"
        )
    return views


def merge_views(views: Sequence[tuple[str, Context]]) -> tuple[str, list[Agent]]:
    """The scenario and both agents, each agent's secret and goal taken from its own view."""
    participants = views[0][1].participants
    for receiver, context in views:
        if set(context.participants) != set(participants):
            raise RecordError(
                f"{receiver}'s view lists {', '.join(context.participants)}, "
                f"another view {', '.join(participants)}"
            )
    agents = []
    for name in participants:
        own_first = sorted(views, key=lambda view: view[0] != name)
        profile = Profile()
        for _, context in own_first:
            profile = merged(profile, context.profiles.get(name, Profile()))
        goals = [context.goals.get(name, "") for _, context in own_first]
        goal = next((goal for goal in goals if not is_unknown_goal(goal)), "")
        if not goal:
            raise RecordError(f"no view states {name}'s goal")
        agents.append(agent_of(profile, name, goal))
    return views[0][1].scenario, agents


def action_turns(messages: Sequence[Sequence[Message]]) -> list[Turn]:
    """Every agent action in order; "did nothing" is left out."""
    turns = []
    for turn in messages:
        for sender, receiver, text in turn:
            is_action = receiver == ENVIRONMENT and sender != ENVIRONMENT
            if is_action and (action := parse_action(sender, text)):
                turns.append(action)
    return turns
