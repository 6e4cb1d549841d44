"""What the commands of several modules share: options, and how a failure is told."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from .chat import ChatEndpoint
from .errors import SotopiaLSError, header_problem, keep_secret


def server_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--url`` and ``--api-key``, read from the environment when not given."""
    command = click.option(
        "--api-key",
        envvar="LABEL_STUDIO_API_KEY",
        show_envvar=True,
        help="Label Studio API key (legacy token or personal access token). Never printed.",
    )(command)
    return click.option(
        "--url",
        envvar="LABEL_STUDIO_URL",
        show_envvar=True,
        help="Label Studio address, e.g. http://127.0.0.1:8080.",
    )(command)


def endpoint_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """A chat endpoint's options (``--model``, ``--base-url``, ``--api-key-env``, ``--workers``,
    ``--timeout``, ``--retries``): what ``chat_endpoint`` takes."""
    for option in reversed((
        click.option("--model", required=True, help="The judge: a model the endpoint serves. "
                     "What it answers is kept under this name."),
        click.option("--base-url", default="https://api.openai.com/v1", show_default=True,
                     envvar="SOTOPIA_LS_LLM_BASE_URL", show_envvar=True,
                     help="An OpenAI-compatible endpoint, up to /v1 (a hosted API, vLLM, "
                     "Ollama)."),
        click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
                     help="The environment variable holding the endpoint's API key (unset or "
                     "empty: no key, as a local server needs). The key is never printed."),
        click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True,
                     help="Requests at a time."),
        click.option("--timeout", type=click.FloatRange(min=1), default=120, show_default=True,
                     help="Seconds for one whole answer; a request still answering then is "
                     "cut."),
        click.option("--retries", type=click.IntRange(0, 10), default=4, show_default=True,
                     help="Repeats of a request answered 429 or 5xx, timed out or cut off: at "
                     "most retries + 1 requests for one answer (the wait doubles from 1 s, or "
                     "is the server's Retry-After, at most a minute)."),
    )):
        command = option(command)
    return command


def chat_endpoint(model: str, base_url: str, api_key_env: str, timeout: float,
                  retries: int) -> ChatEndpoint:
    """The endpoint ``endpoint_options`` describe, its key read from ``api_key_env`` and kept
    out of every message; a model or key no request can carry is a usage error."""
    if not model.strip():
        raise click.UsageError("--model names the judge: it cannot be empty")
    key = os.environ.get(api_key_env, "").strip()
    keep_secret(key)
    problem = header_problem(key, "latin-1")  # requests sends header values as latin-1
    if problem:
        raise click.UsageError(f"the API key in ${api_key_env} {problem}")
    return ChatEndpoint(base_url, model, key, timeout, retries=retries)


@contextmanager
def failures_as_messages() -> Iterator[None]:
    """The package's errors, and the system's refusals to read or write a path, as one line
    with a non-zero exit: never a traceback."""
    try:
        yield
    except SotopiaLSError as error:
        raise click.ClickException(str(error)) from error
    except shutil.Error as error:
        # A copy of many files (shutil.copytree) fails with every file's reason in one list.
        failures = error.args[0] if isinstance(error.args[0], list) else [("", "", error)]
        more = f" (and {len(failures) - 1} more file(s))" if len(failures) > 1 else ""
        raise click.ClickException(f"cannot copy: {failures[0][2]}{more}") from error
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        raise click.ClickException(f"{where}{error.strerror or error}") from error
    except RecursionError as error:
        raise click.ClickException("the input is nested too deeply to read") from error
