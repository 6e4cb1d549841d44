"""Every call of the package to a Label Studio server, through label-studio-sdk.

SDK and HTTP errors become ``LabelStudioError`` in ``sdk_errors``, the key is never part of a
message, and what the functions return is the package's own (never an SDK object); ``Client``
names the SDK's client, so modules outside this folder type one without importing the SDK.
"""

from __future__ import annotations

import html
import re
import sys
from collections import Counter
from urllib.parse import quote
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields as dataclass_fields
from datetime import datetime
from functools import cached_property
from typing import Any

import httpx
import orjson
from label_studio_sdk.base_client import LabelStudioBase
from label_studio_sdk.core.api_error import ApiError
from label_studio_sdk.projects.client import ProjectsClient
from label_studio_sdk.tasks.client import TasksClient

from ..config import check_labeling_config, instructions_html, labeling_config
from ..errors import (
    ImportOutcomeUnknown,
    LabelStudioError,
    ProjectNotFound,
    header_problem,
    keep_secret,
    redacted,
)
from .server import demo_login, tls
from .tasks import EPISODE_ID


class Client(LabelStudioBase):
    """The SDK's ``LabelStudio`` client as the package uses it: its task and project lists
    ask for page after page up to the count the server gives (``_pages``), the task list for
    the server's default ``fields="task_only"`` unless told otherwise. Built on the SDK's
    base client since ``LabelStudio`` also imports its labeling-config and pandas export helpers
    (boto3, jsf, pandas: a second of CPU at each process start). ``connect`` makes one; a test
    may make one directly (``Client(base_url=…, api_key=…)``) for a server it knows is there.
    Its HTTP client is the SDK's default (60 s, redirects as the SDK follows them) on the one
    TLS context ``tls`` keeps, unless one is given."""

    def __init__(self, *, base_url: str, api_key: str, timeout: float = 60,
                 httpx_client: httpx.Client | None = None) -> None:
        super().__init__(base_url=base_url, api_key=api_key, timeout=timeout,
                         httpx_client=httpx_client or httpx.Client(
                             timeout=timeout, follow_redirects=True, verify=tls()))

    @cached_property
    def tasks(self) -> _Tasks:
        return _Tasks(client_wrapper=self._client_wrapper)

    @cached_property
    def projects(self) -> _Projects:
        return _Projects(client_wrapper=self._client_wrapper)


class _Tasks(TasksClient):
    def list(self, **kwargs: Any) -> Iterator[Any]:
        return _pages(lambda page: TasksClient.list(self, **kwargs, page=page), "total")


class _Projects(ProjectsClient):
    def list(self, **kwargs: Any) -> Iterator[Any]:
        return _pages(lambda page: ProjectsClient.list(self, **kwargs, page=page), "count")


# Enough tasks per page that listing a 10,000-task project takes a handful of requests.
_PAGE_SIZE = 1000


def _pages(list_page: Callable[[int], Any], total: str) -> Iterator[Any]:
    """Every item of an SDK listing, asked for page by page (``list_page(n)``), up to the
    count its answer's field ``total`` gives: the SDK's pager asks for the page past the last
    one too, a 404 that costs the server about as much as a page."""
    listed, page = 0, 1
    while True:
        answer = list_page(page)
        items = answer.items or []
        yield from items
        listed += len(items)
        count = getattr(answer.response, total, None)
        if not isinstance(count, int):  # a page that says nothing of the whole: refuse, not guess
            raise LabelStudioError(f"Label Studio's listing gave no {total} of its items")
        if not items or listed >= count:
            return
        page += 1


def _tasks(client: Client, project_id: int, include: str | None, fields: str = "task_only"
           ) -> Iterator[Any]:
    """The project's tasks with only the fields ``include`` names (``fields="all"`` adds
    annotations, predictions and ``draft_exists``: a third more of the server's time)."""
    return client.tasks.list(project=project_id, fields=fields, include=include,
                             page_size=_PAGE_SIZE)


@contextmanager
def sdk_errors(action: str, *, project: int | None = None) -> Iterator[None]:
    """Turn SDK/HTTP failures of ``action`` into ``LabelStudioError``."""
    try:
        yield
    except ApiError as exc:
        raise LabelStudioError(
            f"{action} failed: HTTP {exc.status_code}: {_detail(exc.body)}"
            + (" (check the API key)" if exc.status_code == 401 else ""),
            project=project, status=exc.status_code,
        ) from exc
    except httpx.HTTPError as exc:
        raise LabelStudioError(f"{action} failed: {exc}", project=project) from exc


# How much of a server's error body a message shows: its reason, not a page.
_DETAIL_CHARS = 300


def _detail(body: object) -> str:
    """Label Studio's reason, including the per-field ``validation_errors`` it sends, cut
    short: a server may answer with a whole page, or echo the request's headers."""
    if isinstance(body, dict):
        detail = str(body.get("detail", body))
        errors = body.get("validation_errors")
        text = f"{detail}: {errors}" if errors else detail
    else:
        text = " ".join(str(body).split())
    text = redacted(text)  # before cutting: a cut key would slip past redaction
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"


def connect(url: str | None, api_key: str | None) -> Client:
    """A client for ``url``; both values are required and checked with one cheap call. The
    key is kept out of every message from here on (``errors.redacted``). Given neither, the
    demo ``sotopia-ls up`` serves from the current folder is used, and stderr says so."""
    demo = demo_login() if not url and not api_key else None
    if demo is not None:
        url, api_key = demo.url, demo.api_key
        sys.stderr.write(f"no --url or --api-key given: using the demo's Label Studio at {url} "
                         f"and the key in {demo.credentials_file}\n")
    if not url:
        raise LabelStudioError("no Label Studio URL: pass --url or set LABEL_STUDIO_URL")
    if not api_key:
        raise LabelStudioError(
            "no Label Studio API key: pass --api-key or set LABEL_STUDIO_API_KEY"
        )
    keep_secret(api_key)
    problem = header_problem(api_key, "ascii")  # httpx sends header values as ASCII
    if problem:
        raise LabelStudioError(f"the Label Studio API key {problem}")
    client = Client(base_url=url.rstrip("/"), api_key=api_key)
    with sdk_errors(f"connecting to {redacted(url)}"):
        client.users.whoami()
    return client


@dataclass(frozen=True)
class Project:
    """What the package reads of a project: ``maximum_annotations`` is the overlap, how many
    annotations each task is meant to get (None when Label Studio gives none), and
    ``expert_instruction`` the instructions annotators see (when ``show_instruction``)."""

    id: int
    title: str
    label_config: str
    maximum_annotations: int | None
    expert_instruction: str
    show_instruction: bool

    @classmethod
    def of(cls, sdk_project: Any) -> Project:
        return cls(int(sdk_project.id), sdk_project.title or "", sdk_project.label_config or "",
                   sdk_project.maximum_annotations, sdk_project.expert_instruction or "",
                   bool(sdk_project.show_instruction))


def _only(*fields: str) -> dict[str, Any]:
    """Request options that have Label Studio answer with only ``fields`` of a project (its
    ``include``): it otherwise computes all eight of a project's counters (tasks, annotations,
    predictions...) at each read or update, most of the request's CPU, and sends every field."""
    return {"additional_query_parameters": {"include": ",".join(fields)}}


def read_project(client: Client, project_id: int, *fields: str) -> Any:
    """The SDK's project, for this folder's modules, with only ``fields`` filled in."""
    return client.projects.get(id=project_id, request_options=_only(*fields))


# What ``Project`` reads of a project: its fields are named as Label Studio's.
_PROJECT_FIELDS = ",".join(field.name for field in dataclass_fields(Project))


def find_project(client: Client, ref: str | int) -> Project:
    """The project whose id (digits) or exact title is ``ref``."""
    ref = str(ref)
    if ref.isdigit():
        with sdk_errors("looking up the project", project=int(ref)):
            try:
                return Project.of(read_project(client, int(ref), _PROJECT_FIELDS))
            except ApiError as exc:
                if exc.status_code == 404:
                    raise ProjectNotFound(f"no project with id {ref}") from exc
                raise
    with sdk_errors(f"looking up project {ref!r}"):
        matches = [p for p in client.projects.list(title=ref, include=_PROJECT_FIELDS)
                   if p.title == ref]
    if not matches:
        raise ProjectNotFound(f"no project titled {ref!r}")
    if len(matches) > 1:
        ids = ", ".join(str(p.id) for p in matches)
        raise LabelStudioError(f"several projects are titled {ref!r} (ids {ids}); pass an id")
    return Project.of(matches[0])


def create_project(client: Client, title: str, *, annotations_per_task: int = 2,
                   screen: tuple[str, str] | None = None) -> Project:
    """A new project with the generated labeling config and the rating instructions, or
    with ``screen``'s (labeling config, instructions HTML): the adjudication project's.

    No Skip button: every episode of the study is meant to be rated, and a skipped task
    goes back to the queue of other annotators, so the design's two raters per episode
    would come from whoever did not skip it.
    """
    if len(title) < 3:
        raise LabelStudioError(f"project title {title!r} is too short (3 characters at least)")
    config, instructions = screen or (check_labeling_config(labeling_config()),
                                      instructions_html())
    with sdk_errors(f"creating project {title!r}"):
        return Project.of(client.projects.create(
            title=title,
            label_config=config,
            expert_instruction=instructions,
            show_instruction=True,
            show_skip_button=False,
            maximum_annotations=annotations_per_task,
            # Pre-filled answers anchor annotators; predictions are hidden unless asked for.
            show_collab_predictions=False,
        ))


@dataclass(frozen=True)
class TaskCopy:
    """One task of an episode, as listed; ``worked_on`` when anyone annotated it (submitted,
    skipped or a draft): such a task is never deleted."""

    id: int
    worked_on: bool


def episode_tasks(client: Client, project_id: int) -> dict[str, list[TaskCopy]]:
    """``episode_id → its tasks`` (lowest id first) for every task of the project."""
    found: dict[str, list[TaskCopy]] = {}
    with sdk_errors("listing tasks", project=project_id):
        # include= trims each task to what is read here: much faster than full tasks; only
        # fields="all" gives draft_exists.
        for task in _tasks(client, project_id,
                           "id,data,total_annotations,cancelled_annotations,draft_exists",
                           fields="all"):
            episode_id = (task.data or {}).get(EPISODE_ID)
            if episode_id is not None:
                worked_on = bool(task.total_annotations or task.cancelled_annotations
                                 or task.draft_exists)
                found.setdefault(str(episode_id), []).append(TaskCopy(task.id, worked_on))
    for copies in found.values():
        copies.sort(key=lambda copy: copy.id)
    return found


def task_count(client: Client, project_id: int) -> int:
    """How many tasks the project holds, from one cheap request."""
    with sdk_errors("counting tasks", project=project_id):
        return int(read_project(client, project_id, "task_number").task_number or 0)


def server_release(client: Client) -> str | None:
    """The Label Studio release the server runs (``/api/version``), when it says."""
    with sdk_errors("reading Label Studio's version"):
        return client.versions.get().release


def delete_tasks(client: Client, project_id: int, task_ids: list[int]) -> None:
    """Delete tasks in one request (Label Studio's own "Delete tasks" action)."""
    with sdk_errors(f"deleting {len(task_ids)} tasks", project=project_id):
        client.actions.create(
            id="delete_tasks", project=project_id,
            selected_items={"all": False, "included": task_ids},
        )


# Answers after which Label Studio may have saved the request anyway: the gateway timed out,
# the connection broke. A 4xx other than these is a refusal of the whole batch.
_UNKNOWN_OUTCOME = {408, 502, 503, 504}


def import_batch(client: Client, project_id: int, tasks: list[dict[str, Any]]) -> list[int]:
    """Create ``tasks`` (with any predictions) in one bulk request; returns the new task ids.

    The request is ``projects.import_tasks``'s, sent on the SDK's own HTTP client (its base
    URL, API key and timeout), with the body encoded once by orjson: the SDK's method first
    walks every value of every task twice in Python, which costs many times the encoding and a
    third of an import's wall time. The client's private ``_client_wrapper`` is the one SDK
    internal the package depends on (the SDK's own extensions reach it the same way); the
    import tests fail at once if it moves.

    The SDK's automatic retries are off for this request: a retry of a bulk import that the
    server saved, but whose answer was lost, saves it twice. A failure whose outcome is
    unknown raises ``ImportOutcomeUnknown``; the caller finds out what was saved.
    """
    with sdk_errors(f"importing {len(tasks)} tasks", project=project_id):
        try:
            response = client.projects._client_wrapper.httpx_client.request(
                f"api/projects/{project_id}/import",
                method="POST",
                params={"return_task_ids": True},
                content=orjson.dumps(tasks),
                headers={"content-type": "application/json"},
                request_options={"max_retries": 0},
            )
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise ImportOutcomeUnknown(f"importing {len(tasks)} tasks: {type(exc).__name__}",
                                       project=project_id) from exc
        body = _json_or_text(response)
        if response.status_code in _UNKNOWN_OUTCOME or response.status_code >= 500:
            raise ImportOutcomeUnknown(
                f"importing {len(tasks)} tasks: HTTP {response.status_code}", project=project_id
            )
        if not response.is_success:
            raise ApiError(status_code=response.status_code, headers=dict(response.headers),
                           body=body)
    return list(body.get("task_ids") or []) if isinstance(body, dict) else []


def _json_or_text(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def set_prefill(
    client: Client, project_id: int, prefill: bool, version: str | None = None
) -> str | None:
    """Show annotators predictions pre-filled from ``version``, or show none.

    Label Studio stores with each submitted annotation the prediction of the project's
    ``model_version``; turning pre-fill off also clears that version, so an annotation carries
    a prediction only when one was shown to its annotator.

    With ``prefill`` and no ``version``, the project's predictions must all carry one model
    version, which is then used. Returns the version shown, or None.
    """
    with sdk_errors("changing the prediction settings", project=project_id):
        if not prefill:
            client.projects.update(id=project_id, show_collab_predictions=False,
                                   request_options=_only("id"))
            return None
        if version is None:
            versions = Counter(p.model_version for p in client.predictions.list(project=project_id))
            if len(versions) != 1:
                found = ", ".join(f"{v} ({n})" for v, n in versions.most_common()) or "none"
                raise LabelStudioError(
                    f"pick the predictions to pre-fill with --prefill-version; model versions: {found}",
                    project=project_id,
                )
            (version,) = versions
        client.projects.update(id=project_id, show_collab_predictions=True, model_version=version,
                               request_options=_only("id"))
    return version


@dataclass(frozen=True)
class InviteLinks:
    """The organization's signup link and, for a project, the one that ends in its stream; the
    login page, which for a project also ends there (for people who have an account)."""

    invite: str
    login: str
    project_id: int | None = None
    stream: str = ""


def address(client: Client) -> str:
    """The server's address as ``client`` reaches it, without credentials or a trailing slash:
    the start of every link a command prints, so that the link opens pasted into a browser."""
    return redacted(client._client_wrapper.get_base_url()).rstrip("/")


def invite_links(client: Client, project: str | int | None = None) -> InviteLinks:
    """The current invite link (Label Studio's own; opening the invite dialog in its UI makes
    a new one and voids this), and with ``project`` the link that signs a new annotator up
    and sends them to that project's label stream."""
    with sdk_errors("reading the invite link"):
        invite = client.organizations.invites.get_invite_link()
    signup = f"{address(client)}{invite.invite_url}"
    login = f"{address(client)}/user/login/"
    if project is None:
        return InviteLinks(signup, login)
    project_id = find_project(client, project).id
    stream = quote(f"/projects/{project_id}/data?labeling=1", safe="/")
    return InviteLinks(signup, f"{login}?next={stream}", project_id, f"{signup}&next={stream}")


_FORM_ERROR = re.compile(r'<ul class="field_errors">\s*<li>(.*?)</li>', re.S)


def add_annotators(client: Client, emails: Sequence[str], password: str) -> dict[str, bool]:
    """An account for each of ``emails`` that logs in with ``password``, made as a person makes
    one: through Label Studio's signup form with the invite link (an account made through the
    API has no password). Returns ``email → made`` (False: it was there already)."""
    keep_secret(password)
    present = {email.lower() for email in annotator_emails(client).values()}
    signup = invite_links(client).invite
    made = {}
    for email in dict.fromkeys(emails):  # each once, in order
        made[email] = email.lower() not in present
        if not made[email]:
            continue
        with httpx.Client(timeout=60, verify=tls()) as browser, sdk_errors(f"signing up {email}"):
            browser.get(signup).raise_for_status()
            answer = browser.post(signup, headers={"Referer": signup}, data={
                "email": email, "password": password,
                "csrfmiddlewaretoken": browser.cookies.get("csrftoken", "")})
        if not answer.is_redirect:
            reasons = _FORM_ERROR.findall(answer.text) or [f"HTTP {answer.status_code}"]
            raise LabelStudioError(f"{email}: Label Studio refused the account: "
                                   + "; ".join(redacted(html.unescape(reason.strip()))
                                              for reason in reasons))
        present.add(email.lower())
    return made


def annotator_emails(client: Client) -> dict[int, str]:
    """``user id → email`` for every user on the server (an annotation names its user by id)."""
    with sdk_errors("listing users"):
        return {user.id: user.email or user.username for user in client.users.list()}


def project_predictions(client: Client, project_id: int) -> dict[int, dict[str, Any]]:
    """The latest prediction of each task (``result`` and ``model_version``), by task id.

    A JSON export lists predictions by id only; this fetches their contents, for comparing
    human scores with a backend's predictions when tasks carry no stored evaluation.
    """
    latest: dict[int, dict[str, Any]] = {}
    with sdk_errors("listing predictions", project=project_id):
        for prediction in sorted(client.predictions.list(project=project_id), key=lambda p: p.id):
            latest[prediction.task] = {
                "result": prediction.result, "model_version": prediction.model_version or ""
            }
    return latest


def prediction_count(client: Client, project_id: int) -> int:
    """How many predictions the project's tasks hold: the count Label Studio keeps with the
    project, so no prediction is downloaded."""
    with sdk_errors("counting predictions", project=project_id):
        return read_project(client, project_id,
                            "total_predictions_number").total_predictions_number or 0


@dataclass(frozen=True)
class TaskRecord:
    """One task as a judge reads it: what the annotator sees and what they do not."""

    id: int
    data: dict[str, Any]
    meta: dict[str, Any]


def task_records(client: Client, project_id: int) -> list[TaskRecord]:
    """Every task of the project with its ``data`` and ``meta``, lowest id first."""
    with sdk_errors("listing tasks", project=project_id):
        records = [TaskRecord(task.id, dict(task.data or {}),
                              dict(task.meta) if isinstance(task.meta, dict) else {})
                   for task in _tasks(client, project_id, "id,data,meta")]
    return sorted(records, key=lambda record: record.id)


def update_task_meta(client: Client, project_id: int, task_id: int, meta: dict[str, Any]) -> None:
    """Replace the task's ``meta``; its data, which annotators see, is left as it is."""
    with sdk_errors("saving a task's meta", project=project_id):
        client.tasks.update(id=str(task_id), meta=meta)


def merge_task_meta(client: Client, project_id: int, key: str,
                    entries: dict[int, dict[str, Any]]) -> int:
    """Merge ``entries[task id]`` into the object each task's ``meta[key]`` holds, keeping the
    rest of its meta; how many tasks changed. One listing of the project's task ids (each
    must be in it), then each task's meta read just before its update (``merge_meta_of_task``),
    so a write by another process (``evaluate`` storing a model evaluation, say) earlier in
    the run is kept. Label Studio replaces meta whole and has no conditional update: a write
    between one task's read and its update is still lost, a window of one round trip."""
    with sdk_errors("listing tasks", project=project_id):
        held = {task.id for task in _tasks(client, project_id, "id")}
    for task_id in sorted(entries.keys() - held):
        raise LabelStudioError(f"task {task_id} is not in the project", project=project_id,
                               task=task_id)
    return sum(merge_meta_of_task(client, task_id, key, values)
               for task_id, values in sorted(entries.items()))


def _merged_meta(meta: dict[str, Any], key: str, values: dict[str, Any]) -> dict[str, Any] | None:
    """``meta`` with ``values`` merged into the object ``meta[key]`` holds; None when that
    changes nothing."""
    before = meta.get(key) if isinstance(meta.get(key), dict) else {}
    merged = {**before, **values}
    return None if merged == before else {**meta, key: merged}


def merge_meta_of_task(client: Client, task_id: int, key: str, values: dict[str, Any]) -> bool:
    """``merge_task_meta`` for one task, read alone (not its project's every task); whether it
    changed. Label Studio replaces meta whole: the caller keeps two merges of one task from
    overlapping."""
    with sdk_errors(f"reading task {task_id}"):
        meta = client.tasks.get(id=str(task_id)).meta
    merged = _merged_meta(dict(meta) if isinstance(meta, dict) else {}, key, values)
    if merged is not None:
        with sdk_errors(f"saving the meta of task {task_id}"):
            client.tasks.update(id=str(task_id), meta=merged)
    return merged is not None


# Label Studio's state of a backend it can use.
_CONNECTED = "CO"


@dataclass(frozen=True)
class Backend:
    """An ML backend as Label Studio holds it for a project; ``state`` is Label Studio's
    (``CO``: connected)."""

    id: int
    state: str


def register_backend(
    client: Client, project_id: int, backend_url: str, *, title: str = "sotopia-ls",
    auth: tuple[str, str] | None = None,
) -> Backend:
    """Add the backend to the project, or update the one already at ``backend_url``, and
    switch off the event webhook Label Studio makes for it (see ``switch_off_event_webhook``).

    Label Studio checks /health and /setup on the spot; a backend it cannot use raises
    ``LabelStudioError`` with Label Studio's reason, and with the fix when the reason is its
    guard against local and private addresses.
    """
    settings: dict[str, Any] = {"url": backend_url, "title": title, "is_interactive": False}
    settings |= (
        {"auth_method": "BASIC_AUTH", "basic_auth_user": auth[0], "basic_auth_pass": auth[1]}
        if auth else {"auth_method": "NONE"}
    )
    try:
        with sdk_errors("registering the ML backend", project=project_id):
            same_url = [
                backend for backend in client.ml.list(project=project_id)
                if (backend.url or "").rstrip("/") == backend_url.rstrip("/")
            ]
            if same_url:
                # Label Studio re-checks /setup on update and needs the project for it.
                backend = client.ml.update(id=same_url[0].id, project=project_id, **settings)
            else:
                backend = client.ml.create(project=project_id, **settings)
            backend = client.ml.get(id=backend.id)
    except LabelStudioError as error:
        blocked = _BLOCKED_ADDRESS.search(str(error))
        if blocked is None:
            raise
        raise LabelStudioError(
            f"Label Studio will not call {backend_url}: the address is in {blocked.group(1)}, which it "
            "blocks by default. Start Label Studio with ML_BLOCK_LOCAL_IP=false "
            "USE_DEFAULT_BANNED_SUBNETS=false (`sotopia-ls up --allow-local-backends` does), "
            "or give a --backend-url it may call",
            project=project_id,
        ) from error
    if backend.state != _CONNECTED:
        reason = backend.error_message or "it did not answer /health"
        raise LabelStudioError(f"Label Studio cannot use the backend at {backend_url}: {reason}", project=project_id)
    switch_off_event_webhook(client, project_id, backend_url)
    return Backend(int(backend.id), backend.state)


# Label Studio's answer when a URL falls in a subnet its SSRF guard blocks.
_BLOCKED_ADDRESS = re.compile(r"URL resolves to a reserved network address \(block: ([^)]+)\)")


def switch_off_event_webhook(client: Client, project_id: int, backend_url: str) -> None:
    """Switch off the webhook Label Studio created with the backend (``<backend>/webhook``).

    Label Studio sends it every event of the project with its payload, annotations included.
    This backend trains on nothing, so the events would only carry annotations to a backend
    that discards them, or, behind basic auth, refuses them: Label Studio sends a webhook only
    the headers stored with it, kept in its database and shown by its API, so the backend's
    password is not put there.
    """
    target = backend_url.rstrip("/") + "/webhook"
    with sdk_errors("switching off the backend's event webhook", project=project_id):
        for webhook in client.webhooks.list(project=str(project_id)):
            if webhook.url == target and webhook.is_active:
                client.webhooks.update(id=webhook.id, is_active=False)


# Tasks per request Label Studio sends the backend: far below the backend's body limit
# (docs/benchmarks.md measures a request's size), and few enough that a judge taking a few
# seconds a task answers within Label Studio's ML_TIMEOUT_PREDICT with its default workers.
RETRIEVE_BATCH = 100


def request_predictions(client: Client, project_id: int, *, batch_size: int = RETRIEVE_BATCH) -> int:
    """Have Label Studio ask its backend for predictions for every task of the project; how
    many predictions that made (the project's count after, less before).

    In batches of ``batch_size`` tasks: for the tasks selected, Label Studio sends one request
    holding them all, which for a large project would pass the backend's body limit.
    """
    before = prediction_count(client, project_id)
    with sdk_errors("requesting predictions", project=project_id):
        ids = [task.id for task in _tasks(client, project_id, "id")]
        for start in range(0, len(ids), batch_size):
            client.actions.create(
                id="retrieve_tasks_predictions", project=project_id,
                selected_items={"all": False, "included": ids[start : start + batch_size]},
            )
    return prediction_count(client, project_id) - before


# --- the study gateway: participants' users, one task's data, their annotations ----------------


def ensure_user(client: Client, email: str, username: str) -> int:
    """The id of the user with ``email``, created by the owner's key when there is none.

    Such a user has no password and never logs in: the study gateway creates annotations in
    its name. A user made earlier (a participant who returns, or another gateway process
    that got there first) is found by its email. Neither value is put in a message.
    """
    with sdk_errors("creating a participant's user"):
        try:
            return client.users.create(email=email, username=username).id
        except ApiError as exc:
            if exc.status_code != 400:
                raise
        for user in client.users.list():
            if (user.email or "").lower() == email.lower():
                return user.id
    raise LabelStudioError("Label Studio refused to create a participant's user, and has none "
                           "with that email")


def project_task_data(client: Client, project_id: int) -> dict[int, dict[str, Any]]:
    """``task id → data`` of every task of the project (never its ``meta``)."""
    with sdk_errors("listing tasks", project=project_id):
        return {task.id: dict(task.data or {}) for task in _tasks(client, project_id, "id,data")}


def ground_truth_results(client: Client, project_id: int) -> dict[int, tuple[int, list[Any]]]:
    """``task id → (annotation id, result)`` of the project's ground-truth annotations
    (cancelled ones left out). Label Studio keeps at most one per task."""
    found: dict[int, tuple[int, list[Any]]] = {}
    with sdk_errors("listing ground-truth annotations", project=project_id):
        # fields="all" is what makes Label Studio list a task's annotations with it.
        for task in _tasks(client, project_id, None, fields="all"):
            for annotation in task.annotations or []:
                if annotation.get("ground_truth") and not annotation.get("was_cancelled"):
                    found[task.id] = (annotation["id"], annotation.get("result") or [])
    return found


def user_annotation(client: Client, task_id: int, user_id: int) -> int | None:
    """The id of the user's (first) annotation on the task, if there is one."""
    with sdk_errors(f"listing the annotations of task {task_id}"):
        mine = [a.id for a in client.annotations.list(id=task_id) if a.completed_by == user_id]
    return min(mine) if mine else None


def save_annotation(
    client: Client, task_id: int, *, user_id: int, results: list[dict[str, Any]],
    lead_time: float, started_at: datetime, unique_id: str,
) -> int:
    """Create the user's annotation on the task once, however often it is sent; its id.

    ``unique_id`` (a UUID) makes the request idempotent: Label Studio keeps it with the
    annotation under a unique constraint and answers 409 when it already holds it, as for a
    retry whose first answer was lost; the annotation saved then is looked up. ``started_at``
    goes into ``draft_created_at``, Label Studio's field for when work on an annotation began.
    """
    with sdk_errors(f"saving an annotation on task {task_id}"):
        try:
            return client.annotations.create(
                id=task_id, result=results, completed_by=user_id, lead_time=lead_time,
                draft_created_at=started_at, unique_id=unique_id,
            ).id
        except ApiError as exc:
            if exc.status_code != 409:
                raise
    saved = user_annotation(client, task_id, user_id)
    if saved is None:
        raise LabelStudioError("Label Studio holds the annotation's unique id but no annotation "
                               "of its user on the task", task=task_id)
    return saved
