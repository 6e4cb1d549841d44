"""Encode: a validated chunk → its share of each output file, as bytes, in the worker that
validated it. The records' shapes live in ``shapes``, ``episode_logs`` and ``tables``.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from .cells import FORMULA_START, has_formula_cells, neutralized_table
from .episode_logs import episode_log
from .shapes import annotation_records, episode_records, evaluation_records
from .tables import long_table, otree_data, wide_table
from .validate import Part

if TYPE_CHECKING:
    import pyarrow as pa

# Written a chunk at a time, in input order.
CHUNK_FILES: tuple[str, ...] = (
    "annotations.jsonl", "evaluations.jsonl", "episodes.jsonl", "episode_logs.jsonl",
    "scores_long.csv", "scores_wide.csv",
)


@dataclass(frozen=True)
class Encoding:
    """How outputs are written: ``model_names`` labels ``scores_wide.csv``'s model column;
    ``raw_csv`` writes CSV cells a spreadsheet would evaluate as they are (``cells``)."""

    model_names: Mapping[str, str] = field(default_factory=dict)
    raw_csv: bool = False


@dataclass
class Encoded:
    """A chunk's share of the output files: bytes per ``CHUNK_FILES`` name, and its
    ``scores_long`` rows for the Parquet file. ``unlogged`` says why an episode has no
    ``EpisodeLog``."""

    pieces: dict[str, bytes]
    long: pa.Table
    unlogged: dict[str, str] = field(default_factory=dict)


def jsonl(records: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
                    for record in records)


def csv_header(columns: Iterable[str]) -> bytes:
    header = io.StringIO()
    csv.writer(header, lineterminator="\n").writerow(columns)
    return header.getvalue().encode("utf-8")


def csv_rows(table: pa.Table, raw: bool = False) -> bytes:
    """``table``'s rows as CSV (quoted only where needed), through Arrow: far faster than pandas;
    cells a spreadsheet would evaluate are neutralized unless ``raw``."""
    import pyarrow.csv as pa_csv

    out = io.BytesIO()
    pa_csv.write_csv(table if raw else neutralized_table(table), out,
                     pa_csv.WriteOptions(include_header=False, quoting_style="needed"))
    return out.getvalue()


def encode_part(part: Part, encoding: Encoding) -> Encoded:
    """The chunk's pieces. All annotations of a task are in one chunk, so its
    ``episodes.jsonl`` lines are whole unless the episode is in several tasks, which only
    every chunk together shows (``collection``, ``rewrite``)."""
    rows, table = part.rows, part.table
    # Every text cell of the CSV tables comes from the annotation table, a model label, a
    # dimension's key or JSON: when none of the first two looks like a formula, none does.
    raw = encoding.raw_csv or not (has_formula_cells(table) or any(
        re.match(FORMULA_START, label) for label in encoding.model_names.values()))
    otree = {episode: otree_data(task_data) for episode, task_data in part.data.items()}
    logs, unlogged = _episode_logs(part)
    long = long_table(table)
    records = list(annotation_records(rows))
    # Ground-truth annotations are references for qualification, not a crowd vote.
    crowd = [index for index, row in enumerate(rows) if not row["ground_truth"]]
    pieces = {
        "annotations.jsonl": jsonl(records),
        "evaluations.jsonl": jsonl(evaluation_records(rows)),
        "episodes.jsonl": jsonl(episode_records([rows[i] for i in crowd],
                                                [records[i] for i in crowd])),
        "episode_logs.jsonl": jsonl(logs.values()),
        "scores_long.csv": csv_rows(long, raw),
        "scores_wide.csv": csv_rows(wide_table(table, otree, encoding.model_names), raw),
    }
    return Encoded(pieces, long, unlogged)


def _episode_logs(part: Part) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each episode's ``EpisodeLog``, and why an episode whose task data is not a whole
    episode has none."""
    logs, unlogged = {}, {}
    for episode, task_data in part.data.items():
        try:
            logs[episode] = episode_log(episode, task_data)
        except ValueError as error:
            unlogged[episode] = str(error)
    return logs, unlogged
