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
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pandas as pd

from ..dimensions import AGENTS, DIMENSION_KEYS, rating_name, reasoning_name


def _rewards(annotations: pd.DataFrame) -> dict[int, pd.DataFrame]:
    """Per agent: the seven scores plus ``overall_score`` (their unweighted mean), as floats."""
    rewards = {}
    for agent in AGENTS:
        columns = [rating_name(key, agent) for key in DIMENSION_KEYS]
        scores = annotations[columns].astype("float64").set_axis(list(DIMENSION_KEYS), axis=1)
        scores["overall_score"] = scores.mean(axis=1)
        rewards[agent] = scores
    return rewards


def _reward_lists(rewards: dict[int, pd.DataFrame]) -> Iterator[list[list[Any]]]:
    """Sotopia's ``rewards`` value, one per row: ``[[overall, {dimension: score}], …]``."""
    keys = list(next(iter(rewards.values())).columns)
    per_agent = [frame.to_numpy().tolist() for frame in rewards.values()]
    for agent_rows in zip(*per_agent):
        yield [[row[-1], dict(zip(keys, row))] for row in agent_rows]


def reasoning_texts(annotations: pd.DataFrame) -> pd.Series:
    """Sotopia's evaluator comment layout per annotation, built column-wise.

    ``"Agent 1 comments:\nbelievability: …\n…goal: …\nAgent 2 comments:\n…"``
    """
    text = pd.Series("", index=annotations.index, dtype="str")
    for agent in AGENTS:
        text = text + f"Agent {agent} comments:\n"
        for key in DIMENSION_KEYS:
            text = text + f"{key}: " + annotations[reasoning_name(key, agent)] + "\n"
    return text


# Records are built a slice of annotations at a time: a slice's text turned into Python
# objects is small, the whole table's would be several times the table.
_SLICE_ROWS = 10_000


def _slices(annotations: pd.DataFrame) -> Iterator[pd.DataFrame]:
    for start in range(0, len(annotations), _SLICE_ROWS):
        yield annotations.iloc[start : start + _SLICE_ROWS]


def annotation_records(annotations: pd.DataFrame) -> Iterator[dict[str, Any]]:
    """``AnnotationForEpisode`` dicts, one per annotation; ``pk`` is the annotation id."""
    for part in _slices(annotations):
        yield from _annotation_records(part)


def _annotation_records(annotations: pd.DataFrame) -> Iterator[dict[str, Any]]:
    for pk, episode, annotator, rewards, reasoning in zip(
        annotations["annotation_id"].tolist(),
        annotations["episode_id"].tolist(),
        annotations["annotator_id"].tolist(),
        _reward_lists(_rewards(annotations)),
        reasoning_texts(annotations).tolist(),
    ):
        yield {"pk": str(pk), "episode": episode, "annotator_id": annotator,
               "rewards": rewards, "reasoning": reasoning}


def evaluation_records(annotations: pd.DataFrame) -> Iterator[dict[str, Any]]:
    """Per annotation, each agent's ``SotopiaDimensions``: ``{dimension: [reasoning, score]}``."""
    for part in _slices(annotations):
        yield from _evaluation_records(part)


def _evaluation_records(annotations: pd.DataFrame) -> Iterator[dict[str, Any]]:
    column = {name: annotations[name].tolist() for name in annotations.columns}
    for i in range(len(annotations)):
        per_agent = {
            f"agent_{agent}": {
                key: [column[reasoning_name(key, agent)][i], column[rating_name(key, agent)][i]]
                for key in DIMENSION_KEYS
            }
            for agent in AGENTS
        }
        yield {
            "episode": column["episode_id"][i],
            "annotator_id": column["annotator_id"][i],
            "task_id": column["task_id"][i],
            "annotation_id": column["annotation_id"][i],
            "agent_1_evaluation": per_agent["agent_1"],
            "agent_2_evaluation": per_agent["agent_2"],
            "evaluations": per_agent,
        }


def episode_records(annotations: pd.DataFrame) -> Iterator[dict[str, Any]]:
    """Per episode: rewards averaged over its annotators, reasonings joined with newlines."""
    if annotations.empty:
        return
    keys = annotations["episode_id"]
    means = {agent: frame.groupby(keys, sort=False).mean()
             for agent, frame in _rewards(annotations).items()}
    # Grouped in one plain pass: pandas would call a Python function per episode.
    grouped: dict[str, tuple[list[str], list[str]]] = {}
    texts = itertools.chain.from_iterable(
        reasoning_texts(part).tolist() for part in _slices(annotations)
    )
    for episode, name, text in zip(keys.tolist(), annotations["annotator_id"].tolist(), texts):
        names, texts = grouped.setdefault(episode, ([], []))
        names.append(name)
        texts.append(text)
    for (episode, (names, texts)), rewards in zip(grouped.items(), _reward_lists(means)):
        yield {"episode": episode, "annotator_count": len(names), "annotators": names,
               "rewards": rewards, "reasoning": "\n".join(texts)}
