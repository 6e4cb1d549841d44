"""A researcher runs a command in an install that lacks one of its optional libraries: one line
says which extra to install, never a traceback; and every install the README names runs
`export` and `report`.

A missing library is made by hiding it from a fresh interpreter (``sys.modules[name] = None``,
which makes importing it fail as if it were not installed): nothing is uninstalled from the
shared environment.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sotopia_ls.extras import extra_modules, uv

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))[
    "project"]["optional-dependencies"]
OPTIONAL = sorted({name for extra in ("server", "export", "study")
                   for name in extra_modules(extra)})
EXPORT = '[{"id": 1, "data": {"episode_id": "e1"}, "annotations": []}]'


RUN = "sys.argv[0] = 'sotopia-ls'\nfrom sotopia_ls.__main__ import run\nrun()\n"
# Every command's --help, in one interpreter.
EVERY_HELP = """
from click.testing import CliRunner
from sotopia_ls.cli import main

def calls(group, words):
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        yield [*words, name]
        if hasattr(command, "commands"):
            yield from calls(command, [*words, name])

for words in [[], *calls(main, [])]:
    result = CliRunner().invoke(main, [*words, "--help"])
    print(" ".join(words) or "sotopia-ls", result.exit_code, result.output.startswith("Usage:"))
"""


def without(hidden: list[str], program: str, *args: str,
            cwd: Path) -> subprocess.CompletedProcess[str]:
    """``program`` (by default: ``sotopia-ls ARGS``) in a new interpreter where the modules
    ``hidden`` cannot be imported."""
    hide = f"import sys\nfor name in {hidden!r}:\n    sys.modules[name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", hide + program, *args], cwd=cwd, capture_output=True, text=True,
        env={**os.environ, "LABEL_STUDIO_URL": "", "LABEL_STUDIO_API_KEY": ""}, timeout=120,
    )


EXPORT_EXTRA = "pip install 'sotopia-label-studio[export]'"


@pytest.mark.parametrize(
    ("args", "hidden", "extra", "install"),
    [
        (["report", "--from-file", "export.json", "-o", "report"], "matplotlib", "export",
         EXPORT_EXTRA),
        (["report", "--from-export", ".", "-o", "report"], "krippendorff", "export",
         EXPORT_EXTRA),
        # Installed without its dependencies (sotopia_ls.extras.NO_DEPS): its own command.
        (["report", "--from-file", "export.json", "-o", "report"], "irrCAC", "export",
         "pip install --no-deps 'irrCAC==0.4.4'"),
        (["export", "--from-file", "export.json", "-o", "out"], "pyarrow", "export",
         EXPORT_EXTRA),
        (["study", "status"], "sqlalchemy", "study", "pip install 'sotopia-label-studio[study]'"),
        (["study", "serve"], "uvicorn", "study", "pip install 'sotopia-label-studio[study]'"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else value,
)
def test_a_missing_optional_library_is_one_line_naming_the_install_command(
    args: list[str], hidden: str, extra: str, install: str, tmp_path: Path
) -> None:
    (tmp_path / "export.json").write_text(EXPORT)
    done = without([hidden], RUN, *args, cwd=tmp_path)
    command = " ".join(["sotopia-ls", *args[:2]] if args[0] == "study" else ["sotopia-ls", args[0]])
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"Error: {command} needs the {extra} extra ({hidden} not installed): "
                           f"{install}\n")


@pytest.mark.report
def test_without_ppi_python_the_report_is_written_and_says_how_to_add_the_model_means(
    tmp_path: Path,
) -> None:
    """ppi-python is imported as ppi_py: the line names the module and the extra's install."""
    (tmp_path / "export.json").write_text(EXPORT)
    done = without(["ppi_py"], RUN, "report", "--from-file", "export.json", "-o", "report",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    missing = "needs the ppi extra (ppi_py not installed): pip install 'sotopia-label-studio[ppi]'"
    assert [line for line in done.stderr.splitlines() if "ppi" in line] == [
        f"warning: each agent model's scores not computed: sotopia-ls report {missing}"]
    page = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    assert f"This section {missing}.".replace("'", "&#x27;") in page
    assert not (tmp_path / "report" / "agent_model_scores.csv").exists()


def test_without_the_extra_and_its_no_deps_library_both_commands_are_named_in_order(
    tmp_path: Path,
) -> None:
    (tmp_path / "export.json").write_text(EXPORT)
    done = without(["scipy", "irrCAC"], RUN, "report", "--from-file", "export.json", "-o", "r",
                   cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == ("Error: sotopia-ls report needs the export extra (scipy, irrCAC not "
                           f"installed): {EXPORT_EXTRA} && pip install --no-deps "
                           "'irrCAC==0.4.4'\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["export.json"]


def test_every_command_starts_and_explains_itself_without_any_optional_library(
    tmp_path: Path,
) -> None:
    """Only the commands that need an extra import it, and only when they run."""
    done = without(OPTIONAL, EVERY_HELP, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answers = [line.rsplit(" ", 2) for line in done.stdout.splitlines()]
    failed = [command for command, code, usage in answers if (code, usage) != ("0", "True")]
    assert len(answers) > 10 and not failed, done.stdout


def installs(extra: str) -> set[str]:
    """What ``pip install '.[extra]'`` installs of the extras' requirements, as pyproject.toml
    declares them (an extra of this package named in another followed)."""
    found: set[str] = set()
    for line in EXTRAS[extra]:
        included = re.fullmatch(r"sotopia-label-studio\[(.+)\]", line)
        found |= (set().union(*(installs(name) for name in included[1].split(",")))
                  if included else {line})
    return found


def named_installs() -> set[str]:
    """The extras of every install the README and the two scripts name."""
    scripts = "".join((REPO / "scripts" / name).read_text() for name in ("demo", "test"))
    named = re.findall(r"pip install [^`\n]*\[([a-z,]+)\]", README)
    named += re.findall(r"scripts/setup ([a-z]+)", README + scripts)
    return {extra for names in named for extra in names.split(",")}


def test_every_install_the_readme_names_runs_export_and_report() -> None:
    named = named_installs()
    assert {"server", "study", "test"} <= named, named
    for extra in named:
        assert installs("export") <= installs(extra), f"{extra} lacks the export extra"


@pytest.mark.slow
def test_without_uv_a_new_environment_is_made_by_venv_and_filled_by_its_pip(
    tmp_path: Path,
) -> None:
    """An install without uv (neither beside its interpreter nor on PATH): the package makes
    ``.venv-ml`` with venv, pip in it, and installs into it with that pip."""
    python, found = Path(sys.executable), uv()
    if found:  # an interpreter of this Python, given this environment's libraries, no uv beside
        subprocess.run([found, "venv", "--quiet", "--python", sys.executable,
                        str(tmp_path / "bare")], check=True)
        python = tmp_path / "bare" / "bin" / "python"
    program = ("import sys\nfrom pathlib import Path\n"
               "from sotopia_ls.extras import installer, new_environment\n"
               "print(installer(new_environment(Path(sys.argv[1])))[1:])\n")
    done = subprocess.run(
        [str(python), "-c", program, str(tmp_path / "env")],
        env={**os.environ, "PATH": "", "PYTHONPATH": os.pathsep.join(
            [str(REPO), *(path for path in sys.path if path.endswith("site-packages"))])},
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check']\n"
    pip = subprocess.run([str(tmp_path / "env" / "bin" / "python"), "-m", "pip", "--version"],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
