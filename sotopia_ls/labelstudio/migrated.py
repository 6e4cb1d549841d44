"""Label Studio's database migrated once, for servers started again and again (the tests and
the benchmarks): migrations are most of a fresh server's start (~45 s of CPU). The migrated
database is kept in a cache folder per label-studio release, made under a file lock so that
parallel processes never make it twice; each server starts on a copy of it, and its first start
still creates the user and API token, as on an empty database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path

from filelock import FileLock

from ..errors import LabelStudioError
from .server import QUIET, label_studio_command

DATABASE_FILE = "label_studio.sqlite3"


def sqlite(data_dir: Path, cache: Path) -> Path:
    """``data_dir`` holding a copy of the migrated SQLite database."""
    template = _cached(cache, "sqlite3")
    with FileLock(f"{template}.lock"):
        if not template.exists():
            with tempfile.TemporaryDirectory(dir=cache) as work:
                _migrate(work, {})
                (Path(work) / DATABASE_FILE).rename(template)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copyfile(template, data_dir / DATABASE_FILE)
    return data_dir


def postgresql(settings: Mapping[str, str], cache: Path) -> None:
    """Label Studio's tables in the empty PostgreSQL database ``settings`` name (its
    ``POSTGRE_*`` variables): the first caller migrates its own database and dumps it into the
    cache, the later ones restore that dump (one ``psql`` run, ~1 s)."""
    dump = _cached(cache, "postgresql.sql")
    with FileLock(f"{dump}.lock"):
        if not dump.exists():
            with tempfile.TemporaryDirectory(dir=cache) as work:
                _migrate(work, settings)
                made = Path(work) / dump.name
                _postgres_tool("pg_dump", settings, "--no-owner", "--no-privileges", "-f",
                               str(made))
                made.rename(dump)
            return
    _postgres_tool("psql", settings, "--quiet", "-v", "ON_ERROR_STOP=1", "-f", str(dump))


def _cached(cache: Path, suffix: str) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    return cache / f"label-studio-{version('label-studio')}.{suffix}"


def _migrate(data_dir: str, settings: Mapping[str, str]) -> None:
    """``label-studio version`` migrates the database and exits."""
    _run([label_studio_command(), "version"],
         {"LABEL_STUDIO_BASE_DATA_DIR": data_dir, **QUIET, **settings})


def _postgres_tool(name: str, settings: Mapping[str, str], *args: str) -> None:
    _run([name, "-h", settings["POSTGRE_HOST"], "-p", settings["POSTGRE_PORT"],
          "-U", settings["POSTGRE_USER"], "-d", settings["POSTGRE_NAME"], *args],
         {"PGPASSWORD": settings["POSTGRE_PASSWORD"]})


def _run(command: list[str], env: Mapping[str, str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    if done.returncode:
        raise LabelStudioError(f"{' '.join(command[:2])} failed: {done.stderr[-2000:]}")
