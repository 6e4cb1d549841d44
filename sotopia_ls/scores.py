"""The one score model: per agent, a ``(reasoning, score)`` pair for every rubric dimension.

``AgentScores`` has one field per dimension, kept in range by ``Dimension.check``; ``None`` is
a gap of a stored evaluation, kept and reported. The flat form,
``{rating_name(key, agent): score, reasoning_name(key, agent): text}``, uses Sotopia's oTree
field names, which are also the config's control names and the exports' columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model

from .dimensions import AGENTS, DIMENSION_KEYS, DIMENSIONS, Dimension, rating_name, reasoning_name
from .text import usable

RATING_FIELDS: tuple[str, ...] = tuple(
    rating_name(key, agent) for agent in AGENTS for key in DIMENSION_KEYS
)
# Each agent's ratings and rationales in rubric order, rating before rationale.
SCORE_FIELDS: tuple[str, ...] = tuple(
    name
    for agent in AGENTS
    for key in DIMENSION_KEYS
    for name in (rating_name(key, agent), reasoning_name(key, agent))
)


def _reasoning(text: str) -> str:
    """The rationale rule (``sotopia_ls.text``), whoever wrote the text: what Label Studio's
    database would refuse is removed, and a blank text is no reasoning ("")."""
    return usable(text) or ""


# Every reasoning passes the rule here, so no judge, file or annotator can bring in a text
# that a Label Studio on PostgreSQL refuses (NUL, lone surrogates) when it is stored.
Reasoning = Annotated[str, AfterValidator(_reasoning)]


def _pair(dimension: Dimension) -> Any:
    score = Annotated[int, Field(strict=True), AfterValidator(dimension.check)]
    return (tuple[Reasoning, score] | None, Field(default=None, description=dimension.guidance))


AgentScores: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "AgentScores",
    __config__=ConfigDict(frozen=True, extra="ignore"),
    **{dimension.key: _pair(dimension) for dimension in DIMENSIONS},
)
AgentScores.__doc__ = "One agent's ``(reasoning, score)`` per rubric dimension; None is a gap."


def overall(scores: Sequence[float]) -> float:
    """Sotopia's overall score: the unweighted mean of an agent's scores."""
    return sum(scores) / len(scores)


# Sotopia-pi's qualification distance (every rating within 2 points of the researchers'
# reference), read as the most two raters' scores may differ and still agree.
DISAGREEMENT_THRESHOLD = 2


def scores_disagree(scores: Sequence[int], threshold: int) -> bool:
    """Whether ratings of one dimension and agent differ by more than ``threshold`` (highest
    less lowest): the one rule by which adjudication disputes a rating and a study's adaptive
    extra raters add a slot."""
    return bool(scores) and max(scores) - min(scores) > threshold


class Evaluation(BaseModel):
    """Both agents' scores (agent ``i + 1`` is ``agents[i]``) and who gave them."""

    model_config = ConfigDict(frozen=True)

    evaluator: str = ""
    agents: tuple[AgentScores, AgentScores]  # type: ignore[valid-type]

    def pair(self, agent: int, key: str) -> tuple[str, int] | None:
        return getattr(self.agents[agent - 1], key)

    def gaps(self) -> list[str]:
        """``"agent 1 knowledge"`` for every dimension the evaluation holds no score for."""
        return [
            f"agent {agent} {key}"
            for agent in AGENTS
            for key in DIMENSION_KEYS
            if self.pair(agent, key) is None
        ]

    def flat(self) -> dict[str, Any]:
        """The flat form; dimensions without a score are left out."""
        fields: dict[str, Any] = {}
        for agent in AGENTS:
            for key in DIMENSION_KEYS:
                pair = self.pair(agent, key)
                if pair is not None:
                    fields[rating_name(key, agent)] = pair[1]
                    fields[reasoning_name(key, agent)] = pair[0]
        return fields

    @classmethod
    def from_flat(cls, fields: Mapping[str, Any], evaluator: str = "") -> Evaluation:
        """The evaluation of a flat form; a dimension without a rating is a gap."""
        return cls(
            evaluator=evaluator,
            agents=tuple(
                {
                    key: (str(fields.get(reasoning_name(key, agent), "")),
                          fields[rating_name(key, agent)])
                    for key in DIMENSION_KEYS
                    if rating_name(key, agent) in fields
                }
                for agent in AGENTS
            ),
        )
