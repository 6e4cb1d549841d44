"""A participant page as an object, as oTree's ``Page``: the app builds its routes from a
sequence of them and knows none by name.

A page says

- what it settles as the participant arrives, before any page is shown (``on_arrival``; by
  default nothing): the arrival goes straight to the first page displayed after every page
  had its say, so a visit ended there (nothing to rate) sees no page before its code;
- whether it is displayed for a visit as it stands (``is_displayed``); a participant is always
  on the first page of the sequence that is, and a page asked for out of turn sends them there
  (unless it is ``revisitable``, as the instructions are while rating);
- what its template gets (``vars_for_template``; None: nothing to show after all, go on to the
  current page), its template being ``<name>.html`` among the gateway's templates or in its
  ``template_folder``;
- how its submit comes (``submit``: an HTML ``Form`` posted to the page's own address, JSON a
  ``Script`` of the page posts, or None) and what it does (``before_next_page``, given the
  answers read with the submit's pydantic model; it returns the visit as the submit left it,
  so the app finds the next page without reading the visit again).

By default a page is displayed until the visit has answered it, and its submit records the
answers (``arrival.record_answers``): a consent page or a questionnaire is one class and one
template. Every submit is bounded and needs the session's CSRF token; the app checks both
before a page sees anything.
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
