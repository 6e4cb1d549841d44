"""Episodes → tasks in a Label Studio project: batched, idempotent by episode id.

Each batch is one bulk import request, which Label Studio applies as a whole, so an
interrupted run leaves complete batches behind; the next run lists the episode ids already in
the project and sends only the rest. That makes reruns and resumed runs end with exactly one
task per episode.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from label_studio_sdk import LabelStudio
from tqdm import tqdm

from ..client import existing_episode_ids, import_batch, sdk_errors, set_prefill
from ..episode import Episode
from ..results import evaluation_prediction
from ..tasks import episode_to_task

DEFAULT_BATCH_SIZE = 500


@dataclass(frozen=True)
class PushReport:
    project_id: int
    imported: int
    already_present: int
    with_predictions: int
    batches: int


def task_payload(episode: Episode, *, with_predictions: bool = False) -> dict[str, Any]:
    """One entry of a Label Studio import: task data, plus the stored evaluation if asked."""
    payload: dict[str, Any] = {"data": episode_to_task(episode)}
    if with_predictions and episode.evaluation is not None:
        payload["predictions"] = [evaluation_prediction(episode.evaluation)]
    return payload


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def push_episodes(
    client: LabelStudio,
    project_id: int,
    episodes: Iterable[Episode],
    *,
    with_predictions: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool = True,
) -> PushReport:
    """Import every episode not yet in the project, ``batch_size`` tasks per request."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    present = existing_episode_ids(client, project_id)
    episodes = list(episodes)
    todo = [episode for episode in episodes if episode.id not in present]
    payloads = [task_payload(episode, with_predictions=with_predictions) for episode in todo]
    batches = 0
    with tqdm(
        total=len(payloads), unit="task", desc="Importing", disable=not progress or not payloads
    ) as bar:
        for batch in _batches(payloads, batch_size):
            import_batch(client, project_id, batch)
            batches += 1
            bar.update(len(batch))
    if with_predictions and batches:
        _keep_predictions_hidden_unless_shown(client, project_id)
    return PushReport(
        project_id=project_id,
        imported=len(payloads),
        already_present=len(episodes) - len(todo),
        with_predictions=sum("predictions" in payload for payload in payloads),
        batches=batches,
    )


def _keep_predictions_hidden_unless_shown(client: LabelStudio, project_id: int) -> None:
    """Label Studio points a project at the model version of predictions it imports; undo
    that unless the project pre-fills on purpose, so annotations record no unseen prediction."""
    with sdk_errors("reading the project settings", project=project_id):
        shown = client.projects.get(id=project_id).show_collab_predictions
    if not shown:
        set_prefill(client, project_id, False)
