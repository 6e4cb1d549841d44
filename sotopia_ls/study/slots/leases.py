"""Who rates which episode: k slots per episode (more with adaptive extra raters), each given
out as a lease, settled on submission and taken back when it expires; gold positions get gold
episodes, which have no slots.

Taking a slot is one conditional UPDATE, so concurrent gateways never share one. The order of
the candidates and the rules of settling are in docs/gateway.md, "Leases".
"""

from __future__ import annotations

import hashlib
import logging
import random
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from math import floor
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    and_,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from ...dimensions import DIMENSION_KEYS
from ...errors import StudyError
from ...scores import RATING_FIELDS, scores_disagree
from ..screening.typing_counts import TypingCounts, add_typing
from ..screening.visible import add_visible
from ..settings import THIRD, Adaptive, StudyFile
from ..states import SUBMITTED, AssignmentState, SlotState
from ..store import (
    add_once,
    added_ratings,
    assignments,
    aware,
    episodes,
    gold,
    insert_of,
    now,
    replace_references,
    save_failures,
    slots,
    snapshot_in,
    third_raters,
    visits,
)

log = logging.getLogger("sotopia_ls.study")

# Candidates read per query; more are read when all of them were taken meanwhile.
_CANDIDATES = 8
_ROUNDS = 5

@dataclass(frozen=True)
class FailedSave:
    """A rating Label Studio refused to save, and why."""

    assignment_id: int
    task_id: int
    reason: str
    failed_at: datetime


@dataclass(frozen=True)
class Assignment:
    id: int
    key: str
    study: str
    task_id: int
    state: str
    assigned_at: datetime
    first_shown_at: datetime | None
    submitted_at: datetime | None
    late: bool
    scores: dict[str, Any] | None  # the flat form (``scores.Evaluation.flat``), once submitted
    lead_time: float | None
    ls_annotation_id: int | None
    participant_id: int
    visit_id: int

    @classmethod
    def of(cls, row: Any) -> Assignment:
        return cls(
            id=row.id, key=row.key, study=row.study, task_id=row.task_id, state=row.state,
            assigned_at=aware(row.assigned_at), first_shown_at=aware(row.first_shown_at),
            submitted_at=aware(row.submitted_at), late=bool(row.late), scores=row.results,
            lead_time=row.lead_time, ls_annotation_id=row.ls_annotation_id,
            participant_id=row.participant_id, visit_id=row.visit_id,
        )


@dataclass(frozen=True)
class GoldShare:
    """How much of a visit's work is gold: ``share`` of its ``per_visit`` (m) assignments. A
    share of 1 is a qualification round, which serves nothing else."""

    share: float
    per_visit: int

    @classmethod
    def of(cls, study: StudyFile) -> GoldShare | None:
        """The study's gold share; None when it serves no gold."""
        if study.qualification is not None:
            return cls(1.0, study.episodes_per_participant)
        if study.gold_share:
            return cls(study.gold_share, study.episodes_per_participant)
        return None

    @property
    def only(self) -> bool:
        return self.share >= 1

    def positions(self, visit_id: int, arrived_at: datetime) -> frozenset[int]:
        """Which of the visit's positions (0 to m - 1, in the order it rates) are gold.

        m × share gold positions, rounded up with the probability of the fraction (so that
        share is met on average, and each visit is within one of it), drawn without
        replacement. The draw is seeded by the visit's id and arrival time, neither of which
        the participant sees, so every request of the visit, in any gateway process, finds
        the same positions and no other record is needed.
        """
        seed = hashlib.sha256(f"{visit_id} {arrived_at.timestamp()!r}".encode()).digest()
        draw = random.Random(seed)
        wanted = self.per_visit * self.share
        count = floor(wanted) + (draw.random() < wanted - floor(wanted))
        return frozenset(draw.sample(range(self.per_visit), min(count, self.per_visit)))


@dataclass(frozen=True)
class Added:
    """What ``add_episodes`` recorded anew: ordinary episodes (each with its k slots, or
    three), their slots, gold episodes, and tasks a qualification round does not serve (no
    reference, so no slots)."""

    ordinary: int
    gold: int
    unserved: int
    slots: int


def add_episodes(engine: Engine, study: str, shown: dict[int, dict[str, Any]], k: int,
                 references: dict[int, dict[str, int]] | None = None, *,
                 gold_only: bool = False, unslotted: Collection[int] = (),
                 third_rater_share: float = 0) -> Added:
    """Record the tasks not yet known (their shown data) and give each its k slots, or three
    to the share of them ``third_rater_share`` asks for (``_third_raters``).

    ``references`` (task id → reference ratings) are the study's gold episodes: they get no
    slots, and their references replace any recorded before. A task that already has slots
    never becomes gold (participants rated it as an ordinary episode, and a ground-truth mark
    may come later): its reference is ignored, with one warning line naming such tasks.
    Every insert skips (or, for a reference, updates) a row another gateway starting at the
    same moment inserted first.
    ``gold_only`` (a qualification round) gives no task slots: one without a reference is
    never served, and may still become gold once it has one. ``unslotted`` (practice
    episodes) get no slots either.
    """
    references = references or {}
    with engine.begin() as conn:
        known = set(conn.execute(select(episodes.c.task_id).where(episodes.c.study == study))
                    .scalars())
        references = _not_slotted(conn, study, references)
        recorded = set(conn.execute(select(gold.c.task_id).where(gold.c.study == study))
                       .scalars())
        if references:
            replace_references(conn, gold, study, references)
        new = sorted(set(shown) - known)
        if new:
            conn.execute(insert_of(conn, episodes).on_conflict_do_nothing(), [
                {"study": study, "task_id": task, "shown": shown[task]} for task in new])
        others = [task for task in new if task not in references and task not in recorded
                  and task not in unslotted]
        ordinary = [] if gold_only else others
        thirds = set(_third_raters(conn, study, ordinary, third_rater_share) if k < THIRD
                     else ())
        if thirds:
            conn.execute(insert_of(conn, third_raters).on_conflict_do_nothing(), [
                {"study": study, "task_id": task} for task in sorted(thirds)])
        planned = [{"study": study, "task_id": task, "slot": slot, "state": SlotState.FREE}
                   for task in ordinary
                   for slot in range(1, (THIRD if task in thirds else k) + 1)]
        if planned:
            conn.execute(insert_of(conn, slots).on_conflict_do_nothing(), planned)
    return Added(ordinary=len(ordinary), gold=len(set(references) - recorded),
                 unserved=len(others) - len(ordinary), slots=len(planned))


def _third_raters(conn: Connection, study: str, new: list[int], share: float) -> list[int]:
    """The ``new`` episodes (in task order) to be rated by three: spread evenly, so that after
    each episode the study's chosen ones are its ``share`` of all, rounded."""
    if not share:
        return []
    slotted = conn.execute(select(func.count(func.distinct(slots.c.task_id)))
                           .where(slots.c.study == study)).scalar_one()
    chosen = conn.execute(select(func.count()).select_from(third_raters)
                          .where(third_raters.c.study == study)).scalar_one()
    picked = []
    for position, task in enumerate(new, start=slotted + 1):
        if chosen + len(picked) < floor(share * position + 0.5):
            picked.append(task)
    return picked


def _planned(study: str) -> ColumnElement[bool]:
    """The slots an episode was given when it was added: its k, or three for an episode
    chosen for a third rater (those above k were planned, not added by adaptive raters)."""
    return slots.c.task_id.in_(select(third_raters.c.task_id).where(
        third_raters.c.study == study)) & (slots.c.slot <= THIRD)


def _not_slotted(conn: Connection, study: str,
                 references: dict[int, dict[str, int]]) -> dict[int, dict[str, int]]:
    """``references`` but those of tasks that already have slots, named in a warning."""
    slotted = sorted(set(conn.execute(select(slots.c.task_id).where(
        slots.c.study == study, slots.c.task_id.in_(sorted(references)))).scalars()))
    if slotted:
        log.warning("study %s: task(s) %s have a reference but were served as ordinary "
                    "episodes first, so they stay ordinary, never gold (to make them gold, "
                    "import them again as new tasks)", study, ", ".join(map(str, slotted)))
    return {task: reference for task, reference in references.items() if task not in slotted}


def shown_episode(engine: Engine, study: str, task_id: int) -> dict[str, Any]:
    """What a participant's browser receives of the task."""
    with engine.connect() as conn:
        return conn.execute(select(episodes.c.shown).where(
            episodes.c.study == study, episodes.c.task_id == task_id)).scalar_one()


def _free(moment: datetime) -> Any:
    return or_(slots.c.state == SlotState.FREE,
               and_(slots.c.state == SlotState.LEASED, slots.c.expires_at < moment))


def _filled(moment: datetime) -> Any:
    return func.sum(case(
        (or_(slots.c.state == SlotState.DONE,
             and_(slots.c.state == SlotState.LEASED, slots.c.expires_at >= moment)), 1),
        else_=0,
    ))


def _candidates(conn: Connection, study: str, participant_id: int,
                moment: datetime) -> list[int]:
    """Episodes with a free slot the participant never had; each episode's own slots count
    (k, or more once an extra rater was added)."""
    seen = select(assignments.c.task_id).where(
        assignments.c.study == study, assignments.c.participant_id == participant_id
    )
    filled = _filled(moment)
    query = (
        select(slots.c.task_id)
        .where(slots.c.study == study, slots.c.task_id.not_in(seen))
        .group_by(slots.c.task_id)
        .having(filled < func.count())
        .order_by(filled.desc(), slots.c.task_id)
        .limit(_CANDIDATES)
    )
    return list(conn.execute(query).scalars())


def _take_slot(conn: Connection, study: str, task_id: int, moment: datetime,
               values: dict[str, Any]) -> int | None:
    """Set ``values`` on one free slot of the task: its number, or None when none is free.

    The UPDATE repeats what was seen of the slot (free, or leased to that assignment and
    expired), so it changes nothing if another transaction took the slot in between; the
    assignment whose expired lease is taken over becomes ``expired``.
    """
    seen = conn.execute(
        select(slots.c.slot, slots.c.state, slots.c.assignment_id)
        .where(slots.c.study == study, slots.c.task_id == task_id, _free(moment))
        .order_by(slots.c.slot)
    ).all()
    for slot, state, previous in seen:
        same = (slots.c.state == SlotState.FREE) if state == SlotState.FREE else and_(
            slots.c.state == SlotState.LEASED, slots.c.assignment_id == previous,
            slots.c.expires_at < moment,
        )
        taken = conn.execute(
            update(slots)
            .where(slots.c.study == study, slots.c.task_id == task_id, slots.c.slot == slot, same)
            .values(**values)
        ).rowcount
        if taken:
            if previous is not None:
                conn.execute(update(assignments)
                             .where(assignments.c.id == previous,
                                    assignments.c.state == AssignmentState.LEASED)
                             .values(state=AssignmentState.EXPIRED))
            return slot
    return None


def _is_gold(study: Any, task_id: Any) -> Any:
    """Whether the task is a gold episode of the study."""
    return select(gold.c.task_id).where(gold.c.study == study, gold.c.task_id == task_id
                                        ).exists()


def _visit_lease(conn: Connection, visit_id: int, moment: datetime,
                 lease: timedelta) -> Assignment | None:
    """The visit's leased assignment with its lease renewed, if its slot is still its own (a
    gold one has no slot: it is always its own)."""
    row = conn.execute(
        select(assignments, _is_gold(assignments.c.study, assignments.c.task_id).label("gold"))
        .where(assignments.c.visit_id == visit_id, assignments.c.state == AssignmentState.LEASED)
        .order_by(assignments.c.id.desc()).limit(1)
    ).first()
    if row is None:
        return None
    if row.gold:
        return Assignment.of(row)
    renewed = conn.execute(
        update(slots)
        .where(slots.c.study == row.study, slots.c.task_id == row.task_id,
               slots.c.assignment_id == row.id, slots.c.state == SlotState.LEASED)
        .values(expires_at=moment + lease)
    ).rowcount
    if renewed:
        return Assignment.of(row)
    conn.execute(update(assignments).where(assignments.c.id == row.id)
                 .values(state=AssignmentState.EXPIRED))
    return None


def _gold_turn(conn: Connection, share: GoldShare, visit_id: int, arrived_at: datetime) -> bool:
    """Whether the visit's next position (how many it has rated) is a gold one."""
    rated = conn.execute(select(func.count()).select_from(assignments).where(
        assignments.c.visit_id == visit_id, assignments.c.state.in_(SUBMITTED))).scalar_one()
    return rated in share.positions(visit_id, aware(arrived_at))


def _gold_candidate(conn: Connection, study: str, participant_id: int) -> int | None:
    """A gold episode the participant has not had: one of the least rated, at random (so
    the gold set is spread over participants); None when they had every one."""
    had = select(assignments.c.task_id).where(
        assignments.c.study == study, assignments.c.participant_id == participant_id)
    served = func.count(assignments.c.id)
    rows = conn.execute(
        select(gold.c.task_id, served)
        .outerjoin(assignments, and_(assignments.c.study == gold.c.study,
                                     assignments.c.task_id == gold.c.task_id))
        .where(gold.c.study == study, gold.c.task_id.not_in(had))
        .group_by(gold.c.task_id)).all()
    if not rows:
        return None
    least = min(count for _, count in rows)
    return secrets.choice([task for task, count in rows if count == least])


def _gold_due(conn: Connection, share: GoldShare, study: str, participant_id: int,
              visit_id: int, arrived_at: datetime) -> int | None:
    """The gold episode the visit's next position gets; None when that position is not a
    gold one or the participant had every gold episode."""
    task = _gold_candidate(conn, study, participant_id)
    return task if task is not None and _gold_turn(conn, share, visit_id, arrived_at) else None


def has_work(engine: Engine, study: str, visit_id: int, participant_id: int,
             gold_share: GoldShare | None = None) -> bool:
    """Whether ``lease_for_visit`` would give the visit an episode now, read without taking
    one: the lease it holds, else the gold episode its next position gets, else a free slot
    it may take (a qualification round has no slots). Another gateway may take that slot
    before the visit asks, so True promises nothing; False is final for this moment."""
    with engine.connect() as conn:
        if conn.execute(select(assignments.c.id).where(
                assignments.c.visit_id == visit_id,
                assignments.c.state == AssignmentState.LEASED)).first():
            return True
        if gold_share is not None:
            arrived_at = conn.execute(select(visits.c.arrived_at)
                                      .where(visits.c.id == visit_id)).scalar_one()
            if _gold_due(conn, gold_share, study, participant_id, visit_id, arrived_at):
                return True
            if gold_share.only:
                return False
        return bool(_candidates(conn, study, participant_id, now()))


def lease_for_visit(engine: Engine, study: str, visit_id: int, participant_id: int, *,
                    lease_seconds: float,
                    gold_share: GoldShare | None = None) -> Assignment | None:
    """The assignment the visit should work on now, or None when no episode is left for it;
    ``gold_share`` (``GoldShare.of`` the study) when the study serves gold."""
    try:
        return _lease_for_visit(engine, study, visit_id, participant_id, lease_seconds,
                                gold_share)
    except IntegrityError:
        # The same participant asked twice at once (two tabs): the other request's lease stands.
        return _lease_for_visit(engine, study, visit_id, participant_id, lease_seconds,
                                gold_share)


def _lease_for_visit(engine: Engine, study: str, visit_id: int, participant_id: int,
                     lease_seconds: float,
                     gold_share: GoldShare | None) -> Assignment | None:
    moment, lease = now(), timedelta(seconds=lease_seconds)
    with engine.begin() as conn:
        # One request per visit at a time takes a lease (PostgreSQL row lock; SQLite's
        # BEGIN IMMEDIATE already serializes writers).
        arrived_at = conn.execute(select(visits.c.arrived_at).where(visits.c.id == visit_id)
                                  .with_for_update()).scalar_one()
        current = _visit_lease(conn, visit_id, moment, lease)
        if current is not None:
            return current
        if gold_share is not None:
            # Both looked up on every turn, so that a gold turn costs the queries an ordinary
            # one does: nothing in the time a page takes may tell them apart.
            gold_task = _gold_due(conn, gold_share, study, participant_id, visit_id, arrived_at)
            candidates = [] if gold_share.only else _candidates(conn, study, participant_id,
                                                                moment)
            if gold_task is not None:
                return _new_assignment(conn, study, gold_task, None, participant_id, visit_id,
                                       moment)
            if gold_share.only:
                return None
        for turn in range(_ROUNDS):
            if gold_share is None or turn:
                candidates = _candidates(conn, study, participant_id, moment)
            if not candidates:
                return None
            for task_id in candidates:
                slot = _take_slot(conn, study, task_id, moment,
                                  {"state": SlotState.LEASED, "assignment_id": None,
                                   "expires_at": moment + lease})
                if slot is not None:
                    return _new_assignment(conn, study, task_id, slot, participant_id,
                                           visit_id, moment)
    return None


def _new_assignment(conn: Connection, study: str, task_id: int, slot: int | None,
                    participant_id: int, visit_id: int, moment: datetime) -> Assignment:
    """A leased assignment on the task, holding ``slot`` (None: a gold episode's, slotless)."""
    assignment_id = conn.execute(insert(assignments).values(
        key=secrets.token_hex(16), study=study, task_id=task_id,
        participant_id=participant_id, visit_id=visit_id, state=AssignmentState.LEASED,
        assigned_at=moment,
        late=0,
    )).inserted_primary_key[0]
    if slot is not None:
        conn.execute(update(slots)
                     .where(slots.c.study == study, slots.c.task_id == task_id,
                            slots.c.slot == slot)
                     .values(assignment_id=assignment_id))
    return Assignment.of(conn.execute(
        select(assignments).where(assignments.c.id == assignment_id)).one())


def release_visit(conn: Connection, visit_id: int) -> list[int]:
    """Free the slots the visit holds at once, inside a transaction already begun: its
    participant left the study on Prolific. Their assignments become ``expired``, as when a
    lease runs out, so a late submission is settled as one (``settle``). The ids released."""
    held = select(assignments.c.id).where(assignments.c.visit_id == visit_id,
                                          assignments.c.state == AssignmentState.LEASED)
    # The slots first, then the assignments: the order ``settle`` locks them in.
    conn.execute(select(slots.c.slot).where(slots.c.assignment_id.in_(held)).with_for_update())
    released = list(conn.execute(held.with_for_update()).scalars())
    _give_back(conn, released, SlotState.LEASED, AssignmentState.EXPIRED)
    return released


def _give_back(conn: Connection, chosen: list[int], held: SlotState,
               state: AssignmentState) -> None:
    """Free the slots the ``chosen`` assignments hold (``held``: leased or done) for another
    participant, and put the assignments in ``state``."""
    conn.execute(update(slots).where(slots.c.assignment_id.in_(chosen), slots.c.state == held)
                 .values(state=SlotState.FREE, assignment_id=None, expires_at=None))
    conn.execute(update(assignments).where(assignments.c.id.in_(chosen)).values(state=state))


def mark_shown(engine: Engine, assignment_id: int) -> datetime:
    """When the assignment's episode was first shown (set on the first call only)."""
    with engine.begin() as conn:
        conn.execute(update(assignments)
                     .where(assignments.c.id == assignment_id,
                            assignments.c.first_shown_at.is_(None))
                     .values(first_shown_at=now()))
        return aware(conn.execute(select(assignments.c.first_shown_at)
                                  .where(assignments.c.id == assignment_id)).scalar_one())


def find(engine: Engine, key: str, participant_id: int) -> Assignment | None:
    """The participant's assignment ``key``; None for anyone else's (or none at all)."""
    with engine.connect() as conn:
        row = conn.execute(select(assignments).where(
            assignments.c.key == key, assignments.c.participant_id == participant_id)).first()
    return Assignment.of(row) if row is not None else None


def settle(engine: Engine, assignment: Assignment, scores: dict[str, Any],
           k: int, adaptive: Adaptive | None = None, *,
           typing: TypingCounts | None = None,
           visible_seconds: float | None = None) -> Assignment:
    """Record the submission of ``assignment`` once: its validated ``scores`` (the flat form;
    Label Studio's results are made from them only when saved) and what its page measured
    (``typing`` counts, ``visible_seconds``, where sent); returns it as now stored.

    ``saving`` when it holds a slot or is a gold episode (it is then sent to Label Studio),
    ``surplus`` when every slot of its episode went to others after its lease expired. A
    second call (a double click, a retried request, a replay with other measures) changes
    nothing and returns the first outcome. A rating on a slot above ``k`` is recorded in
    ``added_ratings``, unless its slot was planned for a third rater; with ``adaptive``, a rating that completes its episode's slots may add
    one (``_add_slot``).
    """
    moment = now()
    with engine.begin() as conn:
        # The episode's slots first, then the assignment: the order in which taking a lease
        # locks them too, so a late submission and a takeover of its slot cannot deadlock.
        conn.execute(select(slots.c.slot).where(
            slots.c.study == assignment.study, slots.c.task_id == assignment.task_id)
            .order_by(slots.c.slot).with_for_update()).all()
        # Locked too: a gold episode has no slots to serialize two submissions of it.
        row = conn.execute(select(assignments).where(assignments.c.id == assignment.id)
                           .with_for_update()).one()
        if row.state in SUBMITTED:
            return Assignment.of(row)
        held = conn.execute(
            select(slots.c.slot, slots.c.expires_at).where(
                slots.c.study == row.study, slots.c.task_id == row.task_id,
                slots.c.assignment_id == row.id, slots.c.state == SlotState.LEASED)
        ).first()
        late = (row.state == AssignmentState.EXPIRED
                or (held is not None and aware(held.expires_at) < moment))
        done = {"state": SlotState.DONE, "assignment_id": row.id, "expires_at": None}
        slot = None  # the slot the rating counts for (none: a gold episode's, or surplus)
        if held is not None:
            conn.execute(update(slots).where(
                slots.c.study == row.study, slots.c.task_id == row.task_id,
                slots.c.assignment_id == row.id, slots.c.state == SlotState.LEASED).values(**done))
            slot, state = held.slot, AssignmentState.SAVING
        elif conn.execute(select(_is_gold(row.study, row.task_id))).scalar_one():
            state = AssignmentState.SAVING
        else:
            slot = _take_slot(conn, row.study, row.task_id, moment, done)
            state = AssignmentState.SURPLUS if slot is None else AssignmentState.SAVING
        shown = aware(row.first_shown_at) or aware(row.assigned_at)
        lead_time = (moment - shown).total_seconds()
        conn.execute(update(assignments).where(assignments.c.id == row.id).values(
            state=state, submitted_at=moment, late=int(late), results=scores,
            lead_time=lead_time,
        ))
        if typing is not None:
            add_typing(conn, row.id, typing)
        if visible_seconds is not None:
            add_visible(conn, row.id, visible_seconds, lead_time)
        if slot is not None and slot > k and not conn.execute(select(_planned(row.study)).where(
                slots.c.study == row.study, slots.c.task_id == row.task_id,
                slots.c.slot == slot)).scalar_one():
            conn.execute(insert(added_ratings).values(assignment_id=row.id, slot=slot))
        if slot is not None and adaptive is not None:
            _add_slot(conn, row.study, row.task_id, adaptive)
        return Assignment.of(conn.execute(
            select(assignments).where(assignments.c.id == row.id)).one())


def disagree(ratings: list[dict[str, Any]], threshold: int) -> bool:
    """Whether two of the ratings (each stored scores) differ by more than ``threshold`` on
    some dimension and agent."""
    for name in RATING_FIELDS:
        scores = [fields[name] for fields in ratings if name in fields]
        if scores_disagree(scores, threshold):
            return True
    return False


def _agreement_narrow(conn: Connection, study: str, width: float | None) -> bool:
    """Whether the latest agreement snapshot has every dimension's alpha interval narrower
    than ``width`` (never without a width, a snapshot, or an interval on every dimension)."""
    snapshot = snapshot_in(conn, study) if width is not None else None
    if snapshot is None or not snapshot.figures:
        return False
    # The dimensions' figures (the snapshot also holds the agent models' table).
    dimensions = [snapshot.figures.get(key, {}) for key in DIMENSION_KEYS]
    intervals = [(each.get("alpha_low"), each.get("alpha_high")) for each in dimensions]
    return all(low is not None and high is not None and high - low < width
               for low, high in intervals)


def _add_slot(conn: Connection, study: str, task_id: int, adaptive: Adaptive) -> None:
    """One more slot for the episode when every slot it has is done, its ratings disagree
    (``disagree``), it has fewer than ``max_raters`` slots and the running agreement is not yet
    narrow enough. Inside the settling transaction, after the episode's slots were locked; the
    insert is keyed by (study, task, slot), so two gateways deciding at once add one slot."""
    held = conn.execute(
        select(slots.c.slot, slots.c.state, assignments.c.results)
        .outerjoin(assignments, assignments.c.id == slots.c.assignment_id)
        .where(slots.c.study == study, slots.c.task_id == task_id)).all()
    if (len(held) >= adaptive.max_raters or any(row.state != SlotState.DONE for row in held)
            or not disagree([row.results for row in held], adaptive.threshold)
            or _agreement_narrow(conn, study, adaptive.target_width)):
        return
    add_once(conn, slots, {"study": study, "task_id": task_id,
                           "slot": max(row.slot for row in held) + 1, "state": SlotState.FREE})


@dataclass(frozen=True)
class AddedSlots:
    """The slots adaptive extra raters added to a study's episodes (above k), and how many of
    them were rated."""

    opened: int
    rated: int


def added_slots(engine: Engine, study: str, k: int) -> AddedSlots:
    """How many slots adaptive extra raters added to the study's episodes (numbered above
    ``k``), and how many of them are rated."""
    added = and_(slots.c.study == study, slots.c.slot > k, ~_planned(study))
    with engine.connect() as conn:
        opened, rated = conn.execute(select(
            func.count(), func.count().filter(slots.c.state == SlotState.DONE)).where(added)).one()
    return AddedSlots(opened, rated)


@dataclass(frozen=True)
class Planned:
    """The ordinary episodes a study has, how many of them a third rater was planned for, and
    the slots they were given (k each, three for those): what places are counted from."""

    episodes: int
    thirds: int
    slots: int


def planned_slots(engine: Engine, study: str, k: int) -> Planned:
    """The study's episodes and the slots they were given when added, not those adaptive
    extra raters added since."""
    with engine.connect() as conn:
        episodes, planned = conn.execute(select(
            func.count(func.distinct(slots.c.task_id)), func.count()).where(
            slots.c.study == study, (slots.c.slot <= k) | _planned(study))).one()
        thirds = conn.execute(select(func.count()).select_from(third_raters).where(
            third_raters.c.study == study)).scalar_one()
    return Planned(episodes, thirds, planned)


def added_slot(engine: Engine, assignment_id: int) -> int | None:
    """The slot above k the assignment's rating settled on; None for one of the first k."""
    with engine.connect() as conn:
        return conn.execute(select(added_ratings.c.slot).where(
            added_ratings.c.assignment_id == assignment_id)).scalar_one_or_none()


def mark_saved(engine: Engine, assignment_id: int, annotation_id: int) -> None:
    with engine.begin() as conn:
        conn.execute(update(assignments)
                     .where(assignments.c.id == assignment_id,
                            assignments.c.state == AssignmentState.SAVING)
                     .values(state=AssignmentState.SAVED, ls_annotation_id=annotation_id,
                             saved_at=now()))


def mark_failed(engine: Engine, assignment_id: int, reason: str) -> None:
    """Stop trying to save a rating Label Studio refused; it stays here with ``reason``."""
    with engine.begin() as conn:
        if conn.execute(update(assignments)
                        .where(assignments.c.id == assignment_id,
                               assignments.c.state == AssignmentState.SAVING)
                        .values(state=AssignmentState.FAILED, save_claimed_until=None)).rowcount:
            conn.execute(insert(save_failures).values(assignment_id=assignment_id,
                                                      reason=reason, failed_at=now()))


def failed_saves(engine: Engine, study: str) -> list[FailedSave]:
    """Every rating of the study that Label Studio refused, oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(assignments.c.id, assignments.c.task_id, save_failures.c.reason,
                   save_failures.c.failed_at)
            .join(save_failures, save_failures.c.assignment_id == assignments.c.id)
            .where(assignments.c.study == study, assignments.c.state == AssignmentState.FAILED)
            .order_by(assignments.c.id)).all()
    return [FailedSave(row.id, row.task_id, row.reason, aware(row.failed_at)) for row in rows]


def _failed(conn: Connection, study: str, assignment_ids: list[int] | None) -> list[int]:
    """``assignment_ids`` (or every failed rating of the study), each checked to be one."""
    failed = set(conn.execute(select(assignments.c.id).where(
        assignments.c.study == study, assignments.c.state == AssignmentState.FAILED)).scalars())
    chosen = failed if assignment_ids is None else set(assignment_ids)
    unknown = sorted(chosen - failed)
    if unknown:
        raise StudyError(f"no failed rating of study {study} has assignment id "
                         f"{', '.join(map(str, unknown))}: see `sotopia-ls study status`")
    return sorted(chosen)


def retry_failed(engine: Engine, study: str, assignment_ids: list[int] | None) -> list[int]:
    """Put failed ratings (``assignment_ids``, or all of the study's) back in the outbox, to
    be saved by the next sweep; the ids put back, ascending. An id that names no failed rating
    of the study is a ``StudyError``."""
    with engine.begin() as conn:
        chosen = _failed(conn, study, assignment_ids)
        conn.execute(update(assignments).where(assignments.c.id.in_(chosen))
                     .values(state=AssignmentState.SAVING, save_claimed_until=None))
        conn.execute(delete(save_failures).where(save_failures.c.assignment_id.in_(chosen)))
    return chosen


def shelve_failed(engine: Engine, study: str, assignment_ids: list[int] | None) -> list[int]:
    """Stop waiting for failed ratings that can never be saved: each is kept here,
    ``shelved`` with its results and reason, and its slot is free for another participant, so
    the episode still gets k ratings in Label Studio. The ids shelved, ascending."""
    with engine.begin() as conn:
        chosen = _failed(conn, study, assignment_ids)
        _give_back(conn, chosen, SlotState.DONE, AssignmentState.SHELVED)
    return chosen


def release_claim(engine: Engine, assignment_id: int) -> None:
    """Let the next sweep, of any process, try a rating whose save failed."""
    with engine.begin() as conn:
        conn.execute(update(assignments).where(assignments.c.id == assignment_id)
                     .values(save_claimed_until=None))


def unclaimed(moment: datetime) -> ColumnElement[bool]:
    """A rating no gateway process is saving at ``moment`` (its claim, if any, has run out)."""
    return or_(assignments.c.save_claimed_until.is_(None),
               assignments.c.save_claimed_until < moment)


def claim_saves(engine: Engine, study: str, *, limit: int, hold_seconds: float) -> list[int]:
    """Up to ``limit`` recorded ratings waiting to be saved, claimed by this process for
    ``hold_seconds`` (oldest first). A claim only spares other processes the work: were two to
    save the same rating, Label Studio's unique id would keep one."""
    moment = now()
    free = unclaimed(moment)
    claimed = []
    with engine.begin() as conn:
        waiting = conn.execute(
            select(assignments.c.id).where(assignments.c.study == study,
                                           assignments.c.state == AssignmentState.SAVING, free)
            .order_by(assignments.c.id).limit(limit)).scalars().all()
        for assignment_id in waiting:
            if conn.execute(update(assignments).where(
                    assignments.c.id == assignment_id,
                    assignments.c.state == AssignmentState.SAVING, free)
                    .values(save_claimed_until=moment + timedelta(seconds=hold_seconds))).rowcount:
                claimed.append(assignment_id)
    return claimed


def load(engine: Engine, assignment_id: int) -> Assignment:
    with engine.connect() as conn:
        return Assignment.of(conn.execute(
            select(assignments).where(assignments.c.id == assignment_id)).one())
