"""Chunks → validated and encoded parts, in worker processes, returned in input order.

The work is pure Python on independent chunks, so it scales with processes; at most two chunks
per worker are in flight, which bounds memory. Large results come back through shared memory
(``_Slots``): pickled through the pool's pipe they would cost more than all the writing.
"""

from __future__ import annotations

import gc
import itertools
import mmap
import multiprocessing
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from ..errors import SotopiaLSError
from .chunks import Region
from .encode import Encoded, Encoding, encode_part
from .validate import Part, Settings, validate_chunk

if TYPE_CHECKING:
    import pyarrow as pa

Done = tuple[Part, Encoded | None]
Spans = dict[str, tuple[int, int]]


class _Slots:
    """Shared memory mapped before the workers fork, one slot per chunk in flight.

    A worker copies its chunk's pieces into the chunk's slot and returns where each one is;
    the writer reads them there. Chunk ``n`` uses slot ``n % count``: with ``count`` the most
    chunks in flight, the writer has finished with a slot before its next chunk is handed
    out. Pieces that do not fit travel the usual way.
    """

    def __init__(self, count: int, size: int) -> None:
        # Anonymous shared mappings: only the pages written to take memory.
        self._maps = [mmap.mmap(-1, size) for _ in range(count)]

    def put(self, number: int, pieces: dict[str, bytes | pa.Buffer]) -> Spans | None:
        slot = self._maps[number % len(self._maps)]
        if sum(map(len, pieces.values())) > len(slot):
            return None
        spans, offset = {}, 0
        for name, piece in pieces.items():
            slot[offset : offset + len(piece)] = piece
            spans[name] = (offset, len(piece))
            offset += len(piece)
        return spans

    def take(self, number: int, spans: Spans) -> dict[str, memoryview]:
        """The pieces, valid until the writer asks for the next part."""
        view = memoryview(self._maps[number % len(self._maps)])
        return {name: view[offset : offset + length] for name, (offset, length) in spans.items()}


# The names of the two tables among a slot's pieces.
_TABLE, _LONG = ":table", ":long"

_settings: Settings | None = None
_encoding: Encoding | None = None
_slots: _Slots | None = None


def default_workers() -> int:
    return max(1, min(multiprocessing.cpu_count(), 8))


def process_chunk(chunk: bytes | Region, settings: Settings, encoding: Encoding | None) -> Done:
    """Validate a chunk and, with an ``encoding``, encode it. The part leaves behind its rows
    and task data, which its table and pieces now hold: they would only cost a pickling."""
    part = validate_chunk(chunk, settings)
    encoded = encode_part(part, encoding) if encoding is not None else None
    part.rows, part.data = [], {}
    return part, encoded


def _start_worker(settings: Settings, encoding: Encoding | None, slots: _Slots | None) -> None:
    global _settings, _encoding, _slots
    _settings, _encoding, _slots = settings, encoding, slots
    # A worker allocates millions of objects that live until its part is returned, and
    # frees them all at once: the cyclic collector would rescan them over and over.
    gc.disable()


def _arrow(table: pa.Table) -> pa.Buffer:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return sink.getvalue()


def _table(piece: memoryview | bytes) -> pa.Table:
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(piece)).read_all()


def _in_worker(number: int, chunk: bytes | Region) -> tuple[Part, Encoded | None, Spans | None]:
    assert _settings is not None
    part, encoded = process_chunk(chunk, _settings, _encoding)
    if _slots is None or encoded is None:
        return part, encoded, None
    spans = _slots.put(number, encoded.pieces | {_TABLE: _arrow(part.table),
                                                 _LONG: _arrow(encoded.long)})
    if spans is not None:
        encoded.pieces, encoded.long, part.table = {}, encoded.long.schema.empty_table(), None
    return part, encoded, spans


def _received(number: int, done: tuple[Part, Encoded | None, Spans | None],
              slots: _Slots | None) -> Done:
    part, encoded, spans = done
    if spans is not None and slots is not None and encoded is not None:
        pieces = slots.take(number, spans)
        # The part's table outlives the slot; the long table is written before it is reused.
        part.table = _table(bytes(pieces.pop(_TABLE)))
        encoded.long = _table(pieces.pop(_LONG))
        encoded.pieces = pieces
    return part, encoded


def read_parts(
    chunks: Iterable[bytes | Region], settings: Settings, encoding: Encoding | None,
    workers: int, chunk_bytes: int,
) -> Iterator[Done]:
    """``process_chunk`` of every chunk, in order, on ``workers`` processes. A part's pieces
    are valid until the next part is asked for."""
    chunks = iter(chunks)
    head = list(itertools.islice(chunks, 2))
    if workers <= 1 or len(head) < 2:
        for chunk in itertools.chain(head, chunks):
            yield process_chunk(chunk, settings, encoding)
        return
    # fork starts a worker in milliseconds with the exporter already imported; elsewhere
    # (macOS, Windows) forking a process that holds system frameworks is unsafe.
    forking = sys.platform == "linux"
    context = multiprocessing.get_context("fork" if forking else "spawn")
    in_flight = 2 * workers
    # A slot holds four chunks' worth: the encoded pieces repeat a chunk's text in several files.
    slots = _Slots(in_flight, 4 * chunk_bytes) if forking and encoding is not None else None
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(settings, encoding, slots))
    pending: deque[tuple[int, Future[tuple[Part, Encoded | None, Spans | None]]]] = deque()
    try:
        for number, chunk in enumerate(itertools.chain(head, chunks)):
            pending.append((number, pool.submit(_in_worker, number, chunk)))
            if len(pending) >= in_flight:
                number, future = pending.popleft()
                yield _received(number, future.result(), slots)
        while pending:
            number, future = pending.popleft()
            yield _received(number, future.result(), slots)
    except BrokenProcessPool as error:
        raise SotopiaLSError(f"an export worker process died ({error}); if it ran out of "
                             "memory, export with fewer workers (--workers)") from error
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
