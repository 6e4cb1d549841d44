"""The backend's WSGI app: the routes Label Studio calls, around ``SotopiaJudge``, under waitress.

It answers every route of label-studio-ml 1.0.9's Flask app but is not that app, whose errors
carry tracebacks and whose logs hold tokens: here bodies are validated and bounded, every answer
is JSON, basic auth guards every route and each log record is one line. Settings and safety:
README.md and ml_backend/README.md.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import waitress
from flask import Blueprint, Flask, Response, current_app, jsonify, request
from label_studio_ml.model import LabelStudioMLManager
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from werkzeug.datastructures import WWWAuthenticate
from werkzeug.exceptions import (
    BadRequest,
    HTTPException,
    InternalServerError,
    RequestEntityTooLarge,
    Unauthorized,
)

from sotopia_ls.errors import InvalidLabelingConfig
from sotopia_ls.judge import describe_error

from . import AUTH_ENV, is_loopback, open_host_refusal
from .model import SettingsError, SotopiaJudge

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9090
DEFAULT_THREADS = 4
MAX_BODY_ENV = "SOTOPIA_LS_ML_MAX_BODY_MB"
# Room for a /predict batch of a couple of thousand sample tasks (the sizes are measured in
# ml_backend/README.md); parsing a body costs the server several times its size for a moment.
DEFAULT_MAX_BODY_MB = 16.0
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

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
    # Where the importer keeps the episode's stored evaluation, out of the annotators' sight.
    meta: dict[str, Any] = {}
    predictions: list[dict[str, Any]] = []


class PredictRequest(_Body):
    project: str | int | None = None
    label_config: str
    tasks: list[TaskIn]


class VersionsRequest(_Body):
    project: str | int


class TrainingEvent(_Body):
    # Label Studio names the event on /webhook; its older /train call carries none.
    action: str | None = None


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def json_object() -> dict[str, Any]:
    """The request body as a JSON object, else ``BadRequestBody`` saying what it is instead.

    Decoded here rather than by ``request.get_json``: a deeply nested body makes the decoder
    raise ``RecursionError``, which Flask lets through as a 500.
    """
    raw = request.get_data(cache=False)  # RequestEntityTooLarge above MAX_CONTENT_LENGTH
    if not raw.strip():
        raise BadRequestBody("the body is empty: send a JSON object")
    try:
        body = json.loads(raw)
    except RecursionError:
        raise BadRequestBody("the body's JSON is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise BadRequestBody(f"the body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequestBody(f"the body must be a JSON object, not {_JSON_KINDS.get(type(body), 'null')}")
    return body


Body = TypeVar("Body", bound=_Body)


def parsed(model: type[Body]) -> Body:
    """The request body validated as ``model``, else ``BadRequestBody`` naming each bad field."""
    try:
        return model.model_validate(json_object())
    except ValidationError as exc:
        raise BadRequestBody(describe_error(exc)) from exc


routes = Blueprint("label_studio_ml_routes", __name__)


@routes.get("/")
@routes.get("/health")
def health() -> Response:
    return jsonify(status="UP", model_class=SotopiaJudge.__name__)


@routes.get("/metrics")
def metrics() -> Response:
    return jsonify({})


@routes.get("/is_training")
def is_training() -> Response:
    # The library's answer is a 500 until a model exists; nothing here ever trains.
    return jsonify(is_training=False)


@routes.route("/versions", methods=["GET", "POST"])
def versions() -> Response:
    # Label Studio 1.23 asks with GET and no body; the library took only POST, naming a project.
    if request.method == "POST":
        parsed(VersionsRequest)
    return jsonify(versions=[])  # nothing is trained, so there is no other version


@routes.post("/setup")
def setup() -> Response:
    body = parsed(SetupRequest)
    # The owner's token and the host name Label Studio sends are not passed on: nothing here
    # downloads task files.
    with _model_lock:
        model = LabelStudioMLManager.fetch(body.project, body.label_config)
    return jsonify(model_version=model.model_version)


@routes.post("/predict")
def predict() -> Response:
    body = parsed(PredictRequest)
    # The validated values, so the model (and its log) sees an integer id or none.
    tasks = [{"id": task.id, "data": task.data, "meta": task.meta, "predictions": task.predictions}
             for task in body.tasks]
    with _model_lock:
        model = LabelStudioMLManager.fetch(body.project, body.label_config)
        results = model.model.predict(tasks)
    return jsonify(results=results, model_version=model.model_version)


@routes.post("/webhook")
@routes.post("/train")
def ignore_training() -> Response:
    # The library would start a process per event and write its payload, annotations
    # included, to disk.
    event = parsed(TrainingEvent)
    what = f"event {event.action!r}" if event.action is not None else "a training request"
    logger.info("ignored %s: this backend does not train", what)
    return jsonify(status="ignored")


def _answer(error: HTTPException) -> Response:
    """Werkzeug's answer to ``error`` (status, and headers such as Allow or WWW-Authenticate)
    with a JSON body: ``{"status": 404, "error": "…"}``."""
    response = error.get_response()
    response.set_data(json.dumps({"status": error.code, "error": error.description}))
    response.mimetype = "application/json"
    return response


def _bad_request(error: ValueError) -> Response:
    return _answer(BadRequest(str(error)))


def _too_large(error: RequestEntityTooLarge) -> Response:
    limit = f"{current_app.config['MAX_CONTENT_LENGTH'] / 2**20:g} MB"
    logger.warning("refused %s %r: the body is larger than %s (%s)", request.method, request.path, limit, MAX_BODY_ENV)
    return _answer(RequestEntityTooLarge(
        f"the body is larger than {limit}: send fewer tasks at a time, or raise {MAX_BODY_ENV}"
    ))


def _internal_error(error: Exception) -> Response:
    logger.error("%s %r failed", request.method, request.path, exc_info=error)
    return _answer(InternalServerError("the backend failed on this request; its log says why"))


def _require_basic_auth(user: str, password: str) -> Callable[[], None]:
    expected = (user.encode(), password.encode())

    def check() -> None:
        auth = request.authorization
        given = ((auth.username or "").encode(), (auth.password or "").encode()) if auth else (b"", b"")
        # Both halves are always compared, so the answer's timing tells nothing.
        matches = hmac.compare_digest(given[0], expected[0]) & hmac.compare_digest(given[1], expected[1])
        if not matches:
            logger.warning("refused %s %r: no valid basic auth", request.method, request.path)
            raise Unauthorized(
                "authentication required", www_authenticate=WWWAuthenticate("basic", {"realm": "sotopia-ls"})
            )

    return check


def positive_number_from_env(name: str, default: float) -> float:
    """The number in environment variable ``name``, else ``default``; ``SettingsError`` if not positive."""
    raw = os.getenv(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number") from None
    if not value > 0:
        raise SettingsError(f"{name}={raw!r} must be positive")
    return value


def integer_from_env(name: str, default: int) -> int:
    value = positive_number_from_env(name, float(default))
    if not value.is_integer():
        raise SettingsError(f"{name}={value:g} must be a whole number")
    return int(value)


def basic_auth_from_env() -> tuple[str, str] | None:
    user, password = (os.getenv(name, "") for name in AUTH_ENV)
    if bool(user) != bool(password):
        raise SettingsError(f"set both {' and '.join(AUTH_ENV)}, or neither")
    return (user, password) if user else None


def create_app() -> Flask:
    """The app, ready for any WSGI server; ``SettingsError`` on bad settings."""
    SotopiaJudge.make_provider()  # fail at start, not at the first request
    auth = basic_auth_from_env()
    max_body = int(positive_number_from_env(MAX_BODY_ENV, DEFAULT_MAX_BODY_MB) * 2**20)
    # 1.0.9 reads this flag with different defaults in different places; pin one code path.
    os.environ["LABEL_STUDIO_ML_BACKEND_V2"] = "true"
    # The manager looks here for training runs; an empty private folder keeps it from
    # scanning the working directory. Nothing is written: nothing trains.
    model_dir = tempfile.TemporaryDirectory(prefix="sotopia-ls-ml-")
    LabelStudioMLManager.initialize(SotopiaJudge, model_dir=model_dir.name)
    app = Flask(__name__, static_folder=None)
    app.config["SOTOPIA_LS_MODEL_DIR"] = model_dir  # lives, and is removed, with the app
    app.config["MAX_CONTENT_LENGTH"] = max_body
    app.register_blueprint(routes)
    if auth:
        app.before_request(_require_basic_auth(*auth))
    app.register_error_handler(BadRequestBody, _bad_request)
    app.register_error_handler(InvalidLabelingConfig, _bad_request)
    app.register_error_handler(RequestEntityTooLarge, _too_large)
    app.register_error_handler(HTTPException, _answer)
    app.register_error_handler(Exception, _internal_error)
    return app


# Every C0 and C1 control character, and the two Unicode line separators.
_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))} | {
    ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029",
}


class OneLineFormatter(logging.Formatter):
    """Every record is one line that starts with its time; continuation lines of a traceback
    are indented. Control characters are escaped, so no text from a request, wherever it
    ends up in a message, can start a line that reads as a record of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).translate(_ESCAPES)

    def formatException(self, ei: Any) -> str:
        return self._indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return self._indented(super().formatStack(stack_info))

    @staticmethod
    def _indented(text: str) -> str:
        return textwrap.indent("\n".join(line.translate(_ESCAPES) for line in text.splitlines()), "    ")


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter(LOG_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def main() -> None:
    configure_logging(os.getenv("LOG_LEVEL", "INFO"))
    host = os.getenv("SOTOPIA_LS_ML_HOST", DEFAULT_HOST)
    try:
        port = integer_from_env("SOTOPIA_LS_ML_PORT", DEFAULT_PORT)
        threads = integer_from_env("SOTOPIA_LS_ML_THREADS", DEFAULT_THREADS)
        if not is_loopback(host) and basic_auth_from_env() is None:
            raise SettingsError(open_host_refusal(host))
        app = create_app()
    except SettingsError as exc:
        sys.exit(f"sotopia-ls ml-backend: {exc}")
    logger.info("provider %s, listening on http://%s:%d", SotopiaJudge.PROVIDER, host, port)
    # waitress refuses a larger body before buffering it; Flask's limit covers other servers.
    waitress.serve(app, host=host, port=port, threads=threads, max_request_body_size=app.config["MAX_CONTENT_LENGTH"])


if __name__ == "__main__":
    main()
