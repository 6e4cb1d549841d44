"""Where annotated tasks come from: a live project or a Label Studio JSON export file.

Both are read as a stream of bytes in Label Studio's JSON export format (a list of tasks, each
with its ``data``, ``annotations`` and ``drafts``), cut into chunks of whole tasks
(``chunks.task_chunks``) so a large export is never held in memory whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from ..labelstudio.client import Client
from ..labelstudio.snapshot import project_reads
from .chunks import CHUNK_BYTES, task_chunks
from .wire import Task, decode_tasks


def file_reads(path: Path, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """A file's bytes, ``size`` at a time."""
    with path.open("rb") as stream:
        yield from iter(lambda: stream.read(size), b"")


def tasks_of(reads: Iterable[bytes], origin: str) -> Iterator[Task]:
    """Each task of a JSON export's bytes, decoded a chunk at a time (in this process)."""
    for chunk in task_chunks(reads, origin=origin):
        yield from decode_tasks(chunk, origin)


def file_tasks(path: Path) -> Iterator[Task]:
    """Tasks of a Label Studio JSON export file (``Export → JSON`` in the UI)."""
    return tasks_of(file_reads(path), str(path))


def project_tasks(client: Client, project_id: int) -> Iterator[Task]:
    """Tasks of a live project, read from an export snapshot (``project_reads``)."""
    return tasks_of(project_reads(client, project_id), f"project {project_id}")
