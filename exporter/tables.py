"""Score tables: ``scores_long`` (one row per score) and ``scores_wide`` (the oTree CSV layout).

``scores_wide`` has exactly the columns of the Sotopia oTree ``*_final.csv`` files: an unnamed
first column (the row id; here the annotation id), ``model``, ``pk`` (episode id), ``data``
(the episode as the oTree app showed it), ``prolific_id`` (the annotator), then
``<key>_<N>`` and ``<key>_reasoning_<N>`` for agents 1 and 2. Scripts written for those files
read it unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..dimensions import AGENTS, DIMENSION_KEYS, rating_name, reasoning_name
from ..tasks import AGENTS_KEY, DIALOGUE, agent_field
from .records import SCORE_FIELDS

LONG_COLUMNS: tuple[str, ...] = (
    "episode_id",
    "task_id",
    "annotation_id",
    "annotator_id",
    "agent",
    "agent_name",
    "dimension",
    "score",
    "rationale",
    "lead_time",
    "created_at",
    "source_tag",
    "models",
    "ground_truth",
    "prediction_model_version",
    "predicted_score",
    "changed_from_prediction",
)

# Our agent fields → oTree's personal_info keys, in oTree's order.
_OTREE_PROFILE = {"age": "age", "occupation": "profession", "pronouns": "pronouns",
                  "interests": "interests", "personality": "personality", "secret": "secrets"}


def otree_data(data: dict[str, Any]) -> str:
    """The oTree app's ``data`` JSON for one task: scenario, names, profiles, goals, turns."""
    agents = [agent for agent in data.get(AGENTS_KEY) or [] if isinstance(agent, dict)]
    names = [str(agent.get("name", "")) for agent in agents]
    personal_info = {
        name: {"name": name, **{otree: agent.get(ours, "") for ours, otree in _OTREE_PROFILE.items()}}
        for name, agent in zip(names, agents)
    }
    turns = [
        {"speaker": str(turn.get("speaker", "")), "dialogue": str(turn.get("utterance", ""))}
        for turn in data.get(DIALOGUE) or []
        if isinstance(turn, dict)
    ]
    return json.dumps(
        {
            "scenario": str(data.get("scenario", "")),
            "names": names,
            "personal_info": personal_info,
            "social_goal": {
                name: str(agent.get("goal", "")) for name, agent in zip(names, agents)
            },
            "parsed_conversation": turns,
        },
        ensure_ascii=False,
    )


def scores_long(annotations: pd.DataFrame) -> pd.DataFrame:
    """One row per annotation × agent × dimension, in annotation, agent, rubric order."""
    return next(scores_long_parts(annotations))


def scores_long_parts(
    annotations: pd.DataFrame, rows: int | None = None
) -> Iterator[pd.DataFrame]:
    """``scores_long`` in consecutive parts of at most ``rows`` rows (all in one if None).

    Writing part by part never holds the whole table: it is 14 rows per annotation.
    """
    if annotations.empty:
        yield pd.DataFrame(columns=list(LONG_COLUMNS))
        return
    pairs = [(agent, key) for agent in AGENTS for key in DIMENSION_KEYS]

    def stacked(columns: list[str]) -> pd.Series:
        """One column per (agent, dimension) pair, stacked pair after pair."""
        return pd.concat([annotations[name] for name in columns], ignore_index=True)

    # The row order (annotation id, then rubric order) is found on the keys alone; each column
    # is then taken in that order, instead of copied per pair, stacked and sorted.
    keys = pd.DataFrame({"annotation_id": stacked(["annotation_id"] * len(pairs)),
                         "order": np.repeat(np.arange(len(pairs)), len(annotations))})
    order = keys.sort_values(["annotation_id", "order"], kind="stable").index.to_numpy()
    per_pair = {
        "agent_name": stacked([agent_field(agent, "name") for agent, _ in pairs]),
        "score": stacked([rating_name(key, agent) for agent, key in pairs]),
        "rationale": stacked([reasoning_name(key, agent) for agent, key in pairs]),
        "predicted_score": stacked([f"predicted_{rating_name(key, agent)}" for agent, key in pairs]),
    }
    per_annotation = {name: annotations[name] for name in LONG_COLUMNS
                      if name in annotations.columns}
    # Converted once, so every part gets the same dtype.
    per_annotation["lead_time"] = pd.to_numeric(annotations["lead_time"], errors="coerce")
    agents = np.array([agent for agent, _ in pairs])
    dimensions = pd.Series([key for _, key in pairs])

    def taken(series: pd.Series, at: np.ndarray) -> pd.Series:
        return series.take(at).reset_index(drop=True)

    step = rows or len(order)
    for start in range(0, len(order), step):
        position = order[start : start + step]
        row, pair = position % len(annotations), position // len(annotations)
        columns = {name: taken(series, row) for name, series in per_annotation.items()}
        columns |= {name: taken(series, position) for name, series in per_pair.items()}
        columns |= {"agent": agents[pair], "dimension": taken(dimensions, pair)}
        columns["score"] = columns["score"].astype("int64")
        # NA where no prediction was pre-filled for the annotator.
        columns["changed_from_prediction"] = columns["score"].ne(columns["predicted_score"])
        yield pd.DataFrame({name: columns[name] for name in LONG_COLUMNS})


def scores_wide(
    annotations: pd.DataFrame,
    otree_data_by_episode: Mapping[str, str],
    model_names: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """The oTree ``*_final.csv`` layout, indexed (unnamed) by annotation id.

    ``model`` is the study's label for the model pair: ``model_names[source_tag]`` when given,
    else the episode's source tag.
    """
    tags = annotations["source_tag"]
    wide = pd.DataFrame(
        {
            "model": tags.map(lambda tag: (model_names or {}).get(tag, tag)),
            "pk": annotations["episode_id"],
            "data": annotations["episode_id"].map(otree_data_by_episode),
            "prolific_id": annotations["annotator_id"],
        }
    )
    wide = pd.concat([wide, annotations[list(SCORE_FIELDS)]], axis=1)
    wide.index = pd.Index(annotations["annotation_id"].to_numpy(), name=None)
    return wide
