"""Session fixtures: one real Label Studio server for the whole test run.

The server runs from a temporary SQLite data directory on 127.0.0.1 and a free port.
Projects made by tests are titled ``test_<uuid>`` and deleted at the end of the session.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from label_studio_sdk import LabelStudio

from sotopia_ls.dimensions import AGENTS
from sotopia_ls.labelstudio import server
from sotopia_ls.labelstudio.client import episode_tasks
from sotopia_ls.labelstudio.results import evaluation_results
from sotopia_ls.samples import SAMPLES
from sotopia_ls.scores import Evaluation



@pytest.fixture(scope="session")
def sample_data() -> Path:
    """The real Sotopia sample data shipped with the package (``sotopia_ls/samples``)."""
    return SAMPLES


@pytest.fixture(scope="session")
def label_studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.LocalServer]:
    data_dir = tmp_path_factory.mktemp("label-studio")
    credentials = server.Credentials(
        username="tester@example.com", password="test-password-1", api_key=uuid.uuid4().hex
    )
    with server.start(data_dir, credentials, allow_local_ml_backends=True) as running:
        yield running


@pytest.fixture(scope="session")
def ls_client(label_studio: server.LocalServer) -> Iterator[LabelStudio]:
    client = LabelStudio(base_url=label_studio.url, api_key=label_studio.credentials.api_key)
    yield client
    for project in client.projects.list():
        if (project.title or "").startswith("test_"):
            client.projects.delete(id=project.id)


@pytest.fixture
def project_title() -> str:
    return f"test_{uuid.uuid4().hex[:12]}"


def results_of(scores: Mapping[int, Mapping[str, tuple[str, int]]]) -> list[dict[str, Any]]:
    """A Label Studio result list answering ``{agent: {dimension: (rationale, score)}}``."""
    return evaluation_results(Evaluation(agents=tuple(scores[agent] for agent in AGENTS)))


def row_results(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Label Studio result list answering like a row of an oTree human-eval CSV (read with
    ``to_dict("records")``): the row is the flat form of the score model."""
    return evaluation_results(Evaluation.from_flat(row))


def task_ids(client: LabelStudio, project_id: int) -> dict[str, int]:
    """``episode id → task id`` of a project that holds each episode once."""
    return {episode: tasks[0].id for episode, tasks in episode_tasks(client, project_id).items()}
