"""The participant gateway: a Starlette app between Prolific and Label Studio, serving the pages
of ``flow.PAGE_SEQUENCE`` and guarding them in one place.

The browser holds only a signed session cookie, and no request waits on Label Studio: the
shown data is copied at start and ratings are written behind (``LabelStudioWriter``). The
routes and guards are in docs/gateway.md, "Serving".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs

import jinja2
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.templating import Jinja2Templates

from ..live.dashboard import Dashboard, dashboard_routes, participants_with
from ..live.snapshots import LiveFigures
from ..payment.follow import HOOK_LIMIT, HookRefused, receive_hook
from ..payment.prolific import HOOK_PATH
from ..screening.flags import FLAGS, Flag
from . import arrival
from .assets import Assets
from .editor import Editor
from .flow import PAGE_SEQUENCE
from .gateway import Gateway
from .overload import GATEWAY_LIMITS, Limits, OverloadGuard, Throttle
from .page import Form, NotAccepted, Page, PageRequest, Script, check_sequence, current_page
from .security import (
    CSRF_FIELD,
    CSRF_HEADER,
    SecurityHeaders,
    bounded_body,
    check_csrf,
    csrf_token,
    json_for_html,
)

SESSION_COOKIE = "sotopia_study"
IN_PLACE_HEADER = "x-next-in-place"
SESSION_DAYS = 2

Endpoint = Callable[[Request], Awaitable[Response]]


def unreadable(error: ValidationError) -> str:
    """The first reason a submission's body was refused, naming its field (never its value)."""
    first = error.errors(include_url=False, include_input=False)[0]
    return f"{'.'.join(map(str, first['loc'])) or 'body'}: {first['msg']}"


def _templates(pages: tuple[Page, ...], editor: Editor, assets: Assets) -> Jinja2Templates:
    """The gateway's templates, then each page's own folder; ``editor`` says how the rating
    page loads the editor, ``assets`` where the static files are."""
    folders = dict.fromkeys(page.template_folder for page in pages if page.template_folder)
    environment = jinja2.Environment(
        loader=jinja2.ChoiceLoader([jinja2.PackageLoader("sotopia_ls.study.serving", "templates"),
                                    *(jinja2.FileSystemLoader(folder) for folder in folders)]),
        autoescape=True, undefined=jinja2.StrictUndefined,
    )
    environment.filters["json_for_html"] = json_for_html
    environment.globals["static"] = assets.own
    environment.globals["editor"] = {
        "base": assets.editor, "stylesheet": editor.loader.stylesheet,
        "scripts": editor.loader.scripts,
        # The release lets the page see that the gateway now serves other files.
        "loader": json_for_html({**editor.loader.for_page(), "release": assets.release}),
    }
    return Jinja2Templates(env=environment)


def _form_fields(body: bytes) -> dict[str, str | list[str]]:
    """A form's fields; a field sent several times (checkboxes) as the list of its values."""
    fields = parse_qs(body.decode("utf-8", "replace"))
    return {name: values[0] if len(values) == 1 else values for name, values in fields.items()}


async def _answers(request: Request, submit: Form | Script) -> BaseModel:
    """The submit's body, bounded, CSRF-checked and read with its pydantic model; 413, 403 or
    400 naming the field otherwise."""
    if isinstance(submit, Script):
        check_csrf(request, request.headers.get(CSRF_HEADER))
    try:
        raw = await bounded_body(request, submit.limit)
    except HTTPException as refused:  # 413: the participant is told what to shorten
        raise HTTPException(refused.status_code, submit.too_long) from None
    try:
        if isinstance(submit, Script):
            return submit.answers.model_validate_json(raw)
        fields = _form_fields(raw)
        token = fields.pop(CSRF_FIELD, None)
        check_csrf(request, token if isinstance(token, str) else None)
        return submit.answers.model_validate(fields)
    except ValidationError as error:
        raise HTTPException(400, f"This is not {submit.what} the study can read: "
                            f"{unreadable(error)}.") from None


def create_app(gateway: Gateway, *, secret: str, editor: Editor, https_only: bool,
               pages: tuple[Page, ...] = PAGE_SEQUENCE,
               dashboard_token: str | None = None,
               limits: Limits = GATEWAY_LIMITS,
               hook_secret: str | None = None,
               flags: Sequence[Flag] = FLAGS) -> SecurityHeaders:
    """The gateway's ASGI app for the sequence ``pages``; ``https_only`` marks the session
    cookie Secure; with ``dashboard_token``, the researcher's dashboard is served too, its
    participants judged by ``flags``; ``limits`` say when the process is too busy to take a
    participant's request; with ``hook_secret``, Prolific's webhook calls are taken at
    ``HOOK_PATH``. The security headers wrap the Starlette app itself: its error pages (500s
    included) are made inside Starlette, so they carry them too, as do the overload guard's
    503s (``overload``)."""
    check_sequence(pages)
    study = gateway.study
    engine = gateway.engine
    assets = Assets.of(editor)
    templates = _templates(pages, editor, assets)
    base = f"/s/{study.name}"
    script_paths = tuple(f"/{page.submit.path}" for page in pages
                         if isinstance(page.submit, Script))
    dashboard = Dashboard(engine, study) if dashboard_token else None
    throttle = Throttle()  # wrong dashboard tokens by client: the guard refuses those past it
    live = LiveFigures(engine, study, extra=participants_with(flags) if dashboard else None,
                       also=dashboard.refresh if dashboard else None)
    # The running agreement is kept where this gateway reads it: on the dashboard, and for
    # adaptive raters that stop at a target width. `study status` computes its own otherwise.
    figures_read = dashboard is not None or (study.adaptive is not None
                                             and study.adaptive.target_width is not None)

    def render(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        return templates.TemplateResponse(
            request, template, {"title": study.title, "base": base, **context},
            status_code=status,
        )

    def go(page: Page) -> RedirectResponse:
        return RedirectResponse(f"{base}/{page.name}", status_code=303)

    def check_study(request: Request) -> None:
        if request.path_params["study"] != study.name:
            raise HTTPException(404, "There is no such study here.")

    async def current_visit(request: Request) -> arrival.Visit:
        check_study(request)
        visit_id = request.session.get("visit")
        # Only a visit of this study: another study on the same database and secret (a
        # qualification round and its main study) may have set the cookie.
        visit = await run_in_threadpool(arrival.load_visit, engine, study.name, visit_id) \
            if isinstance(visit_id, int) else None
        if visit is None:
            raise HTTPException(403, "Please open this study from its link on Prolific.")
        return visit

    async def where(visit: arrival.Visit) -> Page:
        """The visit's current page, read again from the database."""
        visit = await run_in_threadpool(arrival.load_visit, engine, study.name, visit.id)
        return current_page(pages, visit, study)

    def turn(request: Request, visit: arrival.Visit) -> PageRequest:
        return PageRequest(visit, gateway, base, csrf_token(request))

    async def arrive(request: Request) -> Response:
        check_study(request)
        parameters = arrival.read_parameters(request.query_params)
        if isinstance(parameters, list):
            return render(request, "problem.html", 400, message=(
                f"This study link is missing or has a malformed {', '.join(parameters)}. "
                "Please open the study again from Prolific."))
        visit = await run_in_threadpool(arrival.arrive, engine, study.name, parameters)
        request.session.clear()
        request.session["visit"] = visit.id
        visit = await run_in_threadpool(settle_arrival, turn(request, visit))
        # The address bar drops Prolific's parameters at once.
        return go(current_page(pages, visit, study))

    def settle_arrival(arriving: PageRequest) -> arrival.Visit:
        """Each page's ``on_arrival`` in turn, each given the visit as the one before left it."""
        for page in pages:
            arriving = replace(arriving, visit=page.on_arrival(arriving))
        return arriving.visit

    def shows(page: Page) -> Endpoint:
        """The page's address: GET shows it, a form POST answers it; out of turn, either goes
        to the current page."""

        async def endpoint(request: Request) -> Response:
            visit = await current_visit(request)
            if request.method == "POST":
                answers = await _answers(request, page.submit)
                if current_page(pages, visit, study) is page:
                    visit = await run_in_threadpool(page.before_next_page,
                                                    turn(request, visit), answers)
                return go(current_page(pages, visit, study))
            if current_page(pages, visit, study) is not page and not page.revisitable:
                return go(current_page(pages, visit, study))
            context = await run_in_threadpool(page.vars_for_template, turn(request, visit))
            if context is None:
                return go(await where(visit))
            return render(request, page.template, csrf=csrf_token(request),
                          csrf_field=CSRF_FIELD, **context)

        return endpoint

    def takes(page: Page, submit: Script) -> Endpoint:
        """A page script's JSON submit; answers where to go next, and, when that is the same
        page and the script keeps it (``IN_PLACE_HEADER``), what it shows again
        (``Page.again_in_place``) with the files' release."""

        async def endpoint(request: Request) -> Response:
            visit = await current_visit(request)
            answers = await _answers(request, submit)
            after = await run_in_threadpool(page.before_next_page, turn(request, visit), answers)
            following = current_page(pages, after, study)
            answer: dict[str, Any] = {"next": f"{base}/{following.name}"}
            if following is page and request.headers.get(IN_PLACE_HEADER) == "1":
                answer |= {"again": await run_in_threadpool(page.again_in_place,
                                                            turn(request, after)),
                           "release": assets.release}
            return JSONResponse(answer)

        return endpoint

    def page_routes(page: Page) -> list[BaseRoute]:
        address = f"/s/{{study}}/{page.name}"
        if isinstance(page.submit, Script):
            return [Route(address, shows(page)),
                    Route(f"/s/{{study}}/{page.submit.path}", takes(page, page.submit),
                          methods=["POST"])]
        return [Route(address, shows(page),
                      methods=["GET", "POST"] if isinstance(page.submit, Form) else ["GET"])]

    def from_script(request: Request) -> bool:
        return request.url.path.endswith(script_paths)

    async def prolific_hook(request: Request) -> Response:
        """A call of Prolific's webhook: its status changes reach the visit (``follow``)."""
        body = await bounded_body(request, HOOK_LIMIT)
        try:
            followed = await run_in_threadpool(receive_hook, engine, study.name,
                                               hook_secret or "", request.headers, body)
        except HookRefused as refusal:
            return JSONResponse({"error": str(refusal)}, status_code=refusal.status)
        return JSONResponse({"taken": followed is not None})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def refused(request: Request, exc: HTTPException) -> Response:
        if from_script(request):
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
        return render(request, "problem.html", exc.status_code, message=exc.detail)

    async def not_accepted(request: Request, exc: NotAccepted) -> Response:
        if from_script(request):
            return JSONResponse({"problems": exc.problems}, status_code=422)
        return render(request, "problem.html", 422, message=" ".join(exc.problems))

    async def failed(request: Request, exc: Exception) -> Response:
        # The traceback goes to the server's log (uvicorn); the participant gets a plain page.
        return render(request, "problem.html", 500, message="Something went wrong on our side. "
                      "Please reload this page; your ratings so far are kept.")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        writing = asyncio.create_task(gateway.writer.run())
        figuring = asyncio.create_task(live.run()) if figures_read else None
        try:
            yield
        finally:
            writing.cancel()
            if figuring is not None:
                figuring.cancel()

    def busy(seconds: int) -> str:
        return templates.get_template("busy.html").render(title=study.title, seconds=seconds)

    return SecurityHeaders(OverloadGuard(assets.serve(Starlette(
        routes=[
            Route("/health", health),
            *([Route(HOOK_PATH, prolific_hook, methods=["POST"])] if hook_secret else []),
            Route("/s/{study}", arrive),
            *(route for page in pages for route in page_routes(page)),
            *(dashboard_routes(dashboard, dashboard_token, render, https_only=https_only,
                               throttle=throttle)
              if dashboard and dashboard_token else []),
        ],
        middleware=[
            Middleware(SessionMiddleware, secret_key=secret, session_cookie=SESSION_COOKIE,
                       max_age=SESSION_DAYS * 24 * 3600, same_site="lax", https_only=https_only),
        ],
        exception_handlers={HTTPException: refused, NotAccepted: not_accepted, 500: failed},
        lifespan=lifespan,
        debug=False,
    )), gateway.load, busy_page=busy, json_paths=script_paths, limits=limits,
        throttle=throttle))
