"""The checkout reads as the package installs: every subpackage lives inside ``sotopia_ls/``, so
a relative import in a plain checkout points where it points once installed, and the folders
the project is known by stay at the top as links into the package."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "sotopia_ls"
TOP_LEVEL = ("importer", "exporter", "ml_backend", "study")


def test_pyproject_lists_the_packages_and_maps_no_folder():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "package-dir" not in setuptools
    listed = {name.removeprefix("sotopia_ls.").replace(".", "/") for name in setuptools["packages"]}
    found = {str(init.parent.relative_to(PACKAGE)) for init in PACKAGE.rglob("__init__.py")}
    assert listed - {"sotopia_ls"} == found - {"."}


@pytest.mark.parametrize("folder", TOP_LEVEL)
def test_each_known_folder_is_a_link_into_the_package(folder):
    link = REPO / folder
    assert link.is_symlink() and link.resolve() == PACKAGE / folder


def test_every_relative_import_resolves_inside_the_checkout():
    unresolved = []
    for module in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = module.parent
                for _ in range(node.level - 1):
                    base = base.parent
                target = base.joinpath(*(node.module or "").split("."))
                if not (target.with_suffix(".py").exists() or (target / "__init__.py").exists()):
                    unresolved.append(f"{module.relative_to(REPO)}:{node.lineno}")
    assert unresolved == []
