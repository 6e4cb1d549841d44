"""Chunks of tasks → ``Part``s, read in worker processes and returned in input order.

Decoding and validating are pure Python work on independent chunks, so they scale with
processes, not threads. At most two chunks per worker are in flight, which bounds memory
whatever the size of the export. An export that fits in one chunk is read in this process.

Each chunk's share of the output files (``Part.pieces``) is appended by the worker that made
it, once the chunks before it have been appended: the files come out in input order, and
hundreds of megabytes never travel back through a pipe. A thread in each worker waits for that
turn, so the worker goes on with its next chunk meanwhile.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import queue
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.synchronize import Condition
from multiprocessing.util import Finalize
from pathlib import Path
from typing import Any

from ..errors import SotopiaLSError
from .chunks import Region
from .collect import Part, Settings, read_part

_WAIT_SECONDS = 1.0


@dataclass
class _Turns:
    """Whose turn it is to append (a chunk number), shared by the workers."""

    condition: Condition
    number: Any  # multiprocessing.Value("q")
    stopped: Any  # multiprocessing.Value("b"): set when the export failed
    failures: Any  # multiprocessing.SimpleQueue of the errors met while appending

    def take(self, number: int, append: Any) -> None:
        """Run ``append`` when the chunks before ``number`` are appended, then pass the turn;
        a chunk with nothing to append (it failed) passes it too, or the next would wait."""
        with self.condition:
            while self.number.value != number:
                if self.stopped.value:
                    return
                self.condition.wait(_WAIT_SECONDS)
            try:
                if append is not None:
                    append()
            except BaseException as error:
                self.stopped.value = 1
                self.failures.put(error)
            finally:
                self.number.value = number + 1
                self.condition.notify_all()


@dataclass
class _Worker:
    settings: Settings
    turns: _Turns
    outputs: Mapping[str, Path]
    appends: queue.SimpleQueue[tuple[int, Any]]


_worker: _Worker | None = None


def _start_worker(settings: Settings, turns: _Turns, outputs: Mapping[str, Path]) -> None:
    global _worker
    _worker = _Worker(settings, turns, outputs, queue.SimpleQueue())
    thread = threading.Thread(target=_append_in_turn, args=(_worker,), name="append")
    thread.start()
    # multiprocessing runs its finalizers as the worker process exits (on the pool's
    # shutdown): this one lets the thread append the worker's last chunks first.
    Finalize(None, _stop_appending, (_worker, thread), exitpriority=10)
    # A worker allocates millions of objects that live until its part is returned, and
    # frees them all at once: the cyclic collector would rescan them over and over.
    gc.disable()


def _append_in_turn(worker: _Worker) -> None:
    while (item := worker.appends.get())[0] >= 0:
        worker.turns.take(*item)


def _appender(part: Part, outputs: Mapping[str, Path]) -> Any:
    """A call that appends the part's pieces to ``outputs`` (they leave the part)."""
    pieces, part.pieces = part.pieces, {}

    def append() -> None:
        for name, piece in pieces.items():
            with outputs[name].open("ab") as out:
                out.write(piece)

    return append


def _read(number: int, chunk: bytes | Region) -> Part:
    assert _worker is not None
    try:
        part = read_part(chunk, _worker.settings)
    except BaseException:
        _worker.appends.put((number, None))
        raise
    _worker.appends.put((number, _appender(part, _worker.outputs)))
    return part


def _stop_appending(worker: _Worker, thread: threading.Thread) -> None:
    worker.appends.put((-1, None))
    thread.join()


def default_workers() -> int:
    return max(1, min(multiprocessing.cpu_count(), 8))


def read_parts(
    chunks: Iterable[bytes | Region], settings: Settings, workers: int,
    outputs: Mapping[str, Path] | None = None,
) -> Iterator[Part]:
    """``read_part`` of every chunk, in order, on ``workers`` processes; the bytes pieces of
    each part are appended to ``outputs[name]`` (and left out of the part)."""
    outputs = outputs or {}
    chunks = iter(chunks)
    head = list(itertools.islice(chunks, 2))
    if workers <= 1 or len(head) < 2:
        for chunk in itertools.chain(head, chunks):
            part = read_part(chunk, settings)
            _appender(part, outputs)()
            yield part
        return
    # fork starts a worker in milliseconds with the exporter already imported; elsewhere
    # (macOS, Windows) forking a process that holds system frameworks is unsafe.
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    turns = _Turns(context.Condition(), context.Value("q", 0), context.Value("b", 0),
                   context.SimpleQueue())
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(settings, turns, outputs))
    pending: deque[Future[Part]] = deque()
    finished = False
    try:
        for number, chunk in enumerate(itertools.chain(head, chunks)):
            pending.append(pool.submit(_read, number, chunk))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
        finished = True
    except BrokenProcessPool as error:
        raise SotopiaLSError(f"an export worker process died ({error}); if it ran out of "
                             "memory, export with fewer workers (--workers)") from error
    finally:
        if not finished:
            with turns.condition:
                turns.stopped.value = 1
                turns.condition.notify_all()
        pool.shutdown(wait=True, cancel_futures=True)
    if not turns.failures.empty():
        raise turns.failures.get()
