"""Following each submission on Prolific: its status comes from Prolific's webhook calls (each
checked for Prolific's signature and a fresh timestamp, a replay refused) or from polling the
study's submissions. A submission returned or timed out frees its visit's slots at once, so
the episode goes to the next participant (README.md, "Following submissions").
"""

from __future__ import annotations

import hmac
import json
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, select

from ..settings import StudyFile
from ..slots.leases import release_visit
from ..states import LEFT_PROLIFIC
from ..store import insert_of, now, participants, prolific_hooks, prolific_statuses, visits
from .prolific import (
    HOOK_TOLERANCE,
    SIGNATURE_HEADER,
    SUBMISSION_EVENT,
    TIMESTAMP_HEADER,
    Prolific,
    hook_signature,
)

# A webhook call's body is a few fields: anything longer is refused unread.
HOOK_LIMIT = 16 * 1024


class HookRefused(Exception):
    """A webhook call not taken: ``status`` is the HTTP answer, the message says why."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Followed:
    """A submission's status recorded for its visit, and the assignments it released."""

    visit_id: int
    status: str
    released: tuple[int, ...]


def _record(conn: Connection, study: str, submission_id: str, status: str) -> Followed | None:
    """``status`` for the study's visit of ``submission_id`` (None: no such visit here),
    its slots freed if its participant left Prolific, inside a transaction already begun."""
    visit_id = conn.execute(
        select(visits.c.id).join(participants, participants.c.id == visits.c.participant_id)
        .where(participants.c.study == study,
               visits.c.prolific_session_id == submission_id.lower())).scalar_one_or_none()
    if visit_id is None:
        return None
    conn.execute(insert_of(conn, prolific_statuses)
                 .values(visit_id=visit_id, status=status, changed_at=now())
                 .on_conflict_do_update(index_elements=["visit_id"],
                                        set_={"status": status, "changed_at": now()}))
    released = release_visit(conn, visit_id) if status in LEFT_PROLIFIC else []
    return Followed(visit_id, status, tuple(released))


def receive_hook(engine: Engine, study: str, secret: str, headers: Mapping[str, str],
                 body: bytes, clock: float | None = None) -> Followed | None:
    """Take one webhook call: signed with ``secret``, its timestamp within
    ``HOOK_TOLERANCE`` of ``clock`` (now), never taken before; else ``HookRefused`` and
    nothing changes. A submission's status change is recorded (None: another event, or a
    submission of no visit here)."""
    signature, timestamp = headers.get(SIGNATURE_HEADER), headers.get(TIMESTAMP_HEADER)
    if not signature or not timestamp:
        raise HookRefused("unsigned: Prolific signs every call", 401)
    if not hmac.compare_digest(signature.encode(),
                               hook_signature(secret, timestamp, body).encode()):
        raise HookRefused("the signature is not Prolific's", 401)
    try:
        stale = abs((time.time() if clock is None else clock) - float(timestamp))
    except ValueError:
        stale = float("inf")
    if not stale <= HOOK_TOLERANCE:
        raise HookRefused(f"the timestamp is more than {HOOK_TOLERANCE} s away", 401)
    try:
        event = json.loads(body)
    except ValueError:
        raise HookRefused("the body is no JSON", 400) from None
    with engine.begin() as conn:
        taken = conn.execute(insert_of(conn, prolific_hooks).values(
            signature=signature, received_at=now()).on_conflict_do_nothing())
        if not taken.rowcount:
            raise HookRefused("taken before: a replay", 409)
        if not (isinstance(event, dict) and event.get("event_type") == SUBMISSION_EVENT
                and isinstance(event.get("resource_id"), str)
                and isinstance(event.get("status"), str)):
            return None
        return _record(conn, study, event["resource_id"], event["status"])


def poll_submissions(engine: Engine, study: StudyFile, prolific: Prolific) -> Counter[str]:
    """Every submission of the study's Prolific study (``study publish`` recorded it; else
    those its visits came from), recorded as ``receive_hook`` records one; how many of each
    status."""
    with engine.connect() as conn:
        studies = [study.prolific.study_id] if study.prolific else sorted(set(conn.execute(
            select(visits.c.prolific_study_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == study.name)).scalars()))
    counts: Counter[str] = Counter()
    for prolific_study in studies:
        for submission in prolific.submissions(prolific_study):
            with engine.begin() as conn:
                if _record(conn, study.name, submission.id, submission.status):
                    counts[submission.status] += 1
    return counts
