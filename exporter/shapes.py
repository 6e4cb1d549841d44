"""Exported annotations in the shapes Sotopia's own code reads.

- ``annotation_records``: ``AnnotationForEpisode{pk, episode, annotator_id, rewards, reasoning}``
  where ``rewards`` is, per agent, ``[overall, {seven scores…, "overall_score": overall}]`` and
  ``reasoning`` is the evaluator-style text ``"Agent 1 comments:\\nbelievability: …"``.
- ``evaluation_records``: per annotation, each agent's seven ``(reasoning, score)`` pairs as
  ``agent_1_evaluation``/``agent_2_evaluation`` (``EvaluationForTwoAgents``, sotopia ≤ 0.1.4)
  and ``evaluations: {agent_1, agent_2}`` (``EvaluationForAgents``, sotopia 0.1.5).
- ``episode_records``: per episode, annotators aggregated as Sotopia's
  ``map_human_annotations_to_episode_logs(aggregate=True)`` does: rewards averaged per agent,
  reasonings joined with newlines.

The first two are built per annotation from its score row (a dict, see ``records``), in the
worker that validated it; the third from all annotations at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any

import pandas as pd

from ..dimensions import AGENTS, DIMENSION_KEYS, rating_name, reasoning_name

_RATINGS = {agent: [rating_name(key, agent) for key in DIMENSION_KEYS] for agent in AGENTS}
_REASONINGS = [reasoning_name(key, agent) for agent in AGENTS for key in DIMENSION_KEYS]
# Per agent, a row's seven scores and seven rationales in rubric order, read in one call each.
_SCORES_OF = {agent: itemgetter(*_RATINGS[agent]) for agent in AGENTS}
_TEXTS_OF = {agent: itemgetter(*(reasoning_name(key, agent) for key in DIMENSION_KEYS))
             for agent in AGENTS}
_ALL_TEXTS_OF = itemgetter(*_REASONINGS)
# Sotopia's evaluator comment layout, with a slot per rationale in _REASONINGS order.
_COMMENTS = "".join(
    f"Agent {agent} comments:\n" + "".join(f"{key}: {{}}\n" for key in DIMENSION_KEYS)
    for agent in AGENTS
)


def reward(scores: Sequence[float]) -> list[Any]:
    """Sotopia's per-agent reward: ``[overall, {dimension: score…, "overall_score": overall}]``
    from the seven scores in rubric order (overall is their unweighted mean)."""
    overall = sum(scores) / len(scores)
    return [overall, {**dict(zip(DIMENSION_KEYS, scores)), "overall_score": overall}]


def comments(texts: Iterable[str]) -> str:
    """The 14 rationales (agent 1's seven, then agent 2's) in the evaluator's layout."""
    return _COMMENTS.format(*texts)


def annotation_records(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``AnnotationForEpisode`` dicts, one per score row; ``pk`` is the annotation id."""
    for row in rows:
        yield {
            "pk": str(row["annotation_id"]),
            "episode": row["episode_id"],
            "annotator_id": row["annotator_id"],
            "rewards": [reward(list(map(float, _SCORES_OF[agent](row)))) for agent in AGENTS],
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


def episode_records(annotations: pd.DataFrame) -> Iterator[dict[str, Any]]:
    """Per episode: rewards averaged over its annotators, reasonings joined with newlines."""
    if annotations.empty:
        return
    keys = annotations["episode_id"]
    means = {}
    for agent in AGENTS:
        scores = annotations[_RATINGS[agent]].astype("float64").set_axis(DIMENSION_KEYS, axis=1)
        scores["overall_score"] = scores.mean(axis=1)
        means[agent] = scores.groupby(keys, sort=False).mean().to_numpy().tolist()
    # Grouped in one plain pass: pandas would call a Python function per episode.
    grouped: dict[str, tuple[list[str], list[str]]] = {}
    texts = zip(*(annotations[name].tolist() for name in _REASONINGS))
    for episode, name, text in zip(keys.tolist(), annotations["annotator_id"].tolist(), texts):
        names, reasonings = grouped.setdefault(episode, ([], []))
        names.append(name)
        reasonings.append(comments(text))
    for number, (episode, (names, reasonings)) in enumerate(grouped.items()):
        rewards = [[means[agent][number][-1],
                    dict(zip((*DIMENSION_KEYS, "overall_score"), means[agent][number]))]
                   for agent in AGENTS]
        yield {"episode": episode, "annotator_count": len(names), "annotators": names,
               "rewards": rewards, "reasoning": "\n".join(reasonings)}
