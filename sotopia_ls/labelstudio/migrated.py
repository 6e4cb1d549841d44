"""Label Studio's database as its migrations leave it: migrations are most of a fresh server's
start (~45 s of CPU). Each release's migrated database is kept as SQL text, SQLite's in the
package (``DUMPS``: ``up`` starts a new data folder on it) and PostgreSQL's beside the tests;
a server starts on a database restored from its dump. The tests and benchmarks make a missing
dump once, by migrating, under a file lock so that parallel processes never make it twice.
Label Studio still checks its migrations at every start, and its first start still creates
the user and API token, as on an empty database.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..errors import LabelStudioError
from .server import QUIET, label_studio_command

DATABASE_FILE = "label_studio.sqlite3"
DATABASES = ("sqlite", "postgresql")
DUMPS = Path(__file__).parent / "databases"


def dump_path(dumps: Path, database: str) -> Path:
    """The installed label-studio release's dump of ``database`` (one of ``DATABASES``)."""
    return dumps / f"label-studio-{version('label-studio')}.{database}.sql"


def restore_sqlite(data_dir: Path, dumps: Path = DUMPS) -> bool:
    """Give a data folder without a database the installed release's migrated one, whole or not
    at all; whether it did. It does not without a dump for that release, nor where label-studio
    is not installed beside this package: Label Studio then migrates at its first start."""
    try:
        dump = dump_path(dumps, "sqlite")
    except PackageNotFoundError:  # label-studio runs from another environment: release unknown
        return False
    if (data_dir / DATABASE_FILE).exists() or not dump.exists():
        return False
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = data_dir / f".{DATABASE_FILE}.partial"
    partial.unlink(missing_ok=True)
    database = sqlite3.connect(partial)
    try:
        database.executescript(dump.read_text(encoding="utf-8"))
    except BaseException:
        database.close()
        partial.unlink()
        raise
    database.close()
    partial.replace(data_dir / DATABASE_FILE)
    return True


def sqlite(data_dir: Path, dumps: Path = DUMPS) -> Path:
    """``data_dir`` holding a new SQLite database restored from the migrated one's dump (made
    first, by migrating, when missing)."""
    def make(work: Path) -> str:
        _migrate(work, {})
        with sqlite3.connect(work / DATABASE_FILE) as made:
            return "\n".join(made.iterdump()) + "\n"

    _dumped(dumps, "sqlite", make)
    (data_dir / DATABASE_FILE).unlink(missing_ok=True)
    restore_sqlite(data_dir, dumps)
    return data_dir


def postgresql(settings: Mapping[str, str], dumps: Path) -> None:
    """Label Studio's tables in the empty PostgreSQL database ``settings`` name (its
    ``POSTGRE_*`` variables), restored from the migrated one's dump by one ``psql`` run."""
    def make(work: Path) -> str:
        _migrate(work, settings)
        _postgres_tool("pg_dump", settings, "--no-owner", "--no-privileges",
                       "-f", str(work / "dump.sql"))
        return (work / "dump.sql").read_text(encoding="utf-8")

    dump = _dumped(dumps, "postgresql", make)
    _postgres_tool("psql", settings, "--quiet", "-v", "ON_ERROR_STOP=1", "-f", str(dump))


def applied_migrations(dump: Path) -> set[tuple[str, str]]:
    """The (app, migration) pairs a dump records as applied, from either database's dump."""
    text = dump.read_text(encoding="utf-8")
    pairs = re.findall(r"""INSERT INTO "django_migrations" VALUES\(\d+,'([^']*)','([^']*)'""",
                       text)
    copy = re.search(r"COPY public\.django_migrations \(id, app, name, applied\) FROM stdin;\n"
                     r"(.*?)\n\\\.", text, re.DOTALL)
    if copy:
        pairs += [tuple(row.split("\t")[1:3]) for row in copy.group(1).splitlines()]
    return set(pairs)


def _dumped(dumps: Path, database: str, make: Callable[[Path], str]) -> Path:
    """The dump, made by ``make`` (in a folder of its own) when the folder lacks it."""
    dump = dump_path(dumps, database)
    if dump.exists():  # written whole by a rename, so present means complete
        return dump
    from filelock import FileLock  # the tests' and benchmarks' dependency, not the package's

    dumps.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{dump}.lock"):
        if not dump.exists():
            with tempfile.TemporaryDirectory(dir=dumps) as work:
                made = Path(work) / dump.name
                made.write_text(make(Path(work)), encoding="utf-8")
                made.rename(dump)
    return dump


def _migrate(data_dir: Path, settings: Mapping[str, str]) -> None:
    """``label-studio version`` migrates the database and exits."""
    _run([label_studio_command(), "version"],
         {"LABEL_STUDIO_BASE_DATA_DIR": str(data_dir), **QUIET, **settings})


def _postgres_tool(name: str, settings: Mapping[str, str], *args: str) -> None:
    _run([name, "-h", settings["POSTGRE_HOST"], "-p", settings["POSTGRE_PORT"],
          "-U", settings["POSTGRE_USER"], "-d", settings["POSTGRE_NAME"], *args],
         {"PGPASSWORD": settings["POSTGRE_PASSWORD"]})


def _run(command: list[str], env: Mapping[str, str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    if done.returncode:
        raise LabelStudioError(f"{' '.join(command[:2])} failed: {done.stderr[-2000:]}")
