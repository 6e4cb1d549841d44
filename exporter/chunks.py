"""A Label Studio JSON export (one top-level list of tasks) → chunks of whole tasks.

Each chunk is a complete JSON array of consecutive tasks, so it can be decoded on its own, in
another process, while the next is still being read. Task ends are found with numpy: the brace
depth counted outside strings, where an unescaped quote opens or closes a string and a quote
is escaped when an odd run of backslashes precedes it.

Counting over a whole block costs more than decoding it, so only the block's tail is counted,
under both guesses of whether it starts inside a string, and a cut is kept only when the chunk
before it decodes as a complete JSON array (msgspec skims it without building anything). Only
a task longer than that tail needs the count over the whole block.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec
import numpy as np

from ..errors import InvalidInput, Problem

CHUNK_BYTES = 16 << 20
_QUOTE, _BACKSLASH, _OPEN, _CLOSE = b'"'[0], b"\\"[0], b"{"[0], b"}"[0]
_BLANK = b" \t\r\n"
# How much of a block's end is searched for its last task end (at least one task, usually).
_TAIL = 1 << 18
_RAW_TASKS = msgspec.json.Decoder(list[msgspec.Raw])


def _blocks_of(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    """``pieces`` (a download's or a file's reads) joined into blocks of at least ``size``."""
    held: list[bytes] = []
    length = 0
    for piece in pieces:
        held.append(piece)
        length += len(piece)
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


def _candidates(body: bytes) -> Iterator[int]:
    """Where the last task of ``body`` probably ends, judged from its tail alone.

    The tail starts at an unknown depth, inside or outside a string; under each assumption the
    last closing brace at the tail's shallowest depth is the end of a task when the tail holds
    one. ``_is_complete`` decides.
    """
    start = max(0, len(body) - _TAIL)
    for inside_string in (False, True):
        closes, depth = _closing_depths(body[start:], inside_string)
        if len(closes):
            yield start + int(closes[depth == depth.min()][-1]) + 1


def _is_complete(chunk: bytes) -> bool:
    try:
        _RAW_TASKS.decode(chunk)
    except msgspec.DecodeError:
        return False
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


def task_chunks(
    pieces: Iterable[bytes], *, origin: str, size: int = CHUNK_BYTES
) -> Iterator[bytes]:
    """JSON arrays of whole tasks, about ``size`` bytes each, read from ``pieces`` in order.

    The last chunk carries whatever follows the last task (normally only ``]``), so a
    malformed ending fails when that chunk is decoded.
    """
    def invalid(reason: str) -> InvalidInput:
        return InvalidInput([Problem(origin, "", f"not a Label Studio JSON export: {reason}")])

    body = b""  # from the next task on: the rest of the last block, then the new block
    opened = comma_due = comma_taken = False

    def take_comma() -> None:
        # Done on the short rest of a block where possible: slicing a block copies it.
        nonlocal body, comma_due, comma_taken
        if body[:1] == b",":
            body, comma_due, comma_taken = body[1:].lstrip(_BLANK), False, True
        elif body and body[:1] != b"]":
            raise invalid("tasks must be separated by commas")

    for block in _blocks_of(pieces, size):
        body = (body + block).lstrip(_BLANK)
        if not opened:
            if not body:
                continue
            if body[:1] != b"[":
                raise invalid("expected a list of tasks")
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
        raise invalid("the input is empty")
    if comma_taken and body[:1] == b"]":
        raise invalid("a comma after the last task")
    yield b"[" + body
