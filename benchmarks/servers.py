"""A throwaway local Label Studio for the benchmarks, on SQLite or on PostgreSQL.

PostgreSQL comes from ``scripts/postgres`` (Debian's package, a cluster of its own on
127.0.0.1), configured the way Label Studio documents it: ``DJANGO_DB=default`` and the
``POSTGRE_*`` variables, passed to the server through ``server.start(extra_env=...)``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path


from sotopia_ls.labelstudio import migrated, server
from sotopia_ls.labelstudio.client import Client

REPO = Path(__file__).resolve().parents[1]
POSTGRES_SCRIPT = REPO / "scripts" / "postgres"
# PostgreSQL's migrated database as SQL, checked in beside the tests that also use it.
MIGRATED = REPO / "tests" / "migrated"


def read_env_file(path: Path) -> dict[str, str]:
    """The ``export KEY=VALUE`` lines written by ``scripts/postgres start``."""
    lines = path.read_text().splitlines()
    return dict(line.removeprefix("export ").split("=", 1) for line in lines if "=" in line)


@contextmanager
def postgres() -> Iterator[dict[str, str]]:
    """Start a PostgreSQL cluster for one run; yields Label Studio's database settings."""
    run = subprocess.run(
        [str(POSTGRES_SCRIPT), "start"], check=True, capture_output=True, text=True
    )
    env_file = Path(run.stdout.strip())
    try:
        yield read_env_file(env_file)
    finally:
        subprocess.run([str(POSTGRES_SCRIPT), "stop", str(env_file.parent)], check=True)
        shutil.rmtree(env_file.parent, ignore_errors=True)


@dataclass(frozen=True)
class Running:
    client: Client
    pid: int  # the server process, whose memory the live-export benchmark watches


@contextmanager
def label_studio(database: str = "sqlite") -> Iterator[Running]:
    """A fresh Label Studio whose data lives in a temp dir (and database)."""
    with tempfile.TemporaryDirectory(prefix="sotopia-bench-") as data_dir, \
            started(Path(data_dir), database) as (running, _):
        yield Running(Client(base_url=running.url, api_key=running.credentials.api_key),
                      running.process.pid)


@contextmanager
def started(data_dir: Path, database: str = "sqlite"
            ) -> Iterator[tuple[server.LocalServer, dict[str, str]]]:
    """Label Studio serving from ``data_dir`` on a database restored from a migrated one's dump
    and, on PostgreSQL, a cluster of its own; the cluster's settings ({} on SQLite)."""
    if database not in migrated.DATABASES:
        raise ValueError(f"database must be one of {', '.join(migrated.DATABASES)}, "
                         f"got {database!r}")
    credentials = server.Credentials(
        username="bench@example.com", password=uuid.uuid4().hex, api_key=uuid.uuid4().hex
    )
    with ExitStack() as stack:
        if database == "postgresql":
            settings = stack.enter_context(postgres())
            migrated.postgresql(settings, MIGRATED)
        else:
            settings = {}
            migrated.sqlite(data_dir)
        yield stack.enter_context(server.start(data_dir, credentials, extra_env=settings)), settings
