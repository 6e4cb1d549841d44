"""Where annotated tasks come from: a live project or a Label Studio JSON export file.

Both are read as a stream of task objects in Label Studio's JSON export format (each task with
its ``data``, ``annotations`` and ``drafts``), parsed incrementally with ijson so a large export
is never held in memory whole: only the task being validated is.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import ijson
from label_studio_sdk import LabelStudio
from label_studio_sdk.types import Export

from ..client import sdk_errors
from ..errors import InvalidInput, LabelStudioError, Problem

_CHUNK = 1 << 16
_POLL_SECONDS = 1.0


class _ChunkReader:
    """A read-only file over an iterator of byte chunks (a download, or a file read in blocks)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._pending = b""

    def _fill(self, size: int) -> None:
        while size < 0 or len(self._pending) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                return
            self._pending += chunk

    def first_byte(self) -> bytes:
        """The first non-blank byte, left unread."""
        while not self._pending.lstrip():
            before = len(self._pending)
            self._fill(before + 1)
            if len(self._pending) == before:
                return b""
        return self._pending.lstrip()[:1]

    def read(self, size: int = -1) -> bytes:
        self._fill(size)
        cut = len(self._pending) if size < 0 else size
        data, self._pending = self._pending[:cut], self._pending[cut:]
        return data


def iter_tasks(chunks: Iterable[bytes], *, origin: str = "export") -> Iterator[dict[str, Any]]:
    """Each task of a JSON export (a top-level list) as soon as it is parsed from ``chunks``."""
    reader = _ChunkReader(chunks)
    if reader.first_byte() != b"[":
        raise InvalidInput([Problem(origin, "", "not a Label Studio JSON export: "
                                                "expected a list of tasks")])
    try:
        # items() runs wholly in ijson's C backend; its push-style coroutine API builds
        # objects in Python and is several times slower.
        for number, task in enumerate(ijson.items(reader, "item", use_float=True,
                                                  buf_size=_CHUNK)):
            if not isinstance(task, dict):
                raise InvalidInput([Problem(origin, str(number), "not a task object")])
            yield task
    except ijson.JSONError as exc:
        reason = f"not a Label Studio JSON export: {str(exc).splitlines()[0]}"
        raise InvalidInput([Problem(origin, "", reason)]) from exc


def file_tasks(path: Path) -> Iterator[dict[str, Any]]:
    """Tasks of a Label Studio JSON export file (``Export → JSON`` in the UI)."""
    with path.open("rb") as stream:
        yield from iter_tasks(iter(lambda: stream.read(_CHUNK), b""), origin=str(path))


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


def project_tasks(
    client: LabelStudio, project_id: int, *, timeout: float = 3600.0
) -> Iterator[dict[str, Any]]:
    """Every task of a live project with all annotations (cancelled ones included) and drafts.

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
            chunks = client.projects.exports.download(project_id, snapshot.id,
                                                      export_type="JSON")
            yield from iter_tasks(chunks, origin=f"project {project_id}")
        finally:
            client.projects.exports.delete(project_id, snapshot.id)


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
