"""A participant's journey as an ordered list of pages, as in oTree's ``page_sequence``:

    arrival (the Prolific link) → [admission] → instructions
        → [practice → practice-feedback (× attempts)] → rate (× m) → done

Reordering or adding a page is a change to the sequence, given to ``create_app(pages=…)``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from ...config import agent_field
from ...dimensions import AGENTS
from ..outbox.saving import checked_results
from ..screening import practice, qualification
from ..screening.typing_counts import TypingCounts, page_counting
from ..screening.visible import VisibleSeconds, page_measuring
from ..settings import StudyFile
from ..slots import leases
from ..states import AssignmentState, Outcome, PracticeStanding
from . import arrival
from .arrival import Visit
from .page import Form, NotAccepted, Page, PageRequest, Script

# A rating is a set of short answers; the bound leaves room for long rationales.
MAX_SUBMISSION = 256 * 1024
TOO_LONG = (f"This rating is too long to save: its rationales together may hold about "
            f"{MAX_SUBMISSION // 1024} KB. Please shorten the longest ones.")
_EDITOR_SETTINGS = {"enableHotkeys": False, "enableTooltips": False, "enableLabelTooltips": False}
_AGENT = re.compile(rf"\bagent ({'|'.join(map(str, AGENTS))})\b")


class PostedRating(BaseModel):
    """The body of ``POST /s/<name>/submit``."""

    model_config = ConfigDict(extra="forbid")

    assignment: str = Field(pattern=r"^[0-9a-f]{32}$")
    results: list[Any] = Field(max_length=500)
    # Characters pasted and typed per rationale field; a page made before the counts sends none.
    typing: TypingCounts | None = None
    # Seconds the page was visible and focused; a page made before the measure sends none.
    visible_seconds: VisibleSeconds | None = None


NOT_ADMITTED = ("This study is open only to participants who passed its qualification round. "
                "Please return it on Prolific.")


class Admission(Page):
    """A study that requires a qualification round admits only its allow-list: anyone else
    stays on this page (no code, no episode), their visit finished as ``not_admitted`` (so
    the review and the protocol count it apart from a participant who left). Whoever is
    admitted passes it once, recorded with the visit's answers, so later pages never ask
    again. A refused visit stays refused, the first outcome kept, even once its participant
    is on the allow-list: it was told to return, and a new Prolific session is a new visit.
    The decision is made on arrival, before the rating page looks for work."""

    name = "admission"
    submit = None

    @property
    def template(self) -> str:
        return "problem.html"

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        return study.requires_qualification is not None and self.name not in visit.answered

    def on_arrival(self, turn: PageRequest) -> Visit:
        return self._admit(turn) if self.is_displayed(turn.visit, turn.study) else turn.visit

    def vars_for_template(self, turn: PageRequest) -> dict[str, Any] | None:
        return None if self.name in self._admit(turn).answered else {"message": NOT_ADMITTED}

    def _admit(self, turn: PageRequest) -> Visit:
        """The visit admitted (its answer recorded) or refused (finished ``not_admitted``)."""
        required, visit = turn.study.requires_qualification, turn.visit
        if (required is not None and visit.outcome is None
                and qualification.visit_admitted(turn.engine, required, visit.id)):
            arrival.record_answers(turn.engine, visit.id, self.name, {"admitted": True})
            return replace(visit, answered=visit.answered | {self.name})
        arrival.finish(turn.engine, visit.id, Outcome.NOT_ADMITTED)
        return replace(visit, outcome=visit.outcome or Outcome.NOT_ADMITTED)


class Instructions(Page):
    """The Social Evaluation Instruction, read once before the first episode, and open again
    from the rating page; never for a visit that ended before it (nothing to rate)."""

    name = "instructions"
    revisitable = True

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        return visit.outcome is None and not visit.instructions_read

    def vars_for_template(self, turn: PageRequest) -> dict[str, Any]:
        return {"instructions": turn.gateway.instructions,
                "first_time": not turn.visit.instructions_read}

    def before_next_page(self, turn: PageRequest, answers: BaseModel) -> Visit:
        arrival.mark_instructions_read(turn.engine, turn.visit.id)
        return replace(turn.visit, instructions_read=True)


class Rate(Page):
    """One episode in Label Studio's editor, until m are rated or none is left; the editor's
    script posts the rating."""

    name = "rate"
    submit = Script("submit", PostedRating, MAX_SUBMISSION, TOO_LONG, "a rating")

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        return visit.outcome is None and visit.rated < study.episodes_per_participant

    def on_arrival(self, turn: PageRequest) -> Visit:
        """An arrival with nothing to rate (every slot taken, or had: the study may be closed;
        in a qualification round, every gold episode had, or a verdict given in another
        session) ends here, before reading instructions it would not be paid for. A visit that
        rated or holds a lease goes on as it was."""
        study, visit = turn.study, turn.visit
        if visit.outcome is not None:
            return visit
        if not _judged(turn) and (visit.rated or leases.has_work(
                turn.engine, study.name, visit.id, visit.participant_id,
                leases.GoldShare.of(study))):
            return visit
        return _finish(turn, visit)

    def vars_for_template(self, turn: PageRequest) -> dict[str, Any] | None:
        shown = self.again_in_place(turn)
        if shown is None:
            return None
        return {**shown, **_page_load(turn, shown["boot"])}

    def again_in_place(self, turn: PageRequest) -> dict[str, Any] | None:
        """The visit's lease (renewed, else a new one) and what its page shows; after a
        rating, the script shows it in the editor it keeps."""
        study, visit = turn.study, turn.visit
        assignment = None if _judged(turn) else leases.lease_for_visit(
            turn.engine, study.name, visit.id, visit.participant_id,
            lease_seconds=study.lease_seconds,
            gold_share=leases.GoldShare.of(study),
        )
        if assignment is None:
            _finish(turn, visit)
            return None
        leases.mark_shown(turn.engine, assignment.id)
        return {"boot": _boot(turn, assignment.task_id, assignment.key, Rate.submit),
                "number": visit.rated + 1, "total": study.episodes_per_participant}

    def before_next_page(self, turn: PageRequest, answers: PostedRating) -> Visit:
        """Record the rating with its slot and its page's measures; a retry of one recorded
        (other measures included) changes nothing. It may come after the page was left (a
        double click on the last episode), so it is read whatever the current page: the
        assignment must be this visit's."""
        study, visit = turn.study, turn.visit
        assignment = leases.find(turn.engine, answers.assignment, visit.participant_id)
        if assignment is None or assignment.visit_id != visit.id:
            raise HTTPException(404, "There is no such episode for you.")
        scores, problems = checked_results(answers.results)
        if problems:
            raise NotAccepted(problems)
        settled = leases.settle(turn.engine, assignment, scores, study.raters_per_episode,
                                study.adaptive, typing=answers.typing,
                                visible_seconds=answers.visible_seconds)
        if settled.state == AssignmentState.SAVING:
            turn.gateway.writer.rating_recorded()
        # Read again: how many this visit has rated is what the rating changed.
        after = arrival.load_visit(turn.engine, study.name, visit.id)
        if after.rated >= study.episodes_per_participant and after.outcome is None:
            return _finish(turn, after)
        return after


def _boot(turn: PageRequest, task_id: int, key: str, submit: Script) -> dict[str, Any]:
    """The editor's boot data for a task (``key`` names the page's rating, ``submit`` where it
    goes), without the labeling config, which only a page load sends (``_page_load``)."""
    data = turn.gateway.shown(task_id)
    return {
        # A constant task id: the editor shows it, and a real one means nothing to a participant.
        "task": {"id": 1, "data": data},
        "assignment": key,
        "submit": f"{turn.base}/{submit.path}",
        "csrf": turn.csrf,
        "settings": _EDITOR_SETTINGS,
        "required": naming_agents(turn.gateway.required, data),
        "typing": page_counting(),
        "visible": page_measuring(),
    }


def _page_load(turn: PageRequest, boot: dict[str, Any]) -> dict[str, Any]:
    """What a page load of the editor adds to its boot data: the labeling config (a running
    editor keeps it) and the instructions."""
    return {"boot": {**boot, "config": turn.gateway.config},
            "instructions": turn.gateway.instructions}


class PracticeEpisode(Page):
    """A study with a practice step: a practice episode in the editor before the first
    episode, its rating scored against the reference and never data; its feedback follows
    (``PracticeFeedback``). The attempts are the participant's, so whoever passed in any
    session goes on, and whoever used every attempt is screened out on arrival."""

    name = "practice"
    submit = Script("practice-submit", PostedRating, MAX_SUBMISSION, TOO_LONG, "a rating")

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        return (study.practice is not None and visit.outcome is None
                and self.name not in visit.answered and not visit.feedback_due)

    def on_arrival(self, turn: PageRequest) -> Visit:
        if not self.is_displayed(turn.visit, turn.study):
            return turn.visit
        return _after_practice(turn, turn.visit)

    def vars_for_template(self, turn: PageRequest) -> dict[str, Any]:
        study, visit = turn.study, turn.visit
        task = practice.next_task(turn.engine, study.name, visit.participant_id)
        # The page's key only names its time on task in the browser: the server decides the
        # episode and the attempt.
        key = f"{visit.id:024x}{task:08x}"[-32:]
        return _page_load(turn, _boot(turn, task, key, PracticeEpisode.submit))

    def before_next_page(self, turn: PageRequest, answers: PostedRating) -> Visit:
        """Score the rating as the participant's next attempt, unless they have none left,
        passed, or await this visit's feedback (a replay): then nothing changes."""
        study, visit = turn.study, turn.visit
        if study.practice is None or visit.outcome is not None:
            raise HTTPException(404, "There is no practice episode for you.")
        scores, problems = checked_results(answers.results)
        if problems:
            raise NotAccepted(problems)
        practice.record_attempt(turn.engine, study.name, study.practice, visit.id,
                                visit.participant_id, scores)
        return arrival.load_visit(turn.engine, study.name, visit.id)


class PracticeFeedback(Page):
    """After a practice attempt: per dimension and agent, the participant's score beside the
    reference and its rationale, and where they were off by more than the tolerance, the
    rubric's guidance and the seed example of their mistake; then another attempt, the
    study, or (every attempt failed) the practice's screen-out code."""

    name = "practice-feedback"
    submit = Form()

    @property
    def template(self) -> str:
        return "practice_feedback.html"

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        return study.practice is not None and visit.outcome is None and visit.feedback_due

    def vars_for_template(self, turn: PageRequest) -> dict[str, Any] | None:
        given = practice.feedback(turn.engine, turn.study.name, turn.study.practice,
                                  turn.visit.id)
        if given is None:
            return None
        shown = turn.gateway.shown(given.task_id)
        names = {agent: shown.get(agent_field(agent, "name")) or f"Agent {agent}"
                 for agent in AGENTS}
        return {"feedback": given, "names": names, "standings": PracticeStanding,
                "tolerance": turn.study.practice.max_distance}

    def before_next_page(self, turn: PageRequest, answers: BaseModel) -> Visit:
        practice.mark_seen(turn.engine, turn.visit.id)
        return _after_practice(turn, arrival.load_visit(turn.engine, turn.study.name,
                                                        turn.visit.id))


def _after_practice(turn: PageRequest, visit: Visit) -> Visit:
    """The visit once its participant's practice is settled: passed (recorded as the
    practice page's answer), failed every attempt (the visit screened out), or going on."""
    study = turn.study
    standing = practice.standing(turn.engine, study.practice, visit.participant_id)
    if standing == PracticeStanding.PASSED:
        arrival.record_answers(turn.engine, visit.id, PracticeEpisode.name, {"passed": True})
        return replace(visit, answered=visit.answered | {PracticeEpisode.name})
    if standing == PracticeStanding.FAILED:
        arrival.finish(turn.engine, visit.id, Outcome.SCREENED_OUT)
        return replace(visit, outcome=visit.outcome or Outcome.SCREENED_OUT)
    return visit


def _failed_practice(turn: PageRequest) -> bool:
    """Whether the visit's participant failed every attempt of the study's practice."""
    return turn.study.practice is not None and practice.standing(
        turn.engine, turn.study.practice, turn.visit.participant_id) == PracticeStanding.FAILED


def naming_agents(required: list[dict[str, Any]], data: dict[str, Any]) -> list[dict[str, Any]]:
    """The required fields, each message naming its agent as the form does ("for Eli Dawson",
    not the config's "for agent 1")."""
    def name(agent: re.Match[str]) -> str:
        return str(data.get(agent_field(int(agent[1]), "name")) or agent[0])

    return [{**field, "message": _AGENT.sub(name, field["message"])} for field in required]


def _judged(turn: PageRequest) -> qualification.Verdict | None:
    """In a qualification round, the verdict the visit's participant holds (given in this
    session or another): they are served nothing more. None before it, and in any other
    study."""
    if turn.study.qualification is None:
        return None
    return qualification.verdict_of(turn.engine, turn.visit.participant_id)


def _verdict(turn: PageRequest, visit_id: int) -> qualification.Verdict | None:
    """A qualification round's verdict on the participant of a visit that ended by it (given
    the first time, read back after); None in any other study."""
    qualifying = turn.study.qualification
    if qualifying is None:
        return None
    return qualification.score_visit(turn.engine, turn.study.name, visit_id,
                                     qualifying.max_distance)


def _finish(turn: PageRequest, visit: Visit) -> Visit:
    """End the visit: completed when it rated anything, else screened out when its
    participant failed the qualification round in another session, else no slots. A completed
    visit of a qualification round is scored at once, so a passer who closes the tab after the
    last rating, before the done page, is on the allow-list all the same."""
    if visit.rated:
        outcome = Outcome.COMPLETED
    else:
        judged = _judged(turn)
        outcome = (Outcome.SCREENED_OUT if judged is not None and not judged.passed
                   else Outcome.NO_SLOTS)
    arrival.finish(turn.engine, visit.id, outcome)
    if outcome == Outcome.COMPLETED:
        _verdict(turn, visit.id)
    return replace(visit, outcome=visit.outcome or outcome)


def _leaving(turn: PageRequest) -> tuple[str, str]:
    """The code and address of a visit ended by its ratings or by a verdict: the completion
    code, except for a participant who failed every practice attempt or did not pass a
    qualification round, who gets its screen-out code (never why)."""
    study = turn.study
    if _failed_practice(turn):
        return study.practice.screen_out_code, study.practice.screen_out_url
    verdict = _verdict(turn, turn.visit.id)
    if verdict is None or verdict.passed:
        return study.completion_code, study.completion_url
    qualifying = study.qualification
    return qualifying.screen_out_code, qualifying.screen_out_url


class Done(Page):
    """The completion code (a qualification round's screen-out code for someone who did not
    pass, and again, with nothing rated, for whoever comes back after failing it) and the way
    back to Prolific, or why there was nothing to rate."""

    name = "done"
    submit = None

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        return True

    def vars_for_template(self, turn: PageRequest) -> dict[str, Any]:
        study, visit = turn.study, turn.visit
        if visit.outcome is None:
            _finish(turn, visit)
            visit = arrival.load_visit(turn.engine, study.name, visit.id)
        if visit.outcome in (Outcome.COMPLETED, Outcome.SCREENED_OUT):
            code, url = _leaving(turn)
            return {"outcome": visit.outcome, "code": code, "url": url, "rated": visit.rated,
                    "practice_failed": _failed_practice(turn)}
        return {"outcome": Outcome.NO_SLOTS, "code": study.no_slots_code,
                "url": study.no_slots_url}


PAGE_SEQUENCE: tuple[Page, ...] = (Admission(), Instructions(), PracticeEpisode(),
                                   PracticeFeedback(), Rate(), Done())
