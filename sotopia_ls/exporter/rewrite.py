"""Rewrite: the chunk files, once every chunk is in, as episodes found in several tasks want.

Writers append before anyone knows an episode turns up again, so the staged files are copied
once in the staging folder, not the export read again (docs/internals.md, "Reading an export").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import numpy as np
import orjson

from .collection import Repeats
from .encode import jsonl
from .shapes import episode_records
from .tables import LONG_ROWS_PER_ANNOTATION as _LONG_ROWS

if TYPE_CHECKING:
    import pyarrow as pa


class _Episode(msgspec.Struct):
    episode: str


class _Log(msgspec.Struct):
    pk: str


_EPISODE, _LOG = msgspec.json.Decoder(_Episode), msgspec.json.Decoder(_Log)


def rewrite(folder: Path, repeats: Repeats, schema: pa.Schema) -> None:
    """Rewrite the chunk files in ``folder`` for ``repeats``."""
    several = repeats.several_tasks
    records = _lines(folder / "annotations.jsonl", set(repeats.aggregated))
    if repeats.refused:
        _rows_without(folder, set(repeats.refused), schema)
    aggregated = [orjson.loads(line) for line in records]
    rows = [{"episode_id": record["episode"], "annotator_id": record["annotator_id"]}
            for record in aggregated]
    _rewritten(folder / "episodes.jsonl", lambda lines: _moved_to_end(
        lines, lambda line: _EPISODE.decode(line).episode in several,
        lambda moved: [jsonl(episode_records(rows, aggregated))]))
    _rewritten(folder / "episode_logs.jsonl", lambda lines: _moved_to_end(
        lines, lambda line: _LOG.decode(line).pk in several, _first_of_each))


def _rows_without(folder: Path, dropped: set[int], schema: pa.Schema) -> None:
    """The files with a row per annotation (``scores_long``: per score) without ``dropped``."""
    for name in ("annotations.jsonl", "evaluations.jsonl"):
        _rewritten(folder / name, lambda lines: _without(lines, dropped))
    _rewritten(folder / "scores_wide.csv",
               lambda lines: _without(_csv_rows(lines), dropped, header=1))
    long_dropped = {row * _LONG_ROWS + pair for row in dropped for pair in range(_LONG_ROWS)}
    _rewritten(folder / "scores_long.csv",
               lambda lines: _without(_csv_rows(lines), long_dropped, header=1))
    _parquet_without(folder / "scores_long.parquet", dropped, schema)


def _lines(path: Path, numbers: set[int]) -> list[bytes]:
    with path.open("rb") as file:
        return [line for number, line in enumerate(file) if number in numbers]


def _rewritten(path: Path, change: Callable[[Iterator[bytes]], Iterable[bytes]]) -> None:
    revised = path.with_name(f".{path.name}.rewritten")
    with path.open("rb") as source, revised.open("wb") as out:
        out.writelines(change(iter(source)))
    os.replace(revised, path)


def _csv_rows(lines: Iterator[bytes]) -> Iterator[bytes]:
    """Whole CSV rows: a quoted cell may hold line breaks, and a row ends where its quotes
    pair up (a quote inside a cell is doubled)."""
    held: list[bytes] = []
    quotes = 0
    for line in lines:
        held.append(line)
        quotes += line.count(b'"')
        if quotes % 2 == 0:
            yield b"".join(held)
            held, quotes = [], 0


def _without(rows: Iterator[bytes], dropped: set[int], header: int = 0) -> Iterator[bytes]:
    for number, row in enumerate(rows, start=-header):
        if number not in dropped:
            yield row


def _moved_to_end(lines: Iterator[bytes], moves: Callable[[bytes], bool],
                  ending: Callable[[list[bytes]], list[bytes]]) -> Iterator[bytes]:
    moved = []
    for line in lines:
        if moves(line):
            moved.append(line)
        else:
            yield line
    yield from ending(moved)


def _first_of_each(lines: list[bytes]) -> list[bytes]:
    """Each episode's first ``EpisodeLog`` line."""
    first: dict[str, bytes] = {}
    for line in lines:
        first.setdefault(_LOG.decode(line).pk, line)
    return list(first.values())


def _parquet_without(path: Path, dropped: set[int], schema: pa.Schema) -> None:
    """The Parquet file without the long rows of ``dropped`` annotations, row group by row
    group (one per chunk, as written)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    revised = path.with_name(f".{path.name}.rewritten")
    source = pq.ParquetFile(path)
    refused = np.array(sorted(dropped), dtype=np.int64)
    with pq.ParquetWriter(revised, schema) as writer:
        start = 0
        for group in range(source.num_row_groups):
            table = source.read_row_group(group)
            rows = start // _LONG_ROWS + np.arange(table.num_rows) // _LONG_ROWS
            kept = pa.array(~np.isin(rows, refused))
            writer.write_table(table.filter(kept).replace_schema_metadata(schema.metadata))
            start += table.num_rows
    os.replace(revised, path)
