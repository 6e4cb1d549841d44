"""A Label Studio JSON export (one top-level list of tasks) → chunks of whole tasks, each a
complete JSON array that decodes on its own in another process while the next is read.

How task ends are found cheaply is in docs/internals.md, "Reading an export".
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np

from ..errors import InvalidInput, Problem

CHUNK_BYTES = 16 << 20
_QUOTE, _BACKSLASH, _OPEN, _CLOSE = b'"'[0], b"\\"[0], b"{"[0], b"}"[0]
_BLANK = b" \t\r\n"
# Some editors start a UTF-8 file with one; JSON says nothing of it, Label Studio never writes it.
_BYTE_ORDER_MARK = b"\xef\xbb\xbf"
# How much of a block's end is searched for its last task end (at least one task, usually).
_TAIL = 1 << 18
_RAW_TASKS = msgspec.json.Decoder(list[msgspec.Raw])
_BLANKS = re.compile(rb"[ \t\r\n]*")
_ARRAY_END = re.compile(rb"[ \t\r\n]*\]")


def _blocks_of(reads: Iterable[bytes], size: int) -> Iterator[bytes]:
    """``reads`` (a download's or a file's) joined into blocks of at least ``size``."""
    held: list[bytes] = []
    length = 0
    for read in reads:
        held.append(read)
        length += len(read)
        if length >= size:
            yield b"".join(held)
            held, length = [], 0
    if held:
        yield b"".join(held)


def _escaped(buffer: bytes, quote: int) -> bool:
    start = quote
    while start > 0 and buffer[start - 1] == _BACKSLASH:
        start -= 1
    return (quote - start) % 2 == 1


def _closing_depths(text: bytes, inside_string: bool) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the closing braces outside strings in ``text`` and the brace depth after
    each, relative to the start of ``text`` (which is inside a string if ``inside_string``)."""
    a = np.frombuffer(text, dtype=np.uint8)
    quotes = np.flatnonzero(a == _QUOTE)
    after_backslash = quotes[(quotes > 0) & (a[np.maximum(quotes - 1, 0)] == _BACKSLASH)]
    escaped = [q for q in after_backslash.tolist() if _escaped(text, q)]
    if escaped:
        quotes = np.setdiff1d(quotes, escaped, assume_unique=True)
    braces = np.flatnonzero((a == _OPEN) | (a == _CLOSE))
    braces = braces[np.searchsorted(quotes, braces) % 2 == int(inside_string)]
    depth = np.cumsum(np.where(a[braces] == _OPEN, 1, -1))
    closing = a[braces] == _CLOSE
    return braces[closing], depth[closing]


def _shallowest_ends(text: bytes) -> Iterator[np.ndarray]:
    """For each guess of whether ``text`` starts inside a string, the offsets just past its
    closing braces at the shallowest depth it reaches: where tasks end, if one ends in it."""
    for inside_string in (False, True):
        closes, depth = _closing_depths(text, inside_string)
        if len(closes):
            yield closes[depth == depth.min()] + 1


def _candidates(body: bytes) -> Iterator[int]:
    """Where the last task of ``body`` probably ends, judged from its tail alone (which starts
    at an unknown depth); ``_is_complete`` decides."""
    start = max(0, len(body) - _TAIL)
    for ends in _shallowest_ends(body[start:]):
        yield start + int(ends[-1])


def _is_complete(chunk: bytes) -> bool:
    try:
        _RAW_TASKS.decode(chunk)
    except msgspec.DecodeError:
        return False
    except RecursionError:
        return True  # well cut, but nested too deeply: decoding the chunk says so
    return True


def _cut(body: bytes) -> tuple[bytes, int]:
    """A JSON array of the tasks that end in ``body`` (which starts at a task), and the length
    of ``body`` they take; ``(b"", 0)`` when no task ends in it."""
    for end in _candidates(body):
        chunk = _array(body, end)
        if _is_complete(chunk):
            return chunk, end
    # Rare: a task longer than the tail. Count depth from the start, where it is known.
    closes, depth = _closing_depths(body, False)
    ends = closes[depth == 0]
    if not len(ends):
        return b"", 0
    end = int(ends[-1]) + 1
    return _array(body, end), end


def _array(body: bytes, end: int) -> bytes:
    return b"".join((b"[", memoryview(body)[:end], b"]"))


def _invalid(origin: str, reason: str) -> InvalidInput:
    return InvalidInput([Problem(origin, "", f"not a Label Studio JSON export: {reason}")])


def task_chunks(
    reads: Iterable[bytes], *, origin: str, size: int = CHUNK_BYTES
) -> Iterator[bytes]:
    """JSON arrays of whole tasks, about ``size`` bytes each, from ``reads`` in order.

    The last chunk carries whatever follows the last task (normally only ``]``), so a
    malformed ending fails when that chunk is decoded.
    """
    body = b""  # from the next task on: the rest of the last block, then the new block
    opened = comma_due = comma_taken = False

    def take_comma() -> None:
        # Done on the short rest of a block where possible: slicing a block copies it.
        nonlocal body, comma_due, comma_taken
        if body[:1] == b",":
            body, comma_due, comma_taken = body[1:].lstrip(_BLANK), False, True
        elif body and body[:1] != b"]":
            raise _invalid(origin, "tasks must be separated by commas")

    for block in _blocks_of(reads, size):
        body = (body + block).lstrip(_BLANK)
        if not opened:
            body = body.removeprefix(_BYTE_ORDER_MARK).lstrip(_BLANK)
            if not body:
                continue
            if body[:1] != b"[":
                raise _invalid(origin, "expected a list of tasks")
            body, opened = body[1:].lstrip(_BLANK), True
        if comma_due:
            take_comma()
        if comma_due or not body:
            continue
        chunk, end = _cut(body)
        if end:
            yield chunk
            body, comma_due, comma_taken = body[end:].lstrip(_BLANK), True, False
            take_comma()
    if not opened:
        raise _invalid(origin, "the input is empty")
    if comma_taken and body[:1] == b"]":
        raise _invalid(origin, "a comma after the last task")
    yield b"[" + body


@dataclass(frozen=True)
class Region:
    """Part ``number`` of an export file cut into ``size``-byte regions, widened to whole tasks.

    It runs from the end of the first task that ends after ``number * size`` (the file's
    opening ``[`` for region 0) to the same point of the next region, so each worker finds its
    own cuts in the file and the parent reads nothing. Those cuts are found from a window of
    the file alone, a guess that decoding proves: a region that decodes as a complete JSON
    array, after a region that did, ends where a task ends. When one does not decode, the
    export is read again with ``task_chunks``, which cuts exactly and names real errors.
    """

    path: Path
    number: int
    size: int

    def read(self) -> bytes | bytearray:
        """The region's tasks as a JSON array."""
        with self.path.open("rb") as file:
            file_size = os.fstat(file.fileno()).st_size
            start = _task_end_after(file, self.number * self.size, file_size)
            end = _task_end_after(file, (self.number + 1) * self.size, file_size)
            if start >= end:
                if not file_size:
                    raise _invalid(str(self.path), "the input is empty")
                return b"[]"
            # Read straight into the array to decode, one byte longer: the region opens with
            # the comma after the previous task (the file's "[" for region 0), which becomes
            # the array's "[", and the extra byte its "]".
            text = bytearray(end - start + 1)
            file.seek(start)
            file.readinto(memoryview(text)[:-1])
        opened = _BLANKS.match(text).end()
        if self.number and text[opened : opened + 1] == b"]":  # only the array's end is left
            return b"[]"
        # Odd openings are refused with a short reason: task_chunks, which reads the file
        # again after any refusal, names them precisely.
        opening = b"[" if self.number == 0 else b","
        trailing_comma = self.number and _ARRAY_END.match(text, opened + 1)
        if text[opened : opened + 1] != opening or trailing_comma:
            raise _invalid(str(self.path), f"unexpected text at byte {start + opened}")
        text[opened] = ord("[")
        if end == file_size:
            del text[-1]  # the file's own "]" closes the array
        else:
            text[-1] = ord("]")
        return text


def regions(path: Path, size: int = CHUNK_BYTES) -> list[Region]:
    return [Region(path, number, size)
            for number in range(max(1, -(-path.stat().st_size // size)))]


def _task_end_after(file: BinaryIO, offset: int, file_size: int) -> int:
    """Just past the first task that ends after ``offset`` (0 for 0, the file's size when no
    task does), judged from a window of the file that grows as needed."""
    if offset == 0:
        return 0
    window = _TAIL
    while offset < file_size:
        file.seek(offset)
        text = file.read(window)
        for ends in _shallowest_ends(text):
            if _followed_by_tasks(text[ends[0]:]):
                return offset + int(ends[0])
        if offset + window >= file_size:
            break
        window *= 2
    return file_size


def _followed_by_tasks(rest: bytes) -> bool:
    """Whether ``rest`` reads as what follows a task: ``]``, or a comma and more tasks (cut
    off by the window's end)."""
    rest = rest.lstrip(_BLANK)
    if rest[:1] == b"]":
        return True
    if rest[:1] != b",":
        return False
    try:
        _RAW_TASKS.decode(b"[" + rest[1:])
    except msgspec.DecodeError as error:
        return "truncated" in str(error)
    except RecursionError:
        return True  # decoding the region says what is wrong with it
    return True
