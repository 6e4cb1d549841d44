"""A participant's journey as an ordered list of pages, as in oTree's ``page_sequence``:

    arrival (the Prolific link) → instructions → rate (× m) → done

Each page says whether it is displayed for a visit as it stands; a participant is always on
the first page that is, and a page asked for out of turn sends them there. Reordering or adding
a page (a consent page, a questionnaire) is a change to ``PAGE_SEQUENCE``.
"""

from __future__ import annotations

from .arrival import Visit
from .settings import StudyFile


class Page:
    name = ""

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        raise NotImplementedError


class Instructions(Page):
    """The Social Evaluation Instruction, read once before the first episode."""

    name = "instructions"

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        return not visit.instructions_read


class Rate(Page):
    """One episode in Label Studio's editor, until m are rated or none is left."""

    name = "rate"

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        return visit.outcome is None and visit.rated < study.episodes_per_participant


class Done(Page):
    """The completion code and the way back to Prolific, or why there was nothing to rate."""

    name = "done"

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        return True


PAGE_SEQUENCE: tuple[Page, ...] = (Instructions(), Rate(), Done())


def current_page(visit: Visit, study: StudyFile) -> Page:
    return next(page for page in PAGE_SEQUENCE if page.is_displayed(visit, study))
