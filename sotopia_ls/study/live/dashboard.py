"""The researcher's dashboard: a page of the gateway, behind its own token, that follows the
study (``/researcher/<name>``, its figures and its sign-in).

The participants' cookie opens nothing here (404), and the token is compared in constant time
and never written anywhere. What it shows is made off the request path. README.md, "Live
dashboard", says what a researcher sees and how sign-in works.
"""

from __future__ import annotations

import hmac
import logging
import pickle
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any
from urllib.parse import parse_qs

from itsdangerous import BadSignature, TimestampSigner
from sqlalchemy import Engine, case, func, select
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ...dimensions import RUBRIC
from ...errors import StudyError
from ...extras import missing_extra
from ..screening.flags import FLAGS, Flag
from ..serving.overload import Throttle, client_address
from ..serving.security import bounded_body
from ..settings import StudyFile
from ..states import AssignmentState, SlotState
from ..status import study_status
from ..store import assignments, now, slots
from .snapshots import MODEL_TABLE, Snapshot, figures_unavailable, latest_snapshot

COOKIE = "sotopia_researcher"
COOKIE_SECONDS = 12 * 3600
_SALT = "sotopia-ls researcher dashboard"
_SIGN_IN_LIMIT = 4096
_BEARER = "bearer "

log = logging.getLogger("sotopia_ls.study")

Render = Callable[..., Response]


def signed_in_value(token: str, study: str) -> str:
    """The cookie's value: the study's name, signed and timed with a key made from the token."""
    return TimestampSigner(token, salt=_SALT).sign(study).decode()


def _bearer(request: Request) -> str | None:
    """The token of the request's ``Authorization: Bearer`` header; None without one."""
    header = request.headers.get("authorization", "")
    return header[len(_BEARER):].strip() if header[:len(_BEARER)].lower() == _BEARER else None


def allowed(request: Request, token: str, study: str) -> bool:
    """Whether the request carries the token (``Authorization: Bearer``) or the dashboard's
    cookie, still valid; the participants' session says nothing here."""
    if (sent := _bearer(request)) is not None:
        return hmac.compare_digest(sent.encode(), token.encode())
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        return False
    try:
        signed = TimestampSigner(token, salt=_SALT).unsign(cookie, max_age=COOKIE_SECONDS)
    except BadSignature:
        return False
    return hmac.compare_digest(signed, study.encode())


def _slot_counts(engine: Engine, study: str) -> dict[str, int]:
    """Slots by where they stand: open (free, or its lease expired), leased, waiting (rated,
    the rating not saved yet), saved (rated and saved, or set aside)."""
    # Labelled in a subquery and grouped on the label: PostgreSQL refuses a GROUP BY on an
    # expression holding a parameter (each use of the time is a parameter of its own).
    place = case(
        ((slots.c.state == SlotState.LEASED) & (slots.c.expires_at >= now()), "leased"),
        (slots.c.state.in_((SlotState.LEASED, SlotState.FREE)), "open"),
        (assignments.c.state == AssignmentState.SAVING, "waiting"),
        else_="saved").label("place")
    placed = (select(place).outerjoin(assignments, assignments.c.id == slots.c.assignment_id)
              .where(slots.c.study == study).subquery())
    with engine.connect() as conn:
        rows = conn.execute(select(placed.c.place, func.count()).group_by(placed.c.place)).all()
    return dict.fromkeys(("open", "leased", "waiting", "saved"), 0) | dict(rows)


def progress(engine: Engine, study: StudyFile) -> dict[str, Any]:
    """Episodes, slots, saves and the median time per episode."""
    status = study_status(engine, study)
    return {
        "episodes": status.episodes, "episodes_done": status.done,
        "episodes_in_progress": status.in_progress, "episodes_open": status.open,
        **{f"slots_{where}": count for where, count in _slot_counts(engine, study.name).items()},
        "saves_waiting": status.unsaved, "saves_failed": len(status.failed),
        "median_minutes": (round(status.median_seconds / 60, 1)
                           if status.median_seconds is not None else None),
    }


def participant_rows(engine: Engine, study: StudyFile,
                     flags: Sequence[Flag] = FLAGS) -> list[dict[str, Any]]:
    """Each visit as the review file has it, cut to what the dashboard shows: which of
    ``flags`` fired, on how many of the ratings each judged. Run in the worker process
    (``live``): the review's tables (pandas) stay out of the gateway's."""
    import pandas as pd

    from ..screening.review import review_rows

    rows = []
    for row in review_rows(engine, study, flags).to_dict("records"):
        fired = [f"{flag.name} {row[f'{flag.name}.fired']}/{row[f'{flag.name}.judged']}"
                 for flag in flags if row[f"{flag.name}.fired"]]
        rows.append({
            "participant": row["participant"], "outcome": row["outcome"],
            "episodes": int(row["episodes"]), "gold_episodes": int(row["gold_episodes"]),
            "median_minutes": None if pd.isna(row["median_minutes"])
            else float(row["median_minutes"]),
            "flags": ", ".join(fired), "suggested": row["suggested"],
        })
    return rows


def participants_with(flags: Sequence[Flag]) -> Callable[[Engine, StudyFile], list[Any]]:
    """``participant_rows`` judged by ``flags``, as the live worker process computes it: the
    flags are sent there, so one that cannot be (a lambda, a function made inside another) is
    refused at start, named, rather than leaving the dashboard's participants empty."""
    for flag in flags:
        try:
            pickle.dumps(flag)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            raise StudyError(f"quality flag {flag.name!r} cannot be sent to the dashboard's "
                             f"worker process (define its check at a module's top level): "
                             f"{error}") from None
    return partial(participant_rows, flags=tuple(flags))


def agreement_view(snapshot: Snapshot | None) -> dict[str, Any] | None:
    """The snapshot, its dimensions in rubric order with their labels, and each agent model's
    scores (or the one line saying what their install lacks)."""
    if snapshot is None:
        return None
    models = snapshot.figures.get(MODEL_TABLE)
    lacking = missing_extra("ppi", included=False) if models is None else ""
    return {"computed_at": snapshot.computed_at.isoformat(), "ratings": snapshot.ratings,
            "dimensions": [{"key": key, "label": RUBRIC[key].label, **snapshot.figures[key]}
                           for key in RUBRIC.keys if key in snapshot.figures],
            "models": models or [],
            "models_unavailable": f"Each agent model's scores {lacking}." if lacking else None}


class Dashboard:
    """What the dashboard shows, made by ``refresh`` (off the request path) and read by
    requests."""

    def __init__(self, engine: Engine, study: StudyFile) -> None:
        self.engine, self.study = engine, study
        self._lock = threading.Lock()
        self._shown: dict[str, Any] = {"study": study.name, "updated_at": None,
                                       "progress": None, "agreement": None, "participants": [],
                                       "agreement_unavailable": figures_unavailable()}
        self._failing: set[str] = set()

    def refresh(self, participants: list[dict[str, Any]] | None) -> None:
        """Progress and the latest snapshot now; ``participants`` (``participant_rows``, made
        by the snapshot's worker) when given. A part that fails keeps its last value and
        holds up none of the others."""
        shown = dict(self.shown())
        for part, made in (
                ("progress", lambda: progress(self.engine, self.study)),
                ("agreement",
                 lambda: agreement_view(latest_snapshot(self.engine, self.study.name)))):
            try:
                shown[part] = made()
                self._failing.discard(part)
            except Exception:
                # Logged when it begins failing, not at every refresh while it goes on.
                if part not in self._failing:
                    log.exception("the dashboard's %s could not be computed; the last shown "
                                  "stays", part)
                self._failing.add(part)
        if participants is not None:
            shown["participants"] = participants
        shown["updated_at"] = now().isoformat()
        with self._lock:
            self._shown = shown

    def shown(self) -> dict[str, Any]:
        with self._lock:
            return self._shown


def _sign_in_token(body: bytes) -> str:
    values = parse_qs(body.decode("utf-8", "replace")).get("token", [""])
    return values[0].strip()


def dashboard_routes(dashboard: Dashboard, token: str, render: Render, *,
                     https_only: bool, throttle: Throttle) -> list[BaseRoute]:
    """The dashboard's routes for ``token``; ``render`` is the gateway's page renderer; each
    wrong token fails its client in ``throttle``."""
    name = dashboard.study.name
    base = f"/researcher/{name}"

    def guard(request: Request) -> None:
        if request.path_params["study"] != name or not allowed(request, token, name):
            if _bearer(request) is not None:
                throttle.failed(client_address(request.scope))
            raise HTTPException(404)

    def signed_in(response: Response) -> Response:
        response.set_cookie(COOKIE, signed_in_value(token, name), max_age=COOKIE_SECONDS,
                            path=base, secure=https_only, httponly=True, samesite="strict")
        return response

    async def page(request: Request) -> Response:
        guard(request)
        # Each visit renews the sign-in, whether it came with the header or the cookie.
        return signed_in(render(request, "researcher.html", base=base))

    async def figures(request: Request) -> Response:
        guard(request)
        return JSONResponse(dashboard.shown())

    async def sign_in(request: Request) -> Response:
        if request.path_params["study"] != name:
            raise HTTPException(404)
        if request.method == "GET":
            return render(request, "researcher_sign_in.html", base=base, refused=False)
        sent = _sign_in_token(await bounded_body(request, _SIGN_IN_LIMIT))
        if not hmac.compare_digest(sent.encode(), token.encode()):
            throttle.failed(client_address(request.scope))
            return render(request, "researcher_sign_in.html", 403, base=base, refused=True)
        return signed_in(RedirectResponse(base, status_code=303))

    return [Route("/researcher/{study}", page),
            Route("/researcher/{study}/figures", figures),
            Route("/researcher/{study}/sign-in", sign_in, methods=["GET", "POST"])]
