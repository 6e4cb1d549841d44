"""``sotopia-ls ml-backend`` serves the backend; ``sotopia-ls connect`` registers it with a project.

The backend runs in an environment of its own (``.venv-ml`` in the current folder by default),
apart from the Label Studio server; ``ensure_ml_environment`` makes it from the ``ml`` extra of
the installed package, read from the package's metadata, so a source checkout and a wheel
install work alike, plus label-studio-ml itself without its declared dependencies (see
``LABEL_STUDIO_ML``). ``connect`` runs here, beside label-studio-sdk.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path

import click
from packaging.requirements import Requirement

from ..labelstudio.client import (
    Client,
    connect,
    find_project,
    register_backend,
    request_predictions,
    set_prefill,
    task_records,
)
from ..labelstudio.tasks import stored_judges
from ..errors import SotopiaLSError, keep_secret
from ..extras import DISTRIBUTION, installer, new_environment, requirements
from ..options import server_options
from . import AUTH_ENV, PROVIDERS, is_loopback, open_host_refusal

# label-studio-ml 1.0.9, the last release of the 1.x API the backend is written for, declares
# Flask==1.1.2, Werkzeug==2.0.2, Jinja2==3.0.3 and itsdangerous==2.0.1, all with published
# security fixes since. The backend uses none of its Flask code (see _wsgi.py), only the model
# base class and manager, and its tests pass on the maintained releases the ml extra names.
# pip cannot install one requirement of an extra without its dependencies, so the library is
# not in the extra: ensure_ml_environment installs it in a second call, with --no-deps.
LABEL_STUDIO_ML = "label-studio-ml==1.0.9"
ML_ENV = Path(".venv-ml")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9090
DEFAULT_TITLE = "sotopia-ls"


def ml_requirements() -> list[str]:
    """The ``ml`` extra of the installed package: the backend's pinned requirements."""
    return [str(requirement) for requirement in requirements("ml")]


def package_source() -> list[str]:
    """pip arguments that install this very package: where it was installed from (PEP 610's
    ``direct_url.json``: a checkout, editable or not, or a wheel file), else its release."""
    # A source checkout may also hold build metadata of its own (``*.egg-info``), found first
    # when it is the current folder: the installed distribution is the one pip recorded.
    found = list(distributions(name=DISTRIBUTION))
    dist = next((d for d in found if d.read_text("direct_url.json")), found[0])
    origin = json.loads(dist.read_text("direct_url.json") or "{}")
    url = origin.get("url", "")
    if url.startswith("file://"):
        path = url.removeprefix("file://")
        return ["-e", path] if origin.get("dir_info", {}).get("editable") else [path]
    return [url or f"{DISTRIBUTION}=={dist.version}"]


def unmet_requirements(python: Path) -> list[str]:
    """What the environment of ``python`` lacks to serve the backend: requirements of the ``ml``
    extra or label-studio-ml it does not satisfy (an older ``.venv-ml`` with Flask 1.1.2, say),
    and this package."""
    where = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    unmet = []
    for line in [*ml_requirements(), LABEL_STUDIO_ML, DISTRIBUTION]:
        requirement = Requirement(line)
        found = next(iter(distributions(name=requirement.name, path=[where])), None)
        if found is None or not requirement.specifier.contains(found.version, prereleases=True):
            unmet.append(line)
    return unmet


def ensure_ml_environment(venv: Path = ML_ENV, *, update: bool = False) -> Path:
    """The Python of ``venv``, created (or, with ``update``, refreshed) to serve the backend.

    label-studio-ml and this package go in without their dependencies: the first declares
    outdated pins (see ``LABEL_STUDIO_ML``), and the backend needs only the pydantic core of
    the second, not label-studio-sdk.
    """
    python = venv / "bin" / "python"
    if not python.exists():
        new_environment(venv)
    if update or unmet_requirements(python):
        install = installer(python)
        subprocess.run([*install, *ml_requirements()], check=True)
        subprocess.run([*install, "--no-deps", LABEL_STUDIO_ML, *package_source()], check=True)
    return python


def backend_python(python: Path | None = None) -> Path:
    """The interpreter that serves: ``python``, this one if it can, else ``.venv-ml``'s."""
    if python is not None:
        return python
    if importlib.util.find_spec("label_studio_ml") is not None:
        return Path(sys.executable)
    candidate = ML_ENV / "bin" / "python"
    if candidate.exists():
        return candidate
    raise SotopiaLSError(
        "no environment with label-studio-ml: run `sotopia-ls ml-backend --setup` "
        f"(creates {ML_ENV}) or pass --python"
    )


def backend_env(host: str, port: int, provider: str, threads: int) -> dict[str, str]:
    """The environment of the backend process: ours, plus the serving settings."""
    return {
        **os.environ,
        "SOTOPIA_LS_ML_HOST": host,
        "SOTOPIA_LS_ML_PORT": str(port),
        "SOTOPIA_LS_ML_THREADS": str(threads),
        "SOTOPIA_LS_PROVIDER": provider,
    }


@click.command("ml-backend")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="Port to listen on.")
@click.option(
    "--provider", type=click.Choice(PROVIDERS), default="stored", show_default=True,
    envvar="SOTOPIA_LS_PROVIDER", show_envvar=True,
    help="stored: the evaluation kept in each task; llm: ask a chat-completions endpoint.",
)
@click.option("--threads", type=int, default=4, show_default=True, help="Server threads.")
@click.option(
    "--python", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="SOTOPIA_LS_ML_PYTHON", show_envvar=True,
    help="Python of an environment with the ml extra. Default: this one if it has it, else ./.venv-ml.",
)
@click.option("--setup", is_flag=True, help="Create or update ./.venv-ml (the ml extra) first.")
def ml_backend_command(
    host: str, port: int, provider: str, threads: int, python: Path | None, setup: bool
) -> None:
    """Serve the pre-annotation backend for Label Studio (waitress; no debug mode).

    The llm provider reads SOTOPIA_LS_LLM_BASE_URL (default https://api.openai.com/v1),
    SOTOPIA_LS_LLM_MODEL, SOTOPIA_LS_LLM_API_KEY, SOTOPIA_LS_LLM_TIMEOUT (seconds, 60) and
    SOTOPIA_LS_LLM_WORKERS (parallel requests, 4) from the environment. Setting
    ML_SERVER_BASIC_AUTH_USER and ML_SERVER_BASIC_AUTH_PASS turns on HTTP basic auth on every
    route; a --host other than loopback is refused without it. Request bodies over
    SOTOPIA_LS_ML_MAX_BODY_MB (16) are refused with 413.

    Example:

        sotopia-ls ml-backend --setup --port 9090

        SOTOPIA_LS_LLM_MODEL=gpt-4o-mini sotopia-ls ml-backend --provider llm
    """
    if not is_loopback(host) and not all(os.getenv(name) for name in AUTH_ENV):
        raise click.ClickException(open_host_refusal(host))
    try:
        interpreter = ensure_ml_environment(update=True) if setup and python is None else backend_python(python)
    except (SotopiaLSError, subprocess.CalledProcessError) as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"sotopia-ls backend ({provider}) on http://{host}:{port}", err=True)
    sys.stdout.flush()
    os.execve(
        interpreter,
        [str(interpreter), "-m", "sotopia_ls.ml_backend._wsgi"],
        backend_env(host, port, provider, threads),
    )


def why_no_predictions(client: Client, project_id: int) -> str:
    """Why asking the backend for every task's predictions made none, from what the tasks
    carry: the ``stored`` provider (the default) predicts only from model evaluations kept in
    a task's meta, and never twice per model."""
    records = task_records(client, project_id)
    bare = sum(not stored_judges(record.meta) for record in records)
    if not bare:
        return ("no prediction made: every task carries a model evaluation, so each already "
                "holds its prediction, or the backend could not use it (its log says why per task)")
    return (f"no prediction made: {bare} of {len(records)} task(s) carry no model evaluation in "
            "their meta, and the backend's stored provider (its default) predicts only from one; "
            "run `sotopia-ls evaluate` first, or serve the backend with --provider llm "
            "(its log says why per task)")


@click.command("connect")
@server_options
@click.option("--project", required=True, help="Id or exact title of the project.")
@click.option(
    "--backend-url", default=f"http://{DEFAULT_HOST}:{DEFAULT_PORT}", show_default=True,
    help="The backend's address as Label Studio reaches it.",
)
@click.option("--title", default=DEFAULT_TITLE, show_default=True, help="The backend's name in Label Studio.")
@click.option("--retrieve", is_flag=True, help="Request predictions for every task now.")
@click.option(
    "--prefill/--no-prefill", default=False, show_default=True,
    help="Show annotators the predictions pre-filled (they anchor judgements: off by default).",
)
@click.option("--prefill-version", help="Model version to pre-fill; default: the only one there is.")
def connect_command(
    project: str, backend_url: str, title: str, retrieve: bool, prefill: bool,
    prefill_version: str | None, url: str | None, api_key: str | None,
) -> None:
    """Register the backend with a project; optionally fetch predictions and pre-fill them.

    Credentials for the backend's basic auth are read from ML_SERVER_BASIC_AUTH_USER and
    ML_SERVER_BASIC_AUTH_PASS. A backend on 127.0.0.1 (or a private address) needs Label
    Studio started with ML_BLOCK_LOCAL_IP=false USE_DEFAULT_BANNED_SUBNETS=false. --retrieve
    asks for 100 tasks at a time and says how many predictions that made, or why none. The
    event webhook Label Studio makes for the backend is switched off: nothing is trained.

    Example:

        sotopia-ls evaluate --project "Sotopia human evaluation" --model gpt-4o-mini

        sotopia-ls connect --project "Sotopia human evaluation" --retrieve --prefill
    """
    user, password = (os.getenv(name, "") for name in AUTH_ENV)
    keep_secret(password)
    try:
        client = connect(url, api_key)
        target = find_project(client, project)
        backend = register_backend(
            client, target.id, backend_url, title=title, auth=(user, password) if user and password else None
        )
        click.echo(f"backend {backend.id} ({backend_url}) connected to project {target.id}")
        if retrieve:
            made = request_predictions(client, target.id)
            click.echo(f"{made} prediction(s) made" if made else why_no_predictions(client, target.id))
        shown = set_prefill(client, target.id, prefill, prefill_version)
    except SotopiaLSError as error:
        raise click.ClickException(str(error)) from error
    click.echo(
        f"annotators see predictions of {shown} pre-filled" if shown else "predictions are hidden from annotators"
    )
