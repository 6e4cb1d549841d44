"""The one episode model every input format is normalized into.

Parsers in ``sotopia_ls.importer`` produce ``Episode`` objects; ``sotopia_ls.tasks`` turns
them into Label Studio task data. Validation here is the contract: an episode that passes
is one an annotator can rate.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .dimensions import DIMENSION_KEYS, RUBRIC

TurnKind = Literal["speak", "non-verbal communication", "action", "none", "leave"]


class Turn(BaseModel):
    """One agent action. ``text`` is what was said or done, without the speaker's name."""

    model_config = ConfigDict(frozen=True)

    speaker: str = Field(min_length=1)
    kind: TurnKind
    text: str = ""


class Agent(BaseModel):
    """One participant as the evaluator saw them: profile, secret and social goal."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    age: str = ""
    occupation: str = ""
    pronouns: str = ""
    interests: str = ""
    personality: str = ""
    secret: str = ""
    goal: str = Field(min_length=1)


class Judgement(BaseModel):
    """One stored (model) rating of one dimension for one agent."""

    model_config = ConfigDict(frozen=True)

    score: int
    reasoning: str = ""


class Evaluation(BaseModel):
    """The episode's stored evaluation: ``agents[i][dimension]`` for agent ``i + 1``."""

    model_config = ConfigDict(frozen=True)

    evaluator: str = ""
    agents: tuple[dict[str, Judgement], dict[str, Judgement]]

    @field_validator("agents")
    @classmethod
    def _complete_and_in_range(
        cls, agents: tuple[dict[str, Judgement], ...]
    ) -> tuple[dict[str, Judgement], ...]:
        for index, judgements in enumerate(agents, start=1):
            missing = [key for key in DIMENSION_KEYS if key not in judgements]
            if missing:
                raise ValueError(f"agent {index}: missing dimensions {', '.join(missing)}")
            unknown = sorted(set(judgements) - set(DIMENSION_KEYS))
            if unknown:
                raise ValueError(f"agent {index}: unknown dimensions {', '.join(unknown)}")
            for key, judgement in judgements.items():
                dimension = RUBRIC[key]
                if not dimension.contains(judgement.score):
                    raise ValueError(
                        f"agent {index}: {key} score {judgement.score} is outside "
                        f"{dimension.range_text}"
                    )
        return agents


class Source(BaseModel):
    """Where the episode came from, kept so exports can be grouped by model pair."""

    model_config = ConfigDict(frozen=True)

    format: str
    file: str = ""
    record: str = ""
    tag: str = ""
    models: tuple[str, ...] = ()
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
