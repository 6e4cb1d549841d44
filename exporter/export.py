"""Annotations → every output file, as one public call per input kind.

``export_project`` and ``export_file`` validate all annotations once (``collect``), build the
tables, and, given ``out_dir``, write:

    annotations.jsonl     Sotopia AnnotationForEpisode, one per annotation
    evaluations.jsonl     per annotation, both agents' (reasoning, score) pairs
    episodes.jsonl        per episode, annotators aggregated as Sotopia does
    scores_long.csv/.parquet
    scores_wide.csv       the oTree *_final.csv layout
    model_scores.csv      the episodes' stored model evaluation, for the report
    errors.jsonl          every refused annotation: task, annotation, annotator, field, reason
    summary.json          the counts that account for every annotation

Files are written to a temporary folder inside ``out_dir`` and moved into place only when all
of them are complete, so a failed run leaves no partial output.
"""

from __future__ import annotations

import csv
import gc
import io
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pandas as pd
from label_studio_sdk import LabelStudio
from tqdm.auto import tqdm

from ..client import find_project
from ..errors import InvalidInput
from .chunks import CHUNK_BYTES, Region, regions, task_chunks
from .collect import Collection, Settings, Tally
from .parallel import default_workers, read_parts
from .shapes import annotation_records, episode_records, evaluation_records
from .source import annotator_emails, file_pieces, project_pieces, project_predictions
from .tables import (
    LONG_COLUMNS,
    WIDE_COLUMNS,
    annotation_table,
    frame,
    long_table,
    otree_data,
    scores_long,
    wide_table,
    with_pandas_types,
)
from .wire import Data

if TYPE_CHECKING:
    import pyarrow as pa

OUTPUT_FILES: tuple[str, ...] = (
    "annotations.jsonl",
    "evaluations.jsonl",
    "episodes.jsonl",
    "scores_long.csv",
    "scores_long.parquet",
    "scores_wide.csv",
    "model_scores.csv",
    "errors.jsonl",
    "summary.json",
)
# Written a chunk at a time, from what the worker that read the chunk made of it, in order.
CHUNK_FILES: tuple[str, ...] = (
    "annotations.jsonl", "evaluations.jsonl", "episodes.jsonl", "scores_long.csv",
    "scores_wide.csv",
)


@dataclass
class ExportResult:
    """The validated annotations as DataFrames, with the counts that account for all of them."""

    collection: Collection

    @property
    def tally(self) -> Tally:
        return self.collection.tally

    @cached_property
    def table(self) -> pa.Table:
        """The annotations as Arrow (what ``annotations`` converts)."""
        return self.collection.table()

    @cached_property
    def annotations(self) -> pd.DataFrame:
        """One row per exported annotation (identifiers, timing, the 28 oTree fields)."""
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

    def write_rest(self, staging: Path) -> None:
        """The files made from all annotations at once (the others are written per chunk)."""
        if self.collection.episodes_split:
            crowd = [row for row in self.table.to_pylist() if not row["ground_truth"]]
            write_jsonl(episode_records(crowd), staging / "episodes.jsonl")
        write_csv(self.model_scores, staging / "model_scores.csv")
        write_jsonl((e.to_dict() for e in self.collection.errors), staging / "errors.jsonl")
        summary = asdict(self.tally) | {"balanced": self.tally.balanced}
        (staging / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def jsonl(records: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
                    for record in records)


def write_jsonl(records: Iterable[dict[str, Any]], path: Path) -> None:
    with path.open("wb") as out:
        for record in records:
            out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """``df`` as CSV (quoted only where needed), through Arrow: ~10x faster than pandas."""
    import pyarrow as pa

    with path.open("wb") as out:
        out.write(csv_header(df.columns))
        out.write(csv_rows(pa.Table.from_pandas(df, preserve_index=False)))


def csv_header(columns: Iterable[str]) -> bytes:
    header = io.StringIO()
    csv.writer(header, lineterminator="\n").writerow(columns)
    return header.getvalue().encode("utf-8")


def csv_rows(table: pa.Table) -> bytes:
    import pyarrow.csv as pa_csv

    out = io.BytesIO()
    pa_csv.write_csv(table, out, pa_csv.WriteOptions(include_header=False,
                                                     quoting_style="needed"))
    return out.getvalue()


def chunk_pieces(
    rows: list[dict[str, Any]], table: pa.Table,
    data: Mapping[str, Data],  # type: ignore[valid-type]
    model_names: Mapping[str, str] | None = None,
) -> dict[str, bytes]:
    """One chunk's share of ``CHUNK_FILES``. Its ``episodes.jsonl`` lines hold the whole
    episode unless the episode has crowd annotations in another chunk too
    (``Collection.episodes_split``)."""
    otree = {episode: otree_data(task_data) for episode, task_data in data.items()}
    long = long_table(table)
    records = list(annotation_records(rows))
    # Ground-truth annotations are references for qualification, not a crowd vote.
    crowd = [index for index, row in enumerate(rows) if not row["ground_truth"]]
    return {
        "annotations.jsonl": jsonl(records),
        "evaluations.jsonl": jsonl(evaluation_records(rows)),
        "episodes.jsonl": jsonl(episode_records([rows[i] for i in crowd],
                                                [records[i] for i in crowd])),
        "scores_long.csv": csv_rows(long),
        "scores_wide.csv": csv_rows(wide_table(table, otree, model_names)),
    }


@dataclass(frozen=True)
class Reading:
    """How an export is read: ``workers`` processes (default one per CPU, at most 8), each
    given chunks of about ``chunk_bytes`` of whole tasks."""

    workers: int = field(default_factory=default_workers)
    chunk_bytes: int = CHUNK_BYTES


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The export builds millions of objects that all live to the end; the cyclic garbage
    collector would rescan them again and again (a sixth of the export's time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_all(
    chunks: Iterable[bytes | Region], settings: Settings, reading: Reading,
    staging: Path | None, bar: tqdm,
) -> Collection:
    """Every chunk's part joined; with ``staging``, the output files written there."""
    import pyarrow.parquet as pq

    collection = Collection()
    outputs = {}
    with ExitStack() as stack:
        if staging is not None:
            outputs = {name: staging / name for name in CHUNK_FILES}
            headers = {"scores_long.csv": csv_header(LONG_COLUMNS),
                       "scores_wide.csv": csv_header(WIDE_COLUMNS)}
            for name, path in outputs.items():
                path.write_bytes(headers.get(name, b""))
            schema = with_pandas_types(long_table(annotation_table([]))).schema
            parquet = stack.enter_context(pq.ParquetWriter(staging / "scores_long.parquet",
                                                           schema))
        for part in read_parts(chunks, settings, reading.workers, outputs):
            # Its rows made again here from the part's table: cheaper than a worker pickling
            # them over.
            if staging is not None:
                parquet.write_table(long_table(part.table).replace_schema_metadata(
                    schema.metadata))
            collection.add(part)
            bar.update(part.size)
    return collection


def _export(
    chunks: Iterable[bytes | Region],
    settings: Settings,
    out_dir: Path | None,
    model_names: Mapping[str, str] | None,
    reading: Reading,
    bar: tqdm,
) -> ExportResult:
    """Read every chunk; with ``out_dir``, write every file to a staging folder inside it and
    move them into place only when all are complete, so a failed run leaves no partial output."""
    with _collector_paused():
        if out_dir is None:
            return ExportResult(_read_all(chunks, settings, reading, None, bar))
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".export-") as tmp:
            staging = Path(tmp)
            settings = Settings(settings.origin, settings.emails, settings.predictions,
                                partial(chunk_pieces, model_names=model_names))
            result = ExportResult(_read_all(chunks, settings, reading, staging, bar))
            result.write_rest(staging)
            for name in OUTPUT_FILES:
                shutil.move(staging / name, out_dir / name)
        return result


def _export_path(
    path: Path, settings: Settings, out_dir: Path | None,
    model_names: Mapping[str, str] | None, reading: Reading, progress: bool,
) -> ExportResult:
    """Each worker reads its own regions of the file. Any refusal is checked by reading the
    file again with exact cuts, which names the real fault (a region that was cut inside a
    task, which only text made to look like JSON can cause, is then read right)."""
    size = path.stat().st_size
    try:
        with _bar(size, progress, "export") as bar:
            return _export(regions(path, reading.chunk_bytes), settings, out_dir, model_names,
                           reading, bar)
    except InvalidInput:
        chunks = task_chunks(file_pieces(path), origin=settings.origin, size=reading.chunk_bytes)
        with _bar(size, progress, "export, checking") as bar:
            return _export(chunks, settings, out_dir, model_names, reading, bar)


def _bar(total: int | None, shown: bool, what: str) -> tqdm:
    return tqdm(total=total, unit="B", unit_scale=True, desc=what, disable=not shown)


def export_project(
    client: LabelStudio,
    project: str | int,
    out_dir: Path | None = None,
    *,
    model_names: Mapping[str, str] | None = None,
    with_predictions: bool = False,
    reading: Reading = Reading(),
    progress: bool = False,
) -> ExportResult:
    """Validate and export every annotation of a live project (given by id or exact title).

    ``with_predictions`` also fetches the project's predictions, the model scores of tasks
    that carry no stored evaluation (e.g. judgements of a pre-annotation backend).
    ``reading`` sets the worker processes and chunk size; ``progress`` shows a bar.
    """
    project_id = find_project(client, project).id
    settings = Settings(
        f"project {project_id}", annotator_emails(client),
        project_predictions(client, project_id) if with_predictions else {},
    )
    # Saved to a file first, so that the workers can read it in parallel; beside the output
    # when there is one (the system's temporary folder may be small).
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".download-") as tmp:
        path = Path(tmp) / f"project-{project_id}.json"
        with path.open("wb") as out, _bar(None, progress, "download") as bar:
            for piece in project_pieces(client, project_id):
                out.write(piece)
                bar.update(len(piece))
        return _export_path(path, settings, out_dir, model_names, reading, progress)


def export_file(
    path: Path,
    out_dir: Path | None = None,
    *,
    emails: Mapping[int, str] | None = None,
    model_names: Mapping[str, str] | None = None,
    reading: Reading = Reading(),
    progress: bool = False,
) -> ExportResult:
    """Validate and export a Label Studio JSON export file, read as a stream.

    Exports name annotators by user id; pass ``emails`` (e.g. ``annotator_emails(client)``) to
    record emails instead of ``user-<id>``. ``reading`` sets the worker processes and chunk
    size; ``progress`` shows a bar.
    """
    return _export_path(path, Settings(str(path), emails or {}), out_dir, model_names, reading,
                        progress)
