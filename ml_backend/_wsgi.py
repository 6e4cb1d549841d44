"""The backend's WSGI app: label-studio-ml 1.0.9's Flask app around ``SotopiaJudge``, under waitress.

Start it with ``sotopia-ls ml-backend``, which runs ``python -m sotopia_ls.ml_backend._wsgi`` in
the backend's environment. Settings come from the environment: ``SOTOPIA_LS_ML_HOST``
(default 127.0.0.1), ``SOTOPIA_LS_ML_PORT`` (9090), ``SOTOPIA_LS_ML_THREADS`` (4),
``ML_SERVER_BASIC_AUTH_USER`` with ``ML_SERVER_BASIC_AUTH_PASS`` (both or neither),
``LOG_LEVEL`` (INFO), and the model's own (``model.SotopiaJudge``).

What this adds to the library's app, and why:

- /setup and /predict bodies are checked first; a bad one gets 400 with the reason, where the
  library would answer 500 with a traceback.
- /predict builds the model from the labeling config in the request, under one lock: the
  library keeps a single model in a class attribute that every server thread shares.
- /webhook and /train acknowledge and discard: nothing here trains, and the library would start
  a process per event and write its payload, annotations included, to disk.
- Optional HTTP basic auth on every route but /webhook, which reveals and does nothing (Label
  Studio sends webhooks without the backend's credentials).
- label-studio-ml's loggers stay at INFO or above: at DEBUG they print request bodies, and
  /setup's body holds the project owner's Label Studio token.
"""

from __future__ import annotations

import hmac
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from functools import wraps
from typing import Any

import waitress
from flask import Flask, Response, jsonify, request
from label_studio_ml.api import init_app
from label_studio_ml.model import LabelStudioMLManager
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sotopia_ls.errors import InvalidLabelingConfig

from .model import SettingsError, SotopiaJudge, describe_error, to_names

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9090

_model_lock = threading.Lock()


class BadRequestBody(ValueError):
    """A request body the backend cannot act on; answered with 400 and this message."""


class _Body(BaseModel):
    # Label Studio sends more than is read here (hostname, access_token, params …).
    model_config = ConfigDict(extra="allow")


class SetupRequest(_Body):
    project: str | int | None = None
    label_config: str = Field(alias="schema")


class TaskIn(_Body):
    id: int | None = None
    data: dict[str, Any]
    predictions: list[dict[str, Any]] = []


class PredictRequest(_Body):
    project: str | int | None = None
    label_config: str
    tasks: list[TaskIn]


def _parsed(model: type[SetupRequest] | type[PredictRequest]) -> Any:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise BadRequestBody("the body must be a JSON object")
    try:
        parsed = model.model_validate(body)
    except ValidationError as exc:
        raise BadRequestBody(describe_error(exc)) from exc
    to_names(parsed.label_config)
    return parsed


def _checked_setup(view: Callable[[], Any]) -> Callable[[], Any]:
    @wraps(view)
    def setup() -> Any:
        _parsed(SetupRequest)
        with _model_lock:
            return view()

    return setup


def _checked_predict(view: Callable[[], Any]) -> Callable[[], Any]:
    @wraps(view)
    def predict() -> Any:
        body = _parsed(PredictRequest)
        with _model_lock:
            LabelStudioMLManager.fetch(body.project, body.label_config)
            return view()

    return predict


def _ignore_training() -> Response:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise BadRequestBody("the body must be a JSON object")
    logger.info("ignored %s: this backend does not train", body.get("action", "a training request"))
    return jsonify({"status": "ignored"})


def _answer_bad_request(error: ValueError) -> tuple[Response, int]:
    return jsonify({"status": 400, "error": str(error)}), 400


def basic_auth_from_env() -> tuple[str, str] | None:
    user = os.getenv("ML_SERVER_BASIC_AUTH_USER", "")
    password = os.getenv("ML_SERVER_BASIC_AUTH_PASS", "")
    if bool(user) != bool(password):
        raise SettingsError("set both ML_SERVER_BASIC_AUTH_USER and ML_SERVER_BASIC_AUTH_PASS, or neither")
    return (user, password) if user else None


def _require_basic_auth(user: str, password: str) -> Callable[[], Response | None]:
    expected = (user.encode(), password.encode())

    def check() -> Response | None:
        if request.endpoint == "webhook":
            return None
        auth = request.authorization
        given = ((auth.username or "").encode(), (auth.password or "").encode()) if auth else (b"", b"")
        # Both halves are always compared, so the answer's timing tells nothing.
        matches = hmac.compare_digest(given[0], expected[0]) & hmac.compare_digest(given[1], expected[1])
        if matches:
            return None
        return Response("authentication required\n", 401, {"WWW-Authenticate": 'Basic realm="sotopia-ls"'})

    return check


def create_app() -> Flask:
    """The app, ready for any WSGI server; ``SettingsError`` on bad settings."""
    SotopiaJudge.make_provider()  # fail at start, not at the first request
    auth = basic_auth_from_env()
    # 1.0.9 reads this flag with different defaults in different places; pin one code path.
    os.environ["LABEL_STUDIO_ML_BACKEND_V2"] = "true"
    # The library looks here for training runs; an empty private folder keeps it from
    # scanning the working directory. Nothing is written: training is switched off.
    model_dir = tempfile.TemporaryDirectory(prefix="sotopia-ls-ml-")
    app = init_app(model_class=SotopiaJudge, model_dir=model_dir.name)
    app.config["SOTOPIA_LS_MODEL_DIR"] = model_dir  # lives, and is removed, with the app
    app.view_functions["_setup"] = _checked_setup(app.view_functions["_setup"])
    app.view_functions["_predict"] = _checked_predict(app.view_functions["_predict"])
    app.view_functions["webhook"] = _ignore_training
    app.view_functions["_train"] = _ignore_training
    app.register_error_handler(BadRequestBody, _answer_bad_request)
    app.register_error_handler(InvalidLabelingConfig, _answer_bad_request)
    if auth:
        app.before_request(_require_basic_auth(*auth))
    library_log = logging.getLogger("label_studio_ml")
    if library_log.getEffectiveLevel() < logging.INFO:
        library_log.setLevel(logging.INFO)
    return app


def main() -> None:
    logging.basicConfig(
        level=os.getenv("LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    host = os.getenv("SOTOPIA_LS_ML_HOST", DEFAULT_HOST)
    port = int(os.getenv("SOTOPIA_LS_ML_PORT", str(DEFAULT_PORT)))
    threads = int(os.getenv("SOTOPIA_LS_ML_THREADS", "4"))
    try:
        app = create_app()
    except SettingsError as exc:
        sys.exit(f"sotopia-ls ml-backend: {exc}")
    logger.info("provider %s, listening on http://%s:%d", SotopiaJudge.PROVIDER, host, port)
    waitress.serve(app, host=host, port=port, threads=threads)


if __name__ == "__main__":
    main()
