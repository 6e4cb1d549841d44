"""The package's optional parts (its extras), and the one way a command asks for one.

``require_extra`` turns a missing module into one line naming the install command, never a
traceback. What each extra installs is read from the package's metadata, so only what
pyproject.toml cannot say, a library installed without its dependencies (``NO_DEPS``), is here.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import click
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DISTRIBUTION = "sotopia-label-studio"


@cache
def requirements(extra: str) -> tuple[Requirement, ...]:
    """The requirements the installed package declares for ``extra``, their markers dropped;
    read once per process (a gateway asks whenever it makes an app or shows its dashboard)."""
    found = []
    for line in distribution(DISTRIBUTION).requires or []:
        requirement = Requirement(line)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
            requirement.marker = None
            found.append(requirement)
    return tuple(found)


@dataclass(frozen=True)
class NoDeps:
    """A library an extra needs that pip installs after the extra, with ``--no-deps``: the
    versions it pins would break the extra's other libraries, and pip resolves every
    requirement of an extra with its dependencies, so it cannot be one of them."""

    requirement: str  # what pip installs: "irrCAC==0.4.4"
    module: str  # its import name


# Requirements imported under another name than their own (``-`` read as ``_``).
IMPORT_NAMES = {"ppi-python": "ppi_py"}

NO_DEPS: dict[str, tuple[NoDeps, ...]] = {
    # Gwet's AC1/AC2 in the report. irrCAC 0.4.4 pins scipy==1.12.0, which would take numpy
    # below what label-studio and pingouin need; it runs on the scipy the export extra has.
    "export": (NoDeps("irrCAC==0.4.4", "irrCAC"),),
}


def included_extras(extra: str) -> list[str]:
    """``extra`` and the extras of this package it includes (``server`` includes ``export``)."""
    found = [extra]
    for requirement in requirements(extra):
        if canonicalize_name(requirement.name) == DISTRIBUTION:
            for included in sorted(requirement.extras):
                found += included_extras(included)
    return list(dict.fromkeys(found))


def no_deps(extras: Iterable[str]) -> list[NoDeps]:
    """What ``extras`` (and the extras they include) install without dependencies."""
    return list(dict.fromkeys(library for extra in extras for name in included_extras(extra)
                              for library in NO_DEPS.get(name, ())))


def extra_modules(extra: str, *, included: bool = True) -> list[str]:
    """The top-level modules ``extra`` installs: each requirement's import name (its own
    name, ``-`` read as ``_``, unless ``IMPORT_NAMES`` says), those of this package's extras
    it includes (unless ``included`` is false), and those of its ``no_deps`` libraries."""
    extras = included_extras(extra) if included else [extra]
    modules = [IMPORT_NAMES.get(canonicalize_name(requirement.name),
                                canonicalize_name(requirement.name).replace("-", "_"))
               for name in extras for requirement in requirements(name)
               if canonicalize_name(requirement.name) != DISTRIBUTION]
    later = [library.module for name in extras for library in NO_DEPS.get(name, ())]
    return list(dict.fromkeys([*modules, *later]))


def uv() -> str | None:
    """uv beside this interpreter (scripts/setup puts it there) or on PATH, else None."""
    return shutil.which("uv", path=os.pathsep.join([sysconfig.get_path("scripts"),
                                                   os.environ.get("PATH", "")]))


def installer(python: Path) -> list[str]:
    """The command that installs requirements into the environment of ``python``: uv's where
    there is one, as it takes seconds where pip takes minutes; else that environment's pip."""
    found = uv()
    if found:
        return [found, "pip", "install", "--quiet", "--python", str(python)]
    return [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]


def new_environment(venv: Path) -> Path:
    """Create the virtual environment ``venv`` on this interpreter and return its Python: with
    uv where there is one (a tenth of a second of CPU; venv's pip takes 4 s), else with venv
    and pip, for ``installer`` to fill either way."""
    found = uv()
    if found:
        subprocess.run([found, "venv", "--quiet", "--python", sys.executable, str(venv)],
                       check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return venv / "bin" / "python"


def install_commands(extra: str, missing: list[str]) -> list[str]:
    """The pip commands that install the ``missing`` modules of ``extra``, in order."""
    later = [library for library in no_deps([extra]) if library.module in missing]
    commands = []
    if set(missing) - {library.module for library in later}:
        commands.append(f"pip install '{DISTRIBUTION}[{extra}]'")
    if later:
        commands.append("pip install --no-deps "
                        + " ".join(f"'{library.requirement}'" for library in later))
    return commands


def missing_modules(extra: str, *, included: bool = True) -> list[str]:
    """The modules of ``extra`` (without those of the extras it includes, unless
    ``included``) that cannot be imported; none when run from a source tree that was never
    installed (nothing to check against)."""
    try:
        modules = extra_modules(extra, included=included)
    except PackageNotFoundError:
        return []
    return [name for name in modules if importlib.util.find_spec(name) is None]


def require_extra(extra: str, *, included: bool = True) -> None:
    """Return when every module of ``extra`` can be imported (those of the extras it includes
    too, unless ``included`` is false); else stop the command with one line naming what is
    missing and the install commands."""
    missing = missing_extra(extra, included=included)
    if missing:
        context = click.get_current_context(silent=True)
        command = context.command_path if context is not None else DISTRIBUTION
        raise click.ClickException(f"{command} {missing}")


def missing_extra(extra: str, *, included: bool = True) -> str:
    """"needs the ``extra`` extra (what is not installed): the install commands", or "" when
    nothing of it is missing: for a part of a command that goes without it and says so."""
    missing = missing_modules(extra, included=included)
    if not missing:
        return ""
    return (f"needs the {extra} extra ({', '.join(missing)} not installed): "
            + " && ".join(install_commands(extra, missing)))
