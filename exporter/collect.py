"""The one validation pass: every annotation is counted and lands in one place.

An export is read as chunks of whole tasks (``chunks``); ``read_part`` turns one chunk into a
``Part``: one flat score row per valid annotation, error rows for refused ones, each episode's
model scores (its stored evaluation, else its latest prediction), and, when files are being
written, the chunk's lines of the per-annotation files. Parts are independent, so they are
made in worker processes (``parallel``) and joined, in order, into a ``Collection``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import ValidationError

from ..dimensions import AGENTS, DIMENSION_KEYS, rating_name, reasoning_name
from ..episode import Evaluation, Judgement
from .records import (
    ErrorRow,
    annotator_of,
    predicted_ratings,
    read_scores,
    scores_of,
)
from .chunks import Region
from .tables import annotation_table
from .wire import Annotation, Data, Task, decode_tasks

if TYPE_CHECKING:
    import pyarrow as pa

MODEL_SCORE_COLUMNS: tuple[str, ...] = ("episode_id", "agent", "dimension", "score", "evaluator")

ModelRow = tuple[str, int, str, int, str]


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

    def add(self, other: Tally) -> None:
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(frozen=True)
class Settings:
    """What reading a chunk needs besides its bytes (handed to each worker once)."""

    origin: str
    emails: Mapping[int, str] = field(default_factory=dict)
    # task id → {"result", "model_version"}: model scores of tasks without a stored evaluation.
    predictions: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    # Builds a chunk's share of the output files (bytes, by file name) from its score rows,
    # their table and its episodes' task data; None when no files are written.
    pieces: Callable[[list[dict[str, Any]], pa.Table, dict[str, Data]],  # type: ignore[valid-type]
                     dict[str, bytes]] | None = None


@dataclass
class Part:
    """What one chunk of tasks gives."""

    size: int = 0  # bytes read
    tally: Tally = field(default_factory=Tally)
    rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[ErrorRow] = field(default_factory=list)
    # Per episode; when an episode spans chunks, the first chunk's are kept.
    model_rows: dict[str, list[ModelRow]] = field(default_factory=dict)
    # Each episode's task data, for the chunk's file pieces (dropped once they are built).
    data: dict[str, Data] = field(default_factory=dict)  # type: ignore[valid-type]
    # The chunk's share of the output files written a chunk at a time: bytes by file name.
    pieces: dict[str, bytes] = field(default_factory=dict)
    # Episodes with a crowd (not ground-truth) annotation in this chunk.
    crowd_episodes: set[str] = field(default_factory=set)
    table: pa.Table | None = None


@dataclass
class Collection:
    """Parts joined in input order."""

    tally: Tally = field(default_factory=Tally)
    tables: list[pa.Table] = field(default_factory=list)
    errors: list[ErrorRow] = field(default_factory=list)
    model_rows: dict[str, list[ModelRow]] = field(default_factory=dict)
    crowd_episodes: set[str] = field(default_factory=set)
    # Whether an episode's crowd annotations are in more than one chunk: then the chunks'
    # episodes.jsonl lines do not aggregate it whole.
    episodes_split: bool = False

    def add(self, part: Part) -> None:
        self.tally.add(part.tally)
        if not self.crowd_episodes.isdisjoint(part.crowd_episodes):
            self.episodes_split = True
        self.crowd_episodes |= part.crowd_episodes
        if part.table is not None:
            self.tables.append(part.table)
        self.errors.extend(part.errors)
        for episode, rows in part.model_rows.items():
            self.model_rows.setdefault(episode, rows)

    def table(self) -> pa.Table:
        """One row per exported annotation: identifiers, timing and the 28 oTree fields."""
        import pyarrow as pa

        self.tables = [pa.concat_tables(self.tables or [annotation_table([])])]
        return self.tables[0]

    def error_table(self) -> pd.DataFrame:
        return pd.DataFrame(
            [error.to_dict() for error in self.errors],
            columns=["task_id", "annotation_id", "annotator", "field", "reason"],
        )

    def model_scores(self) -> pd.DataFrame:
        """The episodes' model evaluation: one row per episode × agent × dimension."""
        return pd.DataFrame([row for rows in self.model_rows.values() for row in rows],
                            columns=list(MODEL_SCORE_COLUMNS))


def _stored_evaluation(data: Data, tally: Tally) -> Evaluation | None:  # type: ignore[valid-type]
    stored = data.sotopia_evaluation
    if not stored:
        return None
    try:
        return Evaluation.model_validate(stored)
    except ValidationError:
        tally.invalid_model_evaluations += 1
        return None


def _predicted_evaluation(prediction: Any) -> Evaluation | None:
    """A prediction holding all 28 valid results, read like an annotation."""
    if not isinstance(prediction, dict):
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


def _model_rows(episode_id: str, evaluation: Evaluation | None) -> list[ModelRow]:
    if evaluation is None:
        return []
    return [
        (episode_id, agent, key, judgements[key].score, evaluation.evaluator)
        for agent, judgements in zip(AGENTS, evaluation.agents)
        for key in DIMENSION_KEYS
    ]


def _models(models: Any) -> str:
    return ",".join(map(str, models)) if isinstance(models, list) else str(models or "")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _task_columns(task: Task, episode_id: str) -> dict[str, Any]:
    """The score-row columns every annotation of ``task`` shares."""
    data = task.data
    return {
        "task_id": task.id,
        "episode_id": episode_id,
        "source_tag": str(data.source_tag or ""),
        "models": _models(data.models),
        "agent_1_name": str(data.agent_1_name or ""),
        "agent_2_name": str(data.agent_2_name or ""),
    }


def _annotation_columns(annotation: Annotation, annotator: str) -> dict[str, Any]:
    shown = annotation.prediction
    return {
        "annotation_id": annotation.id,
        "annotator_id": annotator,
        "ground_truth": bool(annotation.ground_truth),
        "lead_time": _number(annotation.lead_time),
        "created_at": None if annotation.created_at is None else str(annotation.created_at),
        "prediction_model_version": str(shown.get("model_version") or "")
        if isinstance(shown, dict) else "",
        **{f"predicted_{name}": score for name, score in predicted_ratings(shown).items()},
    }


def _keep_latest_per_annotator(task_rows: list[dict[str, Any]], part: Part) -> list[dict[str, Any]]:
    """One annotation per annotator and task: the latest; earlier ones become error rows.
    The kept ones are returned by annotation id."""
    latest: dict[str, dict[str, Any]] = {}
    for row in sorted(task_rows, key=lambda r: r["annotation_id"] or 0):
        earlier = latest.get(row["annotator_id"])
        if earlier is not None:
            part.tally.duplicates += 1
            part.tally.rejected += 1
            part.errors.append(
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
    return sorted(latest.values(), key=lambda row: row["annotation_id"] or 0)


def _latest_prediction(task: Task, settings: Settings) -> Any:
    """The task's prediction: fetched separately, or inline in exports that expand them."""
    inline = [p for p in task.predictions if isinstance(p, dict)]
    return settings.predictions.get(task.id) or (inline[-1] if inline else None)


def add_task(part: Part, task: Task, settings: Settings) -> None:
    """Validate every annotation of one exported task into ``part``."""
    tally = part.tally
    tally.tasks += 1
    tally.drafts += len(task.drafts)
    data = task.data
    episode_id = str(data.episode_id or "")
    task_rows: list[dict[str, Any]] = []
    shared = _task_columns(task, episode_id)
    for annotation in task.annotations:
        tally.total += 1
        annotator = annotator_of(annotation.completed_by, settings.emails)
        if annotation.was_cancelled:
            tally.cancelled += 1
            continue
        fields, problems = scores_of(annotation.result)
        if not episode_id:
            problems.insert(0, ("episode_id", "the task data has no episode_id"))
        if problems:
            tally.rejected += 1
            part.errors.extend(
                ErrorRow(task.id, annotation.id, annotator, name, reason)
                for name, reason in problems
            )
            continue
        fields.update(shared)
        fields.update(_annotation_columns(annotation, annotator))
        task_rows.append(fields)
    if not task_rows:
        return
    if episode_id not in part.data:
        part.data[episode_id] = data
        evaluation = _stored_evaluation(data, tally) or _predicted_evaluation(
            _latest_prediction(task, settings)
        )
        part.model_rows[episode_id] = _model_rows(episode_id, evaluation)
    kept = _keep_latest_per_annotator(task_rows, part)
    tally.exported += len(kept)
    tally.ground_truth += sum(row["ground_truth"] for row in kept)
    part.rows.extend(kept)


def read_part(chunk: bytes | Region, settings: Settings) -> Part:
    """Decode and validate one chunk of tasks (given, or a region of a file to read); with
    ``settings.pieces``, make its share of the output files."""
    if isinstance(chunk, Region):
        chunk = chunk.read()
    part = Part(size=len(chunk))
    for task in decode_tasks(chunk, settings.origin):
        add_task(part, task, settings)
    part.table = annotation_table(part.rows)
    part.crowd_episodes = {row["episode_id"] for row in part.rows if not row["ground_truth"]}
    if settings.pieces is not None:
        part.pieces = settings.pieces(part.rows, part.table, part.data)
    part.rows, part.data = [], {}
    return part
