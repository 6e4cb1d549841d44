"""Writing a task's meta in Label Studio from the gateway, one writer per task at a time, no
transaction of the gateway's database open meanwhile: Label Studio replaces a task's meta
whole, and an open SQLite transaction would make participants wait on Label Studio
(docs/gateway.md, "The outbox").
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import Engine, delete

from ..store import insert_of, meta_claims, now

# Longer than a mark's two Label Studio calls (a read and a write of the meta) can take, each
# cut off by the SDK's request timeout (60 s by default).
HOLD_SECONDS = 150.0
# How often a process waiting for another's turn looks again.
POLL_SECONDS = 0.2

_locks: dict[tuple[str, int], threading.Lock] = {}
_locks_lock = threading.Lock()


def _task_lock(study: str, task_id: int) -> threading.Lock:
    with _locks_lock:
        return _locks.setdefault((study, task_id), threading.Lock())


def _claim(engine: Engine, study: str, task_id: int, holder: str) -> bool:
    """Take the task's claim for ``holder`` unless another holds it (a lapsed one is dropped);
    whether it was taken."""
    moment = now()
    mine = (meta_claims.c.study == study) & (meta_claims.c.task_id == task_id)
    with engine.begin() as conn:
        conn.execute(delete(meta_claims).where(mine, meta_claims.c.claimed_until < moment))
        return bool(conn.execute(insert_of(conn, meta_claims).values(
            study=study, task_id=task_id, holder=holder,
            claimed_until=moment + timedelta(seconds=HOLD_SECONDS)).on_conflict_do_nothing()
        ).rowcount)


def _release(engine: Engine, study: str, task_id: int, holder: str) -> None:
    """Give the claim back, unless it lapsed and another process holds it now."""
    with engine.begin() as conn:
        conn.execute(delete(meta_claims).where(
            meta_claims.c.study == study, meta_claims.c.task_id == task_id,
            meta_claims.c.holder == holder))


@contextmanager
def meta_turn(engine: Engine, study: str, task_id: int) -> Iterator[None]:
    """This thread's turn to write the task's meta: waits for the others' turns to end."""
    holder = uuid.uuid4().hex
    with _task_lock(study, task_id):
        while not _claim(engine, study, task_id, holder):
            time.sleep(POLL_SECONDS)
        try:
            yield
        finally:
            _release(engine, study, task_id, holder)
