"""Write: one writer per output file, in a staging folder, fed the encoded parts in order.

The per-annotation files grow a chunk at a time (``Outputs.add``); the rest are written once
every chunk is in (``Outputs.finish``). The files are listed in README.md's export table.
"""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path
from typing import IO

import pandas as pd

from ..adjudication.reading import ADJUDICATED_FILE, ADJUDICATION_ERRORS_FILE, Adjudicated
from .collection import Collection
from .encode import CHUNK_FILES, Encoded, csv_header, csv_rows, jsonl
from .protocol import PROTOCOL_FILES
from .rewrite import rewrite
from .tables import LONG_COLUMNS, WIDE_COLUMNS, annotation_table, long_table, with_pandas_types

OUTPUT_FILES: tuple[str, ...] = (
    "annotations.jsonl",
    "evaluations.jsonl",
    "episodes.jsonl",
    "episode_logs.jsonl",
    "scores_long.csv",
    "scores_long.parquet",
    "scores_wide.csv",
    "model_scores.csv",
    "errors.jsonl",
    "audit.jsonl",
    "summary.json",
    *PROTOCOL_FILES,
    "annotator_identities.csv",
)
_HEADERS = {"scores_long.csv": csv_header(LONG_COLUMNS),
            "scores_wide.csv": csv_header(WIDE_COLUMNS)}


def write_csv(df: pd.DataFrame, path: Path, raw: bool = False) -> None:
    """``df`` as CSV (quoted only where needed), through Arrow."""
    import pyarrow as pa

    path.write_bytes(csv_header(df.columns)
                     + csv_rows(pa.Table.from_pandas(df, preserve_index=False), raw))


class Outputs:
    """The output files of one export, open in ``folder`` until ``close``."""

    def __init__(self, folder: Path, raw_csv: bool = False) -> None:
        import pyarrow.parquet as pq

        self.folder = folder
        self.raw_csv = raw_csv
        self._unlogged: dict[str, str] = {}
        self._stack = ExitStack()
        self._files: dict[str, IO[bytes]] = {}
        for name in CHUNK_FILES:
            self._files[name] = self._stack.enter_context((folder / name).open("wb"))
            self._files[name].write(_HEADERS.get(name, b""))
        self._schema = with_pandas_types(long_table(annotation_table([]))).schema
        self._parquet = self._stack.enter_context(
            pq.ParquetWriter(folder / "scores_long.parquet", self._schema)
        )

    def add(self, encoded: Encoded) -> None:
        """Append one chunk's pieces, in input order."""
        for name, piece in encoded.pieces.items():
            self._files[name].write(piece)
        self._parquet.write_table(encoded.long.replace_schema_metadata(self._schema.metadata))
        self._unlogged.update(encoded.unlogged)

    def finish(self, collection: Collection, model_scores: pd.DataFrame) -> None:
        """The files made from all annotations at once; every file is closed."""
        self._stack.close()
        if collection.repeats.several_tasks:
            rewrite(self.folder, collection.repeats, self._schema)
        write_csv(model_scores, self.folder / "model_scores.csv", self.raw_csv)
        (self.folder / "errors.jsonl").write_bytes(jsonl(e.to_dict() for e in collection.errors))
        (self.folder / "audit.jsonl").write_bytes(
            jsonl(finding.to_dict() for finding in collection.audit_findings()))
        (self.folder / "summary.json").write_text(
            json.dumps(collection.summary(self._unlogged), indent=2) + "\n")
        write_identities(collection.identities, self.folder / "annotator_identities.csv",
                         self.raw_csv)

    def close(self) -> None:
        self._stack.close()


def write_identities(identities: dict[str, str], path: Path, raw: bool = False) -> None:
    """The pseudonym → identity map, readable by its owner only: it undoes the pseudonyms."""
    frame = pd.DataFrame(sorted(identities.items()), columns=["annotator_id", "identity"])
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(descriptor)
    write_csv(frame, path, raw)


def write_adjudicated(adjudicated: Adjudicated, folder: Path, raw: bool = False) -> None:
    """The adjudicated ratings and the refused adjudications, beside the raw scores."""
    write_csv(adjudicated.scores, folder / ADJUDICATED_FILE, raw)
    (folder / ADJUDICATION_ERRORS_FILE).write_bytes(
        jsonl(problem.__dict__ for problem in adjudicated.problems))
