"""The SOTOPIA-EVAL rubric: the one place the seven dimensions are defined.

Everything else (labeling config, task data, validation, exports, the backend) derives
from ``RUBRIC``, which is loaded once from ``rubric.json`` beside this module. That file
holds, per dimension, the key, label, integer range, the guidance sentence annotators
read, and the good/bad annotation examples of the original Sotopia instruction page,
plus its fully worked example.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

AGENTS: tuple[int, int] = (1, 2)


class Example(BaseModel):
    """One annotation example from the instruction page, judged good or bad."""

    model_config = ConfigDict(frozen=True)

    rationale: str
    rating: int
    verdict: Literal["good", "bad"]
    assessment: str


class Dimension(BaseModel):
    """One SOTOPIA-EVAL dimension; scores are integers in ``range_low..range_high``."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(pattern=r"^[a-z_]+$")
    label: str
    range_low: int
    range_high: int
    guidance: str = Field(min_length=1)
    examples: tuple[Example, ...] = ()

    @model_validator(mode="after")
    def _range_is_sane(self) -> Dimension:
        if self.range_low >= self.range_high:
            raise ValueError(f"dimension {self.key!r}: range_low must be below range_high")
        for example in self.examples:
            if not self.range_low <= example.rating <= self.range_high:
                raise ValueError(
                    f"dimension {self.key!r}: example rating {example.rating} is outside "
                    f"{self.range_low}..{self.range_high}"
                )
        return self

    @property
    def values(self) -> list[int]:
        """Every score an annotator may give, lowest first."""
        return list(range(self.range_low, self.range_high + 1))

    @property
    def max_abs(self) -> int:
        """Largest magnitude on the scale; Sotopia binarizes with ``round(score / max_abs)``."""
        return max(abs(self.range_low), abs(self.range_high))

    @property
    def range_text(self) -> str:
        return f"{self.range_low} to {self.range_high}"

    def contains(self, score: object) -> bool:
        """True when ``score`` is an integer (bools excluded) inside the range."""
        return (
            isinstance(score, int)
            and not isinstance(score, bool)
            and self.range_low <= score <= self.range_high
        )


class WorkedRating(BaseModel):
    dimension: str
    reasoning: str
    score: int


class WorkedAgent(BaseModel):
    name: str
    ratings: tuple[WorkedRating, ...]


class WorkedExample(BaseModel):
    agents: tuple[WorkedAgent, ...]


class Rubric(BaseModel):
    """The whole rubric as shipped; validated once at import time."""

    model_config = ConfigDict(frozen=True)

    dimensions: tuple[Dimension, ...]
    worked_example: WorkedExample

    @model_validator(mode="after")
    def _consistent(self) -> Rubric:
        keys = [d.key for d in self.dimensions]
        if len(set(keys)) != len(keys):
            raise ValueError(f"duplicate dimension keys in {keys}")
        by_key = {d.key: d for d in self.dimensions}
        for agent in self.worked_example.agents:
            for rating in agent.ratings:
                dimension = by_key.get(rating.dimension)
                if dimension is None or not dimension.contains(rating.score):
                    raise ValueError(
                        f"worked example for {agent.name}: {rating.dimension}={rating.score} "
                        "is not a valid rating"
                    )
        return self

    def __getitem__(self, key: str) -> Dimension:
        for dimension in self.dimensions:
            if dimension.key == key:
                return dimension
        raise KeyError(f"unknown dimension {key!r}; known: {', '.join(self.keys)}")

    @property
    def keys(self) -> list[str]:
        return [d.key for d in self.dimensions]


RUBRIC: Rubric = Rubric.model_validate_json(
    files("sotopia_ls").joinpath("rubric.json").read_text(encoding="utf-8")
)
DIMENSIONS: tuple[Dimension, ...] = RUBRIC.dimensions
DIMENSION_KEYS: tuple[str, ...] = tuple(RUBRIC.keys)


def rating_name(key: str, agent: int) -> str:
    """Control name of a rating, as in the Sotopia oTree app: ``believability_1``."""
    return f"{key}_{agent}"


def reasoning_name(key: str, agent: int) -> str:
    """Control name of a rationale, as in the Sotopia oTree app: ``believability_reasoning_1``."""
    return f"{key}_reasoning_{agent}"


def overall(scores: dict[str, float]) -> float:
    """Sotopia's overall score: the unweighted mean of the seven dimensions."""
    return sum(scores[key] for key in DIMENSION_KEYS) / len(DIMENSION_KEYS)


@cache
def agent_evaluation_model() -> type[BaseModel]:
    """One pydantic model per agent evaluation, one ``(reasoning, score)`` field per dimension.

    Mirrors sotopia's ``SotopiaDimensions``; the range is a real ``Field(ge=, le=)`` bound so
    an out-of-range score fails validation with the dimension's name in the error location.
    """
    fields = {
        d.key: (
            tuple[str, Annotated[int, Field(strict=True, ge=d.range_low, le=d.range_high)]],
            Field(description=d.guidance),
        )
        for d in DIMENSIONS
    }
    return create_model("AgentEvaluation", **fields)  # type: ignore[call-overload]
