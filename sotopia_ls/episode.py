"""The one episode model every input format is normalized into.

Parsers in ``sotopia_ls.importer`` produce ``Episode`` objects; ``sotopia_ls.tasks`` turns
them into Label Studio task data. Validation here is the contract: an episode that passes
is one an annotator can rate.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .scores import Evaluation

TurnKind = Literal["speak", "non-verbal communication", "action", "none", "leave"]

# How Sotopia words each kind of turn after the agent's name (``AgentAction.to_natural_language``):
# the judge's prompt, the exported episode logs and the dialogue annotators read all say it so.
ACTION_WORDING: dict[str, str] = {
    "speak": 'said: "{text}"',
    "non-verbal communication": "[non-verbal communication] {text}",
    "action": "[action] {text}",
    "none": "did nothing",
    "leave": "left the conversation",
}


class Turn(BaseModel):
    """One agent action. ``text`` is what was said or done, without the speaker's name."""

    model_config = ConfigDict(frozen=True)

    speaker: str = Field(min_length=1)
    kind: TurnKind
    text: str = ""


class Profile(BaseModel):
    """An agent's background as the evaluator saw it: the one declaration of its fields.

    ``title`` is the label the annotator reads; an ``alias`` is the field's name in Sotopia's
    oTree app (``personal_info``), read by the ``otree-csv`` format and written to
    ``scores_wide.csv``'s ``data`` column.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, coerce_numbers_to_str=True)

    age: str = Field("", title="Age")
    occupation: str = Field("", title="Occupation", alias="profession")
    pronouns: str = Field("", title="Pronouns")
    interests: str = Field("", title="Interests")
    personality: str = Field("", title="Personality and values")
    secret: str = Field("", title="Secret", alias="secrets")


PROFILE_FIELDS: tuple[str, ...] = tuple(Profile.model_fields)
# Our field name → the oTree app's, for the formats that speak oTree.
OTREE_PROFILE_NAMES: dict[str, str] = {
    name: field.alias or name for name, field in Profile.model_fields.items()
}


class Agent(Profile):
    """One participant: profile, name and social goal."""

    name: str = Field(min_length=1)
    goal: str = Field(min_length=1)


class Source(BaseModel):
    """Where the episode came from, kept so exports can be grouped by model pair."""

    model_config = ConfigDict(frozen=True)

    format: str
    file: str = ""
    record: str = ""
    tag: str = ""
    models: tuple[str, ...] = ()
    # The model behind each agent, in agent order: read from ``models`` (Sotopia's
    # ``[evaluator, agent 1, agent 2]``) or named on import (``--models``); () when unknown.
    agent_models: tuple[str, ...] = ()
    environment: str = ""


class Episode(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    scenario: str = Field(min_length=1)
    agents: tuple[Agent, Agent]
    turns: tuple[Turn, ...] = Field(min_length=1)
    source: Source
    evaluation: Evaluation | None = None

    @model_validator(mode="after")
    def _two_distinct_agents(self) -> Episode:
        first, second = (agent.name for agent in self.agents)
        if first == second:
            raise ValueError(f"both agents are named {first!r}")
        strangers = sorted({turn.speaker for turn in self.turns} - {first, second})
        if strangers:
            raise ValueError(f"turns by someone who is not a participant: {', '.join(strangers)}")
        return self
