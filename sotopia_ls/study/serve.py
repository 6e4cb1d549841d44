"""Setting a study up and running its gateway: what ``study init``, ``study serve`` and
``study sync`` do."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import uvicorn

from ..config import check_labeling_config
from ..errors import StudyError
from ..labelstudio.client import Client, find_project, server_release
from ..ml_backend import is_loopback
from .serving.app import create_app
from .serving.editor import find_editor, release_notice
from .serving.gateway import (
    add_new_episodes,
    check_required_round,
    prepare_gateway,
    project_config,
)
from .serving.security import GatewayH11Protocol
from .settings import StudyFile, write_study
from .slots.leases import Added
from .store import open_store

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# An idle keep-alive connection is closed by whichever side's timeout comes first. When it is
# the server, a client that sends its next request at that moment gets the connection reset
# ("Server disconnected without sending a response"; docs/benchmarks.md measures it), so the
# server waits longer than clients and proxies keep an idle connection (httpx 5 s, nginx's
# upstream keepalive_timeout 60 s) and they always close first.
KEEP_ALIVE_SECONDS = 75
# Prolific replaces these placeholders in the study URL with the participant's ids.
PROLIFIC_PARAMETERS = "PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"


def init_study(client: Client, path: Path, *, project: str, overwrite: bool = False,
               **options: Any) -> StudyFile:
    """Write the study file for ``project`` (id or exact title) after checking the project:
    it must exist and keep the rating contract. ``options`` are ``StudyFile.from_options``'s."""
    found = find_project(client, project)
    check_labeling_config(found.label_config)
    study = StudyFile.from_options(project=found.id, **options)
    write_study(study, path, overwrite=overwrite)
    return study


def participant_link(study: StudyFile, address: str) -> str:
    """The study URL to give Prolific, for a gateway reached at ``address``."""
    return f"{address.rstrip('/')}/s/{study.name}?{PROLIFIC_PARAMETERS}"


def check_bind(host: str, public: bool) -> None:
    """Loopback unless ``public``: a public gateway belongs behind an HTTPS reverse proxy."""
    if not is_loopback(host) and not public:
        raise StudyError(
            f"refusing to listen on {host}: participants reach a public gateway through an "
            "HTTPS reverse proxy; pass --public to confirm (session cookies are then sent over "
            "HTTPS only), or bind 127.0.0.1"
        )


def sync_episodes(study: StudyFile, client: Client, *,
                  database: str | None = None) -> Added:
    """Give the tasks imported into the study's project since the gateway started their k
    slots (gold episodes none), and read the gold references again; gateways already running
    offer them at once. What was new: ordinary and gold episodes apart. A required
    qualification round the database never held is refused (``check_required_round``)."""
    engine = open_store(database or study.database)
    check_required_round(study, engine)
    return add_new_episodes(study, client, engine, project_config(study, client))


def editor_notice(client: Client) -> str:
    """One line: the editor participants get, and a warning when the server runs another
    release (checked at ``study init`` and ``study serve``), or why there is none yet."""
    try:
        editor = find_editor()
    except StudyError as error:
        return f"participant editor: {error}"
    return release_notice(editor, server_release(client))


def dashboard_notice(study: StudyFile, address: str) -> str:
    """One line: where the researcher's dashboard is, or how to turn it on."""
    if study.dashboard_token() is None:
        return (f"researcher dashboard: off (set {study.dashboard_token_env} to a random token "
                "to serve it)")
    return (f"researcher dashboard: {address.rstrip('/')}/researcher/{study.name} (sign in at "
            f"/researcher/{study.name}/sign-in with the token in {study.dashboard_token_env})")


def _log_config() -> dict:
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["loggers"]["sotopia_ls.study"] = {"handlers": ["default"], "level": "INFO",
                                             "propagate": False}
    return config


def server_settings(*, public: bool = False) -> dict[str, Any]:
    """How uvicorn runs the gateway (keywords of ``uvicorn.run`` and ``uvicorn.Config``): no
    reload, no debug, no access log with ids, no WebSocket upgrades (the gateway has none),
    uvicorn's own 400s with the security headers (``GatewayH11Protocol``), and idle connections
    kept open longer than any client keeps them (``KEEP_ALIVE_SECONDS``)."""
    return {"http": GatewayH11Protocol, "ws": "none", "log_config": _log_config(),
            "access_log": False, "server_header": False, "proxy_headers": public,
            "timeout_graceful_shutdown": 10, "timeout_keep_alive": KEEP_ALIVE_SECONDS}


def serve_study(study: StudyFile, client: Client, *, database: str | None = None,
                host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, public: bool = False,
                hook_secret: str | None = None) -> None:
    """Run the gateway until stopped, as ``server_settings`` says; with ``hook_secret``,
    taking Prolific's webhook calls."""
    check_bind(host, public)
    secret = study.secret()
    editor = find_editor()
    engine = open_store(database or study.database)
    gateway = prepare_gateway(study, client, engine)
    app = create_app(gateway, secret=secret, editor=editor, https_only=public,
                     dashboard_token=study.dashboard_token(), hook_secret=hook_secret)
    uvicorn.run(app, host=host, port=port, **server_settings(public=public))
