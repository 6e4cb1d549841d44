"""Score tables: ``scores_long`` (one row per score) and ``scores_wide`` (the oTree CSV layout).

``scores_wide`` has exactly the columns of Sotopia's oTree ``*_final.csv`` files, so scripts
written for those read it unchanged; what they lack per annotation is ``scores_long``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pandas as pd

from ..dimensions import AGENTS, DIMENSION_KEYS, rating_name, reasoning_name
from ..episode import OTREE_PROFILE_NAMES
from ..labelstudio.tasks import AGENTS_KEY, DIALOGUE, agent_field
from ..scores import RATING_FIELDS, SCORE_FIELDS
from .wire import Data

# The ratings of the prediction an annotator was shown, where one was pre-filled.
PREDICTED_FIELDS: tuple[str, ...] = tuple(f"predicted_{name}" for name in RATING_FIELDS)

if TYPE_CHECKING:
    import pyarrow as pa

# Time on task, for annotations made through a study's gateway (``export --study``; empty for
# the others): when the episode was given (assigned) to the participant, first shown and
# submitted, and the minutes its rating page was visible and focused (``study.timing``).
TIME_COLUMNS: tuple[str, ...] = ("assigned_at", "first_shown_at", "submitted_at",
                                 "visible_minutes")
ANNOTATION_COLUMNS: tuple[str, ...] = (
    "task_id",
    "annotation_id",
    "episode_id",
    "annotator_id",
    "ground_truth",
    "lead_time",
    "created_at",
    *TIME_COLUMNS,
    "source_tag",
    "models",
    "agent_1_name",
    "agent_2_name",
    # The model behind each agent ("" where the import knew none).
    "agent_1_model",
    "agent_2_model",
    "prediction_model_version",
    # The study review's decision (``tasks.REVIEW_DECISIONS``); "" where none was recorded.
    "review_decision",
    # Rated on a slot adaptive extra raters added to the episode (``tasks.ADDED_SLOTS``).
    "added_slot",
    # The task is a study's gold episode (``tasks.GOLD``): left out of agreement.
    "gold",
)
ROW_COLUMNS: tuple[str, ...] = (*ANNOTATION_COLUMNS, *SCORE_FIELDS, *PREDICTED_FIELDS)
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
    *TIME_COLUMNS,
    "source_tag",
    "models",
    "agent_model",
    "ground_truth",
    "review_decision",
    "added_slot",
    "gold",
    "prediction_model_version",
    "predicted_score",
    "changed_from_prediction",
)
# The oTree files' first column is the unnamed row id (here the annotation id).
WIDE_COLUMNS: tuple[str, ...] = ("", "model", "pk", "data", "prolific_id", *SCORE_FIELDS)

_PAIRS = [(agent, key) for agent in AGENTS for key in DIMENSION_KEYS]
# ``long_table`` rows per annotation.
LONG_ROWS_PER_ANNOTATION = len(_PAIRS)


@cache
def annotation_schema() -> pa.Schema:
    """Column types of the annotation table, fixed so that every chunk's table has them."""
    import pyarrow as pa  # the ``export`` extra: imported when used

    types: dict[str, pa.DataType] = {
        "task_id": pa.int64(), "annotation_id": pa.int64(), "ground_truth": pa.bool_(),
        "added_slot": pa.bool_(), "gold": pa.bool_(), "lead_time": pa.float64(),
        "visible_minutes": pa.float64(),
    }
    types |= {name: pa.int64() for name in (*RATING_FIELDS, *PREDICTED_FIELDS)}
    return pa.schema([(name, types.get(name, pa.string())) for name in ROW_COLUMNS])


def annotation_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Score rows (dicts with ``ROW_COLUMNS``; missing predictions are null) as Arrow."""
    import pyarrow as pa

    schema = annotation_schema()
    # Every row has the other columns; predictions only where one was shown.
    present = ROW_COLUMNS[: -len(PREDICTED_FIELDS)]
    columns = list(zip(*map(itemgetter(*present), rows))) or [()] * len(present)
    columns += [[row.get(name) for row in rows] for name in PREDICTED_FIELDS]
    return pa.table([pa.array(values, type=field.type) for values, field in zip(columns, schema)],
                    schema=schema)


def otree_data(data: Data) -> str:  # type: ignore[valid-type]
    """The oTree app's ``data`` JSON for one task: scenario, names, profiles, goals, turns."""
    agents = [agent for agent in getattr(data, AGENTS_KEY) or [] if isinstance(agent, dict)]
    names = [str(agent.get("name", "")) for agent in agents]
    personal_info = {
        name: {"name": name,
               **{otree: agent.get(ours, "") for ours, otree in OTREE_PROFILE_NAMES.items()}}
        for name, agent in zip(names, agents)
    }
    turns = [{"speaker": str(turn.speaker), "dialogue": str(turn.utterance)}
             for turn in getattr(data, DIALOGUE)]
    return orjson.dumps(
        {
            "scenario": str(data.scenario),
            "names": names,
            "personal_info": personal_info,
            "social_goal": {
                name: str(agent.get("goal", "")) for name, agent in zip(names, agents)
            },
            "parsed_conversation": turns,
        },
    ).decode()


def _interleaved(table: pa.Table, columns: list[str]) -> pa.Array:
    """``columns`` read row by row: row 0's values in column order, then row 1's …"""
    import pyarrow as pa

    n = table.num_rows
    stacked = pa.concat_arrays([table.column(name).combine_chunks() for name in columns])
    return stacked.take(pa.array(np.arange(n * len(columns)).reshape(len(columns), n).T.ravel()))


def long_table(annotations: pa.Table) -> pa.Table:
    """``scores_long``: one row per annotation × agent × dimension, in annotation order, then
    agent, then rubric order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = annotations.num_rows
    each = pa.array(np.repeat(np.arange(n), len(_PAIRS)))
    columns: dict[str, Any] = {
        name: annotations.column(name).take(each)
        for name in LONG_COLUMNS if name in annotations.column_names
    }
    columns["agent"] = pa.array(np.tile([agent for agent, _ in _PAIRS], n))
    columns["dimension"] = pa.array(np.tile([key for _, key in _PAIRS], n), type=pa.string())
    columns["agent_name"] = _interleaved(annotations, [agent_field(a, "name") for a, _ in _PAIRS])
    columns["agent_model"] = _interleaved(annotations,
                                          [agent_field(a, "model") for a, _ in _PAIRS])
    columns["score"] = _interleaved(annotations, [rating_name(k, a) for a, k in _PAIRS])
    columns["rationale"] = _interleaved(annotations, [reasoning_name(k, a) for a, k in _PAIRS])
    columns["predicted_score"] = _interleaved(
        annotations, [f"predicted_{rating_name(k, a)}" for a, k in _PAIRS])
    # Null where no prediction was pre-filled for the annotator.
    columns["changed_from_prediction"] = pc.not_equal(columns["score"],
                                                      columns["predicted_score"])
    return pa.table({name: columns[name] for name in LONG_COLUMNS})


# Arrow's nullable integers and booleans as pandas' (to_pandas would give floats and objects).
_NULLABLE = {**{name: "Int64" for name in PREDICTED_FIELDS}, "predicted_score": "Int64",
             "changed_from_prediction": "boolean"}


def frame(table: pa.Table) -> pd.DataFrame:
    """An annotation or long table as a DataFrame, nullable columns as pandas' nullable types."""
    result = table.to_pandas()
    return result.astype({name: dtype for name, dtype in _NULLABLE.items() if name in result})


def with_pandas_types(table: pa.Table) -> pa.Table:
    """``table`` carrying the pandas metadata ``frame`` would give it, so that pandas reads
    its Parquet file with the same column types."""
    import pyarrow as pa

    metadata = pa.Table.from_pandas(frame(table.slice(0, 0)), preserve_index=False).schema.metadata
    return table.replace_schema_metadata(metadata)


def scores_long(annotations: pa.Table) -> pd.DataFrame:
    """``long_table`` as a DataFrame."""
    return frame(long_table(annotations))


def wide_table(
    annotations: pa.Table,
    otree_data_by_episode: Mapping[str, str],
    model_names: Mapping[str, str] | None = None,
) -> pa.Table:
    """The oTree ``*_final.csv`` layout; the unnamed first column is the annotation id.

    ``model`` is the study's label for the model pair: ``model_names[source_tag]`` when given,
    else the episode's source tag. Each episode's oTree ``data`` is held once, not per row.
    """
    import pyarrow as pa

    names = model_names or {}
    episodes = list(otree_data_by_episode)
    codes = pd.Index(episodes).get_indexer(annotations.column("episode_id").to_pylist())
    data = pa.DictionaryArray.from_arrays(
        pa.array(codes, type=pa.int32(), mask=codes < 0),
        pa.array([otree_data_by_episode[e] for e in episodes], type=pa.large_string()),
    )
    columns = {
        "": annotations.column("annotation_id"),
        "model": pa.array([names.get(tag, tag) for tag in
                           annotations.column("source_tag").to_pylist()], type=pa.string()),
        "pk": annotations.column("episode_id"),
        "data": data,
        "prolific_id": annotations.column("annotator_id"),
    }
    return pa.table(columns | {name: annotations.column(name) for name in SCORE_FIELDS})


def gold_rows(long: pd.DataFrame) -> pd.Series:
    """Which rows of ``long`` rate a gold episode (none in a frame without the gold column,
    as scores_long made before it)."""
    return long["gold"].astype(bool) if "gold" in long else pd.Series(False, index=long.index)
