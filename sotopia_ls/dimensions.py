"""The SOTOPIA-EVAL rubric: the one place the dimensions are defined.

Everything else derives from ``RUBRIC``, loaded once from ``rubric.json`` beside this module or
the file ``SOTOPIA_LS_RUBRIC`` names, so adding or removing a dimension there changes the whole
package (README.md, "The rating dimensions").
"""

from __future__ import annotations

import os
import re
from importlib.resources import files
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import InvalidRubric

AGENTS: tuple[int, int] = (1, 2)
RUBRIC_ENV = "SOTOPIA_LS_RUBRIC"


class Mistake(BaseModel):
    """The error a bad example shows: its rating is about ``points`` too low or too high."""

    model_config = ConfigDict(frozen=True)

    direction: Literal["too_low", "too_high"]
    points: int = Field(ge=1)


class Example(BaseModel):
    """One annotation example from the instruction page, judged good or bad; a bad one says
    which error it shows, so that practice feedback can name the example a rater repeated."""

    model_config = ConfigDict(frozen=True)

    rationale: str
    rating: int
    verdict: Literal["good", "bad"]
    assessment: str
    error: Mistake | None = None

    @model_validator(mode="after")
    def _error_of_bad_only(self) -> Example:
        if self.error is not None and self.verdict == "good":
            raise ValueError("a good example shows no error")
        return self


class RationaleCases(BaseModel):
    """What a rationale of a dimension states, as regular expressions over its text (lower
    case, "n't" as " not"): the dimension's zero case ("no secret was revealed"), a gain, a
    loss. The consistency flag sets them against the score (docs/consistency.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    zero: tuple[re.Pattern[str], ...] = ()
    positive: tuple[re.Pattern[str], ...] = ()
    negative: tuple[re.Pattern[str], ...] = ()


class Dimension(BaseModel):
    """One SOTOPIA-EVAL dimension; scores are integers in ``range_low..range_high``."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(pattern=r"^[a-z_]+$")
    label: str
    range_low: int
    range_high: int
    guidance: str = Field(min_length=1)
    rationale_cases: RationaleCases = RationaleCases()
    examples: tuple[Example, ...] = ()

    @model_validator(mode="after")
    def _range_is_sane(self) -> Dimension:
        if self.range_low >= self.range_high:
            raise ValueError(f"dimension {self.key!r}: range_low must be below range_high")
        for example in self.examples:
            self.check(example.rating)
        return self

    @property
    def values(self) -> list[int]:
        """Every score an annotator may give, lowest first."""
        return list(range(self.range_low, self.range_high + 1))

    @property
    def choices(self) -> dict[str, int]:
        """Every score as the labeling config writes it ("-3"), to the integer it stands for."""
        return {str(value): value for value in self.values}

    @property
    def max_abs(self) -> int:
        """Largest magnitude on the scale: the divisor of the range-based binarization."""
        return max(abs(self.range_low), abs(self.range_high))

    @property
    def range_text(self) -> str:
        return f"{self.range_low} to {self.range_high}"

    def example_for(self, score: int, reference: int) -> Example | None:
        """The bad example showing the error of ``score`` against ``reference``: the same
        direction, the nearest size (the first on a tie); None when none shows it."""
        off = score - reference
        direction = "too_low" if off < 0 else "too_high"
        shown = [e for e in self.examples if e.error and e.error.direction == direction]
        return min(shown, key=lambda e: abs(e.error.points - abs(off)), default=None) \
            if off else None

    def check(self, score: int) -> int:
        """``score`` if it lies inside the range: the package's one range check."""
        if not self.range_low <= score <= self.range_high:
            # A score thousands of digits long is not printed: Python refuses to.
            shown = str(score) if abs(score) < 10**15 else "of more than 15 digits"
            raise ValueError(f"{self.key} score {shown} is outside {self.range_text}")
        return score


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

    dimensions: tuple[Dimension, ...] = Field(min_length=1)
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
                if dimension is None:
                    raise ValueError(
                        f"worked example for {agent.name}: {rating.dimension!r} is not a "
                        f"dimension of this rubric ({', '.join(keys)})"
                    )
                dimension.check(rating.score)
        return self

    def __getitem__(self, key: str) -> Dimension:
        for dimension in self.dimensions:
            if dimension.key == key:
                return dimension
        raise KeyError(f"unknown dimension {key!r}; known: {', '.join(self.keys)}")

    @property
    def keys(self) -> list[str]:
        return [d.key for d in self.dimensions]


def load_rubric() -> Rubric:
    """The rubric of ``SOTOPIA_LS_RUBRIC`` (a path), else the one shipped with the package."""
    custom = os.environ.get(RUBRIC_ENV)
    source = Path(custom) if custom else files("sotopia_ls").joinpath("rubric.json")
    try:
        return Rubric.model_validate_json(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidRubric(str(source), f"cannot read it: {error}") from None
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(map(str, first["loc"]))
        reason = first["msg"].removeprefix("Value error, ")
        raise InvalidRubric(str(source), f"{where}: {reason}" if where else reason) from None


RUBRIC: Rubric = load_rubric()
DIMENSIONS: tuple[Dimension, ...] = RUBRIC.dimensions
DIMENSION_KEYS: tuple[str, ...] = tuple(RUBRIC.keys)


def rating_name(key: str, agent: int) -> str:
    """Control name of a rating, as in the Sotopia oTree app: ``believability_1``."""
    return f"{key}_{agent}"


def reasoning_name(key: str, agent: int) -> str:
    """Control name of a rationale, as in the Sotopia oTree app: ``believability_reasoning_1``."""
    return f"{key}_reasoning_{agent}"
