"""The boundary to Label Studio: every server call of the package goes through here.

label-studio-sdk and HTTP errors are mapped to ``LabelStudioError`` (with the project id when
known) in ``sdk_errors``, so callers above this module catch one exception tree. The API key is
passed to the SDK and nowhere else: it is never part of a message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
from label_studio_sdk import LabelStudio
from label_studio_sdk.core.api_error import ApiError

from .config import instructions_html, labeling_config
from .errors import LabelStudioError, ProjectNotFound
from .tasks import EPISODE_ID

# Enough tasks per page that listing a 10,000-task project takes a handful of requests.
_PAGE_SIZE = 1000


@contextmanager
def sdk_errors(action: str, *, project: int | None = None) -> Iterator[None]:
    """Turn SDK/HTTP failures of ``action`` into ``LabelStudioError``."""
    try:
        yield
    except ApiError as exc:
        raise LabelStudioError(
            f"{action} failed: HTTP {exc.status_code}: {_detail(exc.body)}"
            + (" (check the API key)" if exc.status_code == 401 else ""),
            project=project,
        ) from exc
    except httpx.HTTPError as exc:
        raise LabelStudioError(f"{action} failed: {exc}", project=project) from exc


def _detail(body: object) -> str:
    """Label Studio's reason, including the per-field ``validation_errors`` it sends."""
    if not isinstance(body, dict):
        return str(body)
    detail = str(body.get("detail", body))
    errors = body.get("validation_errors")
    return f"{detail}: {errors}" if errors else detail


def connect(url: str | None, api_key: str | None) -> LabelStudio:
    """A client for ``url``; both values are required and checked with one cheap call."""
    if not url:
        raise LabelStudioError("no Label Studio URL: pass --url or set LABEL_STUDIO_URL")
    if not api_key:
        raise LabelStudioError(
            "no Label Studio API key: pass --api-key or set LABEL_STUDIO_API_KEY"
        )
    client = LabelStudio(base_url=url.rstrip("/"), api_key=api_key)
    with sdk_errors(f"connecting to {url}"):
        client.users.whoami()
    return client


def find_project(client: LabelStudio, ref: str | int) -> Any:
    """The project whose id (digits) or exact title is ``ref``."""
    ref = str(ref)
    if ref.isdigit():
        with sdk_errors("looking up the project", project=int(ref)):
            try:
                return client.projects.get(id=int(ref))
            except ApiError as exc:
                if exc.status_code == 404:
                    raise ProjectNotFound(f"no project with id {ref}") from exc
                raise
    with sdk_errors(f"looking up project {ref!r}"):
        matches = [p for p in client.projects.list(title=ref) if p.title == ref]
    if not matches:
        raise ProjectNotFound(f"no project titled {ref!r}")
    if len(matches) > 1:
        ids = ", ".join(str(p.id) for p in matches)
        raise LabelStudioError(f"several projects are titled {ref!r} (ids {ids}); pass an id")
    return matches[0]


def create_project(client: LabelStudio, title: str, *, annotations_per_task: int = 2) -> Any:
    """A new project with the generated labeling config and the rating instructions."""
    if len(title) < 3:
        raise LabelStudioError(f"project title {title!r} is too short (3 characters at least)")
    with sdk_errors(f"creating project {title!r}"):
        return client.projects.create(
            title=title,
            label_config=labeling_config(),
            expert_instruction=instructions_html(),
            show_instruction=True,
            maximum_annotations=annotations_per_task,
            # Pre-filled answers anchor annotators; predictions are hidden unless asked for.
            show_collab_predictions=False,
        )


def existing_episode_ids(client: LabelStudio, project_id: int) -> dict[str, int]:
    """``episode_id → task id`` for every task already in the project."""
    found: dict[str, int] = {}
    with sdk_errors("listing tasks", project=project_id):
        # include= trims each task to what is read here: about 6x faster than full tasks.
        tasks = client.tasks.list(project=project_id, page_size=_PAGE_SIZE, include="id,data")
        for task in tasks:
            episode_id = (task.data or {}).get(EPISODE_ID)
            if episode_id is not None:
                found[str(episode_id)] = task.id
    return found


def import_batch(client: LabelStudio, project_id: int, tasks: list[dict[str, Any]]) -> list[int]:
    """Create ``tasks`` (with any predictions) in one bulk request; returns the new task ids.

    The request is ``projects.import_tasks``'s, sent on the SDK's own HTTP client (its base
    URL, API key, timeout and retries), with the body encoded once by orjson: the SDK's method
    first walks every value of every task twice in Python, which costs 30 times the encoding
    and a third of an import's wall time.
    """
    with sdk_errors(f"importing {len(tasks)} tasks", project=project_id):
        response = client.projects._client_wrapper.httpx_client.request(
            f"api/projects/{project_id}/import",
            method="POST",
            params={"return_task_ids": True},
            content=orjson.dumps(tasks),
            headers={"content-type": "application/json"},
        )
        body = _json_or_text(response)
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
    client: LabelStudio, project_id: int, prefill: bool, version: str | None = None
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
            client.projects.update(id=project_id, show_collab_predictions=False)
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
        client.projects.update(id=project_id, show_collab_predictions=True, model_version=version)
    return version
