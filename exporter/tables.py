"""Score tables: ``scores_long`` (one row per score) and ``scores_wide`` (the oTree CSV layout).

``scores_wide`` has exactly the columns of the Sotopia oTree ``*_final.csv`` files: an unnamed
first column (the row id; here the annotation id), ``model``, ``pk`` (episode id), ``data``
(the episode as the oTree app showed it), ``prolific_id`` (the annotator), then
``<key>_<N>`` and ``<key>_reasoning_<N>`` for agents 1 and 2. Scripts written for those files
read it unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

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
    shared = ["episode_id", "task_id", "annotation_id", "annotator_id", "lead_time",
              "created_at", "source_tag", "models", "ground_truth"]
    parts = []
    for order, (agent, key) in enumerate((a, k) for a in AGENTS for k in DIMENSION_KEYS):
        part = annotations[shared].copy()
        part["agent"] = agent
        part["agent_name"] = annotations[agent_field(agent, "name")]
        part["dimension"] = key
        part["score"] = annotations[rating_name(key, agent)]
        part["rationale"] = annotations[reasoning_name(key, agent)]
        part["_order"] = order
        parts.append(part)
    if not parts or annotations.empty:
        return pd.DataFrame(columns=list(LONG_COLUMNS))
    long = pd.concat(parts, ignore_index=True)
    long = long.sort_values(["annotation_id", "_order"], kind="stable", ignore_index=True)
    long["score"] = long["score"].astype("int64")
    long["lead_time"] = pd.to_numeric(long["lead_time"], errors="coerce")
    return long[list(LONG_COLUMNS)]


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
