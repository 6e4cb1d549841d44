"""A submitted rating: checked with the project's own rules, then saved to Label Studio once.

The gateway's database is an outbox: the rating is recorded with its slot, the participant
moves on, and a writer in each process saves it later under the participant's user, with the
assignment key as its ``unique_id``, yielding to participants' requests. Why, and the pacing,
are in README.md ("No participant waits on Label Studio") and docs/gateway.md ("The outbox").
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, select, update
from starlette.concurrency import run_in_threadpool

from ...config import control_class, controls
from ...dimensions import AGENTS, DIMENSIONS, rating_name, reasoning_name
from ...errors import LabelStudioError
from ...labelstudio.client import (
    Client,
    ensure_user,
    merge_meta_of_task,
    save_annotation,
)
from ...labelstudio.results import evaluation_results, read_json_results, shape_problems
from ...labelstudio.tasks import ADDED_SLOTS
from ...scores import Evaluation
from ..serving.load import Load
from ..slots.leases import (
    Assignment,
    added_slot,
    claim_saves,
    load,
    mark_failed,
    mark_saved,
    release_claim,
    retry_failed,
    unclaimed,
)
from ..states import AssignmentState
from ..store import assignments, now, participants
from .marks import meta_turn

log = logging.getLogger("sotopia_ls.study")

# A participant's Label Studio user is <PROLIFIC_PID>@ this (``.invalid`` takes no mail).
EMAIL_DOMAIN = "prolific.invalid"

# How long a process holds a rating it is saving before another may try (a save takes well
# under a second; a second attempt would only find the first).
CLAIM_SECONDS = 15.0
SWEEP_SECONDS = 10.0
WRITERS = 3

# The writer yields to participants (``LabelStudioWriter._turn``): it shares the process's CPU,
# thread pool and database connections with their requests, and none of them waits on it.
# Participants are quiet when no request of theirs is in flight and none began for
# QUIET_SECONDS: the requests of one page, or of a burst, come closer together than that.
QUIET_SECONDS = 1.0
# While they are busy the process saves PACED_BATCH ratings a PACED_PAUSE apart: a batch is a
# few Label Studio calls, holding a thread and a database connection briefly, and the pause
# leaves the participants most of the time; a rating still reaches Label Studio soon after
# a person rates it.
PACED_BATCH = 2
PACED_PAUSE = 2.0
# The longest a rating is held back for participants: one that has waited this long is saved
# at the writer's next turn (within a pause) at full speed, busy or not, so participants who
# never pause cannot keep ratings from Label Studio; long enough for the saves of a launch's
# first rush to wait until it has passed.
MAX_DELAY_SECONDS = 120.0
# How often a held-back writer looks whether participants went quiet (a comparison on the event
# loop, nothing more), so that catching up begins soon after.
LOOK_SECONDS = QUIET_SECONDS / 4

# What a participant reads for each control: "Believability rationale for agent 1".
_LABELS = {
    name: f"{dimension.label} {what} for agent {agent}"
    for dimension in DIMENSIONS
    for agent in AGENTS
    for name, what in ((rating_name(dimension.key, agent), "rating"),
                       (reasoning_name(dimension.key, agent), "rationale"))
}


def to_names(config: str) -> dict[str, str]:
    """Each control of the labeling config → the object it labels (read once per gateway)."""
    return {name: control.to_name for name, control in controls(config).items()}


def required_fields(config: str) -> list[dict[str, Any]]:
    """The config's required controls in form order, each with the message it gives when
    left out and where it is on the page (``anchor``, a CSS selector): the rating page names
    them, and goes to the first, when Submit is pressed too early."""
    return [{"name": name, "message": control.attrs.get("requiredMessage") or name,
             "text": control.tag == "TextArea",
             "anchor": (f'textarea[name="{name}"]' if control.tag == "TextArea"
                        else f".{control_class(name)}")}
            for name, control in controls(config).items()
            if control.attrs.get("required", "").lower() == "true"]


def checked_results(raw: Any) -> tuple[dict[str, Any], list[str]]:
    """The validated scores of a submission (the score model's flat form, what the gateway
    stores), or (``{}``, what a participant must fix). Any JSON is answered with problems
    naming the result or control, never an exception."""
    fields, problems = read_json_results(raw)
    problems = shape_problems(raw if isinstance(raw, list) else [raw]) + problems
    if problems:
        return {}, [f"{_LABELS.get(control, control)}: {reason}" for control, reason in problems]
    return Evaluation.from_flat(fields).flat(), []


def user_email(external_id: str) -> str:
    return f"{external_id.lower()}@{EMAIL_DOMAIN}"


def participant_user(engine: Engine, client: Client, participant_id: int) -> int:
    """The participant's Label Studio user, created by the owner's key as their first rating
    is saved."""
    with engine.connect() as conn:
        person = conn.execute(select(participants).where(participants.c.id == participant_id)
                              ).one()
    if person.ls_user_id is not None:
        return person.ls_user_id
    user_id = ensure_user(client, user_email(person.external_id), f"prolific-{person.external_id}")
    with engine.begin() as conn:
        conn.execute(update(participants).where(participants.c.id == participant_id)
                     .values(ls_user_id=user_id))
    return user_id


def save(engine: Engine, client: Client, assignment: Assignment,
         targets: Mapping[str, str] | None = None) -> int:
    """Create the assignment's annotation in Label Studio (once) and record its id. Its
    stored scores become Label Studio results here, labelling ``targets`` (``to_names`` of the
    project's config; None: the rubric's own config)."""
    annotation_id = save_annotation(
        client, assignment.task_id,
        user_id=participant_user(engine, client, assignment.participant_id),
        results=evaluation_results(Evaluation.from_flat(assignment.scores or {}), targets),
        lead_time=assignment.lead_time or 0.0,
        started_at=assignment.first_shown_at or assignment.assigned_at,
        unique_id=str(uuid.UUID(hex=assignment.key)),
    )
    slot = added_slot(engine, assignment.id)
    if slot is not None:
        mark_added_slot(engine, client, assignment, annotation_id, slot)
    mark_saved(engine, assignment.id, annotation_id)
    return annotation_id


def mark_added_slot(engine: Engine, client: Client, assignment: Assignment, annotation_id: int,
                    slot: int) -> None:
    """Record in the task's meta that the annotation came from an added slot.

    Label Studio replaces a task's meta whole: the gateway's marks of one task take turns
    (``marks.meta_turn``), with no transaction of the gateway's database open during the Label
    Studio calls. Other writers of the meta (``study decide``, ``evaluate``) do not
    take these turns: one writing the task's meta at the very moment of a mark could drop it
    (or the mark their change). ``store.added_ratings`` keeps every such rating's slot
    whatever the meta says."""
    with meta_turn(engine, assignment.study, assignment.task_id):
        merge_meta_of_task(client, assignment.task_id, ADDED_SLOTS, {str(annotation_id): slot})


def save_waiting(engine: Engine, client: Client, study: str, *, limit: int = 1,
                 targets: Mapping[str, str] | None = None) -> int:
    """Claim up to ``limit`` waiting ratings and save them; how many left the outbox (saved,
    or refused by Label Studio and marked failed).

    A 4xx (``LabelStudioError.permanent``) would come back on every retry, so the rating is
    marked failed with the reason, for ``study status`` to show; anything else (Label Studio
    down, a 5xx) is tried again by the next sweep."""
    settled = 0
    for assignment_id in claim_saves(engine, study, limit=limit, hold_seconds=CLAIM_SECONDS):
        try:
            save(engine, client, load(engine, assignment_id), targets)
        except LabelStudioError as error:
            if not error.permanent:
                release_claim(engine, assignment_id)
                log.warning("rating %d not saved yet, will retry: %s", assignment_id, error)
                continue
            mark_failed(engine, assignment_id, str(error))
            log.error("rating %d refused by Label Studio, kept in the gateway database until "
                      "retried (sotopia-ls study status): %s", assignment_id, error)
        settled += 1
    return settled


def save_all_waiting(engine: Engine, client: Client, study: str,
                     targets: Mapping[str, str] | None = None) -> int:
    """Save every waiting rating not claimed elsewhere, now; how many left the outbox."""
    total = 0
    while settled := save_waiting(engine, client, study, limit=16, targets=targets):
        total += settled
    return total


def retry_saves(engine: Engine, client: Client, study: str,
                assignment_ids: list[int] | None,
                targets: Mapping[str, str] | None = None) -> dict[int, str]:
    """Put failed ratings (``assignment_ids``, or all) back in the outbox and save what waits
    now; each one's state afterwards (``saved``, ``failed`` again, or still ``saving``: Label
    Studio unreachable, or a running gateway saving it)."""
    retried = retry_failed(engine, study, assignment_ids)
    save_all_waiting(engine, client, study, targets)
    return {assignment_id: load(engine, assignment_id).state for assignment_id in retried}


class LabelStudioWriter:
    """Writes behind the participants, in each gateway process: their ratings after they
    submit (with a participant's first, their Label Studio user), and every ``SWEEP_SECONDS``
    whatever is still waiting (a save that failed, one a killed process had claimed); at
    the pace ``_turn`` sets by the process's ``load``."""

    def __init__(self, engine: Engine, client: Client, study: str, load: Load,
                 targets: Mapping[str, str]) -> None:
        self.engine, self.client, self.study, self.load = engine, client, study, load
        self.targets = targets
        self._ratings: asyncio.Queue[None] | None = None
        self._turns: asyncio.Lock | None = None

    def rating_recorded(self) -> None:
        if self._ratings is not None:
            self._ratings.put_nowait(None)

    async def run(self) -> None:
        """Until cancelled (the app's lifespan starts and ends it)."""
        self._ratings, self._turns = asyncio.Queue(), asyncio.Lock()
        for _ in range(WRITERS):  # start with a sweep: ratings a previous run left waiting
            self._ratings.put_nowait(None)
        await asyncio.gather(*(self._saver() for _ in range(WRITERS)))

    async def _saver(self) -> None:
        assert self._ratings is not None
        while True:
            try:
                await asyncio.wait_for(self._ratings.get(), timeout=SWEEP_SECONDS)
            except TimeoutError:
                pass
            try:
                while await run_in_threadpool(save_waiting, self.engine, self.client, self.study,
                                              limit=await self._turn(), targets=self.targets):
                    pass
            except Exception:  # noqa: BLE001  (a writer outlives any one failure; it is logged)
                log.exception("saving ratings failed; the next sweep retries")

    async def _turn(self) -> int:
        """Wait until this writer may save; how many ratings it may claim then.

        Participants quiet, or a rating overdue (``MAX_DELAY_SECONDS``): one, at once, and the
        next turn looks again (full speed, the writers side by side). Participants busy:
        ``PACED_BATCH`` once ``PACED_PAUSE`` has passed, or one as soon as they are quiet; the
        process's writers wait out these pauses one after another."""
        assert self._turns is not None
        async with self._turns:
            if not self._busy() or await run_in_threadpool(self._overdue):
                return 1
            pause_ends = time.monotonic() + PACED_PAUSE
            while self._busy():
                if time.monotonic() >= pause_ends:
                    return PACED_BATCH
                await asyncio.sleep(LOOK_SECONDS)
            return 1

    def _busy(self) -> bool:
        """Whether participants are being served by this process (``QUIET_SECONDS``)."""
        return (self.load.in_flight > 0
                or time.monotonic() - self.load.last_began < QUIET_SECONDS)

    def _overdue(self) -> bool:
        """Whether a rating no writer is saving has waited ``MAX_DELAY_SECONDS``."""
        moment = now()
        with self.engine.connect() as conn:
            return conn.execute(select(assignments.c.id).where(
                assignments.c.study == self.study,
                assignments.c.state == AssignmentState.SAVING,
                assignments.c.submitted_at <= moment - timedelta(seconds=MAX_DELAY_SECONDS),
                unclaimed(moment),
            ).limit(1)).first() is not None
