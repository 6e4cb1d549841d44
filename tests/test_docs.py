"""Every command explains itself, and the README documents every command and the two scripts."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from sotopia_ls.cli import main
from sotopia_ls.dimensions import DIMENSIONS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
COMMANDS = sorted(main.commands)


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_help_with_an_example(name):
    command = main.commands[name]
    assert command.help and "Example:" in command.help, f"{name} lacks an Example: block"
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"{name} {param.opts} has no help text"


@pytest.mark.parametrize("name", COMMANDS)
def test_readme_documents_command(name):
    assert f"sotopia-ls {name}" in README


def test_readme_gives_the_two_commands_ci_runs():
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "scripts/test" in ci
    assert "scripts/demo" in README and "scripts/test" in README


@pytest.mark.parametrize("dimension", DIMENSIONS, ids=lambda d: d.key)
def test_every_dimension_carries_guidance_and_examples(dimension):
    assert dimension.guidance and dimension.examples
    assert {e.verdict for e in dimension.examples} == {"good", "bad"}
