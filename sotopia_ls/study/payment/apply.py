"""Carrying out a study's review decisions on Prolific (``study pay``), or writing
them as files for Prolific's own screens.

Each action is recorded as soon as Prolific accepted it, so a failure keeps what was sent and
a rerun sends nothing twice; what each decision becomes is in README.md, "Paying on Prolific".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

import pandas as pd
from sqlalchemy import Engine, select

from ...errors import StudyError
from ...exporter.cells import neutralized_frame
from ...folders import replaced_folder
from ..screening.qualification import allow_list_of
from ..screening.review import DECISIONS, SCREENED_OUT
from ..settings import StudyFile
from ..store import (
    add_once,
    aware,
    decisions,
    now,
    participants,
    prolific_actions,
    prolific_group_members,
    prolific_groups,
    visits,
)
from ..states import BonusState
from .bonus import (
    Bonus,
    BonusPlan,
    BonusRule,
    bulk_bonuses,
    pay,
    plan_bonuses,
    record_bonuses,
    set_up,
)
from .prolific import (
    BULK_APPROVE_LIMIT,
    Prolific,
    ProlificError,
    ProlificRefused,
    ProlificUnavailable,
    rejection,
)

# Columns of the rejections file: what Prolific's reject screen asks for, per submission.
REJECT_COLUMNS = ("participant_id", "submission_id", "rejection_category", "message")
# Columns of the file of actions Prolific accepted already (sent with --send).
SENT_COLUMNS = ("participant_id", "submission_id", "action", "sent_at")
ALLOW_LIST_FILE = "allow-list.txt"
_FILE_NAMES = re.compile(r"approve-[0-9a-z]+\.txt|(reject|sent)-[0-9a-z]+\.csv|" + re.escape(
    ALLOW_LIST_FILE))
_SENT = {"approve": "approved", "reject": "rejected"}


@dataclass(frozen=True)
class SubmissionDecision:
    """One visit's recorded decision, with the Prolific ids it acts on."""

    visit_id: int
    submission_id: str
    participant_id: str
    prolific_study: str
    decision: str  # approve | look | reject
    message: str | None
    category: str | None
    sent: str | None  # what was sent to Prolific for the submission already
    sent_at: datetime | None

    @property
    def subject(self) -> str:
        return f"submission {self.submission_id} (participant {self.participant_id})"


@dataclass(frozen=True)
class GroupPlan:
    """A qualification round's participant group: to make (``group_id`` None) or to extend."""

    qualification: str
    name: str
    group_id: str | None
    workspace_id: str | None  # where a group still to make is made
    new_members: tuple[str, ...]
    allowed: tuple[str, ...]  # the whole allow-list


@dataclass(frozen=True)
class Plan:
    """What is left to send to Prolific for a study, and what was sent already."""

    study: str
    approvals: tuple[SubmissionDecision, ...]
    rejections: tuple[SubmissionDecision, ...]
    waiting: tuple[SubmissionDecision, ...]
    conflicts: tuple[SubmissionDecision, ...]  # sent already as another decision
    sent: tuple[SubmissionDecision, ...]  # sent already as decided
    group: GroupPlan | None
    screened_out: int = 0  # a qualification round's screen-outs: nothing to send
    bonuses: BonusPlan | None = None

    def lines(self) -> list[str]:
        """The plan as ``study pay`` prints it: the counts, each action's lines in the order
        of ``ACTIONS``, then what is not sent (waiting, screened out, conflicts)."""
        requests = -(-len(self.approvals) // BULK_APPROVE_LIMIT)
        out = [(f"study {self.study}: {len(self.approvals)} to approve (in {requests} "
                f"bulk-approve request(s)), {len(self.rejections)} to reject, "
                f"{len(self.waiting)} waiting for your decision, {len(self.conflicts)} "
                f"conflict(s), {len(self.sent)} sent before")]
        out += [line for action in ACTIONS for line in action.planned(self)]
        out += [f"look     {d.subject}: waiting for you; write approve or reject in the review "
                "file" for d in self.waiting]
        if self.screened_out:
            out.append(f"screened out: {self.screened_out} submission(s) of the qualification "
                       "round; nothing to send (Prolific does not await their review)")
        out += [f"conflict {d.subject}: {_SENT[d.sent or '']} on Prolific already, now "
                f"{d.decision!r} in the review; not sent (Prolific cannot undo a status change)"
                for d in self.conflicts]
        return out


def plan_payment(engine: Engine, study: StudyFile, group_name: str,
                 workspace_id: str | None = None, bonus_rule: BonusRule | None = None) -> Plan:
    """What is left to send for ``study``'s decisions (and its allow-list, if it is a
    qualification round, and its bonuses: ``bonus_rule``'s and those not paid yet); a
    rejection Prolific would refuse stops it, naming the participant."""
    kinds: dict[str, list[SubmissionDecision]] = {kind: [] for kind in (*DECISIONS, "conflict",
                                                                        "sent")}
    for decided in _decided(engine, study.name):
        if decided.decision not in DECISIONS:
            raise StudyError(f"study {study.name}: visit {decided.visit_id} has the decision "
                             f"{decided.decision!r}, none of {', '.join(DECISIONS)}; record the "
                             "review file again with `study decide`")
        if decided.sent is None:
            kinds[decided.decision].append(decided)
        elif decided.sent == decided.decision:
            kinds["sent"].append(decided)
        else:
            kinds["conflict"].append(decided)
    for decided in kinds["reject"]:
        try:
            rejection(decided.message or "", decided.category or "")
        except ProlificError as exc:
            raise StudyError(f"study {study.name}: the rejection of {decided.subject} "
                             f"(visit {decided.visit_id}): {exc}") from exc
    return Plan(study=study.name, approvals=tuple(kinds["approve"]),
                rejections=tuple(kinds["reject"]), waiting=tuple(kinds["look"]),
                conflicts=tuple(kinds["conflict"]), sent=tuple(kinds["sent"]),
                screened_out=len(kinds[SCREENED_OUT]),
                group=_group_plan(engine, study, group_name, workspace_id),
                bonuses=plan_bonuses(engine, study, bonus_rule))


def _decided(engine: Engine, study: str) -> list[SubmissionDecision]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(decisions.c.visit_id, decisions.c.decision, decisions.c.message,
                   decisions.c.category, visits.c.prolific_session_id,
                   visits.c.prolific_study_id, participants.c.external_id,
                   prolific_actions.c.action, prolific_actions.c.sent_at)
            .join(visits, visits.c.id == decisions.c.visit_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .outerjoin(prolific_actions, prolific_actions.c.visit_id == decisions.c.visit_id)
            .where(participants.c.study == study)
            .order_by(decisions.c.visit_id)
        ).all()
    return [SubmissionDecision(
        visit_id=row.visit_id, submission_id=row.prolific_session_id,
        participant_id=row.external_id, prolific_study=row.prolific_study_id,
        decision=row.decision, message=row.message, category=row.category, sent=row.action,
        sent_at=aware(row.sent_at))
        for row in rows]


def _group_plan(engine: Engine, study: StudyFile, name: str,
                workspace_id: str | None) -> GroupPlan | None:
    if study.qualification is None:
        return None
    allowed = allow_list_of(engine, study.name)
    with engine.connect() as conn:
        group = conn.execute(select(prolific_groups).where(
            prolific_groups.c.qualification == study.name)).first()
        added = set(conn.execute(select(prolific_group_members.c.external_id).where(
            prolific_group_members.c.qualification == study.name)).scalars())
    if not allowed and group is None:
        return None
    return GroupPlan(qualification=study.name, name=group.name if group else name,
                     group_id=group.group_id if group else None, workspace_id=workspace_id,
                     new_members=tuple(p for p in allowed if p not in added),
                     allowed=tuple(allowed))


def default_group_name(study: StudyFile) -> str:
    return f"{study.name}: passed the qualification"


@dataclass
class Sent:
    """What ``send_plan`` got Prolific to accept, and each failure on one line."""

    approved: list[SubmissionDecision] = field(default_factory=list)
    rejected: list[SubmissionDecision] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    group_id: str | None = None
    bonused: list[Bonus] = field(default_factory=list)  # set up in this run
    set_up: list[str] = field(default_factory=list)  # the bulk bonuses set up
    paid: list[str] = field(default_factory=list)  # the bulk bonuses paid
    failures: list[str] = field(default_factory=list)
    stopped: bool = False  # Prolific unavailable: what came after the failure was not tried

    def lines(self) -> list[str]:
        done = [told for action in ACTIONS if (told := action.sent(self))]
        out = ["sent: " + ", ".join(done)]
        out += [f"failed: {failure}" for failure in self.failures]
        if self.stopped:
            out.append("stopped: Prolific is unavailable; run the same command again later, "
                       "it sends only what is left")
        return out


# One request to Prolific and what its failure adds to Prolific's message.
Step = tuple[Callable[[], None], str]


@dataclass(frozen=True)
class Action:
    """One kind of change ``study pay`` makes on Prolific: its lines in the plan, the steps
    that send it (each recorded as soon as Prolific accepted it), and what a run sent of it
    (None: nothing to say). ``send_plan`` runs ``ACTIONS`` in order, knowing none of them."""

    planned: Callable[[Plan], list[str]]
    steps: Callable[[Engine, Prolific, Plan, Sent], list[Step]]
    sent: Callable[[Sent], str | None]


def send_plan(engine: Engine, prolific: Prolific, plan: Plan) -> Sent:
    """Send ``plan``, action by action (``ACTIONS``); every step is made before the first is
    sent, so a plan that cannot be sent sends nothing. A refusal is noted and the rest still
    sent; Prolific unavailable after its retries stops the run."""
    sent = Sent(group_id=plan.group.group_id if plan.group else None)
    steps = [step for action in ACTIONS for step in action.steps(engine, prolific, plan, sent)]
    for step, who in steps:
        try:
            step()
        except ProlificUnavailable as exc:
            sent.failures.append(f"{exc}{who}")
            sent.stopped = True
            break
        except ProlificError as exc:
            sent.failures.append(f"{exc}{who}")
    return sent


def _approvals(engine: Engine, prolific: Prolific, plan: Plan, sent: Sent) -> list[Step]:
    return [(partial(_approve, engine, prolific, chunk, sent), "")
            for chunk in _chunks(plan.approvals)]


def _rejections(engine: Engine, prolific: Prolific, plan: Plan, sent: Sent) -> list[Step]:
    return [(partial(_reject, engine, prolific, d, sent), f" (participant {d.participant_id})")
            for d in plan.rejections]


def _group_steps(engine: Engine, prolific: Prolific, plan: Plan, sent: Sent) -> list[Step]:
    group = plan.group
    if not (group and group.new_members):
        return []
    if group.group_id is None and not group.workspace_id:
        raise StudyError(f"study {plan.study}: making the participant group {group.name!r} "
                         "needs the Prolific workspace it belongs in: give --workspace ID "
                         "(the id in the address of the workspace's page on Prolific)")
    return [(partial(_extend_group, engine, prolific, group, sent), "")]


def _group_lines(plan: Plan) -> list[str]:
    group = plan.group
    if not (group and group.new_members):
        return []
    where = (f"participant group {group.group_id}" if group.group_id
             else f"a new participant group {group.name!r} in workspace "
             + (group.workspace_id or "? (give --workspace ID to send it)"))
    return [f"group    add {len(group.new_members)} passer(s) of {group.qualification} to "
            f"{where}: " + ", ".join(group.new_members)]


def _chunks(approvals: Sequence[SubmissionDecision]) -> list[Sequence[SubmissionDecision]]:
    return [approvals[start:start + BULK_APPROVE_LIMIT]
            for start in range(0, len(approvals), BULK_APPROVE_LIMIT)]


def _approve(engine: Engine, prolific: Prolific, chunk: Sequence[SubmissionDecision],
             sent: Sent) -> None:
    try:
        prolific.bulk_approve([d.submission_id for d in chunk])
    except ProlificRefused as exc:
        # A request refused whole names no submission: approving them one by one pays the
        # others and names the participant of each one refused.
        sent.failures.append(f"{exc}; approving them one by one")
        for decided in chunk:
            try:
                prolific.approve(decided.submission_id)
            except ProlificRefused as refused:
                sent.failures.append(f"{refused} (participant {decided.participant_id})")
                continue
            _record(engine, [decided], "approve")
            sent.approved.append(decided)
        return
    _record(engine, chunk, "approve")
    sent.approved.extend(chunk)


def _reject(engine: Engine, prolific: Prolific, decided: SubmissionDecision, sent: Sent) -> None:
    prolific.reject(decided.submission_id, decided.message or "", decided.category or "")
    _record(engine, [decided], "reject")
    sent.rejected.append(decided)


def _record(engine: Engine, done: Sequence[SubmissionDecision], action: str) -> None:
    with engine.begin() as conn:
        for d in done:
            add_once(conn, prolific_actions,
                     {"visit_id": d.visit_id, "action": action, "sent_at": now()})


def _extend_group(engine: Engine, prolific: Prolific, group: GroupPlan, sent: Sent) -> None:
    """Add the new members to the group, made first if it is not recorded: a group of that
    name already in the workspace (made by a request whose answer was lost) is taken."""
    members = list(group.new_members)
    made = None
    if group.group_id is None:
        workspace = group.workspace_id or ""
        made = next((found for found in prolific.participant_groups(workspace)
                     if found.name == group.name), None)
        if made is None:
            made = prolific.create_participant_group(group.name, workspace, members)
        else:
            prolific.add_to_participant_group(made.id, members)
        sent.group_id = made.id
    else:
        prolific.add_to_participant_group(group.group_id, members)
    with engine.begin() as conn:  # the group and its first members, together
        if made is not None:
            add_once(conn, prolific_groups, {
                "qualification": group.qualification, "group_id": made.id, "name": made.name,
                "created_at": now()})
        for member in members:
            add_once(conn, prolific_group_members, {
                "qualification": group.qualification, "external_id": member,
                "added_at": now()})
    sent.added.extend(members)


def _bonus_steps(engine: Engine, prolific: Prolific, plan: Plan, sent: Sent) -> list[Step]:
    """Record the rule's bonuses, set up those owed (one bulk bonus per Prolific study), then
    pay every bulk bonus set up and not paid."""
    bonus = plan.bonuses
    if bonus is None or not (bonus.new or bonus.waiting or bonus.to_pay):
        return []
    owed: dict[str, list[Bonus]] = {}
    for each in (*bonus.new, *bonus.waiting):
        owed.setdefault(each.prolific_study, []).append(each)
    return [(partial(record_bonuses, engine, bonus.new), ""),
            *((partial(_set_up, engine, prolific, plan.study, study, group, sent), "")
              for study, group in owed.items()),
            (partial(_pay_bonuses, engine, prolific, plan.study, sent), "")]


def _set_up(engine: Engine, prolific: Prolific, study: str, prolific_study: str,
            owed: list[Bonus], sent: Sent) -> None:
    sent.set_up.append(set_up(engine, prolific, study, prolific_study, owed))
    sent.bonused.extend(owed)


def _pay_bonuses(engine: Engine, prolific: Prolific, study: str, sent: Sent) -> None:
    """Pay each bulk bonus of ``study`` set up and not paid, as it stands now."""
    for bulk_id in bulk_bonuses(engine, study, BonusState.SET_UP):
        try:
            if pay(engine, prolific, bulk_id):
                sent.paid.append(bulk_id)
        except ProlificRefused as exc:
            sent.failures.append(str(exc))


# What ``study pay`` sends, in this order: approvals first (they pay), then rejections, then a
# qualification round's passers as a participant group, then bonuses.
ACTIONS: tuple[Action, ...] = (
    Action(planned=lambda plan: [f"approve  {d.subject}" for d in plan.approvals],
           steps=_approvals, sent=lambda sent: f"{len(sent.approved)} approved"),
    Action(planned=lambda plan: [f"reject   {d.subject} {d.category}: {d.message}"
                                 for d in plan.rejections],
           steps=_rejections, sent=lambda sent: f"{len(sent.rejected)} rejected"),
    Action(planned=_group_lines, steps=_group_steps,
           sent=lambda sent: f"{len(sent.added)} added to participant group {sent.group_id}"
           if sent.added else None),
    Action(planned=lambda plan: plan.bonuses.lines() if plan.bonuses else [],
           steps=_bonus_steps,
           sent=lambda sent: f"bonuses of {len(sent.bonused)} submission(s) set up in "
           f"{len(sent.set_up)} bulk bonus(es), {len(sent.paid)} bulk bonus(es) paid"
           if sent.set_up or sent.paid else None),
)


def write_prolific_files(plan: Plan, folder: Path) -> list[Path]:
    """The plan as the files Prolific's screens take, replacing ``folder`` whole: per Prolific
    study, the decisions not sent yet in ``approve-<study id>.txt`` (participant ids one a
    line, for its Bulk approve box) and ``reject-<study id>.csv`` (``REJECT_COLUMNS``, one
    rejection a row), and those Prolific accepted already in ``sent-<study id>.csv``
    (``SENT_COLUMNS``); for a qualification round, ``allow-list.txt`` (every passer's
    participant id, one a line)."""
    texts: dict[str, str] = {}
    for study_id, approvals in _by_study(plan.approvals).items():
        texts[f"approve-{study_id}.txt"] = "".join(f"{d.participant_id}\n" for d in approvals)
    for study_id, rejections in _by_study(plan.rejections).items():
        texts[f"reject-{study_id}.csv"] = _csv(REJECT_COLUMNS, [
            (d.participant_id, d.submission_id, d.category, d.message) for d in rejections])
    for study_id, sent in _by_study((*plan.sent, *plan.conflicts)).items():
        texts[f"sent-{study_id}.csv"] = _csv(SENT_COLUMNS, [
            (d.participant_id, d.submission_id, d.sent,
             d.sent_at.isoformat() if d.sent_at else "") for d in sent])
    if plan.group and plan.group.allowed:
        texts[ALLOW_LIST_FILE] = "".join(f"{member}\n" for member in plan.group.allowed)
    with replaced_folder(folder, lambda name: bool(_FILE_NAMES.fullmatch(name))) as staging:
        for name, text in texts.items():
            (staging / name).write_text(text, encoding="utf-8")
    return [folder / name for name in sorted(texts)]


def _csv(columns: Sequence[str], rows: list[tuple[object, ...]]) -> str:
    return neutralized_frame(pd.DataFrame(rows, columns=list(columns))).to_csv(index=False)


def _by_study(decided: Sequence[SubmissionDecision]) -> dict[str, list[SubmissionDecision]]:
    grouped: dict[str, list[SubmissionDecision]] = {}
    for d in decided:
        grouped.setdefault(d.prolific_study, []).append(d)
    return grouped


@dataclass(frozen=True)
class Payment:
    """What ``apply_decisions`` did: the plan, what was sent (None: a dry run) and the files
    written (none unless asked)."""

    plan: Plan
    sent: Sent | None
    files: list[Path]

    def lines(self) -> list[str]:
        out = self.plan.lines()
        if self.sent is None:
            out.append("dry run: nothing was sent to Prolific (add --send to send it)")
        else:
            out += self.sent.lines()
        out += [f"wrote {path}" for path in self.files]
        return out


def apply_decisions(engine: Engine, study: StudyFile, *, prolific: Prolific | None,
                    send: bool = False, files_dir: Path | None = None,
                    group_name: str | None = None, workspace_id: str | None = None,
                    bonus_rule: BonusRule | None = None) -> Payment:
    """Carry out ``study``'s recorded decisions on Prolific: the plan alone (a dry run), or,
    with ``send``, the plan sent through ``prolific`` and recorded as it goes; then, with
    ``files_dir``, the decisions as they stand as files for Prolific's screens."""
    if send and prolific is None:
        raise StudyError("sending to Prolific needs its API token: set PROLIFIC_TOKEN, or write "
                         "the files for Prolific's own screens with --prolific-files DIR")
    name = group_name or default_group_name(study)
    plan = plan_payment(engine, study, name, workspace_id, bonus_rule)
    sent = send_plan(engine, prolific, plan) if send and prolific else None
    files: list[Path] = []
    if files_dir is not None:  # what this run sent is among the sent ones
        standing = plan_payment(engine, study, name, workspace_id) if sent else plan
        files = write_prolific_files(standing, files_dir)
    return Payment(plan=plan, sent=sent, files=files)
