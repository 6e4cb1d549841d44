"""Exported annotations in the shapes Sotopia's own code reads: ``AnnotationForEpisode``
records, per-annotation evaluations in both Sotopia releases' shapes, and per-episode records
aggregated as ``map_human_annotations_to_episode_logs(aggregate=True)`` does. All are built
from score rows, in the worker that validated them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from ..dimensions import AGENTS, DIMENSION_KEYS, DIMENSIONS, rating_name, reasoning_name
from ..scores import overall

_RATINGS = {agent: [rating_name(key, agent) for key in DIMENSION_KEYS] for agent in AGENTS}
_REASONINGS = [reasoning_name(key, agent) for agent in AGENTS for key in DIMENSION_KEYS]
# Per agent, a row's scores and rationales in rubric order, read in one call each.
_SCORES_OF = {agent: itemgetter(*_RATINGS[agent]) for agent in AGENTS}
_TEXTS_OF = {agent: itemgetter(*(reasoning_name(key, agent) for key in DIMENSION_KEYS))
             for agent in AGENTS}
_ALL_TEXTS_OF = itemgetter(*_REASONINGS)
# Every score as the float Sotopia's rewards hold, made once (a million conversions otherwise).
_FLOAT = {score: float(score) for d in DIMENSIONS for score in d.values}
# Sotopia's evaluator comment layout, with a slot per rationale in _REASONINGS order.
_COMMENTS = "".join(
    f"Agent {agent} comments:\n" + "".join(f"{key}: {{}}\n" for key in DIMENSION_KEYS)
    for agent in AGENTS
)


def reward(scores: Sequence[float]) -> list[Any]:
    """Sotopia's per-agent reward: ``[overall, {dimension: score…, "overall_score": overall}]``
    from the agent's scores in rubric order."""
    mean = overall(scores)
    by_dimension = dict(zip(DIMENSION_KEYS, scores))
    by_dimension["overall_score"] = mean
    return [mean, by_dimension]


def comments(texts: Iterable[str]) -> str:
    """Every rationale (agent 1's, then agent 2's) in the evaluator's layout."""
    return _COMMENTS.format(*texts)


def annotation_records(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``AnnotationForEpisode`` dicts, one per score row; ``pk`` is the annotation id."""
    for row in rows:
        yield {
            "pk": str(row["annotation_id"]),
            "episode": row["episode_id"],
            "annotator_id": row["annotator_id"],
            "rewards": [reward(list(map(_FLOAT.__getitem__, _SCORES_OF[agent](row))))
                        for agent in AGENTS],
            "reasoning": comments(_ALL_TEXTS_OF(row)),
        }


def evaluation_records(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Per score row, each agent's ``SotopiaDimensions``: ``{dimension: [reasoning, score]}``."""
    for row in rows:
        per_agent = {
            f"agent_{agent}": dict(zip(DIMENSION_KEYS,
                                       zip(_TEXTS_OF[agent](row), _SCORES_OF[agent](row))))
            for agent in AGENTS
        }
        yield {
            "episode": row["episode_id"],
            "annotator_id": row["annotator_id"],
            "task_id": row["task_id"],
            "annotation_id": row["annotation_id"],
            "agent_1_evaluation": per_agent["agent_1"],
            "agent_2_evaluation": per_agent["agent_2"],
            "evaluations": per_agent,
        }


def episode_records(
    annotations: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]] | None = None
) -> Iterator[dict[str, Any]]:
    """Per episode, in order of first appearance: the rewards of its annotations averaged
    (each score and each overall), their reasonings joined with newlines.

    ``records`` are the rows' ``annotation_records`` when already made (they hold each row's
    rewards and reasoning); ground-truth rows must be left out of both by the caller.
    """
    grouped: dict[str, tuple[list[str], list[list[Any]], list[str]]] = {}
    for row, record in zip(annotations, records or annotation_records(annotations)):
        names, rewards, reasonings = grouped.setdefault(row["episode_id"], ([], [], []))
        names.append(row["annotator_id"])
        rewards.append(record["rewards"])
        reasonings.append(record["reasoning"])
    for episode, (names, rewards, reasonings) in grouped.items():
        yield {"episode": episode, "annotator_count": len(names), "annotators": names,
               "rewards": [_mean_reward([each[index] for each in rewards])
                           for index in range(len(AGENTS))],
               "reasoning": "\n".join(reasonings)}


def _mean_reward(rewards: list[list[Any]]) -> list[Any]:
    if len(rewards) == 1:
        return rewards[0]
    columns = zip(*(reward[1].values() for reward in rewards))
    means = dict(zip(rewards[0][1], (sum(column) / len(rewards) for column in columns)))
    return [means["overall_score"], means]
