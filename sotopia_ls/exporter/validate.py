"""Validate, in a worker: one chunk of exported tasks → a ``Part``, every annotation counted
and placed once (a score row, or an error row per reason), with the marks its task's meta
holds (review decision, added slot, gold) and its time on task.

A pure function of the chunk and the ``Settings``: what needs every chunk is ``collection``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .. import errors
from ..dimensions import AGENTS, DIMENSION_KEYS
from ..labelstudio.results import Problem, evaluation_of, predicted_ratings, read_results, shown
from ..labelstudio.tasks import (
    ADDED_SLOTS,
    EVALUATION,
    GOLD,
    JUDGES,
    REJECT,
    REVIEW,
    REVIEW_DECISIONS,
    agent_field,
    stored_judges,
)
from ..scores import Evaluation
from .accounting import ErrorRow, Finding, Tally, repeat_refusal
from .chunks import Region
from .tables import TIME_COLUMNS, annotation_table
from .wire import Annotation, Data, Task, decode_tasks

if TYPE_CHECKING:
    import pyarrow as pa

# (episode, agent, dimension, score, judge, the agent's model)
ModelRow = tuple[str, int, str, int, str, str]
# An exported annotation, as the parent needs it once every chunk is in: (episode, task,
# annotator, annotation id, ground truth, and where its task's refusals and findings end in
# the part's lists, where a refusal as a repeat across tasks goes). A plain tuple: a part
# carries thousands, and a named one pickles four times slower.
Rated = tuple[str, int, str, int, bool, int, int]


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
    # Leave out the annotations the study review marked reject.
    exclude_rejected: bool = False
    # annotation id → its time-on-task columns (``tables.TIME_COLUMNS``), for the annotations
    # made through a study's gateway (read from its database); the others' stay empty.
    time_on_task: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)


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
    # Each exported annotation, in the order of ``rows``.
    rated: list[Rated] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # name in the exports → identity, of every annotator seen.
    identities: dict[str, str] = field(default_factory=dict)


def _stored_evaluations(task: Task, tally: Tally) -> list[Evaluation]:
    """Every valid model evaluation kept in the task's meta, each named by its judge."""
    meta = {EVALUATION: task.meta.sotopia_evaluation, JUDGES: task.meta.sotopia_judges}
    judges = stored_judges(meta)
    found = evaluations_of(judges)
    tally.invalid_model_evaluations += len(judges) - len(found)
    return found


def evaluations_of(judges: Mapping[str, Any]) -> list[Evaluation]:
    """The valid ones of ``stored_judges``' evaluations, each named by its judge."""
    found = []
    for name, stored in judges.items():
        try:
            found.append(Evaluation.model_validate(stored).model_copy(update={"evaluator": name}))
        except ValidationError:
            pass
    return found


def _predicted_evaluation(prediction: Any) -> Evaluation | None:
    """A prediction holding every valid result, read like an annotation."""
    if not isinstance(prediction, dict):
        return None
    return evaluation_of(prediction.get("result") or [], str(prediction.get("model_version") or ""))


def _evaluations(task: Task, settings: Settings, tally: Tally) -> list[Evaluation]:
    """The task's stored evaluations; without any, its latest prediction read as one (and
    read only then: it would be thrown away)."""
    stored = _stored_evaluations(task, tally)
    if stored:
        return stored
    predicted = _predicted_evaluation(_latest_prediction(task, settings))
    return [predicted] if predicted else []


def agent_models(data: Data) -> tuple[str, str]:  # type: ignore[valid-type]
    """The model of agent 1 and of agent 2 the task data names ("" where unknown)."""
    named = data.agent_models
    if not (isinstance(named, list) and len(named) == len(AGENTS)):
        return ("", "")
    first, second = (str(model or "") for model in named)
    return first, second


def _model_rows(episode_id: str, evaluations: list[Evaluation],
                models: tuple[str, str]) -> list[ModelRow]:
    """One row per score each evaluation holds; their gaps have none."""
    return [
        (episode_id, agent, key, pair[1], evaluation.evaluator, models[agent - 1])
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
        **{agent_field(agent, "model"): model
           for agent, model in zip(AGENTS, agent_models(data))},
        "agent_1_name": str(data.agent_1_name or ""),
        "agent_2_name": str(data.agent_2_name or ""),
    }


def _annotation_columns(annotation: Annotation, annotator: str, decision: str,
                        added: bool, gold: bool) -> dict[str, Any]:
    shown = annotation.prediction
    return {
        "annotation_id": annotation.id,
        "annotator_id": annotator,
        "ground_truth": bool(annotation.ground_truth),
        "review_decision": decision,
        "added_slot": added,
        "gold": gold,
        "lead_time": _number(annotation.lead_time),
        "created_at": None if annotation.created_at is None else str(annotation.created_at),
        "prediction_model_version": str(shown.get("model_version") or "")
        if isinstance(shown, dict) else "",
        **{f"predicted_{name}": score for name, score in predicted_ratings(shown).items()},
    }


_NO_TIMES = dict.fromkeys(TIME_COLUMNS)


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


def _refused(task: Task, origin: str, key: str, reason: str) -> errors.InvalidInput:
    return errors.InvalidInput([errors.Problem(origin, f"task {shown(task.id)}", reason,
                                               f"meta.{key}")])


def _annotation_marks(task: Task, origin: str, key: str, mark: str) -> dict[int, Any]:
    """``annotation id → mark`` held in the task's ``meta[key]`` ({} without one); anything
    but an object keyed by annotation ids is refused, naming the task and the field."""
    marks = getattr(task.meta, key)
    if marks is None:
        return {}
    if not isinstance(marks, dict):
        raise _refused(task, origin, key, f"not an object of annotation id → {mark}: "
                       f"{shown(marks)}")
    for annotation in marks:
        if not (annotation.isascii() and annotation.isdigit()):
            raise _refused(task, origin, key, f"{shown(annotation)} is not an annotation id")
    return {int(annotation): value for annotation, value in marks.items()}


def review_decisions(task: Task, origin: str) -> dict[int, str]:
    """``annotation id → decision`` of the study review's marks in the task's meta; a mark
    that is not one is refused, naming the task and the field."""
    decisions = _annotation_marks(task, origin, REVIEW, "decision")
    for annotation, decision in decisions.items():
        if decision not in REVIEW_DECISIONS:
            raise _refused(task, origin, REVIEW, f"annotation {annotation}: {shown(decision)} "
                           f"is no decision (one of {', '.join(REVIEW_DECISIONS)})")
    return decisions


def added_slots(task: Task, origin: str) -> frozenset[int]:
    """The annotations the study gateway marked as rated on an added slot (``ADDED_SLOTS``,
    annotation id → slot number, above the first); a mark that is not one is refused."""
    marked = _annotation_marks(task, origin, ADDED_SLOTS, "slot number")
    for annotation, slot in marked.items():
        if not (isinstance(slot, int) and not isinstance(slot, bool) and slot > 1):
            raise _refused(task, origin, ADDED_SLOTS, f"annotation {annotation}: {shown(slot)} "
                           "is no added slot's number")
    return frozenset(marked)


def is_gold(task: Task, origin: str) -> bool:
    """Whether a study gateway marked the task as one of its gold episodes (``GOLD``: study
    name → true); a mark that is not one is refused, naming the task and the field."""
    marks = getattr(task.meta, GOLD)
    if marks is None:
        return False
    if not (isinstance(marks, dict) and all(value is True for value in marks.values())):
        raise _refused(task, origin, GOLD, f"not an object of study name → true: {shown(marks)}")
    return bool(marks)


def _without_rejected(rows: list[dict[str, Any]], tally: Tally) -> list[dict[str, Any]]:
    kept = [row for row in rows if row["review_decision"] != REJECT]
    tally.excluded += len(rows) - len(kept)
    return kept


def add_task(part: Part, task: Task, settings: Settings) -> None:
    """Validate every annotation of one exported task into ``part``."""
    decisions = review_decisions(task, settings.origin)
    added = added_slots(task, settings.origin)
    gold = is_gold(task, settings.origin)
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
        fields.update(settings.time_on_task.get(annotation.id, _NO_TIMES))
        fields.update(_annotation_columns(annotation, annotator,
                                          decisions.get(annotation.id, ""),
                                          annotation.id in added, gold))
        task_rows.append(fields)
    if settings.overlap is not None and submitted > settings.overlap:
        part.findings.append(Finding(
            "more_annotations_than_overlap", task.id, None, "",
            f"{submitted} submitted annotations; the project asks for {settings.overlap}",
        ))
    kept = _keep_latest_per_annotator(task_rows, part)
    if settings.exclude_rejected:
        kept = _without_rejected(kept, tally)
    if episode_id and episode_id not in part.model_rows:  # a judge's scores, rated or not
        part.model_rows[episode_id] = _model_rows(
            episode_id, _evaluations(task, settings, tally), agent_models(data))
    if not kept:
        return
    part.data.setdefault(episode_id, data)
    tally.exported += len(kept)
    tally.ground_truth += sum(row["ground_truth"] for row in kept)
    part.rows.extend(kept)
    ends = len(part.errors), len(part.findings)
    part.rated.extend((episode_id, task.id, row["annotator_id"], row["annotation_id"],
                       row["ground_truth"], *ends) for row in kept)


def _refuse_repeat(row: dict[str, Any], reason: str, part: Part) -> None:
    part.tally.duplicates += 1
    part.tally.rejected += 1
    error, finding = repeat_refusal(row["task_id"], row["annotation_id"], row["annotator_id"],
                                    reason)
    part.errors.append(error)
    part.findings.append(finding)


def validate_chunk(chunk: bytes | Region, settings: Settings) -> Part:
    """Decode and validate one chunk of tasks (given, or a region of a file to read)."""
    if isinstance(chunk, Region):
        chunk = chunk.read()
    part = Part(size=len(chunk))
    for task in decode_tasks(chunk, settings.origin):
        add_task(part, task, settings)
    part.table = annotation_table(part.rows)
    return part
