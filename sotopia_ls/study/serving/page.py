"""A participant page as an object, as oTree's ``Page``: the app builds its routes from a
sequence of them and knows none by name.

A page says what it settles on arrival, whether it is displayed, what its template gets, how
its submit comes and what it does. By default it is displayed until answered and its submit
records the answers, so a consent page is one class and one template (README.md, "A page of
your own").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Engine

from ..settings import StudyFile
from . import arrival
from .arrival import Visit
from .gateway import Gateway

MAX_FORM = 4 * 1024


class NoAnswers(BaseModel):
    """A form with nothing to read but its CSRF token: the button is the answer."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Form:
    """An HTML form posted to the page's own address, the CSRF token a field; answered by
    going on to the current page. ``what`` names it in a refusal."""

    answers: type[BaseModel] = NoAnswers
    limit: int = MAX_FORM
    too_long: str = "The request is too large."
    what: str = "an answer"


@dataclass(frozen=True)
class Script:
    """JSON the page's script posts to ``/s/<study>/<path>``, the CSRF token a header; answered
    with where to go next, and a refusal as JSON (``{"error"}`` or ``{"problems"}``)."""

    path: str
    answers: type[BaseModel]
    limit: int
    too_long: str
    what: str


class NotAccepted(Exception):
    """A submit read but refused (422), with what to change, each in a participant's words."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class PageRequest:
    """One request on a page: the visit as it stands, the gateway, the study's address
    (``/s/<name>``) and the session's CSRF token."""

    visit: Visit
    gateway: Gateway
    base: str
    csrf: str

    @property
    def study(self) -> StudyFile:
        return self.gateway.study

    @property
    def engine(self) -> Engine:
        return self.gateway.engine


class Page:
    name: ClassVar[str] = ""
    template_folder: ClassVar[Path | None] = None
    revisitable: ClassVar[bool] = False
    submit: ClassVar[Form | Script | None] = Form()

    @property
    def template(self) -> str:
        return f"{self.name}.html"

    def is_displayed(self, visit: Visit, study: StudyFile) -> bool:
        return self.name not in visit.answered

    def on_arrival(self, turn: PageRequest) -> Visit:
        return turn.visit

    def vars_for_template(self, turn: PageRequest) -> dict[str, Any] | None:
        return {}

    def again_in_place(self, turn: PageRequest) -> dict[str, Any] | None:
        """What the page's script needs to show this page again without loading it (the next
        episode), the server deciding what; None: the script loads the page anew."""
        return None

    def before_next_page(self, turn: PageRequest, answers: BaseModel) -> Visit:
        arrival.record_answers(turn.engine, turn.visit.id, self.name,
                               answers.model_dump(mode="json"))
        return replace(turn.visit, answered=turn.visit.answered | {self.name})


def current_page(pages: tuple[Page, ...], visit: Visit, study: StudyFile) -> Page:
    """The first page of ``pages`` displayed for the visit: where the participant is."""
    return next(page for page in pages if page.is_displayed(visit, study))


def check_sequence(pages: tuple[Page, ...]) -> None:
    """A ``ValueError`` unless every page has a name and each address is one page's."""
    addresses = [page.name for page in pages] + [
        page.submit.path for page in pages if isinstance(page.submit, Script)]
    repeated = sorted({address for address in addresses if addresses.count(address) > 1})
    if not pages or "" in addresses or repeated:
        raise ValueError(f"a page sequence needs pages, each named, each address one page's: "
                         f"{', '.join(repeated) or 'a page without a name'}")
