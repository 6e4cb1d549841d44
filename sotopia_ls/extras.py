"""The package's optional parts (its extras), and the one way a command asks for one.

A command that needs an extra calls ``require_extra`` before it does anything; when a module
of the extra is missing, the user reads one line naming the install command, never an import
traceback from deep inside the work. What each extra installs is read from the installed
package's metadata (pyproject.toml), so this module never restates the extras.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, distribution

import click
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DISTRIBUTION = "sotopia-label-studio"


def requirements(extra: str) -> list[Requirement]:
    """The requirements the installed package declares for ``extra``, their markers dropped."""
    found = []
    for line in distribution(DISTRIBUTION).requires or []:
        requirement = Requirement(line)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
            requirement.marker = None
            found.append(requirement)
    return found


def extra_modules(extra: str) -> list[str]:
    """The top-level modules ``extra`` installs: each requirement's import name (every
    requirement of ours is imported under its own name, ``-`` read as ``_``), and the modules of
    this package's extras it includes (``server`` includes ``export``)."""
    modules: list[str] = []
    for requirement in requirements(extra):
        if canonicalize_name(requirement.name) == DISTRIBUTION:
            for included in sorted(requirement.extras):
                modules += extra_modules(included)
        else:
            modules.append(canonicalize_name(requirement.name).replace("-", "_"))
    return list(dict.fromkeys(modules))


def require_extra(extra: str) -> None:
    """Return when every module of ``extra`` can be imported; else stop the command with one
    line naming what is missing and the install command."""
    try:
        missing = [name for name in extra_modules(extra) if importlib.util.find_spec(name) is None]
    except PackageNotFoundError:
        return  # run from a source tree that was never installed: nothing to check against
    if missing:
        context = click.get_current_context(silent=True)
        command = context.command_path if context is not None else DISTRIBUTION
        raise click.ClickException(
            f"{command} needs the {extra} extra ({', '.join(missing)} not installed): "
            f"pip install '{DISTRIBUTION}[{extra}]'"
        )
