"""How far a study has come, read from the gateway's database alone (no Label Studio call)."""

from __future__ import annotations

import shlex
import statistics
from dataclasses import dataclass, field
from datetime import timedelta, timezone
from pathlib import Path

from sqlalchemy import Engine, and_, case, func, select

from .live.snapshots import (
    Snapshot,
    agreement_lines,
    arrivals,
    figures_unavailable,
    latest_snapshot,
)
from .outbox.saving import MAX_DELAY_SECONDS, SWEEP_SECONDS
from .payment.hourly import HourlyPay, hourly_pay, pay_lines
from .screening.visible import Quartiles, clipped_count, participant_quartiles, visible_quartiles
from .settings import StudyFile, without_password
from .slots.leases import AddedSlots, FailedSave, added_slots, failed_saves
from .states import SUBMITTED, AssignmentState, Outcome, SlotState
from .store import (
    assignments,
    aware,
    gold,
    now,
    participants,
    prolific_statuses,
    slots,
    visits,
)


# A rating waiting this long has missed several of the writers' sweeps after the longest the
# writers hold one back for busy participants.
STUCK_SECONDS = MAX_DELAY_SECONDS + 3 * SWEEP_SECONDS
# Whether the backlog is shrinking is read from the ratings recorded and saved this recently:
# several of the writers' turns and sweeps, and still the present.
TREND_SECONDS = 60.0


@dataclass(frozen=True)
class StudyStatus:
    episodes: int
    done: int          # every one of its slots rated (k, and any adaptive extra raters added)
    in_progress: int   # some slot rated or leased, not all rated
    open: int          # nobody on it
    active_leases: int
    participants: int
    visits_completed: int
    visits_no_slots: int
    visits_under_way: int
    saved: int         # ratings in Label Studio
    unsaved: int       # recorded here, waiting to be saved (retried every saving.SWEEP_SECONDS)
    surplus: int       # submitted after the lease expired and every slot was taken: kept here
    late: int          # submitted after the lease expired (saved or surplus)
    median_seconds: float | None
    oldest_waiting_seconds: float | None  # since the longest-waiting unsaved rating was submitted
    failed: list[FailedSave]  # refused by Label Studio: kept here, not tried again until retried
    shelved: int       # refused, then set aside by the researcher: kept here, slot given again
    gold: int          # gold episodes: no slots, any number of raters (a round serves only them)
    added: AddedSlots = AddedSlots(0, 0)  # by adaptive extra raters, for disagreeing episodes
    visible: Quartiles | None = None  # minutes per episode the rating page was visible, focused
    visible_participants: Quartiles | None = None  # the same summed per participant
    clipped: int = 0  # ratings whose page claimed more visible time than passed: clipped
    agreement: Snapshot | None = None  # the running agreement, when asked for and rated
    agreement_unavailable: str | None = None  # why this install cannot compute it instead
    pay: HourlyPay | None = None  # the study's reward per hour of the median visit
    users_waiting: int = 0  # participants whose first rating waits: their Label Studio user too
    recorded_lately: int = 0  # ratings recorded for Label Studio in the last TREND_SECONDS
    saved_lately: int = 0     # ratings saved in Label Studio in the last TREND_SECONDS
    on_prolific: dict[str, int] = field(default_factory=dict)  # visits by Prolific's status

    def lines(self, study: StudyFile, options: str) -> list[str]:
        """The report; ``options`` name the study to the commands it suggests
        (``study_options``)."""
        median = (f"{self.median_seconds / 60:.1f} min" if self.median_seconds is not None
                  else "no rating yet")
        return [
            f"study {study.name} (project {study.project}): {self.episodes} episodes, "
            f"{study.raters_per_episode} raters each, up to {study.episodes_per_participant} "
            "episodes per participant",
            f"  episodes done:        {self.done}",
            f"  episodes in progress: {self.in_progress}",
            f"  episodes open:        {self.open}",
            *self._gold_lines(study),
            *self._added_lines(study),
            f"  active leases:        {self.active_leases}",
            f"  participants:         {self.participants} ({self.visits_completed} completed, "
            f"{self.visits_no_slots} found no slot, {self.visits_under_way} under way)",
            *(["  on Prolific:          " + ", ".join(
                f"{status} {count}" for status, count in sorted(self.on_prolific.items()))]
              if self.on_prolific else []),
            f"  ratings:              {self.saved} saved in Label Studio, {len(self.failed)} "
            f"refused by Label Studio, {self.shelved} shelved and {self.surplus} surplus (both "
            f"kept in the gateway database), {self.late} after their lease expired",
            f"  waiting to be saved:  {self._backlog()}",
            f"  median time per episode: {median}",
            f"  visible time per episode: {_visible(self.visible, 'ratings')}",
            "  visible time per participant: "
            + _visible(self.visible_participants, "participants"),
            *self._clipped_lines(),
            *(f"  {line}" for line in pay_lines(study, self.pay)),
            *self._stuck_lines(),
            *self._failure_lines(options),
            *(agreement_lines(self.agreement) if self.agreement is not None else []),
            *([f"  {self.agreement_unavailable}"] if self.agreement_unavailable else []),
        ]

    def _gold_lines(self, study: StudyFile) -> list[str]:
        """How many gold episodes the study serves: a qualification round nothing else."""
        if study.qualification is not None:
            return [f"  gold episodes:        {self.gold} (the qualification round serves "
                    "only these, each to any number of participants)"]
        if study.uses_gold:
            return [f"  gold episodes:        {self.gold} (hidden among the episodes at "
                    f"{study.gold_share:.0%})"]
        return []

    def _added_lines(self, study: StudyFile) -> list[str]:
        """How many slots adaptive extra raters added, and how many of them were rated."""
        if study.adaptive is None:
            return []
        return [f"  extra slots opened:   {self.added.opened} ({self.added.rated} rated; an "
                f"episode whose ratings differ by more than {study.adaptive.threshold} gets one, "
                f"up to {study.adaptive.max_raters} raters)"]

    def _clipped_lines(self) -> list[str]:
        """How many ratings' pages claimed more time than the gateway saw pass, if any."""
        if not self.clipped:
            return []
        return [f"  visible time clipped: {_many(self.clipped, 'rating')} whose page claimed "
                "more time than passed from its first showing to its submission, counted as "
                "that time (`study review` names them)"]

    def _backlog(self) -> str:
        """What waits for Label Studio: ratings (the oldest's age), the users of participants
        whose first rating waits (made with it), and whether it is shrinking."""
        if self.oldest_waiting_seconds is None:
            return "none"
        users = (f", and {_many(self.users_waiting, 'new Label Studio user')}"
                 if self.users_waiting else "")
        trend = ("shrinking" if self.saved_lately > self.recorded_lately
                 else "growing" if self.saved_lately < self.recorded_lately else "steady")
        return (f"{_many(self.unsaved, 'rating')} (the oldest for "
                f"{self.oldest_waiting_seconds:.0f} s){users}; in the last {TREND_SECONDS:.0f} s "
                f"{self.recorded_lately} recorded, {self.saved_lately} saved: {trend}")

    def _stuck_lines(self) -> list[str]:
        """A hint when a rating has waited far longer than the writers hold one back."""
        if self.oldest_waiting_seconds is None or self.oldest_waiting_seconds < STUCK_SECONDS:
            return []
        return [f"a rating has waited {self.oldest_waiting_seconds / 60:.0f} min to be saved: "
                "Label Studio is unreachable, answers with a server error (5xx), tried again "
                "every sweep, or saves slower than ratings come; the gateway's log says which"]

    def _failure_lines(self, options: str) -> list[str]:
        """Each refused rating, why, and the command that sends it again."""
        if not self.failed:
            return []
        lines = ["refused by Label Studio (kept in the gateway database; fix the cause, then "
                 "retry each, or all with `sotopia-ls study retry --all`; one that can never be "
                 "saved can be shelved, its slot given to another participant):"]
        for failure in self.failed:
            lines += [
                f"  assignment {failure.assignment_id} (task {failure.task_id}), "
                # PostgreSQL answers in the session's time zone, whatever the server's.
                f"{failure.failed_at.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC: "
                f"{' '.join(failure.reason.split())}",
                f"    retry: sotopia-ls study retry {options} --assignment {failure.assignment_id}",
                f"    or shelve: sotopia-ls study shelve {options} "
                f"--assignment {failure.assignment_id}",
            ]
        return lines


def _many(count: int, thing: str) -> str:
    return f"{count} {thing}" if count == 1 else f"{count} {thing}s"


def _visible(minutes: Quartiles | None, what: str) -> str:
    """The quartiles of the minutes the rating page was visible and focused, of ``what``."""
    if minutes is None:
        return "no rating measured yet"
    return (f"median {minutes.median:.1f} min (quartiles {minutes.low:.1f} to "
            f"{minutes.high:.1f} min; {minutes.count} {what} measured)")


def study_options(study_path: Path, database: str | None) -> str:
    """``--study`` (and ``--database``, when given) as a shell takes them, so a suggested
    command reads the same study; a password in the database URL is left out."""
    database_option = ["--database", without_password(database)] if database else []
    return shlex.join(["--study", str(study_path), *database_option])


def _count(condition: object) -> object:
    return func.sum(case((condition, 1), else_=0))


def study_status(engine: Engine, study: StudyFile, *, agreement: bool = False) -> StudyStatus:
    """Progress of ``study``: episodes by state, leases, participants, timing; with
    ``agreement``, the running agreement too (``_running_agreement``)."""
    moment, name, k = now(), study.name, study.raters_per_episode
    snapshot, unavailable = _running_agreement(engine, study) if agreement else (None, None)
    active = and_(slots.c.state == SlotState.LEASED, slots.c.expires_at >= moment)
    with engine.connect() as conn:
        # Each episode counted against its own slots: an added one keeps it in progress.
        per_task = conn.execute(
            select(_count(slots.c.state == SlotState.DONE), _count(active), func.count())
            .where(slots.c.study == name).group_by(slots.c.task_id)
        ).all()
        states = dict(conn.execute(
            select(assignments.c.state, func.count()).where(assignments.c.study == name)
            .group_by(assignments.c.state)).all())
        late = conn.execute(select(func.count()).where(
            assignments.c.study == name, assignments.c.late == 1)).scalar_one()
        times = list(conn.execute(select(assignments.c.lead_time).where(
            assignments.c.study == name, assignments.c.state.in_(SUBMITTED))).scalars())
        waiting_since = aware(conn.execute(select(func.min(assignments.c.submitted_at)).where(
            assignments.c.study == name, assignments.c.state == AssignmentState.SAVING))
            .scalar_one())
        users_waiting = conn.execute(
            select(func.count(func.distinct(assignments.c.participant_id)))
            .join(participants, participants.c.id == assignments.c.participant_id)
            .where(assignments.c.study == name, assignments.c.state == AssignmentState.SAVING,
                   participants.c.ls_user_id.is_(None))).scalar_one()
        lately = moment - timedelta(seconds=TREND_SECONDS)
        recorded_lately, saved_lately = conn.execute(select(
            _count(and_(assignments.c.submitted_at >= lately,
                        assignments.c.state != AssignmentState.SURPLUS)),
            _count(assignments.c.saved_at >= lately),
        ).where(assignments.c.study == name)).one()
        people = conn.execute(select(func.count()).where(participants.c.study == name)).scalar_one()
        golden = conn.execute(select(func.count()).select_from(gold)
                              .where(gold.c.study == name)).scalar_one()
        outcomes = dict(conn.execute(
            select(visits.c.outcome, func.count())
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == name).group_by(visits.c.outcome)).all())
        on_prolific = dict(conn.execute(
            select(prolific_statuses.c.status, func.count())
            .join(visits, visits.c.id == prolific_statuses.c.visit_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == name).group_by(prolific_statuses.c.status)).all())
    return StudyStatus(
        episodes=len(per_task),
        done=sum(1 for done, _, held in per_task if done == held),
        in_progress=sum(1 for done, leased, held in per_task
                        if done < held and done + leased > 0),
        open=sum(1 for done, leased, _ in per_task if done + leased == 0),
        active_leases=sum(leased for _, leased, _ in per_task),
        participants=people,
        visits_completed=outcomes.get(Outcome.COMPLETED, 0),
        visits_no_slots=outcomes.get(Outcome.NO_SLOTS, 0),
        visits_under_way=outcomes.get(None, 0),
        saved=states.get(AssignmentState.SAVED, 0),
        unsaved=states.get(AssignmentState.SAVING, 0),
        surplus=states.get(AssignmentState.SURPLUS, 0),
        late=late,
        median_seconds=statistics.median(times) if times else None,
        oldest_waiting_seconds=(moment - waiting_since).total_seconds() if waiting_since else None,
        failed=failed_saves(engine, name),
        shelved=states.get(AssignmentState.SHELVED, 0),
        gold=golden,
        added=added_slots(engine, name, k),
        visible=visible_quartiles(engine, name),
        visible_participants=participant_quartiles(engine, name),
        clipped=clipped_count(engine, name),
        pay=hourly_pay(engine, study),
        agreement=snapshot,
        agreement_unavailable=unavailable,
        users_waiting=users_waiting,
        recorded_lately=recorded_lately or 0,
        saved_lately=saved_lately or 0,
        on_prolific=on_prolific,
    )


def _running_agreement(engine: Engine, study: StudyFile
                       ) -> tuple[Snapshot | None, str | None]:
    """The last snapshot a gateway made (one serving the dashboard or adaptive raters with a
    target width), else one computed now (not saved: such a gateway keeps the snapshot), else why this install cannot compute it (``figures_unavailable``);
    neither before any rating of an ordinary episode (gold ones are left out)."""
    snapshot = latest_snapshot(engine, study.name)
    if snapshot is not None or not arrivals(engine, study.name)[0]:
        return snapshot, None
    unavailable = figures_unavailable()
    if unavailable is not None:
        return None, unavailable
    from .live.figures import live_figures  # the statistics libraries: only when computed here

    return live_figures(engine, study), None
