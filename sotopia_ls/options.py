"""What the commands of several modules share: options, and how a failure is told."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from .errors import SotopiaLSError


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
