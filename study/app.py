"""The participant gateway: a Starlette app between Prolific and Label Studio.

Routes (``<name>`` is the study's name; nothing else is served, everything else is 404):

    GET  /s/<name>?PROLIFIC_PID=…&STUDY_ID=…&SESSION_ID=…   arrival: record, bind the session
    GET  /s/<name>/instructions      the Social Evaluation Instruction
    POST /s/<name>/instructions      "I have read them" (CSRF form field)
    GET  /s/<name>/rate              the current episode in Label Studio's editor
    POST /s/<name>/submit            the rating, as JSON (CSRF header); answers where to go next
    GET  /s/<name>/done              completion code and redirect to Prolific, or no slots
    GET  /static/…                   the editor's files and licences, the page script and style
    GET  /health                     for a load balancer

The browser only ever holds a signed session cookie naming its visit. It never receives a
Label Studio address, key, task id or annotation, nor anything of another participant: the
page gets the labeling config and the shown part of one task's data (``shown``), and its
submissions go to the gateway, which saves them with the owner's key.

No request waits on Label Studio: the shown data is copied into the gateway's database at
start, and ratings (and, with a participant's first one, their user) are written behind by
``LabelStudioWriter``.
Endpoints are ``async`` and hand the blocking work (the database) to Starlette's thread pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import jinja2
from label_studio_sdk import LabelStudio
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..config import check_labeling_config, instructions_html
from ..errors import LabelStudioError
from ..labelstudio.client import find_project, project_task_data
from . import arrival, leases
from .flow import current_page
from .saving import LabelStudioWriter, checked_results, to_names
from .security import (
    CSRF_FIELD,
    CSRF_HEADER,
    SecurityHeaders,
    bounded_body,
    check_csrf,
    csrf_token,
    json_for_html,
)
from .settings import StudyFile
from .shown import ShownFields

SESSION_COOKIE = "sotopia_study"
SESSION_DAYS = 2
# A rating is 28 short answers; 256 KB leaves room for long rationales.
MAX_SUBMISSION = 256 * 1024
TOO_LONG = (f"This rating is too long to save: its rationales together may hold about "
            f"{MAX_SUBMISSION // 1024} KB. Please shorten the longest ones.")
MAX_FORM = 4 * 1024
TASK_CACHE = 4096
_EDITOR_SETTINGS = {"enableHotkeys": False, "enableTooltips": False, "enableLabelTooltips": False}


@dataclass
class Gateway:
    """Everything a request needs: the study, its database, the project's config, the writer."""

    study: StudyFile
    engine: Engine
    config: str
    targets: dict[str, str]  # control → the object it labels, for rebuilding results
    writer: LabelStudioWriter
    shown: Callable[[int], dict[str, Any]]


def project_config(study: StudyFile, client: LabelStudio) -> str:
    """The study project's labeling config, checked against the rating contract."""
    project = find_project(client, study.project)
    return check_labeling_config(project.label_config or "")


def add_new_episodes(study: StudyFile, client: LabelStudio, engine: Engine, config: str) -> int:
    """Copy the shown part of every task the gateway's database does not hold yet, each with
    its k slots; how many were new. Running gateways offer them at once: assignment reads the
    slots from the database."""
    fields = ShownFields.of(config)
    data = project_task_data(client, study.project)
    if not data:
        raise LabelStudioError("the project has no tasks: import episodes first",
                               project=study.project)
    return leases.add_episodes(engine, study.name,
                               {task: fields.shown(d) for task, d in data.items()},
                               study.raters_per_episode)


def prepare_gateway(study: StudyFile, client: LabelStudio, engine: Engine) -> Gateway:
    """Read the project's labeling config and copy every new task into the gateway's
    database."""
    config = project_config(study, client)
    add_new_episodes(study, client, engine, config)

    @lru_cache(maxsize=TASK_CACHE)
    def shown(task_id: int) -> dict[str, Any]:
        return leases.shown_episode(engine, study.name, task_id)

    return Gateway(study, engine, config, to_names(config),
                   LabelStudioWriter(engine, client, study.name), shown)


class Submission(BaseModel):
    """The body of ``POST /s/<name>/submit``."""

    model_config = ConfigDict(extra="forbid")

    assignment: str = Field(pattern=r"^[0-9a-f]{32}$")
    results: list[Any] = Field(max_length=500)


def unreadable(error: ValidationError) -> str:
    """The first reason a submission's body was refused, naming its field (never its value)."""
    first = error.errors(include_url=False, include_input=False)[0]
    return f"{'.'.join(map(str, first['loc'])) or 'body'}: {first['msg']}"


def _templates() -> Jinja2Templates:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("sotopia_ls.study", "templates"), autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return Jinja2Templates(env=environment)


def create_app(gateway: Gateway, *, secret: str, editor_dir: Path,
               https_only: bool) -> SecurityHeaders:
    """The gateway's ASGI app; ``https_only`` marks the session cookie Secure. The security
    headers wrap the Starlette app itself: its error pages (500s included) are made inside
    Starlette, so they carry them too."""
    study = gateway.study
    engine = gateway.engine
    templates = _templates()
    base = f"/s/{study.name}"
    guide = instructions_html()

    def page(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        return templates.TemplateResponse(
            request, f"{name}.html", {"title": study.title, "base": base, **context},
            status_code=status,
        )

    def go(page_name: str) -> RedirectResponse:
        return RedirectResponse(f"{base}/{page_name}", status_code=303)

    def check_study(request: Request) -> None:
        if request.path_params["study"] != study.name:
            raise HTTPException(404, "There is no such study here.")

    async def current_visit(request: Request) -> arrival.Visit:
        check_study(request)
        visit_id = request.session.get("visit")
        visit = await run_in_threadpool(arrival.load_visit, engine, visit_id) \
            if isinstance(visit_id, int) else None
        if visit is None:
            raise HTTPException(403, "Please open this study from its link on Prolific.")
        return visit

    async def arrive(request: Request) -> Response:
        check_study(request)
        parameters = arrival.read_parameters(request.query_params)
        if isinstance(parameters, list):
            return page(request, "problem", 400, message=(
                f"This study link is missing or has a malformed {', '.join(parameters)}. "
                "Please open the study again from Prolific."))
        visit = await run_in_threadpool(arrival.arrive, engine, study.name, parameters)
        request.session.clear()
        request.session["visit"] = visit.id
        csrf_token(request)
        # The address bar drops Prolific's parameters at once.
        return go(current_page(visit, study).name)

    async def instructions(request: Request) -> Response:
        visit = await current_visit(request)
        if request.method == "POST":
            form = parse_qs((await bounded_body(request, MAX_FORM)).decode("utf-8", "replace"))
            check_csrf(request, (form.get(CSRF_FIELD) or [None])[0])
            await run_in_threadpool(arrival.mark_instructions_read, engine, visit.id)
            visit = await run_in_threadpool(arrival.load_visit, engine, visit.id)
            return go(current_page(visit, study).name)
        return page(request, "instructions", instructions=guide,
                    first_time=not visit.instructions_read, csrf=csrf_token(request),
                    csrf_field=CSRF_FIELD)

    async def rate(request: Request) -> Response:
        visit = await current_visit(request)
        if current_page(visit, study).name != "rate":
            return go(current_page(visit, study).name)
        assignment = await run_in_threadpool(
            leases.lease_for_visit, engine, study.name, visit.id, visit.participant_id,
            k=study.raters_per_episode, lease_seconds=study.lease_seconds,
        )
        if assignment is None:
            await run_in_threadpool(arrival.finish, engine, visit.id,
                                    "completed" if visit.rated else "no_slots")
            return go("done")
        data = await run_in_threadpool(gateway.shown, assignment.task_id)
        await run_in_threadpool(leases.mark_shown, engine, assignment.id)
        boot = {
            "config": gateway.config,
            # A constant task id: the editor shows it, and a real one means nothing to a participant.
            "task": {"id": 1, "data": data},
            "assignment": assignment.key,
            "submit": f"{base}/submit",
            "csrf": csrf_token(request),
            "settings": _EDITOR_SETTINGS,
        }
        return page(request, "rate", boot=json_for_html(boot), instructions=guide,
                    number=visit.rated + 1, total=study.episodes_per_participant)

    async def submit(request: Request) -> Response:
        visit = await current_visit(request)
        check_csrf(request, request.headers.get(CSRF_HEADER))
        try:
            raw = await bounded_body(request, MAX_SUBMISSION)
        except HTTPException as refused:  # 413: the participant is told what to shorten
            raise HTTPException(refused.status_code, TOO_LONG) from None
        try:
            body = Submission.model_validate_json(raw)
        except ValidationError as error:
            raise HTTPException(400, f"This is not a rating the study can read: "
                                f"{unreadable(error)}.") from None
        assignment = await run_in_threadpool(leases.find, engine, body.assignment,
                                             visit.participant_id)
        if assignment is None or assignment.visit_id != visit.id:
            raise HTTPException(404, "There is no such episode for you.")
        results, problems = checked_results(body.results, gateway.targets)
        if problems:
            return JSONResponse({"problems": problems}, status_code=422)
        settled = await run_in_threadpool(leases.settle, engine, assignment, results,
                                          study.raters_per_episode)
        if settled.state == "saving":
            gateway.writer.rating_recorded()
        visit = await run_in_threadpool(arrival.load_visit, engine, visit.id)
        if visit.rated >= study.episodes_per_participant:
            await run_in_threadpool(arrival.finish, engine, visit.id, "completed")
        return JSONResponse({"next": f"{base}/{current_page(visit, study).name}"})

    async def done(request: Request) -> Response:
        visit = await current_visit(request)
        if current_page(visit, study).name != "done":
            return go(current_page(visit, study).name)
        if visit.outcome is None:
            await run_in_threadpool(arrival.finish, engine, visit.id,
                                    "completed" if visit.rated else "no_slots")
            visit = await run_in_threadpool(arrival.load_visit, engine, visit.id)
        if visit.outcome == "completed":
            return page(request, "done", code=study.completion_code, url=study.completion_url,
                        rated=visit.rated)
        return page(request, "no_slots", code=study.no_slots_code, url=study.no_slots_url)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def refused(request: Request, exc: HTTPException) -> Response:
        if request.url.path.endswith("/submit"):
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
        return page(request, "problem", exc.status_code, message=exc.detail)

    async def failed(request: Request, exc: Exception) -> Response:
        # The traceback goes to the server's log (uvicorn); the participant gets a plain page.
        return page(request, "problem", 500, message="Something went wrong on our side. "
                    "Please reload this page; your ratings so far are kept.")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        writing = asyncio.create_task(gateway.writer.run())
        try:
            yield
        finally:
            writing.cancel()

    return SecurityHeaders(Starlette(
        routes=[
            Route("/health", health),
            Route("/s/{study}", arrive),
            Route("/s/{study}/instructions", instructions, methods=["GET", "POST"]),
            Route("/s/{study}/rate", rate),
            Route("/s/{study}/submit", submit, methods=["POST"]),
            Route("/s/{study}/done", done),
            Mount("/static/editor", StaticFiles(directory=editor_dir)),
            Mount("/static", StaticFiles(packages=[("sotopia_ls.study", "static")])),
        ],
        middleware=[
            Middleware(SessionMiddleware, secret_key=secret, session_cookie=SESSION_COOKIE,
                       max_age=SESSION_DAYS * 24 * 3600, same_site="lax", https_only=https_only),
        ],
        exception_handlers={HTTPException: refused, 500: failed},
        lifespan=lifespan,
        debug=False,
    ))
