"""Files and folders → raw records, one at a time, each with a label saying where it is.

Labels: ``line N`` (JSON lines, counted from 1 like an editor), ``item N`` (a JSON list,
counted from 0 like Python), ``row N`` (CSV, counted like a spreadsheet: the header is row 1),
``""`` for a file holding a single JSON object. A record that cannot be read comes as a
``RecordError`` in place of the record, so reading never stops at the first bad line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .records import RecordError, unreadable_json

Raw = tuple[str, Mapping[str, Any] | RecordError]
Reader = Callable[[Path], Iterator[Raw]]

CSV_CHUNK_ROWS = 200


def files_in(path: Path, readers: Mapping[str, Reader]) -> tuple[list[Path], list[Path]]:
    """``path`` itself, or every file under a folder that one of ``readers`` reads (hidden ones
    skipped), sorted; and the symbolic links met on the way that lead nowhere or in a loop."""
    if path.is_file():
        return [path], []
    found, dead = [], []
    for entry in path.rglob("*"):
        if any(part.startswith(".") for part in entry.relative_to(path).parts):
            continue
        if entry.is_symlink() and not entry.exists():
            dead.append(entry)
        elif entry.is_file() and entry.suffix.lower() in readers:
            found.append(entry)
    return sorted(found), sorted(dead)


def read_json(path: Path) -> Iterator[Raw]:
    """One object, a list of objects, or — despite the name — JSON lines."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        yield "", RecordError(f"cannot read the file: {error}")
        return
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":
            yield from read_jsonl(path)
        else:
            yield "", _invalid_json(error)
        return
    except (RecursionError, ValueError) as error:
        yield "", _unreadable_json(error)
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield f"item {index}", _as_record(item)
    else:
        yield "", _as_record(value)


def read_jsonl(path: Path) -> Iterator[Raw]:
    """Streamed line by line; blank lines are skipped."""
    number = 0
    try:
        with path.open(encoding="utf-8-sig") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    yield f"line {number}", _as_record(json.loads(line))
                except json.JSONDecodeError as error:
                    yield f"line {number}", _invalid_json(error, line=number)
                except (RecursionError, ValueError) as error:
                    yield f"line {number}", _unreadable_json(error)
    except (OSError, UnicodeDecodeError) as error:
        yield f"line {number + 1}", RecordError(f"cannot read the file from here on: {error}")


def read_csv(path: Path) -> Iterator[Raw]:
    """Streamed in chunks of ``CSV_CHUNK_ROWS`` rows; every cell is read as text."""
    import pandas as pd  # only CSVs need it: the command line starts without it

    row = 1
    try:
        chunks = pd.read_csv(
            path, dtype=str, keep_default_na=False, encoding="utf-8-sig", chunksize=CSV_CHUNK_ROWS
        )
        for chunk in chunks:
            for record in chunk.to_dict("records"):
                row += 1
                yield f"row {row}", record
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError) as error:
        yield f"row {row + 1}", RecordError(f"cannot read the CSV from here on: {error}")


# What every format may come in; a format adds its own file types (``Format.readers``).
READERS: dict[str, Reader] = {
    ".json": read_json,
    ".jsonl": read_jsonl,
    ".ndjson": read_jsonl,
    ".csv": read_csv,
}


def read_file(path: Path, readers: Mapping[str, Reader]) -> Iterator[Raw]:
    reader = readers.get(path.suffix.lower())
    if reader is None:
        accepted = ", ".join(readers)
        yield (
            "",
            RecordError(f"unsupported file type {path.suffix or '(none)'!r}; readable: {accepted}"),
        )
        return
    yield from reader(path)


def label_records(records: Iterable[Mapping[str, Any]]) -> Iterator[Raw]:
    """Records handed over in Python, labelled by position like a JSON list."""
    for index, record in enumerate(records):
        yield f"item {index}", _as_record(record)


def _as_record(value: Any) -> Mapping[str, Any] | RecordError:
    if isinstance(value, Mapping):
        return value
    return RecordError(f"expected a JSON object, got {_json_type(value)}")


def _json_type(value: Any) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _unreadable_json(error: RecursionError | ValueError) -> RecordError:
    return RecordError(f"invalid JSON: {unreadable_json(error)}")


def _invalid_json(error: json.JSONDecodeError, line: int | None = None) -> RecordError:
    where = f"line {line if line is not None else error.lineno}, column {error.colno}"
    ended = error.pos >= len(error.doc.rstrip()) or error.msg.startswith("Unterminated string")
    hint = " (the text ends too early: truncated?)" if ended else ""
    return RecordError(f"invalid JSON at {where}: {error.msg}{hint}")
