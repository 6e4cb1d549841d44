"""Every command explains itself, and the README documents every command, the two scripts and
the annotator's screen."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest

from sotopia_ls.cli import main
from sotopia_ls.dimensions import DIMENSIONS

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
# Where code could reach a folder beside the repository: the parent of the checkout.
OUTSIDE = ("../", "parents[2]", "REPO.parent", ".parent.parent")


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every command by the words that call it, the commands of groups included."""
    found: dict[str, click.Command] = {}
    for name in group.list_commands(None):  # `main` loads its lazy commands when asked
        command = group.get_command(None, name)
        found[prefix + name] = command
        if isinstance(command, click.Group):
            found |= _commands(command, f"{prefix}{name} ")
    return found


ALL_COMMANDS = _commands(main)
COMMANDS = sorted(ALL_COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_help_with_an_example(name):
    command = ALL_COMMANDS[name]
    assert command.help and "Example:" in command.help, f"{name} lacks an Example: block"
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"{name} {param.opts} has no help text"


@pytest.mark.parametrize("name", COMMANDS)
def test_readme_documents_command(name):
    assert f"sotopia-ls {name}" in README


def readme_section(title: str) -> str:
    """The README's text under the heading ``## title``, up to the next such heading."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:] if end == -1 else README[start:end]


# What the browser test checks of the screen, each stated where the screen is described.
@pytest.mark.parametrize("point", ["Two columns on wide screens", "1440×900", "one column",
                                   "No Skip button", "show_skip_button", "side panels are hidden",
                                   "no project setting or config attribute"])
def test_readme_describes_the_annotators_screen(point):
    assert point in readme_section("The annotator's screen")


def test_readme_gives_the_two_commands_ci_runs():
    ci = (REPO / ".ci" / "run").read_text()
    assert ci.rstrip().endswith("exec scripts/test")
    assert "scripts/demo" in README and "scripts/test" in README


# What a newcomer needs right after `scripts/demo`, said beside it: who the login is, how to
# call the command the demo installed, and where the key is.
@pytest.mark.parametrize("point", ["owner@example.com", ".venv/bin/sotopia-ls",
                                   "source .venv/bin/activate",
                                   "var/label-studio/credentials.json"])
def test_readme_tells_a_newcomer_what_follows_the_demo(point):
    assert point in readme_section("Two commands")


def test_ci_runs_the_tests_in_a_fresh_clone_alone_in_an_empty_folder():
    ci = (REPO / ".ci" / "run").read_text()
    assert "mktemp -d" in ci and "git clone" in ci


@pytest.mark.parametrize("folder", ["sotopia_ls", "importer", "exporter", "ml_backend", "study", "tests",
                                    "benchmarks", "scripts", ".ci"])
def test_nothing_reads_a_folder_beside_the_repository(folder):
    for path in (REPO / folder).rglob("*"):
        if path.is_file() and path.suffix in {".py", ""} and path.name != "test_docs.py":
            text = path.read_text(encoding="utf-8", errors="replace")
            found = [pattern for pattern in OUTSIDE if pattern in text]
            assert not found, f"{path.relative_to(REPO)} reaches outside the repository: {found}"


@pytest.mark.parametrize("dimension", DIMENSIONS, ids=lambda d: d.key)
def test_every_dimension_carries_guidance_and_examples(dimension):
    assert dimension.guidance and dimension.examples
    assert {e.verdict for e in dimension.examples} == {"good", "bad"}


@pytest.mark.parametrize("section", [
    "## What Label Studio Community cannot guarantee", "## Into Sotopia",
    "### `sotopia-ls annotators` — add annotators", "**Annotator identities.**",
    "**Spreadsheets.**", "## Security", "## The annotator's screen",
])
def test_readme_keeps_the_sections_researchers_rely_on(section):
    assert section in README


# A module docstring says in a few lines what the module holds and why; longer explanations
# live once in README.md or docs/, where a docstring may point.
MOST_DOCSTRING_LINES = 10


@pytest.mark.parametrize("folder", ["sotopia_ls", "benchmarks"])
def test_module_docstrings_are_short_and_point_at_docs_that_exist(folder):
    too_long, missing = [], []
    for path in sorted((REPO / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstring = ast.get_docstring(tree, clean=False)
        if docstring is None:
            continue
        name = path.relative_to(REPO)
        if tree.body[0].end_lineno - tree.body[0].lineno + 1 > MOST_DOCSTRING_LINES:
            too_long.append(str(name))
        missing += [f"{name}: {page}" for page in re.findall(r"docs/[\w-]+\.md", docstring)
                    if not (REPO / page).is_file()]
    assert not too_long, f"module docstrings over {MOST_DOCSTRING_LINES} lines: {too_long}"
    assert not missing, f"docstrings name docs pages that do not exist: {missing}"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_readme_section_a_command_help_names_is_there(name):
    """``README, "Title"`` in a command's help leads to a heading of that title."""
    named = re.findall(r'README(?:\.md)?, "([^"]+)"', " ".join(ALL_COMMANDS[name].help.split()))
    headings = [" ".join(line.lstrip("#").split()) for line in README.splitlines()
                if line.startswith("#")]
    assert [title for title in named if not any(title in heading for heading in headings)] == []
