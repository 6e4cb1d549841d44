"""The running agreement's figures, computed in the dashboard's worker process only, with the
report's own functions on the ratings the gateway holds: once every rating is saved they are
the report's. It imports the statistics libraries, so the gateway never imports it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import pandas as pd
from sqlalchemy import Engine, select

from ...config import agent_field
from ...dimensions import AGENTS, RUBRIC
from ...extras import missing_extra
from ...statistics.agreement import agreement_table
from ...statistics.alttest import ALL_AGENTS, alt_test
from ...statistics.bootstrap import DEFAULT_BOOTSTRAP, Bootstrap
from ...statistics.gwet import gwet_table
from ...statistics.reliability import UNIT, rated_units
from ...exporter.tables import (
    ANNOTATION_COLUMNS,
    annotation_schema,
    annotation_table,
    scores_long,
)
from ...exporter.collection import MODEL_SCORE_COLUMNS
from ...exporter.validate import _model_rows, agent_models, evaluations_of
from ...exporter.wire import Data
from ..settings import StudyFile
from .snapshots import MODEL_TABLE
from ..store import (
    Snapshot,
    agent_models as task_models,
    assignments,
    episode_ids,
    judge_evaluations,
    now,
    rated,
)

# What the dashboard shows of each judge's alternative annotator test (the report's columns).
ALT_TEST_SHOWN = ("evaluator", "winning_rate", "advantage_probability", "verdict", "items",
                  "third_raters_needed")
# figure name → (the report's column, its table): "agreement" or "gwet".
FIGURES = {
    "alpha": ("alpha", "agreement"), "alpha_low": ("alpha_ci_low", "agreement"),
    "alpha_high": ("alpha_ci_high", "agreement"),
    "ac": ("ac2", "gwet"), "ac_low": ("ac2_ci_low", "gwet"), "ac_high": ("ac2_ci_high", "gwet"),
}


def _rated_rows(engine: Engine, study: str) -> list[Any]:
    """The study's ratings on ordinary episodes with a known episode id, in the order an export
    lists them: by task, then by annotation (ratings still waiting last)."""
    with engine.connect() as conn:
        return list(conn.execute(
            select(assignments.c.id, assignments.c.task_id, assignments.c.participant_id,
                   assignments.c.ls_annotation_id, assignments.c.results,
                   assignments.c.lead_time, episode_ids.c.episode_id, task_models.c.models)
            .join(episode_ids, (episode_ids.c.study == study)
                  & (episode_ids.c.task_id == assignments.c.task_id))
            .outerjoin(task_models, (task_models.c.study == study)
                       & (task_models.c.task_id == assignments.c.task_id))
            .where(rated(study))
            .order_by(assignments.c.task_id, assignments.c.ls_annotation_id.is_(None),
                      assignments.c.ls_annotation_id, assignments.c.id)).all())


def _blank_row() -> dict[str, Any]:
    """The exporter's annotation columns, each empty for its type (no text, false, null)."""
    import pyarrow as pa

    return {field.name: False if pa.types.is_boolean(field.type)
            else "" if pa.types.is_string(field.type) else None
            for field in annotation_schema() if field.name in ANNOTATION_COLUMNS}


def ratings_long(engine: Engine, study: str) -> pd.DataFrame:
    """``scores_long`` of the study's ratings so far, as an export of the project would give
    it (annotators named by their participant number; the columns no figure reads empty)."""
    blank, rows = _blank_row(), []
    for row in _rated_rows(engine, study):
        rows.append(blank | row.results | {  # the stored scores, checked when submitted
            # A rating not saved yet has no annotation id: its assignment's, negated, cannot
            # meet one.
            "task_id": row.task_id, "annotation_id": row.ls_annotation_id or -row.id,
            "episode_id": row.episode_id, "annotator_id": f"participant-{row.participant_id}",
            "lead_time": row.lead_time,
            **{agent_field(agent, "model"): model
               for agent, model in zip(AGENTS, _models(row.models))},
        })
    return scores_long(annotation_table(rows))


def _number(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _pairs(long: pd.DataFrame) -> dict[str, int]:
    """Per dimension, the rater pairs on units rated twice or more."""
    sizes = rated_units(long).groupby([*UNIT, "dimension"]).size()
    pairs = (sizes * (sizes - 1) // 2).groupby(level="dimension").sum()
    return {key: int(pairs.get(key, 0)) for key in RUBRIC.keys}


def _models(stored: Any) -> tuple[str, str]:
    """A task's agent models as the exporter reads them from its data ("" where unknown)."""
    return agent_models(Data(agent_models=stored))


def judge_scores(engine: Engine, study: str, rated_episodes: Collection[str] = ()
                 ) -> pd.DataFrame:
    """``model_scores`` of the study's episodes, as an export gives it (``rated``: among
    ``rated_episodes``), from the judges' evaluations and agent models the gateway copied
    (``screening.judges.keep_judges``, ``snapshots.keep_episode_ids``)."""
    with engine.connect() as conn:
        stored = conn.execute(
            select(episode_ids.c.episode_id, judge_evaluations.c.judges, task_models.c.models)
            .join(episode_ids, (episode_ids.c.study == judge_evaluations.c.study)
                  & (episode_ids.c.task_id == judge_evaluations.c.task_id))
            .outerjoin(task_models, (task_models.c.study == judge_evaluations.c.study)
                       & (task_models.c.task_id == judge_evaluations.c.task_id))
            .where(judge_evaluations.c.study == study)).all()
    return pd.DataFrame([(*row, episode in rated_episodes) for episode, judges, models in stored
                         for row in _model_rows(episode, evaluations_of(judges), _models(models))],
                        columns=list(MODEL_SCORE_COLUMNS))


def model_table(long: pd.DataFrame, judges: pd.DataFrame) -> list[dict[str, Any]] | None:
    """The report's ``agent_model_scores`` as rows (NaN as None); None without ppi-python
    (the dashboard says how to install it)."""
    if missing_extra("ppi", included=False):
        return None
    from ...statistics.agent_models import agent_model_scores

    table = agent_model_scores(long, judges)
    return [{name: _number(value) if isinstance(value, float) else value
             for name, value in row.items()} for row in table.to_dict("records")]


def _alt_tests(long: pd.DataFrame, judges: pd.DataFrame | None
               ) -> dict[str, list[dict[str, Any]]]:
    """Per dimension key, each judge's alternative annotator test, both agents pooled, as the
    report's ``alt_test`` rows (none without a judge)."""
    if judges is None or judges.empty:
        return {key: [] for key in RUBRIC.keys}
    tested = alt_test(long, judges)
    pooled = tested[tested["agent"] == ALL_AGENTS]
    return {key: [{name: row[name] if name in ("evaluator", "verdict") else _number(row[name])
                   for name in ALT_TEST_SHOWN}
                  for row in pooled[pooled["dimension"] == key].to_dict("records")]
            for key in RUBRIC.keys}


def figures_of(long: pd.DataFrame, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
               judges: pd.DataFrame | None = None) -> dict[str, dict[str, Any]]:
    """Per dimension key, the report's α and AC2 with their intervals, the rater pairs, and
    the alternative annotator test of each judge of ``judges`` (``model_scores``)."""
    tables = {"agreement": agreement_table(long, bootstrap).set_index("dimension"),
              "gwet": gwet_table(long, bootstrap).set_index("dimension")}
    pairs = _pairs(long)
    tests = _alt_tests(long, judges)
    return {key: {name: _number(tables[table].at[key, column])
                  for name, (column, table) in FIGURES.items()}
            | {"pairs": pairs[key], "alt_test": tests[key]}
            for key in RUBRIC.keys}


def live_figures(engine: Engine, study: StudyFile,
                 bootstrap: Bootstrap = DEFAULT_BOOTSTRAP) -> Snapshot:
    """The running agreement of ``study`` on its ratings so far (see the module's note)."""
    long = ratings_long(engine, study.name)
    judges = judge_scores(engine, study.name, set(long["episode_id"]))
    return Snapshot(now(), int(long["annotation_id"].nunique()),
                    figures_of(long, bootstrap, judges)
                    | {MODEL_TABLE: model_table(long, judges)})
