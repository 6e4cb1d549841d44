"""The one pass over annotated tasks: every annotation is counted and lands in one place.

``collect`` reads tasks one at a time (from ``source``) and keeps only what the outputs need:
one flat score row per valid annotation, error rows for refused ones, per-episode metadata, and
the episode's model scores (its stored evaluation, else its latest prediction). The
``Collection`` it returns turns these into DataFrames.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pydantic import ValidationError

from ..dimensions import AGENTS, DIMENSION_KEYS, rating_name, reasoning_name
from ..episode import Evaluation, Judgement
from ..tasks import EPISODE_ID, EVALUATION, agent_field
from .records import (
    PREDICTED_FIELDS,
    SCORE_FIELDS,
    ErrorRow,
    annotator_of,
    predicted_ratings,
    read_scores,
)
from .tables import otree_data

ANNOTATION_COLUMNS: tuple[str, ...] = (
    "task_id",
    "annotation_id",
    "episode_id",
    "annotator_id",
    "ground_truth",
    "lead_time",
    "created_at",
    "source_tag",
    "models",
    "agent_1_name",
    "agent_2_name",
    "prediction_model_version",
)
MODEL_SCORE_COLUMNS: tuple[str, ...] = ("episode_id", "agent", "dimension", "score", "evaluator")


@dataclass
class Tally:
    """Counts that account for every annotation: ``total = exported + rejected + cancelled``."""

    tasks: int = 0
    total: int = 0
    exported: int = 0
    rejected: int = 0
    cancelled: int = 0
    duplicates: int = 0
    ground_truth: int = 0
    drafts: int = 0
    invalid_model_evaluations: int = 0

    @property
    def balanced(self) -> bool:
        return self.total == self.exported + self.rejected + self.cancelled

    def reconciliation(self) -> str:
        return (
            f"{self.total} annotations = {self.exported} exported + {self.rejected} rejected "
            f"+ {self.cancelled} cancelled/skipped"
        )


@dataclass
class EpisodeInfo:
    """What the outputs need of an episode, without its (large) dialogue."""

    agent_names: tuple[str, str]
    source_tag: str
    models: str
    otree_data: str


@dataclass
class Collection:
    rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[ErrorRow] = field(default_factory=list)
    episodes: dict[str, EpisodeInfo] = field(default_factory=dict)
    model_rows: list[tuple[str, int, str, int, str]] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    _annotations: pd.DataFrame | None = field(default=None, repr=False)

    def annotations(self) -> pd.DataFrame:
        """One row per exported annotation: identifiers, timing and the 28 oTree fields.

        Built once, when collecting is done; ``rows`` is then released, the frame holding the
        same values in a fraction of the memory of their Python objects.
        """
        if self._annotations is None:
            self._annotations = pd.DataFrame(
                self.rows, columns=[*ANNOTATION_COLUMNS, *SCORE_FIELDS, *PREDICTED_FIELDS]
            ).astype({name: "Int64" for name in PREDICTED_FIELDS})
            self.rows = []
        return self._annotations

    def error_table(self) -> pd.DataFrame:
        return pd.DataFrame(
            [error.to_dict() for error in self.errors],
            columns=["task_id", "annotation_id", "annotator", "field", "reason"],
        )

    def model_scores(self) -> pd.DataFrame:
        """The episodes' stored model evaluation: one row per episode × agent × dimension."""
        return pd.DataFrame(self.model_rows, columns=list(MODEL_SCORE_COLUMNS))


def _episode_info(data: dict[str, Any]) -> EpisodeInfo:
    models = data.get("models") or []
    return EpisodeInfo(
        agent_names=(
            str(data.get(agent_field(1, "name"), "")),
            str(data.get(agent_field(2, "name"), "")),
        ),
        source_tag=str(data.get("source_tag", "")),
        models=",".join(map(str, models)) if isinstance(models, list) else str(models),
        otree_data=otree_data(data),
    )


def _stored_evaluation(data: dict[str, Any], tally: Tally) -> Evaluation | None:
    stored = data.get(EVALUATION)
    if not stored:
        return None
    try:
        return Evaluation.model_validate(stored)
    except ValidationError:
        tally.invalid_model_evaluations += 1
        return None


def _predicted_evaluation(prediction: dict[str, Any] | None) -> Evaluation | None:
    """A prediction holding all 28 valid results, read like an annotation."""
    if not prediction:
        return None
    fields, problems = read_scores(prediction.get("result") or [])
    if problems:
        return None
    agents = tuple(
        {key: Judgement(score=fields[rating_name(key, agent)],
                        reasoning=fields[reasoning_name(key, agent)]) for key in DIMENSION_KEYS}
        for agent in AGENTS
    )
    return Evaluation(evaluator=str(prediction.get("model_version") or ""), agents=agents)


def _model_rows(
    episode_id: str, evaluation: Evaluation | None
) -> list[tuple[str, int, str, int, str]]:
    if evaluation is None:
        return []
    return [
        (episode_id, agent, key, judgements[key].score, evaluation.evaluator)
        for agent, judgements in zip(AGENTS, evaluation.agents)
        for key in DIMENSION_KEYS
    ]


def _annotation_row(
    task_id: int, annotation: dict[str, Any], annotator: str, episode_id: str, info: EpisodeInfo
) -> dict[str, Any]:
    shown = annotation.get("prediction")
    return {
        "task_id": task_id,
        "annotation_id": annotation.get("id"),
        "episode_id": episode_id,
        "annotator_id": annotator,
        "ground_truth": bool(annotation.get("ground_truth")),
        "lead_time": annotation.get("lead_time"),
        "created_at": annotation.get("created_at"),
        "source_tag": info.source_tag,
        "models": info.models,
        "agent_1_name": info.agent_names[0],
        "agent_2_name": info.agent_names[1],
        "prediction_model_version": str(shown.get("model_version") or "") if shown else "",
        **{f"predicted_{name}": score for name, score in predicted_ratings(shown).items()},
    }


def _keep_latest_per_annotator(
    task_rows: list[dict[str, Any]], collection: Collection
) -> list[dict[str, Any]]:
    """One annotation per annotator and task: the latest; earlier ones become error rows."""
    latest: dict[str, dict[str, Any]] = {}
    for row in sorted(task_rows, key=lambda r: r["annotation_id"] or 0):
        earlier = latest.get(row["annotator_id"])
        if earlier is not None:
            collection.tally.duplicates += 1
            collection.tally.rejected += 1
            collection.errors.append(
                ErrorRow(
                    earlier["task_id"],
                    earlier["annotation_id"],
                    earlier["annotator_id"],
                    "",
                    f"duplicate: the same annotator also submitted annotation "
                    f"{row['annotation_id']} on this task; only the latest is kept",
                )
            )
        latest[row["annotator_id"]] = row
    return list(latest.values())


def _latest_prediction(
    task: dict[str, Any], predictions: Mapping[int, dict[str, Any]]
) -> dict[str, Any] | None:
    """The task's prediction: fetched separately, or inline in exports that expand them."""
    inline = [p for p in task.get("predictions") or [] if isinstance(p, dict)]
    return predictions.get(task.get("id")) or (inline[-1] if inline else None)


def add_task(
    collection: Collection,
    task: dict[str, Any],
    emails: Mapping[int, str],
    predictions: Mapping[int, dict[str, Any]],
) -> None:
    """Validate every annotation of one exported task into ``collection``.

    The episode's model scores come from the evaluation stored in the task data, else from the
    task's latest prediction (a pre-annotation backend's judgement).
    """
    tally = collection.tally
    tally.tasks += 1
    tally.drafts += len(task.get("drafts") or [])
    task_id = task.get("id")
    data = task.get("data") or {}
    episode_id = str(data.get(EPISODE_ID) or "")
    info: EpisodeInfo | None = None
    task_rows: list[dict[str, Any]] = []
    for annotation in task.get("annotations") or []:
        tally.total += 1
        annotator = annotator_of(annotation.get("completed_by"), emails)
        if annotation.get("was_cancelled"):
            tally.cancelled += 1
            continue
        fields, problems = read_scores(annotation.get("result") or [])
        if not episode_id:
            problems.insert(0, (EPISODE_ID, "the task data has no episode_id"))
        if problems:
            tally.rejected += 1
            collection.errors.extend(
                ErrorRow(task_id, annotation.get("id"), annotator, name, reason)
                for name, reason in problems
            )
            continue
        if info is None:
            info = collection.episodes.get(episode_id) or _episode_info(data)
        task_rows.append(_annotation_row(task_id, annotation, annotator, episode_id, info) | fields)
    if info is None:
        return
    if episode_id not in collection.episodes:
        collection.episodes[episode_id] = info
        evaluation = _stored_evaluation(data, tally) or _predicted_evaluation(
            _latest_prediction(task, predictions)
        )
        collection.model_rows.extend(_model_rows(episode_id, evaluation))
    kept = _keep_latest_per_annotator(task_rows, collection)
    tally.exported += len(kept)
    tally.ground_truth += sum(row["ground_truth"] for row in kept)
    collection.rows.extend(kept)


def collect(
    tasks: Iterable[dict[str, Any]],
    emails: Mapping[int, str] | None = None,
    predictions: Mapping[int, dict[str, Any]] | None = None,
) -> Collection:
    """Validate every annotation of ``tasks`` (Label Studio export objects) in one pass.

    ``emails`` maps Label Studio user ids to emails; the annotator id of a record is the email
    when known, else ``user-<id>``. ``predictions`` (task id → ``result``, ``model_version``)
    supplies model scores for tasks without a stored evaluation.
    """
    collection = Collection()
    for task in tasks:
        add_task(collection, task, emails or {}, predictions or {})
    return collection

