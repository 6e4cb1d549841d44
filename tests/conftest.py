"""Session fixtures: one real Label Studio server for the whole test run.

The server runs from a temporary SQLite data directory on 127.0.0.1 and a free port.
Projects made by tests are titled ``test_<uuid>`` and deleted at the end of the session.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from label_studio_sdk import LabelStudio

from sotopia_ls import server
from sotopia_ls.samples import SAMPLES



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
