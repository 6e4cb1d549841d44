"""A stored Sotopia evaluation (``rewards`` + ``reasoning``) as ``sotopia_ls.scores.Evaluation``.

``rewards`` comes in the shape of each Sotopia release; a bare number per agent marks a failed
evaluation (none kept). Missing dimensions are gaps, kept and reported; ``reasoning`` is the
evaluator's "Agent 1 comments:" text, split per dimension.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from typing import Annotated

from pydantic import Field, ValidationError

from ..dimensions import DIMENSION_KEYS
from ..scores import Evaluation
from .records import RecordError

# Strict: a score written as "7" or true is not a number, whatever a lax parser would make of it.
Score = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Reward = tuple[Score, dict[str, Score]] | dict[str, Score] | Score

_AGENT_COMMENTS = re.compile(
    r"^[ \t]*Agent[ \t]*(?P<agent>\d+)[ \t]*comments[ \t]*:[ \t]*$", re.I | re.M
)
_DIMENSION = re.compile(
    r"^[ \t]*(?P<key>"
    + "|".join(re.escape(key).replace("_", "[ _]") for key in DIMENSION_KEYS)
    + r")[ \t]*:[ \t]*",
    re.I | re.M,
)


def stored_evaluation(
    rewards: Sequence[Reward] | None, reasoning: str, evaluator: str
) -> Evaluation | None:
    """The evaluation of both agents, ``None`` when there is none or it failed."""
    if not rewards or any(isinstance(reward, (int, float)) for reward in rewards):
        return None
    if len(rewards) != 2:
        raise RecordError(f"expected one entry per agent (2), found {len(rewards)}", "rewards")
    texts = parse_reasoning(reasoning)
    agents = tuple(
        _judgements(index, _scores(reward), texts.get(index, {}))
        for index, reward in enumerate(rewards, start=1)
    )
    try:
        return Evaluation(evaluator=evaluator, agents=agents)
    except ValidationError as error:
        # The first problem, told as the evaluator's: "agent 2: secret score 3 is outside …".
        first = error.errors(include_url=False)[0]
        index = first["loc"][1] if len(first["loc"]) > 1 else 0
        reason = first["msg"].removeprefix("Value error, ")
        raise RecordError(f"agent {int(index) + 1}: {reason}", "rewards") from error


def _scores(reward: tuple[float, dict[str, float]] | dict[str, float]) -> dict[str, float]:
    """The dimension scores of either shape."""
    return reward[1] if isinstance(reward, tuple) else reward


def _judgements(
    agent: int, scores: dict[str, float], texts: dict[str, str]
) -> dict[str, tuple[str, int]]:
    """``{dimension: (reasoning, score)}`` for the rubric's dimensions the agent has."""
    pairs = {}
    for key in DIMENSION_KEYS:
        if key not in scores:
            continue
        score = scores[key]
        if not math.isfinite(score) or not float(score).is_integer():
            raise RecordError(
                f"agent {agent}: {key} score {score} is not a whole number", "rewards"
            )
        pairs[key] = (texts.get(key, ""), int(score))  # AgentScores applies the rationale rule
    return pairs


def parse_reasoning(text: str) -> dict[int, dict[str, str]]:
    """``{agent: {dimension: text}}`` from the evaluator's comments; absent parts are absent."""
    blocks = list(_AGENT_COMMENTS.finditer(text or ""))
    parsed: dict[int, dict[str, str]] = {}
    for block, after in zip(blocks, [*blocks[1:], None]):
        body = text[block.end() : after.start() if after else len(text)]
        entries = list(_DIMENSION.finditer(body))
        parsed[int(block["agent"])] = {
            entry["key"].lower().replace(" ", "_"): body[
                entry.end() : following.start() if following else len(body)
            ].strip()
            for entry, following in zip(entries, [*entries[1:], None])
        }
    return parsed
