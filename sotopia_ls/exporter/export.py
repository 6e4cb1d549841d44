"""Annotations → every output file: read → validate → encode → write.

``export_file`` reads a Label Studio JSON export file, ``export_project`` a live project's
snapshot; both cut it into chunks, validate and encode them in worker processes, and write into
a staging folder that replaces ``out_dir`` whole. The input is read once; episodes found in
several tasks are settled at the end (``collection``, ``rewrite``).
"""

from __future__ import annotations

import gc
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from tqdm.auto import tqdm

from ..adjudication.reading import ADJUDICATION_FILES, Adjudicated, adjudicated_scores
from ..errors import InvalidInput
from ..folders import replaced_folder
from ..labelstudio.client import (
    Client,
    Project,
    annotator_emails,
    find_project,
    project_predictions,
)
from ..labelstudio.snapshot import project_reads
from .accounting import Tally
from .chunks import CHUNK_BYTES, regions, task_chunks
from .collection import Collection
from .encode import Encoding
from .parallel import default_workers, read_parts
from .protocol import export_protocol, write_protocol
from .source import file_reads
from .tables import frame, scores_long
from .validate import Settings
from .write import OUTPUT_FILES, Outputs, write_adjudicated

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class ExportResult:
    """The validated annotations as DataFrames, with the counts that account for all of them.

    ``several_tasks`` maps each episode found in more than one task to those tasks;
    ``protocol`` is the record ``protocol.json`` holds.
    """

    collection: Collection
    protocol: dict[str, Any]
    # The adjudication project's ratings, read when an export is given one.
    adjudicated: Adjudicated | None = None

    @property
    def tally(self) -> Tally:
        return self.collection.tally

    @property
    def several_tasks(self) -> dict[str, list[int]]:
        return self.collection.repeats.several_tasks

    @cached_property
    def table(self) -> pa.Table:
        """The annotations as Arrow (what ``annotations`` converts)."""
        return self.collection.table()

    @cached_property
    def annotations(self) -> pd.DataFrame:
        """One row per exported annotation: identifiers, timing and the flat scores."""
        return frame(self.table)

    @cached_property
    def scores_long(self) -> pd.DataFrame:
        return scores_long(self.table)

    @cached_property
    def errors(self) -> pd.DataFrame:
        return self.collection.error_table()

    @cached_property
    def model_scores(self) -> pd.DataFrame:
        return self.collection.model_scores()


@dataclass(frozen=True)
class Reading:
    """How an export is read: ``workers`` processes (default one per CPU, at most 8), each
    given chunks of about ``chunk_bytes`` of whole tasks."""

    workers: int = field(default_factory=default_workers)
    chunk_bytes: int = CHUNK_BYTES


DEFAULT_READING = Reading()  # frozen: one value serves every call that gives none


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The export builds millions of objects that all live to the end; the cyclic garbage
    collector would rescan them again and again, a good part of the export's time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _bar(total: int | None, shown: bool, what: str) -> tqdm:
    return tqdm(total=total, unit="B", unit_scale=True, desc=what, disable=not shown)


def _one_pass(
    path: Path, settings: Settings, encoding: Encoding | None, reading: Reading,
    staging: Path | None, progress: bool, *, exact: bool,
) -> Collection:
    """Read every chunk of ``path``; with ``staging``, write every output file there.

    Chunks are cut from regions of the file that each worker finds on its own, or, ``exact``,
    by reading the file through in order."""
    chunks = (task_chunks(file_reads(path), origin=settings.origin, size=reading.chunk_bytes)
              if exact else regions(path, reading.chunk_bytes))
    collection = Collection()
    outputs = (Outputs(staging, encoding.raw_csv)
               if staging is not None and encoding is not None else None)
    status = path.stat()
    size = status.st_size if stat.S_ISREG(status.st_mode) else None
    try:
        with _bar(size, progress, "export, checking" if exact else "export") as bar:
            for part, encoded in read_parts(chunks, settings, encoding, reading.workers,
                                                 reading.chunk_bytes):
                if outputs is not None and encoded is not None:
                    outputs.add(encoded)
                collection.add(part)
                bar.update(part.size)
        collection.settle()
        if outputs is not None:
            outputs.finish(collection, collection.model_scores())
    finally:
        if outputs is not None:
            outputs.close()
    return collection


def _read(
    path: Path, settings: Settings, encoding: Encoding | None, reading: Reading,
    staging: Path | None, progress: bool,
) -> Collection:
    """One pass; a refused chunk is checked by reading the file again with exact cuts, which
    names the real fault (a region cut inside a task, which only text made to look like JSON
    can cause, is then read right). A pipe, which can be read only once and has no regions,
    is read with exact cuts at once."""
    if not stat.S_ISREG(path.stat().st_mode):
        return _one_pass(path, settings, encoding, reading, staging, progress, exact=True)
    try:
        return _one_pass(path, settings, encoding, reading, staging, progress, exact=False)
    except InvalidInput:
        return _one_pass(path, settings, encoding, reading, staging, progress, exact=True)


def _export(
    path: Path, settings: Settings, staging: Path | None, encoding: Encoding,
    reading: Reading, progress: bool, studies: Sequence[Mapping[str, Any]],
) -> ExportResult:
    encoding_used = encoding if staging is not None else None
    with _collector_paused():
        collection = _read(path, settings, encoding_used, reading, staging, progress)
    result = ExportResult(collection,
                          export_protocol(collection, settings.exclude_rejected, studies))
    if staging is not None:
        write_protocol(staging, result.protocol)
    return result


def _owned(name: str) -> bool:
    return name in OUTPUT_FILES or name in ADJUDICATION_FILES


@contextmanager
def _workspace(out_dir: Path | None) -> Iterator[tuple[Path | None, Path]]:
    """``(staging, scratch)``: the folder that becomes ``out_dir`` (None without one), and a
    scratch folder for a download, removed before the outputs take their place. Beside the
    output when there is one: the system's temporary folder may be small."""
    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="sotopia-ls-") as scratch:
            yield None, Path(scratch)
        return
    with replaced_folder(out_dir, _owned) as staging:
        scratch = staging / ".download"
        scratch.mkdir()
        yield staging, scratch
        shutil.rmtree(scratch)


def export_project(
    client: Client,
    project: str | int | Project,
    out_dir: Path | None = None,
    *,
    model_names: Mapping[str, str] | None = None,
    with_predictions: bool = False,
    keep_identities: bool = False,
    raw_csv: bool = False,
    exclude_rejected: bool = False,
    studies: Sequence[Mapping[str, Any]] = (),
    time_on_task: Mapping[int, Mapping[str, Any]] | None = None,
    adjudication: str | int | None = None,
    reading: Reading = DEFAULT_READING,
    progress: bool = False,
) -> ExportResult:
    """Validate and export every annotation of a live project (given by id or exact title,
    or as a ``Project`` the caller already looked up).

    The keywords match the ``sotopia-ls export`` options (README.md):
    ``keep_identities`` names annotators by email, ``with_predictions`` reads predictions as
    model scores, ``raw_csv`` leaves formula-like cells as they are, ``exclude_rejected``
    leaves out what the review rejected, ``studies`` and ``time_on_task`` merge a study's
    protocol and times (``sotopia_ls.study``), ``adjudication`` adds an adjudication project's
    ratings in their own files; ``reading`` sets workers and chunk size.
    """
    target = project if isinstance(project, Project) else find_project(client, project)
    adjudicated = (adjudicated_scores(client, adjudication, target.id)
                   if adjudication is not None else None)
    settings = Settings(
        f"project {target.id}", annotator_emails(client), keep_identities,
        overlap=target.maximum_annotations,
        predictions=project_predictions(client, target.id) if with_predictions else {},
        exclude_rejected=exclude_rejected, time_on_task=time_on_task or {},
    )
    with _workspace(out_dir) as (staging, scratch):
        path = scratch / f"project-{target.id}.json"
        with path.open("wb") as out, _bar(None, progress, "download") as bar:
            for read in project_reads(client, target.id):
                out.write(read)
                bar.update(len(read))
        result = _export(path, settings, staging, Encoding(dict(model_names or {}), raw_csv),
                         reading, progress, studies)
        if adjudicated is not None and staging is not None:
            write_adjudicated(adjudicated, staging, raw_csv)
        result.adjudicated = adjudicated
        return result


def export_file(
    path: Path,
    out_dir: Path | None = None,
    *,
    identities: Mapping[int, str] | None = None,
    model_names: Mapping[str, str] | None = None,
    keep_identities: bool = False,
    raw_csv: bool = False,
    overlap: int | None = None,
    exclude_rejected: bool = False,
    studies: Sequence[Mapping[str, Any]] = (),
    time_on_task: Mapping[int, Mapping[str, Any]] | None = None,
    reading: Reading = DEFAULT_READING,
    progress: bool = False,
) -> ExportResult:
    """Validate and export a Label Studio JSON export file, read as a stream.

    As ``export_project``; ``identities`` maps user ids to emails (e.g.
    ``annotator_emails(client)``) for the private map, and ``overlap`` is the project's
    annotations per task, for the audit.
    """
    settings = Settings(str(path), identities or {}, keep_identities, overlap=overlap,
                        exclude_rejected=exclude_rejected, time_on_task=time_on_task or {})
    with _workspace(out_dir) as (staging, _):
        return _export(Path(path), settings, staging,
                       Encoding(dict(model_names or {}), raw_csv), reading, progress, studies)

