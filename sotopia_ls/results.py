"""Scores ↔ Label Studio annotation/prediction ``result`` lists.

A rating is a single-choice ``Choices`` control whose choice values are the integers of the
range written as text (``"-3"``), because Label Studio's ``Rating`` tag cannot hold zero or
negative values. A rationale is a ``TextArea``. All 28 controls point at the dialogue.
"""

from __future__ import annotations

from typing import Any

from .dimensions import AGENTS, DIMENSION_KEYS, rating_name, reasoning_name
from .episode import Evaluation
from .tasks import DIALOGUE

RATING_TYPE = "choices"
REASONING_TYPE = "textarea"


def rating_result(key: str, agent: int, score: int) -> dict[str, Any]:
    return {
        "from_name": rating_name(key, agent),
        "to_name": DIALOGUE,
        "type": RATING_TYPE,
        "value": {"choices": [str(score)]},
    }


def reasoning_result(key: str, agent: int, text: str) -> dict[str, Any]:
    return {
        "from_name": reasoning_name(key, agent),
        "to_name": DIALOGUE,
        "type": REASONING_TYPE,
        "value": {"text": [text]},
    }


def results_from_scores(
    scores: dict[int, dict[str, tuple[str, int]]],
) -> list[dict[str, Any]]:
    """All 28 results from ``{agent: {dimension: (reasoning, score)}}``, rating then rationale."""
    results: list[dict[str, Any]] = []
    for agent in AGENTS:
        for key in DIMENSION_KEYS:
            reasoning, score = scores[agent][key]
            results.append(rating_result(key, agent, score))
            results.append(reasoning_result(key, agent, reasoning))
    return results


def evaluation_prediction(evaluation: Evaluation) -> dict[str, Any]:
    """One Label Studio prediction holding all 28 results of a stored Sotopia evaluation."""
    scores = {
        agent: {key: (j.reasoning, j.score) for key, j in judgements.items()}
        for agent, judgements in zip(AGENTS, evaluation.agents)
    }
    return {
        "model_version": evaluation.evaluator or "sotopia-evaluation",
        "result": results_from_scores(scores),
    }
