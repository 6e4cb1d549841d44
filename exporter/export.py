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
import io
import itertools
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from label_studio_sdk import LabelStudio

from ..client import find_project
from .collect import Collection, Tally, collect
from .shapes import annotation_records, episode_records, evaluation_records
from .source import annotator_emails, file_tasks, project_predictions, project_tasks
from .tables import scores_long, scores_long_parts, scores_wide

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
# scores_long is written in parts of this many rows (10,000 annotations), so the table's
# 14 rows per annotation are never all held at once.
_LONG_PART_ROWS = 140_000


@dataclass
class ExportResult:
    """The validated annotations as DataFrames, with the counts that account for all of them."""

    collection: Collection
    model_names: Mapping[str, str] | None = None

    @property
    def tally(self) -> Tally:
        return self.collection.tally

    @cached_property
    def annotations(self) -> pd.DataFrame:
        """One row per exported annotation (identifiers, timing, the 28 oTree fields)."""
        return self.collection.annotations()

    @cached_property
    def scores_long(self) -> pd.DataFrame:
        return scores_long(self.annotations)

    @cached_property
    def scores_wide(self) -> pd.DataFrame:
        otree = {key: info.otree_data for key, info in self.collection.episodes.items()}
        return scores_wide(self.annotations, otree, self.model_names)

    @cached_property
    def errors(self) -> pd.DataFrame:
        return self.collection.error_table()

    @cached_property
    def model_scores(self) -> pd.DataFrame:
        return self.collection.model_scores()

    def _write_scores_long(self, staging: Path) -> None:
        """``scores_long.csv`` and ``.parquet``, built and written a part at a time."""
        import pyarrow.parquet as pq

        parts = (_arrow(part) for part in scores_long_parts(self.annotations, _LONG_PART_ROWS))
        first = next(parts)
        with pq.ParquetWriter(staging / "scores_long.parquet", first.schema) as parquet:

            def written(table: pa.Table) -> pa.Table:
                parquet.write_table(table)
                return table

            _write_csv_tables((written(t) for t in itertools.chain([first], parts)),
                              staging / "scores_long.csv")

    def _scores_wide_table(self) -> pa.Table:
        """``scores_wide`` as Arrow, each episode's oTree ``data`` held once, not per row."""
        import pyarrow as pa

        episodes = self.collection.episodes
        # The oTree files' first column is the unnamed row id. The data column is left empty
        # here and replaced: a copy per annotation would be the largest column of the export.
        table = _arrow(scores_wide(self.annotations, {}, self.model_names).reset_index(names=""))
        codes = pd.Index(list(episodes)).get_indexer(self.annotations["episode_id"])
        data = pa.DictionaryArray.from_arrays(
            pa.array(codes, type=pa.int32(), mask=codes < 0),
            pa.array([info.otree_data for info in episodes.values()], type=pa.large_string()),
        )
        return table.set_column(table.column_names.index("data"), "data", data)

    def write(self, out_dir: Path) -> list[Path]:
        """Write every output file into ``out_dir`` (created if needed); returns their paths."""
        out_dir.mkdir(parents=True, exist_ok=True)
        annotations = self.annotations
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".export-") as tmp:
            staging = Path(tmp)
            _write_jsonl(staging / "annotations.jsonl", annotation_records(annotations))
            _write_jsonl(staging / "evaluations.jsonl", evaluation_records(annotations))
            # Ground-truth annotations are references for qualification, not a crowd vote.
            crowd = annotations[~annotations["ground_truth"].astype(bool)]
            _write_jsonl(staging / "episodes.jsonl", episode_records(crowd))
            self._write_scores_long(staging)
            _write_csv_tables([self._scores_wide_table()], staging / "scores_wide.csv")
            write_csv(self.model_scores, staging / "model_scores.csv")
            _write_jsonl(staging / "errors.jsonl", (e.to_dict() for e in self.collection.errors))
            summary = asdict(self.tally) | {"balanced": self.tally.balanced}
            (staging / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            written = []
            for name in OUTPUT_FILES:
                target = out_dir / name
                shutil.move(staging / name, target)
                written.append(target)
        return written


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """``frame`` as CSV (quoted only where needed), through Arrow: ~10x faster than pandas."""
    _write_csv_tables([_arrow(frame)], path)


def _arrow(frame: pd.DataFrame) -> pa.Table:
    # pyarrow is the ``export`` extra: imported here so the package imports without it.
    import pyarrow as pa

    return pa.Table.from_pandas(frame, preserve_index=False)


def _write_csv_tables(tables: Iterable[pa.Table], path: Path) -> None:
    """Consecutive Arrow tables with the same columns as one CSV file."""
    import pyarrow.csv as pa_csv

    options = pa_csv.WriteOptions(include_header=False, quoting_style="needed")
    with path.open("wb") as out:
        for number, table in enumerate(tables):
            if number == 0:
                header = io.StringIO()
                csv.writer(header, lineterminator="\n").writerow(table.column_names)
                out.write(header.getvalue().encode("utf-8"))
            pa_csv.write_csv(table, out, options)


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")


def _finish(
    tasks: Iterator[dict[str, Any]],
    emails: Mapping[int, str],
    out_dir: Path | None,
    model_names: Mapping[str, str] | None,
    predictions: Mapping[int, dict[str, Any]] | None = None,
) -> ExportResult:
    result = ExportResult(collect(tasks, emails, predictions), model_names)
    if out_dir is not None:
        result.write(out_dir)
    return result


def export_project(
    client: LabelStudio,
    project: str | int,
    out_dir: Path | None = None,
    *,
    model_names: Mapping[str, str] | None = None,
    with_predictions: bool = False,
) -> ExportResult:
    """Validate and export every annotation of a live project (given by id or exact title).

    ``with_predictions`` also fetches the project's predictions, the model scores of tasks
    that carry no stored evaluation (e.g. judgements of a pre-annotation backend).
    """
    project_id = find_project(client, project).id
    predictions = project_predictions(client, project_id) if with_predictions else None
    return _finish(project_tasks(client, project_id), annotator_emails(client), out_dir,
                   model_names, predictions)


def export_file(
    path: Path,
    out_dir: Path | None = None,
    *,
    emails: Mapping[int, str] | None = None,
    model_names: Mapping[str, str] | None = None,
) -> ExportResult:
    """Validate and export a Label Studio JSON export file, read as a stream.

    Exports name annotators by user id; pass ``emails`` (e.g. ``annotator_emails(client)``) to
    record emails instead of ``user-<id>``.
    """
    return _finish(file_tasks(path), emails or {}, out_dir, model_names)
