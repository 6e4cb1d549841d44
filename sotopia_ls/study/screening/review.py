"""The review file: one row per visit (a Prolific submission) with every quality flag, the gold
distance, the qualification's verdict and a suggested decision; then the researcher's edited
decisions read back, checked whole, recorded and marked in the tasks' meta.

The columns and the suggestion's rules (``RULES``, the first that applies) are described in
README.md, "Review and pay"; nothing here tells a participant of references or other people.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError
from sqlalchemy import Connection, Engine, select

from ...errors import LabelStudioError, StudyError
from ...exporter.cells import FORMULA_START, neutralized_frame
from ...exporter.protocol import median_minutes
from ...folders import write_file
from ...labelstudio.client import Client, merge_task_meta
from ...labelstudio.tasks import DIALOGUE, REVIEW, REVIEW_DECISIONS
from ..payment.prolific import InvalidRejection, rejection
from ..settings import StudyFile
from ..states import FOR_LABEL_STUDIO, SUBMITTED, Outcome, PracticeStanding
from ..store import (
    add_once,
    assignments,
    bonuses,
    decisions,
    episodes,
    gold,
    insert_of,
    now,
    participants,
    prolific_statuses,
    visits,
)
from .flags import (
    FLAGS,
    Annotation,
    Earlier,
    Flag,
    FlagResult,
    FlagThresholds,
    Typing,
    flag_annotation,
    largest_distance,
    measured_typing,
)
from .judges import judges_rationales
from .practice import visit_practice
from .qualification import verdicts
from .rationale_check import CHECK, stored_verdicts
from .typing_counts import recorded_typing
from .visible import clipped, recorded_visible

UNFINISHED = "unfinished"
# A qualification round's failed submission: the participant got the screen-out code, so
# Prolific does not await its review and payment sends nothing for it.
SCREENED_OUT = "screened_out"
DECISIONS: tuple[str, ...] = (*REVIEW_DECISIONS, SCREENED_OUT)
IDENTITY = ("participant", "submission")
EDITABLE = ("decision", "message", "category")
# An approved submission's bonus, in the currency (``2.50``): optional, recorded once by `study
# decide` and paid by `study pay --send` (``payment/bonus.py``).
BONUS = "bonus"


def columns(flags: Sequence[Flag] = FLAGS) -> tuple[str, ...]:
    """The review file's columns, two for each flag of ``flags``."""
    return (*IDENTITY, "outcome", "prolific_status", "episodes", "gold_episodes", "minutes",
            "median_minutes",
            *(f"{flag.name}.{count}" for flag in flags for count in ("fired", "judged")),
            f"{CHECK}.unsupported", f"{CHECK}.judged", "gold_distance", "qualification", "practice", "practice_attempts", "suggested",
            "rule", "details", *EDITABLE, BONUS)


# What each flag found, as a participant reads it in a rejection: ``fired`` and ``judged``
# count their ratings, the other names are the study's thresholds (``FlagThresholds``).
PARTICIPANT_WORDING: dict[str, str] = {
    "short_rationale": "explanations shorter than {min_rationale_words} words in {fired} of "
                       "{judged} conversations",
    "repeated_rationale": "one explanation given for several questions in {fired} of {judged} "
                          "conversations",
    "copied_rationale": "explanations that match another participant's in {fired} of {judged} "
                        "conversations",
    "too_fast": "less time on {fired} of {judged} conversations than it takes to read them",
    "pasted_rationale": "explanations mostly pasted rather than typed in {fired} of {judged} "
                        "conversations",
    "straight_lining": "the same score for every question in {fired} of {judged} conversations",
    "rationale_echoes_judge": "explanations that match a computer model's output in {fired} of "
                              "{judged} conversations",
    "rationale_contradicts_score": "explanations that say the opposite of their score (\"no "
                                   "secret was revealed\" beside a score far from 0) in {fired} "
                                   "of {judged} conversations",
    # Nothing of references or how many conversations had one: in a main study the gold
    # episodes are hidden, and the counts would tell how many there were.
    "gold_distance": "scores far from what the conversations support",
}
_FAILED_CHECKS = ("Thank you for taking part in our study. We cannot approve this submission "
                  "because it did not pass our quality checks.")
_CHECKS_CLOSING = ("The instructions asked for a considered score and a written explanation "
                   "of your own for every question.")
_UNFINISHED = ("Thank you for your interest in our study. We cannot approve this submission "
               "because the study was not completed: the rating pages were left before the "
               "end, so no completion code was given.")


@dataclass(frozen=True)
class Rated:
    """One submitted rating of a visit: its episode, whether gold, its flags."""

    task_id: int
    gold: bool
    seconds: float | None  # on task: the page's visible time where measured, else lead time
    distance: int | None  # the largest |score - reference|, for a gold rating
    flags: tuple[FlagResult, ...]
    claimed: float | None = None  # the page's visible seconds, where more than ``seconds``
    unmeasured: str = ""  # why its typing counts are not measured ("" when they are)
    checked: tuple[Any, ...] = ()  # its rationales' verdicts by a model (``rationale_check``)

    def findings(self) -> list[tuple[str, str]]:
        """What the researcher reads of the rating: each flag that fired, a clipped time and
        typing not measured, with what was found."""
        found = [(result.name, result.detail) for result in self.flags if result.fired]
        if self.claimed is not None:
            found.append(("time_clipped", f"the page claimed {self.claimed:.0f} s, the gateway "
                                          f"saw {self.seconds:.0f} s pass"))
        if self.unmeasured:
            found.append(("typing_not_measured", self.unmeasured))
        found += [(CHECK, f"{verdict.rating}: not supported, says {verdict.model}: "
                          f"{verdict.reason}") for verdict in self.checked
                  if not verdict.supported]
        return found


@dataclass(frozen=True)
class ReviewedVisit:
    """A visit as the review sees it."""

    id: int
    participant: str
    submission: str
    outcome: str
    rated: tuple[Rated, ...]
    qualification: str  # passed | failed | "" (not a scored qualification visit)
    practice: str = ""  # a ``PracticeStanding`` of its participant | "" (no attempt in it)
    practice_attempts: int = 0  # practice attempts made in this visit

    def counts(self, flag: str) -> tuple[int, int]:
        """Ratings ``flag`` fired on, and ratings it judged."""
        results = [result for rated in self.rated for result in rated.flags
                   if result.name == flag]
        return sum(result.fired for result in results), len(results)


def _most(flag: str) -> Callable[[ReviewedVisit], bool]:
    def applies(visit: ReviewedVisit) -> bool:
        fired, judged = visit.counts(flag)
        return fired * 2 > judged
    return applies


def _everywhere(flag: str) -> Callable[[ReviewedVisit], bool]:
    def applies(visit: ReviewedVisit) -> bool:
        fired, judged = visit.counts(flag)
        return judged > 0 and fired == judged
    return applies


def _any_fired(visit: ReviewedVisit) -> bool:
    return any(result.fired for rated in visit.rated for result in rated.flags)


@dataclass(frozen=True)
class Rule:
    """When ``applies``, suggest ``decision``; a rejection's ``category`` and the ``opening``
    of its message (the checks that failed follow it)."""

    name: str
    decision: str
    category: str
    opening: str
    applies: Callable[[ReviewedVisit], bool]


RULES: tuple[Rule, ...] = (
    # Told to return the study on Prolific: nothing there awaits a decision.
    Rule(Outcome.NOT_ADMITTED, "", "", "",
         lambda visit: visit.outcome == Outcome.NOT_ADMITTED),
    # A qualification round's verdict decides its completed submissions: the passer did the
    # work asked, and whoever failed was screened out on Prolific already.
    Rule("qualified", "approve", "", "", lambda visit: visit.qualification == "passed"),
    Rule(SCREENED_OUT, SCREENED_OUT, "", "", lambda visit: visit.qualification == "failed"),
    # Failed every practice attempt: given the practice's screen-out code, nothing rated.
    Rule("practice_failed", SCREENED_OUT, "", "",
         lambda visit: visit.outcome == Outcome.SCREENED_OUT
         and visit.practice == PracticeStanding.FAILED),
    Rule("far_from_gold", "reject", "FAILED_CHECK", _FAILED_CHECKS, _most("gold_distance")),
    Rule("straight_lining", "reject", "LOW_EFFORT", _FAILED_CHECKS,
         _everywhere("straight_lining")),
    Rule(UNFINISHED, "look", "NO_CODE", _UNFINISHED, lambda visit: visit.outcome == UNFINISHED),
    # A page that claims more time than passed is no page of the gateway's as it was sent.
    Rule("time_clipped", "look", "FAILED_CHECK", _FAILED_CHECKS,
         lambda visit: any(rated.claimed is not None for rated in visit.rated)),
    Rule("flagged", "look", "LOW_EFFORT", _FAILED_CHECKS, _any_fired),
    # Whether rationales were pasted is unknown: never approved as if they were typed.
    Rule("typing_not_measured", "look", "FAILED_CHECK", _FAILED_CHECKS,
         lambda visit: any(rated.unmeasured for rated in visit.rated)),
)
APPROVE = Rule("clean", "approve", "", "", lambda visit: True)


def suggestion(visit: ReviewedVisit) -> Rule:
    """The first rule of ``RULES`` that applies to ``visit``, else ``APPROVE``."""
    return next((rule for rule in RULES if rule.applies(visit)), APPROVE)


def participant_message(visit: ReviewedVisit, rule: Rule, thresholds: FlagThresholds,
                        flags: Sequence[Flag] = FLAGS) -> str:
    """What a rejection by ``rule`` tells the participant: its opening, then each check of
    ``flags`` that failed (with how often, except the gold distance; a flag without its
    participant wording in its own description); empty for a rule without an opening (an
    approval, a screen-out)."""
    if not rule.opening:
        return ""
    failed = []
    for flag in flags:
        fired, judged = visit.counts(flag.name)
        if fired:
            wording = PARTICIPANT_WORDING.get(
                flag.name, f"{flag.description} in {{fired}} of {{judged}} conversations")
            failed.append(wording.format(fired=fired, judged=judged, **thresholds.model_dump()))
    if not failed:
        return rule.opening
    return f"{rule.opening} They found {'; '.join(failed)}. {_CHECKS_CLOSING}"


# --- reading the gateway's database ---------------------------------------------------------


def _words(shown: dict[str, Any]) -> int | None:
    """Words of the dialogue an episode showed; None when it showed none."""
    turns = shown.get(DIALOGUE)
    if not isinstance(turns, list):
        return None
    return sum(len(str(value).split()) for turn in turns if isinstance(turn, dict)
               for value in turn.values())


def _visit_rows(engine: Engine, study: StudyFile) -> list[Any]:
    """Each visit of ``study`` (id, submission, outcome, participant), first arrived first."""
    with engine.connect() as conn:
        return list(conn.execute(
            select(visits.c.id, visits.c.prolific_session_id, visits.c.outcome,
                   participants.c.external_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == study.name)
            .order_by(visits.c.arrived_at, visits.c.id)).all())


def thresholds(study: StudyFile) -> FlagThresholds:
    """The flags' thresholds for ``study``: a qualification round's own ``max_distance``
    judges the gold distance, as it judged the round (one setting for one thing)."""
    if study.qualification is None:
        return study.flags
    return study.flags.model_copy(update={"gold_distance": study.qualification.max_distance})


def read_visits(engine: Engine, study: StudyFile,
                flags: Sequence[Flag] = FLAGS) -> list[ReviewedVisit]:
    """Every visit of ``study``, first arrived first, with its submitted ratings flagged by
    ``flags``."""
    scored = verdicts(engine, study.name)
    rated = _rated(engine, study, flags)
    practised = visit_practice(engine, study.name, study.practice) if study.practice else {}
    return [ReviewedVisit(row.id, row.external_id, row.prolific_session_id,
                          row.outcome or UNFINISHED, tuple(rated[row.id]),
                          "" if row.id not in scored
                          else "passed" if scored[row.id].passed else "failed",
                          *practised.get(row.id, ("", 0)))
            for row in _visit_rows(engine, study)]


def _rated(engine: Engine, study: StudyFile, flags: Sequence[Flag]) -> dict[int, list[Rated]]:
    """Every submitted rating of ``study``, flagged by ``flags``, by visit id."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(assignments.c.id, assignments.c.task_id, assignments.c.visit_id,
                   assignments.c.participant_id, assignments.c.results,
                   assignments.c.lead_time, participants.c.external_id)
            .join(participants, participants.c.id == assignments.c.participant_id)
            .where(assignments.c.study == study.name, assignments.c.state.in_(SUBMITTED))
            .order_by(assignments.c.submitted_at, assignments.c.id)).all()
        references = dict(conn.execute(
            select(gold.c.task_id, gold.c.reference).where(gold.c.study == study.name)).all())
        words = {task_id: _words(shown) for task_id, shown in conn.execute(
            select(episodes.c.task_id, episodes.c.shown).where(episodes.c.study == study.name))}
    flat = {row.id: row.results for row in rows}  # the stored scores, checked when submitted
    judged = judges_rationales(engine, study.name)
    checked = stored_verdicts(engine, study.name)
    typed = recorded_typing(engine, flat)
    # Time on task: the page's visible time where the page measured it (Label Studio's lead
    # time runs on while the participant is elsewhere).
    visible, claimed = recorded_visible(engine, flat), clipped(engine, flat)
    seconds = {row.id: visible.get(row.id, row.lead_time) for row in rows}
    limits = thresholds(study)
    submitted: dict[int, list[Any]] = defaultdict(list)  # each task's ratings so far
    rated: dict[int, list[Rated]] = defaultdict(list)
    for row in rows:  # first submitted first
        earlier = tuple(Earlier(participant=other.external_id, fields=flat[other.id])
                        for other in submitted[row.task_id]
                        if other.participant_id != row.participant_id)
        submitted[row.task_id].append(row)
        reference = references.get(row.task_id)
        annotation = _annotation(row, flat[row.id], words.get(row.task_id), earlier, reference,
                                 typed.get(row.id, {}), seconds[row.id],
                                 judged.get(row.task_id, {}))
        farthest = largest_distance(flat[row.id], reference) if reference else None
        rated[row.visit_id].append(Rated(
            row.task_id, reference is not None, seconds[row.id],
            abs(farthest[1] - farthest[2]) if farthest else None,
            flag_annotation(annotation, limits, flags), claimed.get(row.id),
            measured_typing(annotation)[1], tuple(checked.get(row.id, {}).values())))
    return rated


def _annotation(row: Any, fields: dict[str, Any], episode_words: int | None,
                earlier: tuple[Earlier, ...], reference: Any,
                typed: dict[str, Typing], seconds: float | None,
                judged: dict[str, dict[str, str]]) -> Annotation:
    try:
        return Annotation(participant=str(row.participant_id), episode=str(row.task_id),
                          fields=fields, episode_words=episode_words, seconds=seconds,
                          typing=typed, earlier=earlier, reference=reference, judged=judged)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise StudyError(f"assignment {row.id} (task {row.task_id}) cannot be reviewed: "
                         f"{first['msg']}") from None


# --- the rows -------------------------------------------------------------------------------


def _minutes(seconds: Sequence[float]) -> tuple[float | None, float | None]:
    """The minutes summed, and the median minutes per episode (as the protocol gives it)."""
    return (round(sum(seconds) / 60, 2) if seconds else None), median_minutes(seconds)


def _row(visit: ReviewedVisit, thresholds: FlagThresholds, recorded: Any,
         flags: Sequence[Flag], status: str, bonus: str) -> dict[str, Any]:
    rule = suggestion(visit)
    minutes, median = _minutes([r.seconds for r in visit.rated if r.seconds is not None])
    distances = [r.distance for r in visit.rated if r.distance is not None]
    row: dict[str, Any] = {
        "participant": visit.participant, "submission": visit.submission,
        "outcome": visit.outcome, "prolific_status": status,
        "episodes": sum(not r.gold for r in visit.rated),
        "gold_episodes": sum(r.gold for r in visit.rated),
        "minutes": minutes, "median_minutes": median,
    }
    for flag in flags:
        row[f"{flag.name}.fired"], row[f"{flag.name}.judged"] = visit.counts(flag.name)
    verdicts = [verdict for rated in visit.rated for verdict in rated.checked]
    row[f"{CHECK}.unsupported"] = sum(not verdict.supported for verdict in verdicts)
    row[f"{CHECK}.judged"] = len(verdicts)
    row |= {
        "gold_distance": max(distances) if distances else None,
        "qualification": visit.qualification, "practice": str(visit.practice),
        "practice_attempts": visit.practice_attempts,
        "suggested": rule.decision, "rule": rule.name,
        "details": "; ".join(f"task {r.task_id}: {name}: {detail}"
                             for r in visit.rated for name, detail in r.findings()),
    }
    row[BONUS] = bonus
    if recorded is not None:
        return row | {"decision": recorded.decision, "message": recorded.message or "",
                      "category": recorded.category or ""}
    return row | {"decision": rule.decision,
                  "message": participant_message(visit, rule, thresholds, flags),
                  "category": rule.category}


def review_rows(engine: Engine, study: StudyFile,
                flags: Sequence[Flag] = FLAGS) -> pd.DataFrame:
    """One row per visit of ``study`` (``columns(flags)``), its editable columns filled with
    the decision recorded before, else the suggestion; ``prolific_status`` is the submission's
    last status on Prolific, as followed (``payment/follow.py``; blank: none known)."""
    found = read_visits(engine, study, flags)
    ids = [v.id for v in found]
    with engine.connect() as conn:
        recorded = {row.visit_id: row for row in conn.execute(
            select(decisions).where(decisions.c.visit_id.in_(ids)))}
        statuses = dict(conn.execute(select(prolific_statuses.c.visit_id,
                                            prolific_statuses.c.status)
                                     .where(prolific_statuses.c.visit_id.in_(ids))).all())
        given = dict(conn.execute(select(bonuses.c.visit_id, bonuses.c.cents)
                                  .where(bonuses.c.visit_id.in_(ids))).all())
    judged = thresholds(study)
    frame = pd.DataFrame([_row(visit, judged, recorded.get(visit.id), flags,
                               statuses.get(visit.id, ""),
                               f"{given[visit.id] / 100:.2f}" if visit.id in given else "")
                          for visit in found], columns=list(columns(flags)))
    return frame.astype({"gold_distance": "Int64"})


def write_review(engine: Engine, study: StudyFile, path: Path, force: bool = False,
                 flags: Sequence[Flag] = FLAGS) -> pd.DataFrame:
    """Write ``study``'s review file to ``path`` (replaced whole), a column pair for each of
    ``flags``; its rows. Unless ``force``, a file there whose decisions differ from the ones
    it would get (edits not read back) is refused, naming its first such line."""
    frame = review_rows(engine, study, flags)
    if not force and path.exists():
        _check_unedited(path, frame)
    write_file(path, neutralized_frame(frame).to_csv(index=False))
    return frame


def _check_unedited(path: Path, frame: pd.DataFrame) -> None:
    """Refuse ``path`` when a row of it holds other decisions than ``frame`` gives its
    submission: the researcher's edits, not recorded yet, would be lost."""
    written = {row.submission: (*(str(row[name]).strip() for name in EDITABLE),
                                _amount(row[BONUS])) for _, row in frame.iterrows()}
    try:
        records = list(_records(path))
    except StudyError as error:
        raise StudyError(f"{error}; not a review file to replace: give --force to replace "
                         "it") from None
    for line, row in records:
        if written.get(row["submission"]) != (*(row[name] for name in EDITABLE),
                                              _amount(row.get(BONUS, ""))):
            raise StudyError(f"{path}: line {line} holds decisions not recorded (an edited "
                             "review file?): record them with `study decide`, or give "
                             "--force to replace it")


def _amount(cell: str) -> Decimal | str:
    """A bonus cell as an amount, so ``0.5`` is ``0.50``; a cell that is none, as written."""
    try:
        return Decimal(cell)
    except InvalidOperation:
        return cell


# --- reading the edited file back -----------------------------------------------------------


@dataclass(frozen=True)
class Decided:
    """One row of an edited review file, checked: the decision on a visit."""

    visit_id: int
    decision: str
    message: str | None
    category: str | None
    bonus_cents: int | None = None  # the optional bonus column, in hundredths


def _plain(cell: str) -> str:
    """A cell as written before ``neutralized_frame`` quoted it."""
    return cell[1:] if cell.startswith("'") and re.match(FORMULA_START, cell[1:]) else cell


def _records(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """Each record of the CSV file with the line it starts on. Read with the csv module, not
    pandas: each record's line is known, for the messages, even when a cell spans lines."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet may write a BOM
    except OSError as error:
        raise StudyError(f"{path}: cannot read the review file: {error.strerror}") from None
    except UnicodeDecodeError:
        raise StudyError(f"{path}: not UTF-8 text; save the review file as CSV UTF-8") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, [])
        missing = [name for name in (*IDENTITY, *EDITABLE) if name not in header]
        if missing:
            hint = (" (cells separated by ';'? save as CSV with commas)"
                    if len(header) == 1 and ";" in header[0] else "")
            raise StudyError(f"{path}: line 1: column {missing[0]} is missing{hint}")
        end = reader.line_num
        for cells in reader:
            line, end = end + 1, reader.line_num
            if not any(cells):
                continue
            if len(cells) != len(header):
                raise StudyError(f"{path}: line {line}: {len(cells)} cells where the header "
                                 f"has {len(header)}")
            yield line, {name: _plain(cell).strip() for name, cell in zip(header, cells)}
    except csv.Error as error:
        raise StudyError(f"{path}: line {reader.line_num}: not CSV: {error}") from None


class _BadCell(Exception):
    """A cell of an edited review file that cannot be recorded: its column and why."""

    def __init__(self, column: str, reason: str) -> None:
        super().__init__(reason)
        self.column = column


def _checked(row: dict[str, str], known: dict[str, list[Any]],
             screened: set[int]) -> Decided | None:
    """The decision ``row`` holds (None: no decision on a visit refused at admission);
    ``_BadCell`` at its first problem."""
    submission = row["submission"]
    if not known.get(submission):
        raise _BadCell("submission", f"{submission!r} is no submission of this study")
    visit = next((v for v in known[submission] if v.external_id == row["participant"]), None)
    if visit is None:
        raise _BadCell("participant", f"{row['participant']!r} is not the participant of "
                       f"submission {submission}: leave the identity columns as written")
    decision, message, category = row["decision"].lower(), row["message"], row["category"].upper()
    if not decision and visit.outcome == Outcome.NOT_ADMITTED:
        return None  # told to return the study on Prolific: nothing there awaits a decision
    if decision not in DECISIONS:
        raise _BadCell("decision", f"{row['decision']!r} is not one of {', '.join(DECISIONS)}")
    if decision == SCREENED_OUT and visit.id not in screened:
        raise _BadCell("decision", f"{SCREENED_OUT} is only for a submission that failed the "
                       "qualification round or the practice")
    if decision == "reject":
        try:
            rejection(message, category)
        except InvalidRejection as invalid:
            raise _BadCell("message" if "message" in invalid.fields else "category",
                           str(invalid)) from None
    if decision in ("approve", SCREENED_OUT):  # Prolific is sent no message
        message = category = ""
    return Decided(visit.id, decision, message or None, category or None,
                   _bonus(row.get(BONUS, ""), decision))


def _bonus(cell: str, decision: str) -> int | None:
    """The bonus cell in hundredths (None: empty); only an approved submission gets one."""
    if not cell:
        return None
    try:
        amount = Decimal(cell)
    except InvalidOperation:
        amount = Decimal("NaN")
    if not amount.is_finite() or amount <= 0 or amount != round(amount, 2):
        raise _BadCell(BONUS, f"{cell!r} is no amount of the currency above 0 with at most "
                       "two decimals, e.g. 0.50")
    if decision != "approve":
        raise _BadCell(BONUS, "only an approved submission gets a bonus")
    return int(amount * 100)


def read_review(path: Path, engine: Engine, study: StudyFile) -> list[Decided]:
    """The decisions of an edited review file, every row checked; the first bad row raises
    one line naming the file, line and column."""
    known: dict[str, list[Any]] = defaultdict(list)
    for row in _visit_rows(engine, study):
        known[row.prolific_session_id].append(row)
    screened = {visit for visit, verdict in verdicts(engine, study.name).items()
                if not verdict.passed}
    if study.practice is not None:
        screened |= {visit for visit, (standing, _) in visit_practice(
            engine, study.name, study.practice).items() if standing == PracticeStanding.FAILED}
    decided: dict[int, tuple[int, Decided]] = {}
    for line, row in _records(path):
        try:
            checked = _checked(row, known, screened)
            if checked is not None and checked.visit_id in decided:
                raise _BadCell("submission", f"{row['submission']} is decided on line "
                               f"{decided[checked.visit_id][0]} already")
        except _BadCell as bad:
            raise StudyError(f"{path}: line {line}, column {bad.column}: {bad}") from None
        if checked is not None:
            decided[checked.visit_id] = line, checked
    return [checked for _, checked in decided.values()]


# --- recording ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Marked:
    """What ``mark_annotations`` did: annotations marked, the tasks that changed, and the
    decided visits' ratings not yet saved in Label Studio (so not marked yet)."""

    annotations: int
    tasks: int
    unsaved: int


@dataclass(frozen=True)
class Recorded:
    """What ``record_review`` did: decisions recorded (new or changed) by kind, decisions as
    recorded before, and the marks in Label Studio."""

    recorded: Counter[str]
    unchanged: int
    marked: Marked


def record_decisions(engine: Engine, decided: Sequence[Decided]) -> Counter[str]:
    """Record each decision; one that differs from the visit's recorded decision replaces it
    (``recorded_at`` now). The decisions recorded, by kind."""
    recorded: Counter[str] = Counter()
    with engine.begin() as conn:
        before = {row.visit_id: (row.decision, row.message, row.category)
                  for row in conn.execute(select(decisions).where(
                      decisions.c.visit_id.in_([d.visit_id for d in decided])))}
        for d in decided:
            if before.get(d.visit_id) == (d.decision, d.message, d.category):
                continue
            values = {"decision": d.decision, "message": d.message, "category": d.category,
                      "recorded_at": now()}
            conn.execute(insert_of(conn, decisions).values(visit_id=d.visit_id, **values)
                         .on_conflict_do_update(index_elements=["visit_id"], set_=values))
            recorded[d.decision] += 1
        _record_bonuses(conn, [d for d in decided if d.bonus_cents is not None])
    return recorded


def _record_bonuses(conn: Connection, decided: Sequence[Decided]) -> None:
    """Each bonus of the file, recorded once: paid as recorded, it can no longer change."""
    before = dict(conn.execute(select(bonuses.c.visit_id, bonuses.c.cents).where(
        bonuses.c.visit_id.in_([d.visit_id for d in decided]))).all())
    for d in decided:
        if d.visit_id in before and before[d.visit_id] != d.bonus_cents:
            raise StudyError(f"visit {d.visit_id}: its bonus is recorded as "
                             f"{before[d.visit_id] / 100:.2f} already, and a bonus is paid "
                             "once, as recorded: write that amount back")
        add_once(conn, bonuses, {"visit_id": d.visit_id, "cents": d.bonus_cents,
                                 "reason": "the review file's bonus", "recorded_at": now()})


def mark_annotations(engine: Engine, study: StudyFile, client: Client,
                     decided: Sequence[Decided]) -> Marked:
    """Mark every Label Studio annotation of the decided visits with its visit's decision
    (task meta ``sotopia_review``); a screen-out is no verdict on the work and marks none.
    A rating still waiting to be saved has no annotation yet: counted, marked by a later run."""
    chosen = {d.visit_id: d.decision for d in decided if d.decision in REVIEW_DECISIONS}
    with engine.connect() as conn:
        rated = conn.execute(
            select(assignments.c.visit_id, assignments.c.task_id, assignments.c.ls_annotation_id)
            .where(assignments.c.study == study.name,
                   assignments.c.state.in_(FOR_LABEL_STUDIO),
                   assignments.c.visit_id.in_(list(chosen)))).all()
    saved = [row for row in rated if row.ls_annotation_id is not None]
    marks: dict[int, dict[str, Any]] = defaultdict(dict)
    for row in saved:
        marks[row.task_id][str(row.ls_annotation_id)] = chosen[row.visit_id]
    changed = merge_task_meta(client, study.project, REVIEW, dict(marks)) if marks else 0
    return Marked(len(saved), changed, len(rated) - len(saved))


def record_review(path: Path, engine: Engine, study: StudyFile, client: Client) -> Recorded:
    """Read an edited review file, record its decisions and mark them in Label Studio; nothing
    is recorded when any row is bad."""
    decided = read_review(path, engine, study)
    recorded = record_decisions(engine, decided)
    try:
        marked = mark_annotations(engine, study, client, decided)
    except LabelStudioError as error:
        raise LabelStudioError(f"the decisions of {path} are recorded, but marking them in "
                               f"Label Studio failed: {error}; run the same command again once "
                               "it answers") from error
    return Recorded(recorded, len(decided) - sum(recorded.values()), marked)
