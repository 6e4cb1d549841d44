"""Click options shared by the commands of several modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


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
