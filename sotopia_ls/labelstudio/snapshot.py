"""A live project's annotated tasks, streamed from a Label Studio export snapshot.

Label Studio writes a snapshot to a file in batches of tasks, so neither side holds the whole
project (its ``/export`` endpoint builds the full list in memory first). Its tasks are the
objects of a JSON export file: each annotation with ``completed_by``, ``was_cancelled``,
``ground_truth``, ``lead_time`` and ``created_at``, predictions as ids.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

from label_studio_sdk.types import Export

from ..errors import LabelStudioError
from .client import Client, sdk_errors

_POLL_SECONDS = 1.0
SNAPSHOT_TITLE = "sotopia-ls export"
# A snapshot of ours older than this was left by a run that was killed: the next run deletes
# it. Younger ones may belong to an export running right now.
_LEFTOVER_AFTER = timedelta(hours=6)


def _finished_snapshot(client: Client, project_id: int, snapshot: Export,
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


def project_reads(
    client: Client, project_id: int, *, timeout: float = 3600.0
) -> Iterator[bytes]:
    """The bytes of every task of a live project with all annotations (cancelled ones
    included) and drafts, from an export snapshot.

    The snapshot is deleted afterwards, and so are snapshots that killed runs left behind;
    ``timeout`` bounds waiting for a snapshot written in the background.
    """
    with sdk_errors("exporting the project", project=project_id):
        _delete_leftovers(client, project_id)
        snapshot = client.projects.exports.create(
            id=project_id,
            title=SNAPSHOT_TITLE,
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


def _delete_leftovers(client: Client, project_id: int) -> None:
    now = datetime.now(timezone.utc)
    for snapshot in client.projects.exports.list(project_id):
        created = snapshot.created_at
        if (snapshot.title == SNAPSHOT_TITLE and created is not None
                and now - created.astimezone(timezone.utc) > _LEFTOVER_AFTER):
            client.projects.exports.delete(project_id, snapshot.id)
