"""Chunks of tasks → ``Part``s, read in worker processes and returned in input order.

Decoding and validating are pure Python work on independent chunks, so they scale with
processes, not threads. At most two chunks per worker are in flight, which bounds memory
whatever the size of the export. An export that fits in one chunk is read in this process.

Each chunk's share of the output files (``Part.pieces`` that are bytes) is appended by the
worker that made it, when the chunks before it have been appended: the files come out in
input order, and hundreds of megabytes never travel back through a pipe.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.synchronize import Condition
from pathlib import Path
from typing import Any

from .collect import Part, Settings, read_part

_WAIT_SECONDS = 1.0


@dataclass
class _Turns:
    """Whose turn it is to append (a chunk number), shared by the workers."""

    condition: Condition
    number: Any  # multiprocessing.Value("q")
    stopped: Any  # multiprocessing.Value("b"): set when the export failed


@dataclass
class _Worker:
    settings: Settings
    turns: _Turns | None
    outputs: Mapping[str, Path]


_worker: _Worker | None = None


def _start_worker(worker: _Worker) -> None:
    global _worker
    _worker = worker
    # A worker allocates millions of objects that live until its part is returned, and
    # frees them all at once: the cyclic collector would rescan them over and over.
    gc.disable()


def _append(part: Part, outputs: Mapping[str, Path]) -> None:
    for name in [name for name, piece in part.pieces.items() if isinstance(piece, bytes)]:
        with outputs[name].open("ab") as out:
            out.write(part.pieces.pop(name))


def _read(number: int, chunk: bytes) -> Part:
    assert _worker is not None and _worker.turns is not None
    turns = _worker.turns
    part: Part | None = None
    failure: BaseException | None = None
    try:
        part = read_part(chunk, _worker.settings)
    except BaseException as exc:  # re-raised below, after taking the turn
        failure = exc
    with turns.condition:
        while turns.number.value != number:
            if turns.stopped.value:
                raise RuntimeError("the export stopped")
            turns.condition.wait(_WAIT_SECONDS)
        try:
            if part is not None:
                _append(part, _worker.outputs)
        finally:
            # Even a chunk that failed takes its turn, or the next would wait for ever.
            turns.number.value = number + 1
            turns.condition.notify_all()
    if failure is not None:
        raise failure
    assert part is not None
    return part


def default_workers() -> int:
    return max(1, min(multiprocessing.cpu_count(), 8))


def read_parts(
    chunks: Iterable[bytes], settings: Settings, workers: int,
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
            _append(part, outputs)
            yield part
        return
    # fork starts a worker in milliseconds with the exporter already imported; elsewhere
    # (macOS, Windows) forking a process that holds system frameworks is unsafe.
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    turns = _Turns(context.Condition(), context.Value("q", 0), context.Value("b", 0))
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(_Worker(settings, turns, outputs),))
    pending: deque[Future[Part]] = deque()
    try:
        for number, chunk in enumerate(itertools.chain(head, chunks)):
            pending.append(pool.submit(_read, number, chunk))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        if pending:
            with turns.condition:
                turns.stopped.value = 1
                turns.condition.notify_all()
        pool.shutdown(wait=True, cancel_futures=True)
