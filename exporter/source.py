"""Where annotated tasks come from: a live project or a Label Studio JSON export file.

Both are read as a stream of bytes in Label Studio's JSON export format (a list of tasks, each
with its ``data``, ``annotations`` and ``drafts``), cut into chunks of whole tasks
(``chunks.task_chunks``) so a large export is never held in memory whole.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from label_studio_sdk import LabelStudio
from label_studio_sdk.types import Export

from ..client import sdk_errors
from ..errors import LabelStudioError
from .chunks import CHUNK_BYTES, task_chunks
from .wire import Task, decode_tasks

_POLL_SECONDS = 1.0


def file_pieces(path: Path, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """A file's bytes, ``size`` at a time."""
    with path.open("rb") as stream:
        yield from iter(lambda: stream.read(size), b"")


def tasks_of(pieces: Iterable[bytes], origin: str) -> Iterator[Task]:
    """Each task of a JSON export's bytes, decoded a chunk at a time (in this process)."""
    for chunk in task_chunks(pieces, origin=origin):
        yield from decode_tasks(chunk, origin)


def file_tasks(path: Path) -> Iterator[Task]:
    """Tasks of a Label Studio JSON export file (``Export → JSON`` in the UI)."""
    return tasks_of(file_pieces(path), str(path))


def _finished_snapshot(client: LabelStudio, project_id: int, snapshot: Export,
                       timeout: float) -> Export:
    """``snapshot`` once Label Studio has written it.

    Without Redis the snapshot is written inside the create request; with Redis it is a
    background job, polled here until it completes.
    """
    deadline = time.monotonic() + timeout
    while snapshot.status != "completed":
        if snapshot.status == "failed":
            raise LabelStudioError(f"Label Studio failed to write export snapshot {snapshot.id} "
                                   "(see the server's log)", project=project_id)
        if time.monotonic() > deadline:
            raise LabelStudioError(f"export snapshot {snapshot.id} was not written within "
                                   f"{timeout:.0f} s (status {snapshot.status!r})",
                                   project=project_id)
        time.sleep(_POLL_SECONDS)
        snapshot = client.projects.exports.get(project_id, snapshot.id)
    return snapshot


def project_pieces(
    client: LabelStudio, project_id: int, *, timeout: float = 3600.0
) -> Iterator[bytes]:
    """The bytes of every task of a live project with all annotations (cancelled ones
    included) and drafts.

    Reads an export snapshot: Label Studio writes it to a file in batches of tasks, so neither
    side holds the whole project (its ``/export`` endpoint builds the full list in memory
    first). Its tasks are the objects of an export file, each annotation with ``completed_by``,
    ``was_cancelled``, ``ground_truth``, ``lead_time`` and ``created_at``, predictions as ids.
    The snapshot is deleted afterwards; ``timeout`` bounds waiting for a background one.
    """
    with sdk_errors("exporting the project", project=project_id):
        snapshot = client.projects.exports.create(
            id=project_id,
            title="sotopia-ls export",
            # Spelled out: a filter keeps only the kinds it sets ("usual" alone would drop
            # skipped and ground-truth annotations).
            annotation_filter_options={"usual": True, "ground_truth": True, "skipped": True},
            serialization_options={"drafts": {"only_id": False},
                                   "predictions": {"only_id": True}},
        )
        try:
            snapshot = _finished_snapshot(client, project_id, snapshot, timeout)
            yield from client.projects.exports.download(project_id, snapshot.id,
                                                         export_type="JSON")
        finally:
            client.projects.exports.delete(project_id, snapshot.id)


def project_tasks(client: LabelStudio, project_id: int) -> Iterator[Task]:
    """Tasks of a live project, read from an export snapshot (``project_pieces``)."""
    return tasks_of(project_pieces(client, project_id), f"project {project_id}")


def annotator_emails(client: LabelStudio) -> dict[int, str]:
    """``user id → email`` for every user on the server (an annotation names its user by id)."""
    with sdk_errors("listing users"):
        return {user.id: user.email or user.username for user in client.users.list()}


def project_predictions(client: LabelStudio, project_id: int) -> dict[int, dict[str, Any]]:
    """The latest prediction of each task (``result`` and ``model_version``), by task id.

    A JSON export lists predictions by id only; this fetches their contents, for comparing
    human scores with a backend's predictions when tasks carry no stored evaluation.
    """
    latest: dict[int, dict[str, Any]] = {}
    with sdk_errors("listing predictions", project=project_id):
        for prediction in sorted(client.predictions.list(project=project_id), key=lambda p: p.id):
            latest[prediction.task] = {
                "result": prediction.result, "model_version": prediction.model_version or ""
            }
    return latest
