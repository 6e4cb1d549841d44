"""A participant's journey as an ordered list of pages, as in oTree's ``page_sequence``:

    arrival (the Prolific link) → [admission] → instructions → rate (× m) → done

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
from ..screening import qualification
from ..screening.typing_counts import TypingCounts, page_counting
from ..screening.visible import VisibleSeconds, page_measuring
from ..settings import StudyFile
from ..slots import leases
from ..states import AssignmentState, Outcome
from . import arrival
from .arrival import Visit
from .page import NotAccepted, Page, PageRequest, Script

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
        # The labeling config goes with the page only: the running editor keeps it.
        return {**shown, "boot": {**shown["boot"], "config": turn.gateway.config},
                "instructions": turn.gateway.instructions}

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
        data = turn.gateway.shown(assignment.task_id)
        leases.mark_shown(turn.engine, assignment.id)
        boot = {
            # A constant task id: the editor shows it, and a real one means nothing to a participant.
            "task": {"id": 1, "data": data},
            "assignment": assignment.key,
            "submit": f"{turn.base}/{Rate.submit.path}",
            "csrf": turn.csrf,
            "settings": _EDITOR_SETTINGS,
            "required": naming_agents(turn.gateway.required, data),
            "typing": page_counting(),
            "visible": page_measuring(),
        }
        return {"boot": boot, "number": visit.rated + 1, "total": study.episodes_per_participant}

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
    code, except for a participant who did not pass a qualification round, who gets its
    screen-out code (never why)."""
    study, verdict = turn.study, _verdict(turn, turn.visit.id)
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
            return {"outcome": visit.outcome, "code": code, "url": url, "rated": visit.rated}
        return {"outcome": Outcome.NO_SLOTS, "code": study.no_slots_code,
                "url": study.no_slots_url}


PAGE_SEQUENCE: tuple[Page, ...] = (Admission(), Instructions(), Rate(), Done())
