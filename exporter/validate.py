"""Validate: one chunk of exported tasks → a ``Part``, every annotation counted and placed once.

``validate_chunk`` decodes a chunk of whole tasks (``chunks``, ``wire``) and turns it into a
``Part``: one flat score row per valid annotation (identifiers, timing and the flat form of
``sotopia_ls.scores``, read by ``sotopia_ls.labelstudio.results``), an error row per reason an
annotation was refused, each episode's model scores (every judge's evaluation kept in its
task's meta, else its latest prediction) and the counts that account for every annotation
(``Tally``). It is a pure function of the chunk and the ``Settings``, so chunks are validated
in worker processes and their parts joined, in order, into a ``Collection``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import ValidationError

from ..dimensions import AGENTS, DIMENSION_KEYS
from ..labelstudio.results import Problem, evaluation_of, predicted_ratings, read_results, shown
from ..labelstudio.tasks import EVALUATION, JUDGES, stored_judges
from ..scores import Evaluation
from .chunks import Region
from .tables import annotation_table
from .wire import Annotation, Data, Task, decode_tasks

if TYPE_CHECKING:
    import pyarrow as pa

MODEL_SCORE_COLUMNS: tuple[str, ...] = ("episode_id", "agent", "dimension", "score", "evaluator")

ModelRow = tuple[str, int, str, int, str]


@dataclass(frozen=True)
class ErrorRow:
    """One reason an annotation was refused; a line of ``errors.jsonl``."""

    task_id: int | None
    annotation_id: int | None
    annotator: str
    field: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Finding:
    """Something the export saw that a study should not have: a line of ``audit.jsonl``.

    ``kind`` is one of ``AUDIT_KINDS``."""

    kind: str
    task_id: int | None
    annotation_id: int | None
    annotator: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


AUDIT_KINDS: tuple[str, ...] = (
    "edited_by_another_user", "more_annotations_than_overlap", "repeated_annotator",
    "episode_in_several_tasks",
)


def _user_id(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Author:
    """Who wrote an annotation: the Label Studio user, the name the exports give them (the
    stable pseudonym ``annotator-<user id>`` unless identities are kept) and their identity
    (the email, when known), which only the private map holds."""

    user: int
    name: str
    identity: str


def author_of(completed_by: Any, settings: Settings) -> Author | None:
    """The author an annotation's ``completed_by`` names (a user id, or an object with the id
    and email), or None when it names no user."""
    email = None
    if isinstance(completed_by, dict):
        completed_by, email = completed_by.get("id"), completed_by.get("email")
    user = _user_id(completed_by)
    if user is None:
        return None
    identity = str(email or settings.identities.get(user) or "")
    name = identity if settings.keep_identities and identity else f"annotator-{user}"
    return Author(user, name, identity)


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
    """What validating a chunk needs besides its bytes (handed to each worker once)."""

    origin: str
    # user id → email, where known; exports show them only when ``keep_identities``.
    identities: Mapping[int, str] = field(default_factory=dict)
    keep_identities: bool = False
    # The project's annotations per task, where known: more is an audit finding.
    overlap: int | None = None
    # task id → {"result", "model_version"}: model scores of tasks without a stored evaluation.
    predictions: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    # Known after a first reading, when an episode is in several tasks (``Collection``):
    # those episodes, and each annotation whose annotator later annotated the same episode
    # again in another task, with that later annotation's id.
    several_tasks: frozenset[str] = frozenset()
    superseded: Mapping[int, int] = field(default_factory=dict)


@dataclass
class Part:
    """What one chunk of tasks gives; ``encode`` adds its share of the output files."""

    size: int = 0  # bytes read
    tally: Tally = field(default_factory=Tally)
    # One flat score row per exported annotation, in input order, and the same as Arrow.
    rows: list[dict[str, Any]] = field(default_factory=list)
    table: pa.Table | None = None
    errors: list[ErrorRow] = field(default_factory=list)
    # Per episode; when an episode spans chunks, the first chunk's are kept.
    model_rows: dict[str, list[ModelRow]] = field(default_factory=dict)
    # Each episode's task data, for the files that show the episode.
    data: dict[str, Data] = field(default_factory=dict)  # type: ignore[valid-type]
    # (episode, task, annotator, annotation) of each exported annotation.
    keys: list[tuple[str, int, str, int]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # name in the exports → identity, of every annotator seen.
    identities: dict[str, str] = field(default_factory=dict)


@dataclass
class Collection:
    """Parts joined in input order."""

    tally: Tally = field(default_factory=Tally)
    tables: list[pa.Table] = field(default_factory=list)
    errors: list[ErrorRow] = field(default_factory=list)
    model_rows: dict[str, list[ModelRow]] = field(default_factory=dict)
    keys: list[tuple[str, int, str, int]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    identities: dict[str, str] = field(default_factory=dict)

    def add(self, part: Part) -> None:
        self.tally.add(part.tally)
        if part.table is not None:
            self.tables.append(part.table)
        self.errors.extend(part.errors)
        for episode, rows in part.model_rows.items():
            self.model_rows.setdefault(episode, rows)
        self.keys.extend(part.keys)
        self.findings.extend(part.findings)
        self.identities.update(part.identities)

    def audit_findings(self) -> list[Finding]:
        """Every finding, and one for each episode found in several tasks."""
        return self.findings + [
            Finding("episode_in_several_tasks", tasks[0], None, "",
                    f"episode {episode} is in tasks {', '.join(map(str, tasks))}")
            for episode, tasks in self.several_tasks().items()
        ]

    def audit(self) -> dict[str, int]:
        """How many findings of each kind."""
        findings = self.audit_findings()
        return {kind: sum(f.kind == kind for f in findings) for kind in AUDIT_KINDS}

    def several_tasks(self) -> dict[str, list[int]]:
        """``episode → its task ids`` for every episode found in more than one task."""
        first: dict[str, int] = {}
        several: dict[str, set[int]] = {}
        for episode, task, _, _ in self.keys:
            if first.setdefault(episode, task) != task:
                several.setdefault(episode, {first[episode]}).add(task)
        return {episode: sorted(ids) for episode, ids in several.items()}

    def superseded(self) -> dict[int, int]:
        """``annotation → the same annotator's later annotation of the same episode`` in
        another task: one annotator is one rating of an episode."""
        latest: dict[tuple[str, str], int] = {}
        superseded: dict[int, int] = {}
        for episode, _, annotator, annotation in sorted(self.keys, key=lambda key: key[3]):
            earlier = latest.get((episode, annotator))
            if earlier is not None:
                superseded[earlier] = annotation
            latest[(episode, annotator)] = annotation
        return superseded

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
        """The episodes' model evaluations: one row per episode × judge × agent × dimension,
        the judge named in ``evaluator``."""
        return pd.DataFrame([row for rows in self.model_rows.values() for row in rows],
                            columns=list(MODEL_SCORE_COLUMNS))


def _stored_evaluations(task: Task, tally: Tally) -> list[Evaluation]:
    """Every valid model evaluation kept in the task's meta, each named by its judge."""
    meta = {EVALUATION: task.meta.sotopia_evaluation, JUDGES: task.meta.sotopia_judges}
    found = []
    for name, stored in stored_judges(meta).items():
        try:
            found.append(Evaluation.model_validate(stored).model_copy(update={"evaluator": name}))
        except ValidationError:
            tally.invalid_model_evaluations += 1
    return found


def _predicted_evaluation(prediction: Any) -> Evaluation | None:
    """A prediction holding every valid result, read like an annotation."""
    if not isinstance(prediction, dict):
        return None
    return evaluation_of(prediction.get("result") or [], str(prediction.get("model_version") or ""))


def _model_rows(episode_id: str, evaluations: list[Evaluation]) -> list[ModelRow]:
    """One row per score each evaluation holds; their gaps have none."""
    return [
        (episode_id, agent, key, pair[1], evaluation.evaluator)
        for evaluation in evaluations
        for agent in AGENTS
        for key in DIMENSION_KEYS
        if (pair := evaluation.pair(agent, key)) is not None
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
            _refuse_repeat(earlier, f"duplicate: the same annotator also submitted annotation "
                           f"{row['annotation_id']} on this task; only the latest is kept", part)
        latest[row["annotator_id"]] = row
    return sorted(latest.values(), key=lambda row: row["annotation_id"] or 0)


def _latest_prediction(task: Task, settings: Settings) -> Any:
    """The task's prediction: fetched separately, or inline in exports that expand them."""
    inline = [p for p in task.predictions if isinstance(p, dict)]
    return settings.predictions.get(task.id) or (inline[-1] if inline else None)


def _identifier_problems(task: Task, annotation: Annotation, author: Author | None
                         ) -> list[Problem]:
    """What keeps an annotation from being told apart: ids that are not numbers, no author,
    flags that are not true or false (``"false"`` is not false)."""
    problems = []
    if _user_id(task.id) is None:
        problems.append(("task.id", f"not a task id: {shown(task.id)}"))
    if _user_id(annotation.id) is None:
        problems.append(("id", f"not an annotation id: {shown(annotation.id)}"))
    if author is None:
        problems.append(("completed_by", f"not a user: {shown(annotation.completed_by)}"))
    for flag in ("was_cancelled", "ground_truth"):
        value = getattr(annotation, flag)
        if value is not None and not isinstance(value, bool):
            problems.append((flag, f"not true or false: {shown(value)}"))
    return problems


# Label Studio records as ``updated_by`` whoever created an annotation on someone's behalf
# (an owner's script, the study gateway) in the same save: only a later save is an edit.
_EDIT_AFTER = timedelta(seconds=1)


def _moment(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _audit(task: Task, annotation: Annotation, author: Author, part: Part) -> None:
    """Findings about one annotation: saved again later by someone who is not its author."""
    editor = _user_id(annotation.updated_by)
    if editor is None or editor == author.user:
        return
    created, updated = _moment(annotation.created_at), _moment(annotation.updated_at)
    if created and updated and updated - created > _EDIT_AFTER:
        part.findings.append(Finding(
            "edited_by_another_user", task.id, annotation.id, author.name,
            f"saved again by annotator-{editor} at {annotation.updated_at}, not by its author",
        ))


def add_task(part: Part, task: Task, settings: Settings) -> None:
    """Validate every annotation of one exported task into ``part``."""
    tally = part.tally
    tally.tasks += 1
    tally.drafts += len(task.drafts)
    data = task.data
    episode_id = str(data.episode_id or "")
    task_rows: list[dict[str, Any]] = []
    shared = _task_columns(task, episode_id)
    submitted = 0
    for annotation in task.annotations:
        tally.total += 1
        author = author_of(annotation.completed_by, settings)
        annotator = author.name if author else ""
        problems = _identifier_problems(task, annotation, author)
        if problems:
            tally.rejected += 1
            part.errors.extend(ErrorRow(_user_id(task.id), _user_id(annotation.id), annotator,
                                        name, reason) for name, reason in problems)
            continue
        part.identities[author.name] = author.identity
        if annotation.was_cancelled:
            tally.cancelled += 1
            continue
        submitted += 1
        _audit(task, annotation, author, part)
        fields, problems = read_results(annotation.result)
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
    if settings.overlap is not None and submitted > settings.overlap:
        part.findings.append(Finding(
            "more_annotations_than_overlap", task.id, None, "",
            f"{submitted} submitted annotations; the project asks for {settings.overlap}",
        ))
    if not task_rows:
        return
    if episode_id not in part.data:
        part.data[episode_id] = data
        predicted = _predicted_evaluation(_latest_prediction(task, settings))
        evaluations = _stored_evaluations(task, tally) or ([predicted] if predicted else [])
        part.model_rows[episode_id] = _model_rows(episode_id, evaluations)
    kept = [row for row in _keep_latest_per_annotator(task_rows, part)
            if not _superseded(row, settings, part)]
    tally.exported += len(kept)
    tally.ground_truth += sum(row["ground_truth"] for row in kept)
    part.rows.extend(kept)
    part.keys.extend((episode_id, task.id, row["annotator_id"], row["annotation_id"])
                     for row in kept)


def _superseded(row: dict[str, Any], settings: Settings, part: Part) -> bool:
    later = settings.superseded.get(row["annotation_id"])
    if later is None:
        return False
    _refuse_repeat(row, f"duplicate: the same annotator also annotated episode "
                   f"{row['episode_id']} in another task (annotation {later}); only the latest "
                   "is kept", part)
    return True


def _refuse_repeat(row: dict[str, Any], reason: str, part: Part) -> None:
    """An annotator's earlier rating of an episode they rated again: refused, and audited."""
    part.tally.duplicates += 1
    part.tally.rejected += 1
    part.errors.append(ErrorRow(row["task_id"], row["annotation_id"], row["annotator_id"], "",
                                reason))
    part.findings.append(Finding("repeated_annotator", row["task_id"], row["annotation_id"],
                                 row["annotator_id"], reason))


def validate_chunk(chunk: bytes | Region, settings: Settings) -> Part:
    """Decode and validate one chunk of tasks (given, or a region of a file to read)."""
    if isinstance(chunk, Region):
        chunk = chunk.read()
    part = Part(size=len(chunk))
    for task in decode_tasks(chunk, settings.origin):
        add_task(part, task, settings)
    part.table = annotation_table(part.rows)
    return part
