"""Session fixtures: one real Label Studio server for each pytest process (each worker, when
scripts/test runs the suite in parallel with pytest-xdist).

The server runs from a temporary SQLite data directory (its database restored from the
checked-in dump of a migrated one, see ``migrated``) on 127.0.0.1 and a free port. Projects
made by tests are titled ``test_<uuid>``; they go with the server's temporary folder (deleting
them one by one at the end was work for nothing). Whatever the processes share in the
repository (the side environments ``.venv-ml`` and ``.venv-sotopia``) is made under a file
lock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from browser import CHROMIUM, fresh_page, launched_chromium, log_in
from click.testing import CliRunner, Result
from filelock import FileLock
from playwright.sync_api import Browser, StorageState
from prolific_stand_in import StandIn, serving
from xdist.scheduler import LoadFileScheduling

from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, DIMENSIONS, rating_name, reasoning_name
from sotopia_ls.extras import uv
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio import migrated as migrated_database
from sotopia_ls.labelstudio import server
from sotopia_ls.labelstudio.client import Client, episode_tasks
from sotopia_ls.labelstudio.results import evaluation_results
from sotopia_ls.labelstudio.tasks import episode_to_task
from sotopia_ls.ml_backend.commands import ensure_ml_environment
from sotopia_ls.samples import SAMPLES
from sotopia_ls.scores import Evaluation
from sotopia_ls.study.serving.assets import CACHE_ENV

REPO = Path(__file__).resolve().parents[1]
# One TLS context for every HTTP client and call of the tests: httpx otherwise reads the whole CA
# bundle for each (~50 ms of CPU), though every address here is plain HTTP on 127.0.0.1.
TLS = server.tls()
# The gateways the tests start write their gzipped static files here, once for every worker,
# rather than into the user's cache folder.
os.environ.setdefault(CACHE_ENV, str(Path(tempfile.gettempdir()) / "sotopia-ls-tests-static"))
# The hundreds of processes the tests start (Label Studio's servers, gateways, their workers,
# commands) read the byte code the first of them wrote, rather than compiling pandas, Django and
# this package anew each where PYTHONDONTWRITEBYTECODE is set: uv, unlike pip, compiles nothing
# at install. A test that needs none written sets it again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
ML_ENV = REPO / ".venv-ml"
# Marked tests that take longest, longest first. Their files run first, so that under
# pytest-xdist (scripts/test, which keeps this order with --no-loadscope-reorder) none of them
# is left running alone at the end.
HEAVIEST_FIRST = ("slow", "postgres", "browser", "server", "report")
# Files whose tests share nothing costly at module scope, longest tests first: under
# scripts/test each of their tests is a unit of its own, run by whichever worker is free, rather
# than the whole file on one worker (the benchmark file alone took 10 minutes so).
EACH_TEST_ALONE = ("tests/test_demo.py", "tests/test_wheel.py", "tests/test_benchmarks.py")


class FileOrTestScheduling(LoadFileScheduling):
    """xdist's ``--dist loadfile``, but each test of ``EACH_TEST_ALONE`` a unit of its own."""

    def _split_scope(self, nodeid: str) -> str:
        file = super()._split_scope(nodeid)
        return nodeid if file in EACH_TEST_ALONE else file


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> FileOrTestScheduling | None:
    """Spread the slow files' tests over the workers (scripts/test runs ``--dist loadfile``)."""
    return FileOrTestScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


# A test is marked for what its fixtures start, so that the developer subset
# (``-m "not slow and not postgres and not browser and not server and not report"``) leaves it
# out even when only a fixture, not the test, says so.
MARKED_BY_FIXTURE = {"label_studio": "server", "browser": "browser"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks from ``MARKED_BY_FIXTURE``; then the files holding the heaviest marked tests first
    (``EACH_TEST_ALONE`` in its order), the order within a file kept."""
    for item in items:
        for fixture in set(MARKED_BY_FIXTURE) & set(getattr(item, "fixturenames", ())):
            item.add_marker(MARKED_BY_FIXTURE[fixture])

    def weight(item: pytest.Item) -> int:
        marks = {mark.name for mark in item.iter_markers()}
        return next((n for n, name in enumerate(HEAVIEST_FIRST) if name in marks),
                    len(HEAVIEST_FIRST))

    file_weight: dict[Path, int] = {}
    for item in items:
        file_weight[item.path] = min(file_weight.get(item.path, len(HEAVIEST_FIRST)),
                                     weight(item))
    alone = {file: n for n, file in enumerate(EACH_TEST_ALONE)}
    items.sort(key=lambda item: (file_weight[item.path],
                                 alone.get(item.nodeid.split("::")[0], len(alone))))


@contextmanager
def made_once(shared: Path) -> Iterator[None]:
    """Held while a folder shared by every pytest process in this tree (xdist's workers,
    another developer's run) is checked and made, so that two never build it at once."""
    locks = REPO / "var" / "test-locks"
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(locks / f"{shared.name}.lock"):
        yield


# PostgreSQL's migrated database as SQL, one per label-studio release (SQLite's is the
# package's own, migrated_database.DUMPS).
MIGRATED = REPO / "tests" / "migrated"


def migrated(data_dir: Path) -> Path:
    """``data_dir`` holding a SQLite database as Label Studio's migrations leave it."""
    return migrated_database.sqlite(data_dir)


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
    with server.start(migrated(data_dir), credentials, allow_local_ml_backends=True) as running:
        yield running


@pytest.fixture(scope="session")
def ls_client(label_studio: server.LocalServer) -> Client:
    return Client(base_url=label_studio.url, api_key=label_studio.credentials.api_key)


@pytest.fixture(scope="session")
def ml_python() -> Path:
    """The pre-annotation backend's environment, made from the ml extra on first use."""
    with made_once(ML_ENV):
        return ensure_ml_environment(ML_ENV)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for a test file; each test opens contexts of its own in it."""
    if not CHROMIUM.exists():
        pytest.skip(f"Chromium is not installed at {CHROMIUM}")
    with launched_chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def logged_in(browser: Browser, label_studio: server.LocalServer) -> StorageState:
    """The cookies of one login through Label Studio's login page, for the contexts of a
    test file's tests (each its own) that need no session of their own."""
    with fresh_page(browser) as page:
        log_in(page, label_studio)
        return page.context.storage_state()


@pytest.fixture
def project_title() -> str:
    return f"test_{uuid.uuid4().hex[:12]}"


def results_of(scores: Mapping[int, Mapping[str, tuple[str, int]]]) -> list[dict[str, Any]]:
    """A Label Studio result list answering ``{agent: {dimension: (rationale, score)}}``."""
    return evaluation_results(evaluation_of(scores))


def flat_of(scores: Mapping[int, Mapping[str, tuple[str, int]]]) -> dict[str, Any]:
    """The flat form answering ``{agent: {dimension: (rationale, score)}}``: a submission's
    scores as the gateway stores them."""
    return evaluation_of(scores).flat()


def evaluation_of(scores: Mapping[int, Mapping[str, tuple[str, int]]]) -> Evaluation:
    return Evaluation(agents=tuple(scores[agent] for agent in AGENTS))


def row_results(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Label Studio result list answering like a row of an oTree human-eval CSV (read with
    ``to_dict("records")``): the row is the flat form of the score model."""
    return evaluation_results(Evaluation.from_flat(row))


def task_ids(client: Client, project_id: int) -> dict[str, int]:
    """``episode id → task id`` of a project that holds each episode once."""
    return {episode: tasks[0].id for episode, tasks in episode_tasks(client, project_id).items()}


# --- shared by the exporter, report and statistics tests ---------------------------------


def study_long(study: pd.DataFrame) -> pd.DataFrame:
    """The sample CSVs as ``scores_long``: each CSV row one annotation by its own annotator,
    the CSV's ``model`` column (the model pair) as the source tag."""
    parts = [
        pd.DataFrame({
            "episode_id": study["pk"], "annotation_id": study.index,
            "annotator_id": "row-" + study.index.astype(str), "agent": agent,
            "dimension": key, "score": study[rating_name(key, agent)].astype("int64"),
            "rationale": study[reasoning_name(key, agent)], "lead_time": 60.0,
            "ground_truth": False, "source_tag": study["model"],
        })
        for agent in AGENTS for key in DIMENSION_KEYS
    ]
    return pd.concat(parts, ignore_index=True)


def read_study(sample_data: Path) -> pd.DataFrame:
    csvs = sorted((sample_data / "human_eval").glob("*_final.csv"))
    return study_long(pd.concat([pd.read_csv(p) for p in csvs], ignore_index=True))


def sections_named(*names: str) -> tuple[Any, ...]:
    """The report's sections of those names, in page order: a test that reads only them
    builds only them (each is computed and shown as in the whole report)."""
    from sotopia_ls.report.sections import SECTIONS  # scipy's statistics: when a test asks

    return tuple(section for section in SECTIONS if section.name in names)


def project_sections(client: Client, project: int, *names: str, bootstrap: int) -> Any:
    """The report of a live project as ``report_project`` computes it, with only the sections
    of those names and nothing written: a test comparing figures with the report's reads no
    page (drawing its plots is most of a report's CPU)."""
    from sotopia_ls.exporter.export import export_project
    from sotopia_ls.report.build import build_report

    export = export_project(client, project)
    return build_report(export.scores_long, export.model_scores, export.tally,
                        bootstrap=bootstrap, sections=sections_named(*names))


def scores(offset: int) -> dict[int, dict[str, tuple[str, int]]]:
    return {a: {d.key: (f"rationale {offset}", d.range_low + offset) for d in DIMENSIONS}
            for a in AGENTS}


@pytest.fixture
def export_file(sample_data: Path, tmp_path: Path) -> Path:
    """A Label Studio JSON export as the UI writes it, annotators given as email objects."""
    episodes = load_episodes([sample_data / "otree_episodes" / "GPT3.5-GPT3.5"]).episodes[:3]
    tasks = [
        {
            "id": number,
            "data": episode_to_task(episode),
            "annotations": [
                {"id": number * 10 + k, "completed_by": {"id": k, "email": f"rater{k}@lab.test"},
                 "result": results_of(scores(k)), "was_cancelled": False,
                 "ground_truth": False, "lead_time": 40.0 + k,
                 "created_at": "2024-05-01T10:00:00Z"}
                for k in (1, 2)
            ],
            "drafts": [],
            "predictions": [],
        }
        for number, episode in enumerate(episodes, start=1)
    ]
    path = tmp_path / "project-1-at-2024.json"
    path.write_text(json.dumps(tasks))
    return path


def with_meta(export_file: Path, key: str, marks: Mapping[int, object]) -> Path:
    """The export file with ``marks[task id]`` under ``key`` in those tasks' meta, as the study
    marks them in Label Studio (review decisions, added slots, gold episodes)."""
    tasks = json.loads(export_file.read_text())
    for task in tasks:
        if task["id"] in marks:
            task["meta"] = {key: marks[task["id"]]}
    export_file.write_text(json.dumps(tasks))
    return export_file


def invoke(command: Any, *args: str) -> Result:
    """A command run offline: no Label Studio address or key in its environment."""
    return CliRunner().invoke(command, list(args), env={"LABEL_STUDIO_URL": "",
                                                        "LABEL_STUDIO_API_KEY": ""})


# --- sotopia's own models, in an environment of their own -------------------------------

# Sotopia 0.1.5 pins libraries our environment may not share (rich<15, click 8.1), so its
# models run in their own virtual environment, made once by the script the README names.
SOTOPIA_ENV = REPO / ".venv-sotopia"


def _run(command: list[str], env: Mapping[str, str] | None = None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"


def uv_on_path(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the suite's uv (scripts/setup puts it beside this interpreter) first on
    PATH: the scripts then make a new environment with it, not with venv and pip (7 s of CPU)."""
    found = uv()
    if found is None:
        return dict(env)
    return {**env, "PATH": f"{Path(found).parent}{os.pathsep}{env.get('PATH', '')}"}


def sotopia_python() -> Path:
    python = SOTOPIA_ENV / "bin" / "python"
    with made_once(SOTOPIA_ENV):
        if not (SOTOPIA_ENV / ".ready").exists():
            _run([str(REPO / "scripts" / "sotopia-env")], env=uv_on_path(
                {**os.environ, "VENV": str(SOTOPIA_ENV), "PYTHON": sys.executable}))
            (SOTOPIA_ENV / ".ready").touch()
    return python


@pytest.fixture
def prolific() -> Iterator[StandIn]:
    """Prolific's stand-in (``prolific_stand_in``: real HTTP on 127.0.0.1) for one test."""
    with serving() as stand_in:
        yield stand_in
