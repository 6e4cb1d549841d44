"""Episodes → tasks in a Label Studio project: batched, and ending with one task per episode.

Label Studio has no uniqueness constraint to lean on, so the push converges instead: it repairs
copies, sends only what is missing, never blindly resends a request whose outcome is unknown,
and repairs again when another import added tasks meanwhile (README.md, "sotopia-ls import").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..config import check_labeling_config
from ..episode import Episode
from ..folders import write_file
from ..errors import ImportOutcomeUnknown, ProjectNotFound
from .client import (
    Client,
    Project,
    TaskCopy,
    create_project,
    delete_tasks,
    episode_tasks,
    find_project,
    import_batch,
    read_project,
    sdk_errors,
    set_prefill,
    task_count,
)
from .results import evaluation_prediction
from .tasks import episode_meta, episode_to_task

DEFAULT_BATCH_SIZE = 500
# Unknown outcomes tolerated per import before giving up (each one costs a listing).
_UNKNOWN_OUTCOMES = 3


@dataclass
class PushReport:
    """What a push did. ``removed`` are surplus copies deleted; ``kept_copies`` maps an
    episode to its tasks when more than one of them has been worked on (all are kept)."""

    project_id: int
    imported: int = 0
    already_present: int = 0
    with_predictions: int = 0
    batches: int = 0
    removed: list[int] = field(default_factory=list)
    kept_copies: dict[str, list[int]] = field(default_factory=dict)
    retried_batches: int = 0


def task_payload(episode: Episode, *, with_predictions: bool = False) -> dict[str, Any]:
    """One entry of a Label Studio import: task data and meta, plus the stored evaluation as
    a prediction if asked."""
    payload: dict[str, Any] = {"data": episode_to_task(episode), "meta": episode_meta(episode)}
    if with_predictions and episode.evaluation is not None:
        payload["predictions"] = [evaluation_prediction(episode.evaluation)]
    return payload


def write_tasks(episodes: Iterable[Episode], path: Path, *, with_predictions: bool = False) -> int:
    """The Label Studio import JSON of ``episodes`` written to ``path`` (no server); returns
    how many tasks."""
    tasks = [task_payload(episode, with_predictions=with_predictions) for episode in episodes]
    write_file(path, json.dumps(tasks, ensure_ascii=False, indent=1))
    return len(tasks)


@dataclass
class Copies:
    """Episodes found in more than one task: the ``surplus`` copies nobody worked on, and
    each episode with more than one task somebody ``worked_on``."""

    surplus: list[int] = field(default_factory=list)
    worked_on: dict[str, list[int]] = field(default_factory=dict)


def find_copies(tasks: dict[str, list[TaskCopy]]) -> Copies:
    """Of several tasks of one episode, the first worked on (else the lowest id) stays."""
    copies = Copies()
    for episode_id, found in tasks.items():
        if len(found) < 2:
            continue
        worked_on = [task for task in found if task.worked_on]
        keep = worked_on[0] if worked_on else found[0]
        copies.surplus += [task.id for task in found if task is not keep and not task.worked_on]
        if len(worked_on) > 1:
            copies.worked_on[episode_id] = [task.id for task in worked_on]
    return copies


def repair_copies(
    client: Client, project_id: int, tasks: dict[str, list[TaskCopy]], report: PushReport
) -> None:
    """Delete the surplus copies; record the episodes whose copies were worked on."""
    copies = find_copies(tasks)
    if copies.surplus:
        delete_tasks(client, project_id, copies.surplus)
        report.removed += copies.surplus
    report.kept_copies.update(copies.worked_on)


def check_project(client: Client, project: str | int, *, repair: bool = True
                  ) -> tuple[int, Copies]:
    """The project's id and its episodes found in several tasks; with ``repair``, the surplus
    copies are deleted."""
    project_id = find_project(client, project).id
    copies = find_copies(episode_tasks(client, project_id))
    if repair and copies.surplus:
        delete_tasks(client, project_id, copies.surplus)
    return project_id, copies


def push_episodes(
    client: Client,
    project_id: int,
    episodes: Iterable[Episode],
    *,
    with_predictions: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool = True,
) -> PushReport:
    """Add every episode not yet in the project, ``batch_size`` tasks per request, and leave
    the project with one task per episode (see the module's docstring)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    episodes = list(episodes)
    report = PushReport(project_id)
    present = episode_tasks(client, project_id)
    repair_copies(client, project_id, present, report)
    report.already_present = sum(episode.id in present for episode in episodes)
    todo = [episode for episode in episodes if episode.id not in present]
    expected = task_count(client, project_id) + len(todo)
    unknown = 0
    with tqdm(total=len(todo), unit="task", desc="Importing",
              disable=not progress or not todo) as bar:
        while todo:
            batch, todo = todo[:batch_size], todo[batch_size:]
            payloads = [task_payload(e, with_predictions=with_predictions) for e in batch]
            try:
                import_batch(client, project_id, payloads)
                saved = batch
                report.batches += 1
            except ImportOutcomeUnknown:
                unknown += 1
                if unknown > _UNKNOWN_OUTCOMES:
                    raise
                report.retried_batches += 1
                listed = episode_tasks(client, project_id)
                saved = [episode for episode in batch if episode.id in listed]
                todo = [episode for episode in batch if episode.id not in listed] + todo
            report.imported += len(saved)
            report.with_predictions += _predicted(saved, with_predictions)
            bar.update(len(saved))
    if task_count(client, project_id) != expected:
        repair_copies(client, project_id, episode_tasks(client, project_id), report)
    if with_predictions and report.imported:
        _keep_predictions_hidden_unless_shown(client, project_id)
    return report


def _predicted(episodes: Sequence[Episode], with_predictions: bool) -> int:
    return sum(episode.evaluation is not None for episode in episodes) if with_predictions else 0


def _keep_predictions_hidden_unless_shown(client: Client, project_id: int) -> None:
    """Label Studio points a project at the model version of predictions it imports; undo
    that unless the project pre-fills on purpose, so annotations record no unseen prediction."""
    with sdk_errors("reading the project settings", project=project_id):
        shown = read_project(client, project_id,
                             "show_collab_predictions").show_collab_predictions
    if not shown:
        set_prefill(client, project_id, False)


def import_episodes(
    client: Client,
    episodes: Iterable[Episode],
    *,
    project: str | int | None = None,
    title: str = "Sotopia human evaluation",
    annotations_per_task: int = 2,
    with_predictions: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool = True,
) -> tuple[Project, bool, PushReport]:
    """Push ``episodes`` into the project ``project`` (id or exact title), or into the project
    titled ``title``, created (with the generated labeling config) when there is none.

    Returns the project, whether it was created, and the push's report.
    """
    created = False
    if project is not None:
        target = find_project(client, project)
    else:
        try:
            target = find_project(client, title)
        except ProjectNotFound:
            target, created = create_project(
                client, title, annotations_per_task=annotations_per_task
            ), True
    if not created:
        # A researcher may restyle a project's config; one that breaks the rating contract
        # would collect annotations the export refuses.
        check_labeling_config(target.label_config)
    report = push_episodes(
        client, target.id, episodes, with_predictions=with_predictions,
        batch_size=batch_size, progress=progress,
    )
    return target, created, report

